"""The environment a run trained in: library and driver versions, its files' fingerprints.

The training worker writes it into the run folder (environment.json) each time
it starts (a resume records the environment it continued in), once TensorFlow
is loaded; the Compare dialog and `mgpu-train runs --json` read it from there.
It lives in the folder, not the run store, so the store's schema needs nothing
for it, and an older run simply has none.

A fingerprint must not hold up the run's start: a file is hashed whole (sha256)
up to FULL_HASH_BYTES; a bigger one by its size and its first and last
SAMPLE_BYTES; a folder (images) by its listing: every file's relative path,
size and modification time, hashed, without reading a file. `method` says which.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mgpu_gui.core.config import DEMO, RunConfig, is_model_file
from mgpu_gui.core.datasets.inspection import demo_resource
from mgpu_gui.core.devices.nvml import query_inventory
from mgpu_gui.core.plain import from_plain, to_plain
from mgpu_gui.core.runs.checkpoints import format_bytes

ENVIRONMENT_FILE = "environment.json"
FULL_HASH_BYTES = 256 * 2**20
SAMPLE_BYTES = 16 * 2**20
WHOLE = "sha256 of the file"
SAMPLED = f"sha256 of its size and first and last {SAMPLE_BYTES // 2**20} MiB"
LISTING = "sha256 of its listing: each file's path, size and modification time"


@dataclass(frozen=True)
class FileRecord:
    """One file (or folder) the run read: model, data, validation data, custom objects."""

    role: str
    path: str
    size: int | None = None  # bytes; a folder's: its files' total
    sha256: str | None = None
    method: str = ""  # how `sha256` was taken (WHOLE, SAMPLED, LISTING)
    files: int | None = None  # a folder's file count
    error: str = ""  # why it could not be fingerprinted


@dataclass(frozen=True)
class RunEnvironment:
    """Versions as the worker saw them; None where unknown (no NVIDIA driver: no driver;
    a JAX run on the Python input pipeline: no TensorFlow, as it never loaded one)."""

    tensorflow: str | None = None
    keras: str | None = None
    engine: str | None = None  # the Keras backend the run trained on
    input_pipeline: str | None = None  # what fed it: tf.data or python (auto resolved)
    jax: str | None = None  # JAX runs: jax's and jaxlib's versions, the devices' platform
    jaxlib: str | None = None
    jax_platform: str | None = None
    cuda: str | None = None  # the CUDA TensorFlow was built with; None: a CPU build
    cudnn: str | None = None
    driver: str | None = None  # the NVIDIA driver, as NVML reports it
    cuda_driver: str | None = None  # the highest CUDA the driver supports
    python: str | None = None
    files: tuple[FileRecord, ...] = ()
    recorded: float = 0.0  # when (time.time())

    def to_dict(self) -> dict[str, Any]:
        return to_plain(asdict(self))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunEnvironment:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["files"] = [{k: v for k, v in f.items() if k in FileRecord.__dataclass_fields__}
                          for f in known.get("files") or ()]
        return from_plain(cls, known)

    def facts(self) -> dict[str, str | None]:
        """What the Compare table shows, by column: versions, then each file's hash
        (12 hex digits: enough to see two differ) with its size."""
        shown: dict[str, str | None] = {
            "TensorFlow": self.tensorflow, "Keras": self.keras, "JAX": self.jax,
            "input pipeline": self.input_pipeline, "CUDA": self.cuda, "cuDNN": self.cudnn,
            "driver": self.driver}
        for record in self.files:
            shown[f"{record.role} file"] = (
                None if record.sha256 is None else
                f"{record.sha256[:12]} ({format_bytes(record.size)})")
        return shown


def environment_path(folder: Path) -> Path:
    return folder / ENVIRONMENT_FILE


def read_environment(folder: Path) -> RunEnvironment | None:
    """The run's record; None when it has none (an older run) or it cannot be read."""
    try:
        return RunEnvironment.from_dict(json.loads(environment_path(folder).read_text()))
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def record_environment(folder: Path, config: RunConfig,
                       versions: Mapping[str, str | None]) -> RunEnvironment:
    """Fingerprint the run's files, ask NVML for the driver, and write environment.json
    (replaced whole: a reader never sees half of it). `versions`: the worker's tensorflow,
    keras, cuda and cudnn (engine.tf_facts.environment_versions), engine and
    input_pipeline, and on JAX jax, jaxlib and jax_platform (engine.jax_strategy)."""
    inventory = query_inventory()
    environment = RunEnvironment(
        tensorflow=versions.get("tensorflow"), keras=versions.get("keras"),
        engine=versions.get("engine"), input_pipeline=versions.get("input_pipeline"),
        jax=versions.get("jax"), jaxlib=versions.get("jaxlib"),
        jax_platform=versions.get("jax_platform"),
        cuda=versions.get("cuda"), cudnn=versions.get("cudnn"),
        driver=inventory.driver_version, cuda_driver=inventory.cuda_driver_version,
        python=platform.python_version(),
        files=tuple(fingerprint(role, path) for role, path in run_files(config)),
        recorded=time.time())
    target = environment_path(folder)
    partial = target.with_suffix(".json.partial")
    partial.write_text(json.dumps(environment.to_dict(), indent=2))
    os.replace(partial, target)
    return environment


def run_files(config: RunConfig) -> list[tuple[str, Path]]:
    """The files a run reads, by role: the bundled demo data too (it changes with the app)."""
    files: list[tuple[str, Path]] = []
    if is_model_file(config.model):
        files.append(("model", Path(config.model).expanduser()))
    for role, source in (("data", config.data), ("validation data", config.validation_data)):
        if source == DEMO:
            files.append((role, Path(str(demo_resource()))))
        elif source is not None:
            files.append((role, Path(source).expanduser()))
    for role, extra in (("custom objects", config.custom_objects),
                        ("pretrained weights", config.pretrained)):
        if extra is not None and Path(extra).expanduser().is_file():
            files.append((role, Path(extra).expanduser()))
    return files


def fingerprint(role: str, path: Path) -> FileRecord:
    """A file's or folder's hash and size, bounded in time (see the module); never raises."""
    try:
        if path.is_dir():
            return _folder_record(role, path)
        size = path.stat().st_size
        digest = hashlib.sha256()
        with path.open("rb") as stream:
            if size <= FULL_HASH_BYTES:
                method = WHOLE
                for block in iter(lambda: stream.read(2**20), b""):
                    digest.update(block)
            else:
                method = SAMPLED
                digest.update(str(size).encode())
                digest.update(stream.read(SAMPLE_BYTES))
                stream.seek(size - SAMPLE_BYTES)
                digest.update(stream.read(SAMPLE_BYTES))
        return FileRecord(role, str(path), size, digest.hexdigest(), method)
    except OSError as error:
        return FileRecord(role, str(path), error=error.strerror or str(error))


def _folder_record(role: str, folder: Path) -> FileRecord:
    entries = []
    for root, dirs, names in os.walk(folder, followlinks=True):
        dirs.sort()  # a stable order whatever the file system returns
        for name in sorted(names):
            stat = os.stat(os.path.join(root, name))
            relative = os.path.relpath(os.path.join(root, name), folder)
            entries.append((relative, stat.st_size, stat.st_mtime_ns))
    digest = hashlib.sha256()
    for relative, size, mtime in entries:
        digest.update(f"{relative}\0{size}\0{mtime}\n".encode("utf-8", "surrogateescape"))
    return FileRecord(role, str(folder), sum(e[1] for e in entries), digest.hexdigest(),
                      LISTING, files=len(entries))


DATA_ROLES = ("data", "validation data")


def data_changes(folder: Path) -> list[str]:
    """How the run's data differs from what it started on (environment.json's fingerprints),
    one line per file or folder: a resume would go on training on other data. Empty when
    nothing changed, or when the run recorded no fingerprint (an older run)."""
    recorded = read_environment(folder)
    if recorded is None:
        return []
    changes = []
    for before in recorded.files:
        if before.role not in DATA_ROLES or before.sha256 is None:
            continue
        now = fingerprint(before.role, Path(before.path))
        if now.sha256 == before.sha256:
            continue
        if now.error:
            changes.append(f"the {before.role} {before.path} cannot be read now: {now.error}")
        elif before.files is not None and now.files != before.files:
            changes.append(f"the {before.role} folder {before.path} holds {now.files} files, "
                           f"{before.files} when the run started")
        elif now.size != before.size:
            changes.append(f"the {before.role} {before.path} is {format_bytes(now.size)}, "
                           f"{format_bytes(before.size)} when the run started")
        else:
            what = ("files were modified since" if before.method == LISTING
                    else "its content differs from the run's start")
            changes.append(f"the {before.role} {before.path}: {what}")
    return changes
