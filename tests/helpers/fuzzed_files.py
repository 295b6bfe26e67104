"""Seeded damaged model and data files, for the file inspector's fuzz test and benchmark.

Valid small files are made without TensorFlow (a legacy-Keras `.h5` with a
`model_config` attribute and weights, a Keras 3 `.keras` zip with config.json and
model.weights.h5, `.npz` files from numpy.savez and savez_compressed), then
mutated: bit flips (mostly in the headers, where parsers look), truncations,
swapped chunks, and zip bombs (a member that expands to gigabytes, or one that
only declares gigabytes). The same seed gives the same files.
"""

from __future__ import annotations

import functools
import io
import json
import random
import struct
import zipfile
import zlib
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import h5py
import numpy as np

from mgpu_gui.core.inspect_request import InspectKind

BOMB_MIB = 2048  # more than the inspector's 1 GiB memory headroom
_ZEROS = bytes(1 << 20)


class Mutation(StrEnum):
    NONE = "none"
    BIT_FLIPS = "bit_flips"
    TRUNCATE = "truncate"
    SWAP_CHUNKS = "swap_chunks"
    ZIP_BOMB = "zip_bomb"  # a member that really expands to BOMB_MIB
    SIZE_LIE = "size_lie"  # a small member whose header declares gigabytes


@dataclass(frozen=True)
class FuzzCase:
    path: Path
    kind: InspectKind
    mutation: Mutation


SUFFIXES = (".h5", ".keras", ".npz")
# Bombs are few: each costs the child ~1 GiB of decompression before its MemoryError.
_WEIGHTS = {Mutation.NONE: 6, Mutation.BIT_FLIPS: 40, Mutation.TRUNCATE: 20,
            Mutation.SWAP_CHUNKS: 25, Mutation.ZIP_BOMB: 3, Mutation.SIZE_LIE: 6}


def fuzz_cases(folder: Path, count: int, seed: int) -> list[FuzzCase]:
    """Write `count` files (valid and mutated, all three kinds) into `folder`."""
    rng = random.Random(seed)
    valid = {suffix: valid_files(suffix, seed) for suffix in SUFFIXES}
    mutations, weights = zip(*_WEIGHTS.items(), strict=True)
    cases = []
    for index in range(count):
        suffix = rng.choice(SUFFIXES)
        mutation = rng.choices(mutations, weights)[0]
        if suffix == ".h5" and mutation in (Mutation.ZIP_BOMB, Mutation.SIZE_LIE):
            mutation = Mutation.BIT_FLIPS  # no zip inside an HDF5 file
        data = mutate(rng.choice(valid[suffix]), suffix, mutation, rng)
        path = folder / f"case{index:05d}_{mutation.value}{suffix}"
        path.write_bytes(data)
        kind = InspectKind.DATA if suffix == ".npz" else InspectKind.MODEL
        cases.append(FuzzCase(path, kind, mutation))
    return cases


def mutate(data: bytes, suffix: str, mutation: Mutation, rng: random.Random) -> bytes:
    if mutation is Mutation.NONE:
        return data
    if mutation is Mutation.BIT_FLIPS:
        out = bytearray(data)
        span = len(out) if rng.random() < 0.3 else min(len(out), 4096)
        for _ in range(rng.randint(1, 24)):
            out[rng.randrange(span)] ^= 1 << rng.randrange(8)
        return bytes(out)
    if mutation is Mutation.TRUNCATE:
        return data[: rng.randrange(len(data))]
    if mutation is Mutation.SWAP_CHUNKS:
        size = rng.randint(8, max(8, min(1024, len(data) // 4)))
        a, b = sorted(rng.sample(range(0, len(data) - size, size), 2))
        return data[:a] + data[b:b + size] + data[a + size:b] + data[a:a + size] + data[b + size:]
    if mutation is Mutation.ZIP_BOMB:
        return zip_bomb(suffix)
    return zip_bomb(suffix, declared=rng.randint(1, 3) << 30)


def zip_bomb(suffix: str, mib: int = BOMB_MIB, declared: int | None = None) -> bytes:
    """A .keras whose config.json, or an .npz whose y_train, expands to `mib` MiB of zeros
    (an .npz's header asks for an array that size); with `declared`, a small member that
    only declares that many bytes."""
    if suffix == ".keras":
        members = [("metadata.json", b'{"keras_version": "3.15.1"}')]
        target, prefix = "config.json", b'{"class_name": "Sequential", "config": {"name": "'
    else:
        members = [("x_train.npy", _npy(np.zeros((4, 8, 8), np.uint8)))]
        target, prefix = "y_train.npy", _npy_header(np.dtype(np.uint8), (mib << 20,))
    if declared is None:
        return zip_bytes(members, (target, *zeros_member(prefix, mib)))
    small = zlib.compress(prefix + bytes(64))[2:-4]  # raw deflate
    return zip_bytes(members, (target, small, declared, zlib.crc32(prefix)))


# -- valid files --------------------------------------------------------------------------
@functools.cache
def valid_files(suffix: str, seed: int) -> tuple[bytes, ...]:
    """A few valid files of one kind, as bytes."""
    rng = np.random.default_rng(seed)
    if suffix == ".h5":
        return tuple(_h5_model(rng, units) for units in (3, 10))
    if suffix == ".keras":
        return tuple(_keras_model(rng, units) for units in (2, 5))
    return tuple(_npz(rng, compressed) for compressed in (False, True))


def _config(units: int) -> dict:
    def layer(cls: str, name: str, **cfg) -> dict:
        return {"class_name": cls, "config": {"name": name, **cfg}}

    return {"class_name": "Sequential", "config": {"name": "net", "layers": [
        layer("InputLayer", "in", batch_input_shape=[None, 8, 8, 1]),
        layer("Conv2D", "conv", filters=4, kernel_size=[3, 3], activation="relu"),
        layer("Flatten", "flat"),
        layer("Dense", "out", units=units, activation="softmax"),
    ]}}


def _weights(h5: h5py.Group, rng: np.random.Generator, units: int) -> None:
    for name, shapes in (("conv", ((3, 3, 1, 4), (4,))), ("out", ((144, units), (units,)))):
        group = h5.create_group(name).create_group(name)
        for label, shape in zip(("kernel:0", "bias:0"), shapes, strict=True):
            group.create_dataset(label, data=rng.standard_normal(shape).astype(np.float32))
        group.attrs["weight_names"] = [f"{name}/{label}".encode() for label in ("kernel:0",
                                                                                "bias:0")]


def _h5_model(rng: np.random.Generator, units: int) -> bytes:
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as h5:
        h5.attrs["keras_version"] = "2.21.0"
        h5.attrs["backend"] = "tensorflow"
        h5.attrs["model_config"] = json.dumps(_config(units))
        h5.attrs["training_config"] = json.dumps({"loss": "categorical_crossentropy"})
        weights = h5.create_group("model_weights")
        weights.attrs["layer_names"] = [b"conv", b"out"]
        _weights(weights, rng, units)
    return buffer.getvalue()


def _keras_model(rng: np.random.Generator, units: int) -> bytes:
    weights = io.BytesIO()
    with h5py.File(weights, "w") as h5:
        _weights(h5.create_group("layers"), rng, units)
    config = {**_config(units), "compile_config": {"loss": "sparse_categorical_crossentropy"}}
    members = [("metadata.json", json.dumps({"keras_version": "3.15.1"}).encode()),
               ("config.json", json.dumps(config).encode()),
               ("model.weights.h5", weights.getvalue())]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members:
            archive.writestr(name, data)
    return buffer.getvalue()


def _npz(rng: np.random.Generator, compressed: bool) -> bytes:
    arrays = {"x_train": rng.integers(0, 255, (40, 8, 8), dtype=np.uint8),
              "y_train": rng.integers(0, 4, 40),
              "x_val": rng.integers(0, 255, (10, 8, 8), dtype=np.uint8),
              "y_val": rng.integers(0, 4, 10)}
    buffer = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buffer, **arrays)
    return buffer.getvalue()


# -- zips made by hand (zipfile cannot write a member it did not compress) ------------------
def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def _npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buffer, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                 "shape": shape})
    return buffer.getvalue()


@functools.cache
def zeros_member(prefix: bytes, mib: int) -> tuple[bytes, int, int]:
    """(raw deflate, size, crc32) of `prefix` + `mib` MiB of zeros, built in milliseconds.

    After a sync flush and 32 KiB of zeros the compressor's state repeats, so
    each further MiB compresses to the same bytes: compress two, repeat one.
    """
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = compressor.compress(prefix) + compressor.compress(_ZEROS)
    head += compressor.flush(zlib.Z_SYNC_FLUSH)
    repeat = compressor.compress(_ZEROS) + compressor.flush(zlib.Z_SYNC_FLUSH)
    tail = compressor.flush()
    crc = zlib.crc32(prefix)
    for _ in range(mib):
        crc = zlib.crc32(_ZEROS, crc)
    return head + repeat * (mib - 1) + tail, len(prefix) + (mib << 20), crc


def zip_bytes(members: list[tuple[str, bytes]], raw: tuple[str, bytes, int, int]) -> bytes:
    """A zip of stored `members` plus one deflated member given as (name, data, size, crc)."""
    entries = [(name, data, 0, len(data), zlib.crc32(data)) for name, data in members]
    entries.append((raw[0], raw[1], 8, raw[2], raw[3]))
    out, central = io.BytesIO(), io.BytesIO()
    for name, data, method, size, crc in entries:
        offset = out.tell()
        encoded = name.encode()
        out.write(struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, method, 0, 33, crc, len(data),
                              size, len(encoded), 0) + encoded + data)
        central.write(struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, method, 0, 33, crc,
                                  len(data), size, len(encoded), 0, 0, 0, 0, 0, offset)
                      + encoded)
    start = out.tell()
    out.write(central.getvalue())
    out.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(entries), len(entries),
                          len(central.getvalue()), start, 0))
    return out.getvalue()
