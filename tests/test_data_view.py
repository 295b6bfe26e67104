"""The Data view (issue 16): a dataset's figures before training, read in a child.

The overview's numbers on a small `.npz` and a small image folder (counts per
split, the 5x imbalance warning, shape, dtype, value range, image sizes, and
saying so when it read a sample), its child round trip, and the dialog filled
stage by stage from the run setup's Preview button.
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from mgpu_gui.core.children.data_overview import DataOverviewJob
from mgpu_gui.core.datasets import overview as overview_mod
from mgpu_gui.core.datasets.inspection import DataKind
from mgpu_gui.core.datasets.overview import (
    OverviewRequest,
    Stage,
    imbalance_warning,
    overview_data,
)
from mgpu_gui.core.events import DataOverviewFailed

FOLDER_COUNTS = {"cat": 10, "dog": 2, "owl": 3}  # 10 / 2 = 5x: the warning
SIZES = ((12, 10), (20, 16))  # (width, height) of the images, alternating


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("folder")
    rng = np.random.default_rng(0)
    for name, count in FOLDER_COUNTS.items():
        (root / name).mkdir()
        for i in range(count):
            width, height = SIZES[i % 2]
            pixels = rng.integers(10, 200, (height, width, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / name / f"{i:02d}.png")
    return root


@pytest.fixture(scope="module")
def npz(tmp_path_factory):
    """uint8 28x28 images: class 0 has 64 samples, 1 and 2 have 16 each (4x); 12 test samples."""
    path = tmp_path_factory.mktemp("npz") / "data.npz"
    y = np.array([0, 0, 1, 0, 2, 0] * 16)
    x = np.zeros((len(y), 28, 28), dtype=np.uint8)
    x[:, 3:9, 3:9] = 7
    x[50, 0, 0] = 250
    np.savez(path, x_train=x, y_train=y, x_test=x[:12], y_test=y[:12])
    return path


def test_the_warning_comes_at_5x_and_names_both_classes():
    assert imbalance_warning(["a", "b"], [24, 5]) == ""  # 4.8x
    warning = imbalance_warning(["a", "b", "c"], [50, 10, 30])
    assert "'a' has 50 training samples, 5.0x the 10 of 'b'" in warning
    assert "no training samples ('b')" in imbalance_warning(["a", "b"], [3, 0])


def test_npz_counts_shape_dtype_range_and_samples(npz):
    parts = []
    result = overview_data(OverviewRequest(str(npz)), parts.append)
    assert [p.stage for p in parts] == [Stage.COUNTS, Stage.SAMPLES]
    assert result.stage is Stage.DONE and result.kind is DataKind.NPZ
    assert result.class_names == ("0", "1", "2")
    assert [(s.split, s.samples, s.counts) for s in result.splits] == [
        ("train", 96, (64, 16, 16)), ("test", 12, (8, 2, 2))]
    assert result.imbalance == ""  # 4x
    assert result.input_shape == (28, 28, 1) and result.dtype == "uint8"
    assert (result.value_min, result.value_max) == (0.0, 250.0)
    assert result.values_note() == "all 96 samples"
    assert [t.label for t in result.thumbnails] == [0] * 4 + [1] * 4 + [2] * 4
    assert result.thumbnails[0].name == "sample 0" and parts[0].thumbnails == ()


def test_npz_says_when_the_time_limit_cut_the_range(npz, monkeypatch):
    monkeypatch.setattr(overview_mod, "CHUNK_BYTES", 28 * 28 * 10)  # 10 samples a chunk
    result = overview_data(OverviewRequest(str(npz), budget_s=0.0))
    assert result.values_read == 10 and result.values_total == 96
    assert result.values_note() == ("10 of 96 samples (the first ones: reading stopped at "
                                    "the time limit)")
    assert result.value_max == 7.0  # the 250 of sample 50 was not read
    assert "lie beyond what was read in time" in result.thumbs_note


def test_folder_counts_sizes_and_sampling_said(folder):
    parts = []
    result = overview_data(OverviewRequest(str(folder), image_size=(24, 32)), parts.append)
    assert [p.stage for p in parts] == [Stage.COUNTS, Stage.SAMPLES]
    assert result.class_names == ("cat", "dog", "owl")
    assert result.train_counts == (10, 2, 3)
    assert "'cat' has 10 training samples, 5.0x the 2 of 'dog'" in result.imbalance
    assert result.input_shape == (24, 32, 3) and result.dtype == "uint8"
    assert {(s.width, s.height): s.files for s in result.sizes} == {(12, 10): 8, (20, 16): 7}
    assert result.sizes_note() == "all 15 files"
    assert result.value_min >= 10 and result.value_max < 200
    assert result.values_note() == "9 of 15 images (a random sample)"  # those drawn
    assert sorted(t.label for t in result.thumbnails) == [0] * 4 + [1] * 2 + [2] * 3
    sampled = overview_data(OverviewRequest(str(folder), header_sample=6))
    assert sampled.sizes_read == 6 and sum(s.files for s in sampled.sizes) == 6
    assert sampled.sizes_note() == "6 of 15 files (a random sample)"


def test_the_child_streams_the_stages_and_ends_with_the_same_figures(folder):
    parts = []
    result = DataOverviewJob(OverviewRequest(str(folder)), parts.append).run()
    assert [p.stage for p in parts] == [Stage.COUNTS, Stage.SAMPLES]
    local = overview_data(OverviewRequest(str(folder)))
    assert result.stage is Stage.DONE
    assert (result.splits, result.sizes, result.thumbnails, result.imbalance) == (
        local.splits, local.sizes, local.thumbnails, local.imbalance)
    failed = DataOverviewJob(OverviewRequest(str(folder / "nothing"))).run()
    assert isinstance(failed, DataOverviewFailed) and failed.user_error
    assert "dataset not found" in failed.message


def test_preview_opens_the_data_view_filled_with_the_figures(qtbot, panel, folder):
    panel.data_kind.setCurrentIndex(panel.data_kind.findData("npz"))
    panel.data_edit.clear()
    assert not panel.data_preview.isEnabled()  # a file kind, no path yet
    panel.set_data_path(str(folder))
    assert panel.data_preview.isEnabled()
    panel.data_preview.click()
    dialog = panel.data_view
    assert dialog is not None and dialog.isVisible()
    view = dialog.view
    assert view.status.text() == "Counting the classes…"
    # The click only shows the headline; the content and the child follow its paint.
    assert not view.built and not dialog.loader.is_running()
    with qtbot.waitSignal(dialog.loader.finished, timeout=10_000):
        pass
    assert view.overview.stage is Stage.DONE and not dialog.loader.is_running()
    assert view.bars.names == ("cat", "dog", "owl") and view.bars.counts == (10, 2, 3)
    assert view.warning.isVisible() and "5.0x the 2 of 'dog'" in view.warning.text()
    assert "15 training samples in 3 classes" in view.headline.text()
    assert view.range_label.text().endswith("from 9 of 15 images (a random sample)")
    assert "12×10 px: 8 (53 %)" in view.sizes_label.text()
    rows = {row.name: row for row in view.thumbs.rows}
    assert [len(rows[name].images) for name in ("cat", "dog", "owl")] == [4, 2, 3]
    assert rows["dog"].images[0].width() == overview_mod.THUMB_PX  # 12x10 px, enlarged
    assert rows["cat"].captions[0].endswith(".png")
    assert view.status.text().startswith("Read in")
    dialog.close()
    assert panel.data_view is None
