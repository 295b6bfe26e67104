"""Whether a model file already holds its optimizer's state (h5py; read in the inspector child).

The run's checkpoints are as large as the file when it does, and about three
times larger when it does not (Adam keeps two slots as large as the weights):
the preflight's disk check needs to know which, before anything is written.
"""

from __future__ import annotations

import io
import struct
import zipfile
from pathlib import Path
from typing import BinaryIO

import h5py


def has_optimizer_state(path: Path) -> bool | None:
    """True or False for a `.keras` or `.h5` file; None when it cannot be told."""
    try:
        return _has_optimizer_state(path)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        return None


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
