"""Checks that need no TensorFlow, run before a run folder or a worker exists.

Bad input is refused in milliseconds with the same messages the worker would
give later, and leaves no files behind. What only the built model can tell (a
`.py` builder's shapes) is checked again in the worker.
"""

from __future__ import annotations

import importlib.util
import io
import os
import struct
import zipfile
from pathlib import Path
from typing import BinaryIO

import h5py

from mgpu_gui.core.config import DEMO, RunConfig
from mgpu_gui.core.datasets import fit_check
from mgpu_gui.core.datasets.inspection import DataInfo, LabelKind, inspect_data
from mgpu_gui.core.errors import DataError, ModelError, OutputError, UserError
from mgpu_gui.core.modelfiles.info import ModelFileInfo, lambda_refused
from mgpu_gui.core.modelfiles.inspection import inspect_model_file
from mgpu_gui.core.runs import checkpoints


def check(config: RunConfig, replicas: int,
          disk: bool = True) -> tuple[ModelFileInfo | None, DataInfo]:
    """Raise the first problem found; return what was learned for display.

    `disk=False` leaves out the output folder's checks (writable, free space),
    for callers that check the inputs alone.
    """
    if config.tensorboard and importlib.util.find_spec("tensorboard") is None:
        raise UserError("TensorBoard logs need the tensorboard package, which TensorFlow 2.21 "
                        "no longer installs: pip install 'mgpu-gui[tensorboard]', or train "
                        "without --tensorboard.")
    model = None if config.model == DEMO else inspect_model_file(config.model)
    data = inspect_data(config.data, image_size=config.image_size)
    if config.validation_data is not None:
        inspect_data(config.validation_data, image_size=config.image_size)
    if model is not None:
        check_model_fits(config, model, data)
    check_batch_fits(config, replicas, data)
    if disk:
        check_output_disk(config, model)
    return model, data


def check_model_fits(config: RunConfig, model: ModelFileInfo, data: DataInfo) -> None:
    """Refuse a model that would run code without consent, or whose shapes do not fit the data.

    Pure: works on what was read, so the GUI re-checks without reading the files again.
    """
    # A legacy multi-GPU wrapper's slicing Lambdas never run: the template is rebuilt
    # from its config. Only Lambdas inside the template would run code.
    lambdas = model.wrapper.template_lambdas if model.wrapper else model.lambda_layers
    if lambdas and not config.allow_unsafe_code:
        raise ModelError(lambda_refused(model, ", ".join(lambdas)))
    if model.input_shape is not None and data.x_shape is not None:
        fit_check.check_input_shape(model.input_shape, data.x_shape)
    if data.label_kind is LabelKind.SPARSE:
        fit_check.check_label_range(model.output_units, data.label_max, data.num_classes)


def check_batch_fits(config: RunConfig, replicas: int, data: DataInfo) -> None:
    """Refuse a global batch larger than the training set (pure, like `check_model_fits`)."""
    train, _, _ = data.split_counts(config.validation_split)
    global_batch = config.batch_per_replica * replicas
    if train < global_batch:
        raise DataError(
            f"the training set has {train} samples, fewer than one global batch "
            f"({global_batch} = {config.batch_per_replica} per replica x {replicas} replicas); "
            f"lower the batch per replica or use fewer replicas.")


def check_output_disk(config: RunConfig, model: ModelFileInfo | None) -> None:
    """Refuse a read-only output folder, or a disk too full for the run's checkpoints.

    A `.py` builder's (or the demo's) size is known only once it is built: then
    only the margin for logs is checked here, and the worker checks the rest.
    """
    root = config.output_path
    existing = checkpoints.nearest_existing(root)
    if not os.access(existing, os.W_OK):
        try:
            readonly = bool(os.statvfs(existing).f_flag & os.ST_RDONLY)
        except OSError:
            readonly = False
        reason = "Read-only file system" if readonly else "Permission denied"
        raise OutputError(f"Cannot write to output folder {root}: {reason}. "
                          f"Choose a folder you can write to (--output-dir).")
    size = checkpoint_estimate(model.path) if model is not None else None
    need = checkpoints.space_needed(size, len(config.export_formats))
    checkpoints.check_free_space(root, need)


def checkpoint_estimate(path: Path) -> int | None:
    """Bytes of one checkpoint of this model: the file, x3 when it holds no optimizer state."""
    try:
        size = path.stat().st_size
        has_state = _has_optimizer_state(path)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        return None
    if size == 0 or path.suffix.lower() == ".py":
        return None
    return size if has_state else size * checkpoints.ADAM_FACTOR


def _has_optimizer_state(path: Path) -> bool:
    """Adam and co. keep slots as large as the weights; a trained file already has them."""
    suffix = path.suffix.lower()
    if suffix == ".keras":
        with open(path, "rb") as raw, _weights_entry(raw, path) as entry, \
                h5py.File(entry, "r") as weights:
            variables = weights.get("optimizer/vars")
            return variables is not None and len(variables) > 2  # beyond step and rate
    if suffix in (".h5", ".hdf5"):
        with h5py.File(path, "r") as weights:
            return "optimizer_weights" in weights
    return False


def _weights_entry(raw: BinaryIO, path: Path) -> _Window:
    """The `.keras` zip's weights file, read in place: Keras stores it uncompressed, and
    zipfile's own reader rereads from the start on every backward seek (Python 3.11)."""
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("model.weights.h5")
    if info.compress_type != zipfile.ZIP_STORED:
        raise ValueError("compressed weights")
    raw.seek(info.header_offset)
    header = raw.read(30)
    if header[:4] != b"PK\x03\x04":
        raise ValueError("bad zip entry")
    name_length, extra_length = struct.unpack("<HH", header[26:30])
    return _Window(raw, info.header_offset + 30 + name_length + extra_length, info.file_size)


class _Window(io.RawIOBase):
    """A read-only, seekable view of `size` bytes of `raw` from `start`."""

    def __init__(self, raw: BinaryIO, start: int, size: int):
        super().__init__()
        self._raw, self._start, self._size, self._pos = raw, start, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer) -> int:
        count = max(0, min(len(buffer), self._size - self._pos))
        self._raw.seek(self._start + self._pos)
        data = self._raw.read(count)
        buffer[:len(data)] = data
        self._pos += len(data)
        return len(data)
