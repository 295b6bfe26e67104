"""The Runs tab's Size column and "Prune checkpoints…", on run folders filled by hand
(tests/helpers/checkpoint_files.py; stores as in test_runs_panel.record_run); no TensorFlow."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from mgpu_gui.core.events import RunStatus
from mgpu_gui.core.runs import disk
from mgpu_gui.core.runs.checkpoints import format_bytes
from mgpu_gui.core.runs.folder import RunDir
from mgpu_gui.core.runs.lock import RunLock
from mgpu_gui.gui.panels.runs import RunsPanel
from mgpu_gui.gui.widgets.runs_table import Column
from tests.helpers.checkpoint_files import MODEL, fill_checkpoints
from tests.helpers.questions import Questions
from tests.test_runs_panel import record_run

DONE = 4


@pytest.fixture
def runs(store, tmp_path):
    """old and resumed (checkpoints to prune), clean (nothing to prune), busy (running)."""
    made = {name: record_run(store, tmp_path, name, done=DONE, start_t=1.7e9 + i,
                             end=None if name == "busy" else RunStatus.COMPLETED)
            for i, name in enumerate(("old", "resumed", "clean", "busy"))}
    frees = {name: fill_checkpoints(RunDir(made[name].run_dir), DONE)
             for name in ("old", "resumed", "busy")}
    return made, frees


@pytest.fixture
def panel(open_runs_panel, store, runs):
    return open_runs_panel(store, 1100, 300)


def size_cell(panel: RunsPanel, run_id: int, role=Qt.ItemDataRole.DisplayRole):
    row = next(r for r in range(panel.proxy.rowCount())
               if panel.proxy.index(r, 0).data(Qt.ItemDataRole.UserRole + 1) == run_id)
    return panel.proxy.index(row, Column.SIZE).data(role)


def test_size_column_and_when_prune_is_offered(panel, runs):
    made, frees = runs
    old = disk.measure(made["old"].run_dir)
    assert old is not None
    assert size_cell(panel, made["old"].id) == format_bytes(old.total)
    tip = size_cell(panel, made["old"].id, Qt.ItemDataRole.ToolTipRole)
    assert f"Pruning its checkpoints frees {format_bytes(frees['old'])}" in tip
    assert "Checkpoints (best, last, the resume backup)" in tip
    for names, reason in ((["clean"], "Nothing to prune"), (["busy"], "never pruned"),
                          ([], "Select the runs")):
        panel.select_runs([made[n].id for n in names])
        assert not panel.prune_action.isEnabled() and reason in panel.prune_action.toolTip()
    panel.select_runs([made["old"].id, made["clean"].id])
    assert panel.prune_action.isEnabled()


def test_prune_asks_with_what_it_frees_then_prunes_in_the_background(
        qtbot, panel, runs, monkeypatch):
    made, frees = runs
    old, resumed = RunDir(made["old"].run_dir), RunDir(made["resumed"].run_dir)
    total = disk.measure(old.path).total
    questions = Questions()
    asked = questions.asked

    panel.select_runs([made[n].id for n in ("old", "resumed", "clean", "busy")])
    questions.answer(monkeypatch, QMessageBox.StandardButton.Cancel)
    panel.prune_action.trigger()
    assert f"these 2 runs? This frees {format_bytes(frees['old'] + frees['resumed'])}" in asked[0]
    assert "2 of the selected runs have nothing to prune or are running" in asked[0]
    assert disk.measure(old.path).total == total  # cancelled: nothing changed

    questions.answer(monkeypatch, QMessageBox.StandardButton.Yes)
    lock = RunLock.acquire(resumed.path)  # resumed from a terminal since the last read
    try:
        with qtbot.waitSignal(panel.refreshed, timeout=5_000):
            panel.prune_action.trigger()
            assert not panel.prune_action.isEnabled()  # while it prunes
    finally:
        lock.release()
    assert panel.message.text() == (
        f"Freed {format_bytes(frees['old'])} in 1 run. “resumed” was left alone: it is still "
        f"running (its training process holds the run's lock).")
    assert size_cell(panel, made["old"].id) == format_bytes(total - frees["old"])
    assert disk.measure(resumed.path).prunable == frees["resumed"]
    assert old.resume_point().epochs_done == DONE
    assert old.best_checkpoint.read_bytes() == bytes([DONE - 1]) * MODEL
    assert old.last_checkpoint.read_bytes() == bytes([DONE + 1]) * MODEL
