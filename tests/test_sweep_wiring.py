"""The Sweep dialog, the Sweeps tab and the Sweep view on the run store, without training:
Start queues the trials (and asks for the queue runner), a refusal stays in the dialog,
the tab and the view read the store off the GUI thread, Cancel drops the waiting
trials and Extend… queues new ones. Runs are stored by hand (tests/test_sweep_store.py's
`trained`), as a supervisor records them."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QMessageBox

from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.runs.queue import JobQueue
from mgpu_gui.core.sweeps.results import TrialStatus
from mgpu_gui.core.sweeps.space import parse_parameter
from mgpu_gui.core.sweeps.store import list_sweeps, load_sweep, start_sweep
from mgpu_gui.core.sweeps.trials import SweepSpec
from mgpu_gui.gui.dialogs.sweep_view import SweepViewDialog
from mgpu_gui.gui.jobs import sweep_jobs
from mgpu_gui.gui.panels.sweeps import SweepsPanel
from tests.test_sweep_store import FOUR, jobs, trained


@pytest.fixture
def runner_starts(monkeypatch) -> list:
    """The queue runner is asked for, never started (no training here)."""
    asked: list = []
    monkeypatch.setattr(sweep_jobs, "ensure_runner", asked.append)
    return asked


@pytest.fixture
def answers(monkeypatch) -> list[str]:
    """Every question answered Yes; the texts asked, kept."""
    asked: list[str] = []

    def question(_parent, _title, text, *_args):
        asked.append(text)
        return QMessageBox.StandardButton.Yes

    monkeypatch.setattr(QMessageBox, "question", question)
    return asked


@pytest.fixture
def sweep(store, tmp_path) -> int:
    """A 3-trial learning-rate sweep on fake GPUs: trial 0 completed, the others waiting."""
    base = RunConfig(epochs=3, seed=1, output_dir=str(tmp_path / "runs"),
                     devices=DeviceSelection(kind=DeviceKind.GPU))
    spec = SweepSpec(base, (parse_parameter("learning_rate", "1e-3,3e-3,1e-2", base),))
    sweep_id = start_sweep(store, spec, "lr sweep", inventory=FOUR)
    trained(store, jobs(store, sweep_id)[0], [0.9, 0.5, 0.6])
    return sweep_id


def open_view(qtbot, store, sweep_id: int) -> SweepViewDialog:
    dialog = SweepViewDialog(store.path, sweep_id, "lr sweep", inventory=lambda: FOUR)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitUntil(lambda: dialog.stored is not None)
    return dialog


def test_start_queues_the_sweeps_trials_asks_for_the_runner_and_opens_its_view(
        qtbot, window, store, runner_starts):
    dialog = window.show_sweep_dialog()
    dialog.rows[0].values.setText("1e-3,3e-3")
    dialog.name_edit.setText("two rates")
    dialog.start_button.click()
    qtbot.waitUntil(lambda: bool(window.sweep_views), timeout=5_000)
    assert window.sweep_dialog is None and runner_starts == [store.path]  # closed
    [record] = list_sweeps(store)
    assert record.name == "two rates" and record.counts == {TrialStatus.WAITING: 2}
    queued = jobs(store, record.id)
    assert [job.config.learning_rate for job in queued] == [1e-3, 3e-3]
    assert [job.name for job in queued] == ["two rates-t1", "two rates-t2"]
    assert f"Sweep {record.id} started" in window.statusBar().currentMessage()
    view = window.sweep_views[record.id]
    qtbot.waitUntil(lambda: view.view.table.model().rowCount() == 2)
    tabs = window.log
    assert tabs.tabText(tabs.indexOf(window.sweeps_panel)) == "Sweeps"
    assert tabs.indexOf(window.sweeps_panel) == tabs.indexOf(window.queue_panel) + 1
    tabs.setCurrentWidget(window.sweeps_panel)
    qtbot.waitUntil(lambda: window.sweeps_panel.table.rowCount() == 1)
    view.close()
    assert not window.sweep_views


def test_a_refused_sweep_writes_nothing_and_the_dialog_stays_saying_why(
        qtbot, window, store, runner_starts):
    dialog = window.show_sweep_dialog()
    # GPUs this machine lacks: only the store's device check can tell.
    dialog.base = dialog.base.replace(devices=DeviceSelection(kind=DeviceKind.GPU, replicas=2))
    dialog.rows[0].values.setText("1e-3,3e-3")
    qtbot.waitUntil(lambda: dialog.past == [])  # the store's past runs, read in the background
    assert "no earlier" in dialog.total_label.text()
    assert dialog.start_button.isEnabled()
    dialog.start_button.click()
    assert dialog.start_button.text() == "Starting…" and not dialog.start_button.isEnabled()
    qtbot.waitUntil(lambda: not dialog.starting, timeout=5_000)
    assert dialog.isVisible() and dialog.start_button.isEnabled()
    assert "No GPU is available" in dialog.problems_label.text()
    assert dialog.problems_label.isVisible()
    assert list_sweeps(store) == [] and JobQueue(store).jobs(finished=True) == []
    assert runner_starts == [] and not window.sweep_views
    dialog.reject()


def test_the_sweeps_tab_lists_the_stores_sweeps_and_opens_one(qtbot, store, sweep, answers):
    panel = SweepsPanel(store)
    qtbot.addWidget(panel)
    panel.show()
    qtbot.waitUntil(lambda: panel.table.rowCount() == 1)
    cells = [panel.table.item(0, c).text() for c in range(panel.table.columnCount())]
    assert cells[:2] == [str(sweep), "lr sweep"]
    assert cells[3:] == ["2 waiting, 1 completed", "1 of 3", "val_loss 0.5 (trial #1)"]
    assert panel.stack.currentWidget() is panel.table
    panel.table.selectRow(0)
    with qtbot.waitSignal(panel.open_requested) as opened:
        panel.open_button.click()
    assert opened.args == [sweep, "lr sweep"]
    panel.cancel_button.click()  # asks, naming what it drops
    assert answers == ["Cancel the sweep lr sweep? 2 trials waiting will be dropped and "
                       "0 trials running will stop at the next batch (resumable from the "
                       "Runs tab). Finished trials keep their runs."]
    qtbot.waitUntil(lambda: panel.table.item(0, 3).text() == "1 completed, 2 dropped, cancelled")
    assert not panel.cancel_button.isEnabled()  # nothing waits or runs any more
    panel.shutdown()


def test_with_no_sweep_the_tab_says_what_one_is_and_how_to_start_it(qtbot, store):
    panel = SweepsPanel(store)
    qtbot.addWidget(panel)
    panel.show()
    qtbot.waitUntil(lambda: panel.stack.currentWidget() is panel.empty_label)
    assert "Run ▸ Sweep…" in panel.empty_label.text()
    assert not panel.open_button.isEnabled() and not panel.cancel_button.isEnabled()
    panel.shutdown()


def test_the_view_shows_the_stores_trials_and_a_double_click_asks_for_a_runs_curves(
        qtbot, store, sweep):
    dialog = open_view(qtbot, store, sweep)
    stored = load_sweep(store, sweep)
    table = dialog.view.table
    assert table.model().rowCount() == 3
    assert [table.model().index(r, 2).data() for r in range(3)] == [
        "completed", "waiting", "waiting"]
    assert table.model().index(0, 3).data() == "0.5"  # the best val_loss, epoch 2
    assert "Best: trial #1" in dialog.view.summary.text()
    assert dialog.timer.isActive()  # trials wait: read again until they end
    with qtbot.waitSignal(dialog.show_curves_requested) as shown:
        table.doubleClicked.emit(table.model().index(0, 1))
    assert shown.args == [stored.jobs[0].run_id]
    dialog.close()
    assert not dialog.timer.isActive()


def test_cancel_in_the_view_drops_the_waiting_trials(qtbot, store, sweep, answers):
    dialog = open_view(qtbot, store, sweep)
    with qtbot.waitSignal(dialog.message) as said:
        dialog.view.cancel_button.click()
    assert said.args == [f"Sweep {sweep}: 2 waiting trial(s) dropped, 0 running trial(s) "
                         f"stopping at the next batch (resumable)."]
    assert "2 trials waiting will be dropped" in answers[0]
    [record] = list_sweeps(store)
    assert record.cancelled and record.counts == {TrialStatus.COMPLETED: 1,
                                                  TrialStatus.DROPPED: 2}
    qtbot.waitUntil(lambda: not dialog.view.cancel_button.isEnabled())
    assert not dialog.timer.isActive()  # the sweep has ended
    dialog.close()


def test_extend_adds_trials_of_new_values_and_names_a_bad_value_on_its_row(
        qtbot, store, sweep, runner_starts):
    dialog = open_view(qtbot, store, sweep)
    extend = dialog.extend()
    assert extend is not None and extend.isVisible()
    [row] = extend.rows
    assert not extend.add_button.isEnabled()  # nothing new yet
    row.values.setText("3e-3,fast")
    assert row.message.property("role") == "error" and "fast" in row.message.text()
    assert not extend.add_button.isEnabled()
    row.values.setText("3e-3,3e-2")  # 3e-3 it has: one new trial per repeat
    extend.repeats_spin.setValue(2)
    assert extend.total_label.text() == "5 new trials to queue"  # 3e-2 twice, 3 seconds
    with qtbot.waitSignal(dialog.changed, timeout=5_000):
        extend.add_button.click()
    assert dialog.extend_dialog is None and runner_starts == [store.path]  # closed
    queued = jobs(store, sweep)
    assert len(queued) == 8
    assert sorted((j.config.learning_rate, j.config.seed) for j in queued[3:]) == [
        (1e-3, 2), (3e-3, 2), (1e-2, 2), (3e-2, 1), (3e-2, 2)] and queued[3].trial_index == 3
    qtbot.waitUntil(lambda: dialog.view.table.model().rowCount() == 8)
    dialog.close()
