"""The augmentation preview: real images of the folder beside variants made by the
training's own layers, in a child, following the strengths while it is open."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mgpu_gui.core.augment_preview import Pick, PreviewRequest, pick_images
from mgpu_gui.core.events import AugmentPreviewRow
from tests.helpers.augment_preview import CannedJob


@pytest.fixture
def folder(tmp_path) -> Path:
    """Three classes of two noise images each (a transform always shows), one unreadable."""
    rng = np.random.default_rng(0)
    for label in ("cat", "dog", "owl"):
        (tmp_path / "images" / label).mkdir(parents=True)
        for i in range(2):
            Image.fromarray(rng.integers(0, 256, (24, 40, 3), dtype=np.uint8)).save(
                tmp_path / "images" / label / f"{i}.png")
    return tmp_path / "images"


def pixels(png: str) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(png))))


def test_images_are_picked_across_classes_seeded(folder):
    request = PreviewRequest(str(folder), (32, 32), "flip", images=4)
    picks = pick_images(request)
    assert len(picks) == 4 and len({p.label for p in picks[:3]}) == 3
    assert pick_images(request) == picks  # seeded
    assert pick_images(PreviewRequest(str(folder), (32, 32), "flip", images=99)) != picks
    assert len(pick_images(PreviewRequest(str(folder), (32, 32), "flip", images=99))) == 6


@pytest.mark.slow
def test_the_training_layers_vary_the_images_and_an_empty_spec_leaves_them(folder):
    from mgpu_gui.engine import augmentation

    broken = folder / "owl" / "broken.png"
    broken.write_bytes(b"not a png")
    picks = [Pick(str(folder / "cat" / "0.png"), "cat"), Pick(str(broken), "owl")]
    rows: list[AugmentPreviewRow] = []
    augmentation.preview(PreviewRequest(str(folder), (32, 48), "rotate=0.3,zoom=0.3",
                                        variants=3, px=48), picks, rows.append)
    augmentation.preview(PreviewRequest(str(folder), (32, 48), "", variants=3, px=48),
                         picks[:1], rows.append)
    varied, unreadable, unchanged = rows
    original, *variants = (pixels(png) for png in varied.pngs)
    assert original.shape == (32, 48, 3) and len(variants) == 3
    assert all(np.abs(v.astype(int) - original).mean() > 10 for v in variants)
    assert not unreadable.pngs and "broken.png cannot be decoded" in unreadable.error
    assert (unchanged.label, unchanged.name) == ("cat", "0.png")
    original, *variants = (pixels(png) for png in unchanged.pngs)
    assert all(np.array_equal(v, original) for v in variants)


@pytest.mark.slow
def test_the_dialog_shows_the_childs_pictures(panel, qtbot, folder):
    assert not panel.augment_preview.isEnabled()  # the demo: nothing to augment
    panel.set_data_path(folder)
    assert not panel.augment_preview.isEnabled()  # no transform ticked
    panel.augment_picker.boxes["rotate"].setChecked(True)
    panel.augment_picker.strengths["rotate"].setValue(0.3)
    panel.augment_picker.boxes["zoom"].setChecked(True)
    assert panel.augment_preview.isEnabled()
    panel.augment_preview.click()
    dialog = panel.augment_view
    assert dialog.status.text() == "Starting TensorFlow…" or dialog.grid.rows
    qtbot.waitUntil(lambda: len(dialog.grid.rows) == 4 and not dialog.loader.is_running(),
                    timeout=60_000)
    for row in dialog.grid.rows:
        original, *variants = row.images
        assert len(variants) == 5 and all(v != original for v in variants)
    assert {row.name for row in dialog.grid.rows} == {"cat", "dog", "owl"}
    assert "rotated up to 108°" in dialog.about.text() and not dialog.progress.isVisible()
    assert not dialog.message.isVisible()


def test_a_folder_without_images_says_so(panel, qtbot, tmp_path):
    (tmp_path / "empty" / "cat").mkdir(parents=True)
    panel.set_data_path(tmp_path / "empty")
    panel.augment_picker.boxes["flip"].setChecked(True)
    dialog = panel.preview_augmentation()
    qtbot.waitUntil(lambda: dialog.message.isVisible(), timeout=30_000)
    assert "has 1 class subfolders but no images" in dialog.message.text()
    assert not dialog.grid.rows


def test_the_preview_follows_the_strengths_and_draws_new_samples(panel, qtbot, folder,
                                                                 monkeypatch):
    monkeypatch.setattr("mgpu_gui.gui.jobs.augment_preview.AugmentPreviewJob", CannedJob)
    CannedJob.requests = []
    panel.set_data_path(folder)
    panel.augment_picker.boxes["contrast"].setChecked(True)
    dialog = panel.preview_augmentation()
    qtbot.waitUntil(lambda: len(dialog.grid.rows) == 4 and not dialog.loader.is_running())
    assert CannedJob.requests == [PreviewRequest(str(folder), (64, 64), "contrast=0.2",
                                                 seed=0, px=96)]
    strength = panel.augment_picker.strengths["contrast"]
    strength.setValue(0.3)
    strength.setValue(0.4)  # two steps, one preview once the edits pause
    qtbot.waitUntil(lambda: len(CannedJob.requests) == 2)
    assert CannedJob.requests[1].spec == "contrast=0.4" and CannedJob.requests[1].seed == 0
    qtbot.waitUntil(lambda: not dialog.loader.is_running())
    dialog.again.click()
    assert CannedJob.requests[2].seed == 1 and CannedJob.requests[2].spec == "contrast=0.4"
    qtbot.waitUntil(lambda: not dialog.loader.is_running())
    panel.augment_picker.boxes["contrast"].setChecked(False)
    assert "Tick a transform" in dialog.about.text() and not dialog.grid.rows
    assert not dialog.again.isEnabled() and len(CannedJob.requests) == 3
