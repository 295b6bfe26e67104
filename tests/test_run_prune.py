"""A run's disk size and pruning its old checkpoints: core/runs/disk.py and `mgpu-train runs
prune`, on run folders filled by hand (tests/helpers/checkpoint_files.py); no TensorFlow."""

from __future__ import annotations

import json

import pytest

from mgpu_gui.cli import main as cli
from mgpu_gui.core.runs import checkpoints as ckpt
from mgpu_gui.core.runs import disk
from mgpu_gui.core.runs.folder import RunDir
from mgpu_gui.core.runs.lock import RunLock
from tests.helpers.checkpoint_files import MODEL, fill_checkpoints
from tests.test_runs_panel import record_run

DONE = 4


def snapshot(run_dir: RunDir) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir.path)): p.read_bytes()
            for p in sorted(run_dir.path.rglob("*")) if p.is_file()}


def assert_resumable_with_best_and_last(run_dir: RunDir) -> None:
    """What the run stands for and what its resume reads are all there."""
    assert run_dir.resume_point().epochs_done == DONE
    backup = ckpt.read_backup(run_dir.backup)
    assert backup is not None and backup.model is not None
    assert backup.model.read_bytes() == bytes([DONE]) * MODEL
    assert run_dir.best_checkpoint.read_bytes() == bytes([DONE - 1]) * MODEL
    assert run_dir.last_checkpoint.read_bytes() == bytes([DONE + 1]) * MODEL
    assert run_dir.export_path("keras").is_file() and run_dir.events_jsonl.is_file()


@pytest.fixture
def run_dir(tmp_path) -> tuple[RunDir, int]:
    folder = RunDir(tmp_path / "run")
    folder.path.mkdir()
    (folder.path / "events.jsonl").write_text("{}\n")
    return folder, fill_checkpoints(folder, DONE)


def test_size_counts_hard_links_once_and_by_kind(run_dir):
    folder, frees = run_dir
    size = disk.measure(folder.path)
    assert size is not None and size.prunable == frees
    metadata = (folder.backup / ckpt.METADATA_NAME).stat().st_size
    # epoch 4 (backup), epoch 5 (backup and last: one file), best, two old epochs, temp
    assert size.checkpoints == 5 * MODEL + metadata + 500
    assert size.exports == MODEL
    assert size.other == 3 + 2000  # events.jsonl and the cache
    assert size.total == size.checkpoints + size.exports + size.other
    assert disk.measure(folder.path / "gone") is None


def test_prune_keeps_best_last_and_the_resume_backup_and_is_idempotent(run_dir):
    folder, frees = run_dir
    before = disk.measure(folder.path)
    plan = disk.plan_prune(folder.path)
    assert plan.frees == frees and not plan.skipped
    assert {p.name for p in plan.remove} == {
        "epoch-0001.keras", "epoch-0002.keras", "epoch-0005.keras",  # 5: never committed
        ".epoch-0009.tmp-999999.keras", "cache"}
    assert plan.what() == "3 old checkpoints, 1 temporary file and the decoded-image cache"

    done = disk.prune(folder.path)
    assert (done.frees, done.remove, done.problems) == (frees, plan.remove, ())
    after = disk.measure(folder.path)
    assert after is not None and before is not None
    assert (after.total, after.prunable) == (before.total - frees, 0)
    assert_resumable_with_best_and_last(folder)
    assert not folder.cache.exists() and not ckpt.temp_files(folder.path)

    again = disk.prune(folder.path)
    assert (again.remove, again.frees, again.what()) == ((), 0, "nothing")


def test_a_running_run_is_left_alone(run_dir):
    folder, _ = run_dir
    lock = RunLock.acquire(folder.path)  # as its worker holds it
    before = snapshot(folder)
    try:
        for plan in (disk.plan_prune(folder.path), disk.prune(folder.path)):
            assert "still running" in plan.skipped and not plan.remove and not plan.frees
    finally:
        lock.release()
    assert snapshot(folder) == before


# -- mgpu-train runs prune ----------------------------------------------------------------

def cli_run(capsys, store, *args: str) -> tuple[int, str, str]:
    code = cli.main(["--store", str(store.path), *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def runs(store, tmp_path):
    """Two runs with checkpoints to prune: 'old' and 'busy' (which will be running)."""
    made = {}
    for name in ("old", "busy"):
        record = record_run(store, tmp_path, name, done=DONE)
        made[name] = (record, fill_checkpoints(RunDir(record.run_dir), DONE))
    return made


def test_cli_dry_run_prune_and_a_running_run(capsys, store, runs):
    (old, frees), (busy, _) = runs["old"], runs["busy"]
    old_dir, busy_dir = RunDir(old.run_dir), RunDir(busy.run_dir)
    before = snapshot(old_dir)
    code, out, err = cli_run(capsys, store, "runs", "prune", str(old.id), "--dry-run")
    assert (code, err) == (0, "")
    assert f"Run {old.id} ({old.name}): would free 4.4 KiB (3 old checkpoints" in out
    assert "nothing was removed" in out and snapshot(old_dir) == before

    lock = RunLock.acquire(busy_dir.path)
    busy_files = snapshot(busy_dir)
    try:
        code, out, err = cli_run(capsys, store, "runs", "prune", "--all", "--json")
    finally:
        lock.release()
    assert (code, err) == (0, "")
    result = json.loads(out)
    by_name = {r["name"].split("-")[-1]: r for r in result["runs"]}
    assert (result["dry_run"], result["frees"]) == (False, frees)
    assert by_name["old"]["frees"] == frees and by_name["old"]["skipped"] is None
    assert "still running" in by_name["busy"]["skipped"] and by_name["busy"]["files"] == []
    assert snapshot(busy_dir) == busy_files
    assert_resumable_with_best_and_last(old_dir)

    code, out, _ = cli_run(capsys, store, "runs", "prune", "old")
    assert (code, out) == (
        0, f"Run {old.id} ({old.name}): nothing to prune.\nFreed 0 bytes in total.\n")


def test_cli_listing_shows_each_runs_size(capsys, store, runs):
    old, _ = runs["old"]
    size = disk.measure(old.run_dir)
    assert size is not None
    code, out, _ = cli_run(capsys, store, "runs", "--json")
    listed = {r["name"].split("-")[-1]: r for r in json.loads(out)}
    assert listed["old"]["size"] == {"checkpoints": size.checkpoints, "exports": size.exports,
                                     "other": size.other, "prunable": size.prunable,
                                     "total": size.total}
    code, out, _ = cli_run(capsys, store, "runs")
    header, *rows = out.splitlines()
    assert "SIZE" in header
    assert ckpt.format_bytes(size.total) in next(row for row in rows if "old" in row)


@pytest.mark.parametrize("args", [("999",), ("nosuchrun",), (), ("1", "--all")])
def test_cli_prune_refuses_unknown_runs_in_one_line(capsys, store, runs, args):
    before = snapshot(RunDir(runs["old"][0].run_dir))
    code, out, err = cli_run(capsys, store, "runs", "prune", *args)
    assert (code, out) == (2, "") and err.startswith("error: ") and err.count("\n") == 1
    assert snapshot(RunDir(runs["old"][0].run_dir)) == before
