"""The Data view's time-bounded folder listing: the same files as training's listing, and
the first counts estimated, saying so, when the listing runs past its budget."""

from __future__ import annotations

import os

import pytest

from mgpu_gui.core.datasets.folder_listing import ClassFolders
from mgpu_gui.core.datasets.inspection import list_images
from mgpu_gui.core.datasets.overview import OverviewRequest, Stage, overview_data
from mgpu_gui.core.errors import DataError

PNG = bytes.fromhex(  # a valid 1x1 grey PNG
    "89504e470d0a1a0a0000000d4948445200000001000000010800000000"
    "3a7e9b550000000a49444154789c6360000000020001e221bc330000000049454e44ae426082")


@pytest.fixture(scope="module")
def tricky(tmp_path_factory):
    """Class folders with what a listing can get wrong: nesting (with names that sort
    differently as strings and as paths), hidden files and folders, upper-case suffixes,
    other files, a linked class folder (a class) and a linked subfolder (not entered)."""
    root = tmp_path_factory.mktemp("tricky")
    files = ["cat/b/c.png", "cat/b-c/1.png", "cat/a.PNG", "cat/.hidden.png", "cat/notes.txt",
             "cat/.cache/x.jpg", "cat/deep/er/z.jpeg", "dog/1.bmp", "dog/2.gif", ".skip/3.png"]
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(PNG)
    (root / "elsewhere").mkdir()
    (root / "elsewhere" / "e.png").write_bytes(PNG)
    os.symlink(root / "elsewhere", root / "linked")  # a class of its own, as in list_images
    os.symlink(root / "dog", root / "cat" / "dogs")  # inside a class: not entered
    return root


def test_the_listing_is_training_s_listing(tricky):
    listing = ClassFolders(tricky).listing()
    assert listing == list_images(tricky)
    assert listing.class_names == ("cat", "dog", "elsewhere", "linked")
    assert [os.path.relpath(p, tricky) for p in listing.paths[:5]] == [
        "cat/.cache/x.jpg", "cat/a.PNG", "cat/b/c.png", "cat/b-c/1.png", "cat/deep/er/z.jpeg"]


def test_the_listing_fails_as_training_s_does(tmp_path):
    (tmp_path / "empty_class").mkdir()
    with pytest.raises(DataError) as ours:
        ClassFolders(tmp_path).listing()
    with pytest.raises(DataError) as theirs:
        list_images(tmp_path)
    assert str(ours.value) == str(theirs.value)
    with pytest.raises(DataError, match="is empty"):
        ClassFolders(tmp_path / "empty_class")


def test_past_the_budget_the_first_counts_are_estimates_then_exact(tmp_path):
    """Budget 0: one class folder listed, the others estimated from their directories'
    sizes (all one block here, so as large as the listed one), then counted."""
    for name, count in (("a", 12), ("b", 3), ("c", 30)):
        (tmp_path / name).mkdir()
        for i in range(count):
            (tmp_path / name / f"{i}.png").write_bytes(PNG)
    parts = []
    result = overview_data(OverviewRequest(str(tmp_path), count_budget_s=0.0), parts.append)
    assert [p.stage for p in parts] == [Stage.COUNTS, Stage.COUNTS, Stage.SAMPLES]
    first, exact = parts[0], parts[1]
    assert first.estimated == 2 and first.train_counts[0] == 12
    assert all(count > 0 for count in first.train_counts[1:])
    assert first.imbalance == "" and first.stored.startswith("about ")
    assert first.counts_note().startswith("Counts estimated: 1 of 3 class folders listed")
    assert exact.estimated == 0 and exact.counts_note() == ""
    assert exact.train_counts == result.train_counts == (12, 3, 30)
    assert "10.0x the 3 of 'b'" in exact.imbalance
    within = overview_data(OverviewRequest(str(tmp_path)), parts.clear() or parts.append)
    assert [p.stage for p in parts] == [Stage.COUNTS, Stage.SAMPLES]  # no estimate needed
    assert within.train_counts == (12, 3, 30)


def test_estimates_are_marked_in_the_bars(qtbot):
    from mgpu_gui.gui.widgets.class_bars import ClassBars

    bars = ClassBars("Samples per class")
    qtbot.addWidget(bars)
    bars.set_counts(("a", "b", "c"), (1200, 300, 3000), exact=1)
    assert bars.accessibleDescription() == "a: 1,200, b: ≈300, c: ≈3,000"
    bars.set_counts(("a", "b", "c"), (1200, 312, 2990))
    assert bars.accessibleDescription() == "a: 1,200, b: 312, c: 2,990"


def test_the_shown_run_setup_imports_the_data_view_ahead_on_a_thread(qtbot, monkeypatch):
    """The first open's import (10-30 ms) happens before the click, off the GUI thread."""
    import sys
    import threading

    from mgpu_gui.gui.panels import run_setup

    started: list[threading.Thread] = []
    monkeypatch.setattr(run_setup, "preload", lambda load, name: started.append(
        threading.Thread(target=load, name=name)) or started[-1].start())
    panel = run_setup.RunSetupPanel()
    qtbot.addWidget(panel)
    panel.show()
    qtbot.waitUntil(lambda: bool(started))
    started[0].join()
    panel.hide()
    panel.show()
    assert len(started) == 1  # once per panel
    assert "mgpu_gui.gui.dialogs.data_view" in sys.modules
    panel.shutdown()
