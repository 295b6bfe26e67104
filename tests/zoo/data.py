"""Tiny deterministic data for the zoo, written into a folder the caller gives.

Each writer makes the smallest data that still gives every stage something real to do:
a few training steps at a global batch of 16 on 2 replicas, a validation split, a test
split where the format has one (an `.npz`), and for images a `predict/` folder of raw
files (PNG and JPEG) as a user would pass to `mgpu-train predict`. The classes are made
easy to tell apart (a bright channel, a bright quadrant, a sine's frequency) so a
2-epoch run learns something and `evaluate` has a non-trivial confusion matrix.
Everything is seeded: the same call writes the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

SEED = 29


@dataclass(frozen=True)
class DataFiles:
    """What a writer made: `path` goes to `--data`; `predict` (image data only) to `predict`."""

    path: Path
    predict: Path | None = None


def _rng(salt: int) -> np.random.Generator:
    return np.random.default_rng(SEED + salt)


def _split_npz(path: Path, x: np.ndarray, y: np.ndarray, n_test: int) -> Path:
    """The last `n_test` samples are the test split; the app takes validation from train."""
    np.savez(path, x_train=x[:-n_test], y_train=y[:-n_test], x_test=x[-n_test:],
             y_test=y[-n_test:])
    return path


def _save_png(array: np.ndarray, path: Path) -> None:
    from PIL import Image

    mode = "L" if array.ndim == 2 else "RGB"
    Image.fromarray(array.astype(np.uint8), mode).save(path)


def image_npz(folder: Path, classes: int = 4, per_class: int = 24, size: int = 28) -> DataFiles:
    """Grey 28x28 digits-like images in [0, 1] (MNIST's layout): class k lights quadrant k.
    Also a few raw grey PNGs under predict/, as 0-255 files."""
    rng = _rng(1)
    n = classes * per_class
    y = np.tile(np.arange(classes), per_class)
    x = rng.random((n, size, size, 1), dtype=np.float32) * 0.3
    half = size // 2
    for i, label in enumerate(y):
        r, c = divmod(int(label) % 4, 2)
        x[i, r * half:(r + 1) * half, c * half:(c + 1) * half, 0] += 0.7
    data = _split_npz(folder / "image.npz", x, y, n_test=16)
    predict = folder / "image_predict"
    predict.mkdir(exist_ok=True)
    for i in range(3):
        _save_png(x[-(i + 1), :, :, 0] * 255, predict / f"digit_{i}.png")
    return DataFiles(data, predict)


def image_folder(folder: Path, classes: int = 3, per_class: int = 18, size: int = 32,
                 name: str = "images") -> DataFiles:
    """RGB PNGs in one subfolder per class (class k: channel k bright), plus predict/ with
    two PNGs and a JPEG of another size (predict resizes as training did)."""
    rng = _rng(2 + classes)
    root = folder / name
    names = [f"class_{chr(ord('a') + k)}" for k in range(classes)]
    for k, label in enumerate(names):
        (root / label).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            pixels = rng.integers(0, 90, (size, size, 3))
            pixels[:, :, k % 3] += 150
            if k >= 3:  # a fourth class and up: a bright stripe instead
                pixels[:, : size // 4, :] = 240
            _save_png(pixels, root / label / f"{label}_{i:02d}.png")
    predict = folder / f"{name}_predict"
    predict.mkdir(exist_ok=True)
    from PIL import Image

    for k in range(min(classes, 2)):
        pixels = rng.integers(0, 90, (size, size, 3))
        pixels[:, :, k] += 150
        _save_png(pixels, predict / f"raw_{k}.png")
    pixels = rng.integers(0, 90, (size * 2, size * 2, 3))
    pixels[:, :, 0] += 150
    Image.fromarray(pixels.astype(np.uint8), "RGB").save(predict / "raw_big.jpg", quality=90)
    return DataFiles(root, predict)


def image_folder_binary(folder: Path) -> DataFiles:
    """Two classes (cats vs dogs in the keras-io example this serves)."""
    return image_folder(folder, classes=2, per_class=24, name="images_binary")


def tabular_npz(folder: Path, features: int = 6, classes: int = 3, n: int = 96) -> DataFiles:
    """Float features, integer classes: class k shifts feature k (the legacy .h5 template
    takes 6 features and 3 classes)."""
    rng = _rng(3)
    y = np.tile(np.arange(classes), n // classes)
    x = rng.normal(size=(n, features)).astype(np.float32)
    x[np.arange(n), y % features] += 2.0
    return DataFiles(_split_npz(folder / "tabular.npz", x, y, n_test=16))


def binary_npz(folder: Path, features: int = 8, n: int = 128) -> DataFiles:
    """Imbalanced 0/1 labels (1 in 4 positive; the fraud example's is 1 in 578, too rare
    for a tiny set): positives shift the first two features."""
    rng = _rng(4)
    y = (np.arange(n) % 4 == 0).astype(np.int64)
    x = rng.normal(size=(n, features)).astype(np.float32)
    x[y == 1, :2] += 1.5
    return DataFiles(_split_npz(folder / "binary.npz", x, y, n_test=32))


def regression_npz(folder: Path, features: int = 5, n: int = 96) -> DataFiles:
    """A linear target plus noise, float32 labels of shape (n,)."""
    rng = _rng(5)
    x = rng.normal(size=(n, features)).astype(np.float32)
    y = (x @ np.linspace(-1, 1, features) + 0.1 * rng.normal(size=n)).astype(np.float32)
    return DataFiles(_split_npz(folder / "regression.npz", x, y, n_test=16))


def multihot_npz(folder: Path, features: int = 10, labels: int = 4, n: int = 96) -> DataFiles:
    """Multi-hot labels (n, 4) of 0/1 floats, each sample with one to three labels."""
    rng = _rng(6)
    x = rng.normal(size=(n, features)).astype(np.float32)
    y = (x[:, :labels] > 0.2).astype(np.float32)
    y[y.sum(axis=1) == 0, 0] = 1.0
    return DataFiles(_split_npz(folder / "multihot.npz", x, y, n_test=16))


def sequence_npz(folder: Path, steps: int = 32, n: int = 96) -> DataFiles:
    """Univariate series (n, 32, 1), FordA's layout: class 0 a slow sine, 1 a fast one."""
    rng = _rng(7)
    y = np.tile(np.arange(2), n // 2)
    t = np.linspace(0, 2 * np.pi, steps, dtype=np.float32)
    freq = np.where(y == 0, 1.0, 3.0)[:, None]
    x = np.sin(freq * t[None, :] + rng.random((n, 1)) * 6) + 0.2 * rng.normal(size=(n, steps))
    return DataFiles(_split_npz(folder / "sequence.npz", x[..., None].astype(np.float32), y,
                                n_test=16))


WRITERS = {
    "image_npz": image_npz,
    "image_folder": image_folder,
    "image_folder_binary": image_folder_binary,
    "tabular": tabular_npz,
    "binary": binary_npz,
    "regression": regression_npz,
    "multihot": multihot_npz,
    "sequence": sequence_npz,
}
