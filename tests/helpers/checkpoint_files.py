"""A run folder's checkpoints as training leaves them, made without training, for prune tests.

Written with the worker's own functions (checkpoints.py), so the hard links are real:
`done` epochs committed to the backup, the best epoch an earlier one, a crash while
saving the next epoch (its backup file written and linked as last, never committed),
per-epoch checkpoints, a dead writer's temporary file, a decoded-image cache and an
export.
"""

from __future__ import annotations

from pathlib import Path

from mgpu_gui.core.runs import checkpoints as ckpt
from mgpu_gui.core.runs.folder import RunDir

MODEL = 1000  # bytes of one model file
OLD_EPOCHS = (1, 2)  # per-epoch checkpoints/epoch-NNNN.keras
TEMP = 500
CACHE = (("train-f00d.index", 100), ("train-f00d.data-00000-of-00001", 1900))


def model_writer(fill: bytes):
    def write(path: Path) -> None:
        path.write_bytes(fill * MODEL)
    return write


def fill_checkpoints(run_dir: RunDir, done: int) -> int:
    """Fill `run_dir` (an epoch's model file holds its number as bytes); returns the bytes
    a prune frees: the per-epoch checkpoints, the temporary file and the cache."""
    backup = run_dir.backup
    committed = ckpt.write_backup_model(backup, done, model_writer(bytes([done])))
    ckpt.commit_backup(backup, done)
    run_dir.checkpoints.mkdir(exist_ok=True)
    run_dir.best_checkpoint.write_bytes(bytes([done - 1]) * MODEL)
    ckpt.link_atomically(committed, run_dir.last_checkpoint)
    # The next epoch saved, then the crash: last names it, the backup's metadata does not.
    crashed = ckpt.write_backup_model(backup, done + 1, model_writer(bytes([done + 1])))
    ckpt.link_atomically(crashed, run_dir.last_checkpoint)
    for epoch in OLD_EPOCHS:
        (run_dir.checkpoints / f"epoch-{epoch:04d}.keras").write_bytes(bytes([epoch]) * MODEL)
    (backup / ".epoch-0009.tmp-999999.keras").write_bytes(b"t" * TEMP)
    run_dir.cache.mkdir(exist_ok=True)
    for name, size in CACHE:
        (run_dir.cache / name).write_bytes(b"c" * size)
    run_dir.export_path("keras").write_bytes(b"e" * MODEL)
    return MODEL * len(OLD_EPOCHS) + TEMP + sum(size for _, size in CACHE)
