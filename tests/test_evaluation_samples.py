"""Where each evaluated sample came from, and its picture drawn again from the data: image
files (one since damaged), the demo's digits, rows of an .npz array beyond its first chunk;
and the clear refusals when the data is gone or the evaluation predates the origins."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from PIL import Image

from mgpu_gui.core.config import DEMO
from mgpu_gui.core.datasets.inspection import load_demo_arrays
from mgpu_gui.core.errors import DataError
from mgpu_gui.core.evaluation.result import PREDICTIONS_FILE, EvaluationResult, Split
from mgpu_gui.core.evaluation.samples import DrawRequest, SampleOrigins, draw_samples


def kept(tmp_path, origins: SampleOrigins) -> str:
    labels = np.zeros(len(origins), dtype=np.int64)
    EvaluationResult("m.keras", origins.source, Split.TEST, len(origins), None).save(
        tmp_path, labels, np.ones((len(origins), 1)), origins)
    return str(tmp_path / PREDICTIONS_FILE)


def drawn(predictions: str, picks, px=16, chunk=32) -> list[np.ndarray | None]:
    parts: list[tuple[int, list[str]]] = []
    draw_samples(DrawRequest(predictions, tuple(picks), px),
                 lambda first, pngs: parts.append((first, pngs)), chunk=chunk)
    assert [first for first, _ in parts] == list(range(0, len(picks), chunk))
    pngs = [png for _, block in parts for png in block]
    return [np.asarray(Image.open(io.BytesIO(base64.b64decode(p)))) if p else None
            for p in pngs]


def test_image_files_are_drawn_in_the_order_asked_and_a_damaged_one_is_empty(tmp_path):
    files = []
    for i, color in enumerate(((255, 0, 0), (0, 255, 0), (0, 0, 255))):
        path = tmp_path / f"{i}.png"
        Image.new("RGB", (40, 20), color).save(path)
        files.append(str(path))
    origins = SampleOrigins.of_files(str(tmp_path), np.array(files)).take(np.array([2, 0, 1]))
    assert origins.describe(0) == "2.png"
    (tmp_path / "1.png").write_bytes(b"not a png any more")
    pictures = drawn(kept(tmp_path, origins), [0, 1, 2], chunk=2)
    assert pictures[0].shape == (8, 16, 3)  # fitted into 16 px, its aspect kept
    assert tuple(pictures[0][4, 8]) == (0, 0, 255) and tuple(pictures[1][4, 8]) == (255, 0, 0)
    assert pictures[2] is None


def test_rows_of_an_npz_array_are_read_past_its_first_chunk(tmp_path, monkeypatch):
    monkeypatch.setattr("mgpu_gui.core.evaluation.samples.CHUNK_BYTES", 64 * 3)
    x = np.zeros((10, 8, 8), dtype=np.float32)
    x[np.arange(10), np.arange(10) % 8, 0] = 1.0
    np.savez(tmp_path / "d.npz", x_test=x, y_test=np.arange(10))
    origins = SampleOrigins.of_rows(str(tmp_path / "d.npz"), "x_test", 10, (8, 8))
    shuffled = origins.take(np.array([9, 3, 5]))
    assert shuffled.describe(0) == "x_test[9]"
    pictures = drawn(kept(tmp_path, shuffled), [0, 2], px=8)
    assert [int(np.flatnonzero(p[:, 0])[0]) for p in pictures] == [9 % 8, 5]


def test_the_demo_digits_are_drawn_from_the_bundled_arrays(tmp_path):
    digits, _ = load_demo_arrays()
    origins = SampleOrigins.of_rows(DEMO, "demo", len(digits), digits.shape[1:])
    picture = drawn(kept(tmp_path, origins.take(np.array([7]))), [0], px=8)[0]
    expected = digits[7].astype(float)
    stretched = np.round((expected - expected.min()) / np.ptp(expected) * 255)
    assert np.array_equal(picture, stretched.astype(np.uint8))


def test_what_cannot_be_drawn_says_why(tmp_path):
    np.savez(tmp_path / "d.npz", x_test=np.zeros((4, 8, 8)), y_test=np.zeros(4))
    origins = SampleOrigins.of_rows(str(tmp_path / "d.npz"), "x_test", 4, (8, 8))
    predictions = kept(tmp_path, origins)
    (tmp_path / "d.npz").unlink()
    with pytest.raises(DataError, match="is gone"):
        drawn(predictions, [0])
    features = SampleOrigins.of_rows(str(tmp_path / "d.npz"), "x_test", 4, (20,))
    with pytest.raises(DataError, match="not pictures"):
        drawn(kept(tmp_path, features), [0])
    np.savez(tmp_path / PREDICTIONS_FILE, labels=np.zeros(4), outputs=np.ones((4, 1)))
    with pytest.raises(DataError, match="evaluate again"):
        drawn(predictions, [0])

