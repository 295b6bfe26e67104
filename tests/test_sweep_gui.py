"""The Sweep dialog and the Sweep view, on the pure core (no store, no training): the
dialog builds the SweepSpec the core would from the same text and names each problem
on its row; the view shows synthetic outcomes as the core ranks and plots them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QFont

from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.runs.compare import ComparedRun
from mgpu_gui.core.sweeps.estimate import PastRun
from mgpu_gui.core.sweeps.plots import parallel_data, scatter_data
from mgpu_gui.core.sweeps.results import TrialOutcome, TrialStatus, sweep_results
from mgpu_gui.core.sweeps.space import parse_parameter
from mgpu_gui.core.sweeps.trials import Search, SweepSpec, plan_trials
from mgpu_gui.gui.dialogs.sweep import SweepDialog
from mgpu_gui.gui.dialogs.sweep_view import SweepView
from tests.test_native_feel import unnamed

BASE = RunConfig(epochs=3, seed=42)


@pytest.fixture
def dialog(qtbot):
    made = SweepDialog(BASE)
    qtbot.addWidget(made)
    return made


# -- the dialog -------------------------------------------------------------------------------

def test_the_dialog_builds_the_spec_the_core_builds_from_the_same_text(qtbot, dialog):
    dialog.rows[0].values.setText("log:1e-4..1e-2:3")
    dialog.add_row("optimizer", "adam,sgd")
    dialog.random_radio.setChecked(True)
    dialog.samples_spin.setValue(4)
    dialog.seed_spin.setValue(7)
    dialog.repeats_spin.setValue(2)
    dialog.gpus_spin.setValue(2)
    dialog.parallel_spin.setValue(2)
    dialog.median_check.setChecked(True)
    dialog.grace_spin.setValue(3)
    dialog.metric_combo.setCurrentText("val_accuracy")
    assert dialog.metric_hint.text() == "higher is better"
    assert dialog.start_button.isEnabled(), dialog.problems
    assert dialog.rows[0].message.text() == (
        "3 values on a log scale: 0.0001, 0.001, 0.01")
    expected = SweepSpec(BASE, (parse_parameter("learning_rate", "log:1e-4..1e-2:3", BASE),
                                parse_parameter("optimizer", "adam,sgd", BASE)),
                         Search.RANDOM, samples=4, random_seed=7, repeats=2, gpus_per_trial=2,
                         max_parallel=2, metric="val_accuracy", median_stop=True, grace=3)
    with qtbot.waitSignal(dialog.start_requested) as started:
        dialog.start_button.click()
    assert started.args == [expected, "Learning rate × Optimizer"]
    # 4 draws x 2 repeats; no earlier run to time it by (none was handed in).
    assert dialog.total_label.text().startswith("8 trials x 3 epochs = 24 epochs; no earlier")


def test_a_bad_value_is_named_on_its_row_and_keeps_start_disabled(dialog):
    assert not dialog.start_button.isEnabled()  # no values yet: the row says so
    assert dialog.rows[0].message.text().startswith("give the values to try")
    dialog.rows[0].values.setText("1e-3,3e-3")
    assert dialog.start_button.isEnabled()
    batch = dialog.add_row("batch_per_replica", "32,64.5")
    assert not dialog.start_button.isEnabled()
    assert batch.message.text() == "'64.5' is not a whole number"
    assert batch.message.property("role") == "error"
    assert batch.values.property("invalid") is True
    assert not dialog.rows[0].values.property("invalid")
    assert "Batch per GPU" in dialog.problems_label.text()
    assert dialog.spec is None and [f for f, _ in dialog.problems] == ["batch_per_replica"]
    batch.values.setText("32,64")
    assert dialog.start_button.isEnabled() and dialog.problems_label.isHidden()
    assert batch.message.text() == "2 values: 32, 64"
    # A grid over a range without a count cannot be planned; the row's setting is named.
    dialog.rows[0].values.setText("log:1e-4..1e-2")
    assert not dialog.start_button.isEnabled()
    assert "count" in dialog.rows[0].message.text()
    batch.remove.click()
    assert [row.name for row in dialog.rows] == ["learning_rate"]


def test_a_metric_the_trials_never_report_is_refused_as_sweep_start_refuses_it(dialog):
    """Issue 29, finding 11: `--metric bogus` was queued and the sweep never ranked; the
    CLI refuses it, and so does the dialog (the demo compiles with loss and accuracy)."""
    dialog.rows[0].values.setText("1e-3,3e-3")
    dialog.metric_combo.setCurrentText("val_auc")
    assert not dialog.start_button.isEnabled()
    assert [f for f, _ in dialog.problems] == ["metric"]
    assert "val_accuracy" in dict(dialog.problems)["metric"]
    dialog.metric_combo.setCurrentText("val_accuracy")
    assert dialog.start_button.isEnabled()


def test_a_compiled_model_file_refuses_an_lr_sweep_until_overridden(qtbot):
    dialog = SweepDialog(BASE, compiled_model=True)
    qtbot.addWidget(dialog)
    assert dialog.override_check.isVisibleTo(dialog)
    dialog.rows[0].values.setText("1e-3,1e-2")
    assert not dialog.start_button.isEnabled()
    assert "compiled optimizer" in dialog.rows[0].message.text()
    assert dialog.rows[0].values.property("invalid") is True
    dialog.override_check.setChecked(True)
    assert dialog.start_button.isEnabled()
    assert dialog.spec.base.override_compile
    # A batch sweep trains the file's optimizer as it is: nothing to override.
    dialog.override_check.setChecked(False)
    dialog.rows[0].setting.setCurrentIndex(dialog.rows[0].setting.findData("batch_per_replica"))
    dialog.rows[0].values.setText("32,64")
    assert dialog.start_button.isEnabled()
    assert not SweepDialog(BASE).override_check.isVisibleTo(dialog)


def test_the_estimate_times_the_sweep_by_past_runs_read_off_the_gui_thread(qtbot):
    past = [PastRun("demo-7", "demo", "demo", ended=1.0, seconds_per_epoch=10.0)]
    dialog = SweepDialog(BASE, past_runs=lambda: past)
    qtbot.addWidget(dialog)
    dialog.rows[0].values.setText("1e-3,3e-3")
    qtbot.waitUntil(lambda: "about" in dialog.total_label.text())
    assert dialog.total_label.text() == (
        "2 trials x 3 epochs = 6 epochs; about 1 m 00 s with 1 at a time "
        "(10 s per epoch as run demo-7)")
    assert not unnamed(dialog)[0]


# -- the view ---------------------------------------------------------------------------------

SPEC = SweepSpec(BASE, (parse_parameter("learning_rate", "log:1e-4..1e-2:4", BASE),
                        parse_parameter("batch_per_replica", "32,64", BASE)))
NOT_FINISHED = {2: TrialStatus.FAILED, 6: TrialStatus.RUNNING, 7: TrialStatus.WAITING}


def outcomes(spec: SweepSpec = SPEC) -> list[TrialOutcome]:
    """val_loss best near lr 1e-3 and the smaller batch; trial 2 failed, 6 runs, 7 waits."""
    made = []
    for trial in plan_trials(spec):
        lr, batch = trial.values["learning_rate"], trial.values["batch_per_replica"]
        level = 0.2 + 0.15 * (math.log10(lr) + 3) ** 2 + batch / 640 + 0.03 * trial.repeat
        status = NOT_FINISHED.get(trial.index, TrialStatus.COMPLETED)
        run = None if status in (TrialStatus.FAILED, TrialStatus.WAITING) else ComparedRun(
            trial.label, (0, 1, 2), {"val_loss": tuple(level + 0.8 / (e + 1) for e in range(3))})
        made.append(TrialOutcome(trial, status, run, "out of memory" if run is None else ""))
    return made


@pytest.fixture
def view(qtbot):
    made = SweepView()
    qtbot.addWidget(made)
    made.resize(1100, 700)
    return made


def bold_rows(view: SweepView) -> list[int]:
    proxy = view.table.model()
    return [r for r in range(proxy.rowCount())
            if isinstance(font := proxy.index(r, 0).data(Qt.ItemDataRole.FontRole), QFont)
            and font.bold()]


def test_the_view_shows_each_trial_and_marks_the_best(qtbot, view):
    shown = outcomes()
    view.show_sweep(SPEC, shown)
    results = sweep_results(shown)
    proxy = view.table.model()
    assert proxy.rowCount() == len(shown) == 8
    assert [proxy.index(r, 0).data() for r in range(8)] == [str(i) for i in range(1, 9)]
    best = results.best.trial.index
    assert bold_rows(view) == [best]
    columns = [proxy.headerData(c, Qt.Orientation.Horizontal) for c in range(proxy.columnCount())]
    assert columns == ["#", "Learning rate", "Batch per GPU", "Status", "Best val_loss",
                       "Epoch of best"]
    assert proxy.index(2, 3).data() == "failed"
    assert proxy.index(2, 3).data(Qt.ItemDataRole.ToolTipRole) == "out of memory"
    assert float(proxy.index(best, 4).data()) == pytest.approx(results.best.best.best, rel=1e-3)
    view.table.sortByColumn(4, Qt.SortOrder.AscendingOrder)  # sortable: the best first
    assert proxy.index(0, 0).data() == str(best + 1) and bold_rows(view) == [0]
    assert f"Best: trial #{best + 1}" in view.summary.text()
    assert view.cancel_button.isEnabled()  # trials wait and run
    with qtbot.waitSignal(view.cancel_requested):
        view.cancel_button.click()
    with qtbot.waitSignal(view.extend_requested):
        view.extend_button.click()
    assert not view.group_check.isEnabled()  # no repeats to group
    assert not unnamed(view)[0]


def test_one_scatter_point_and_one_parallel_line_per_finished_trial(view):
    shown = outcomes()
    view.show_sweep(SPEC, shown)
    results = sweep_results(shown)
    finished = [row.trial for row in results.finished]
    assert len(finished) == 5  # not the failed, the waiting nor the running trial
    xs, ys = view.scatter.points.getOriginalDataset()
    assert list(xs) == [t.values["learning_rate"] for t in finished]  # at its values
    assert list(ys) == [row.best.best for row in results.finished]
    assert view.scatter.item.ctrl.logXCheck.isChecked()  # a log range: a log axis
    view.scatter.setting_combo.setCurrentIndex(1)
    xs, _ = view.scatter.points.getOriginalDataset()
    assert list(xs) == [t.values["batch_per_replica"] for t in finished]
    assert not view.scatter.item.ctrl.logXCheck.isChecked()
    expected = parallel_data(results, SPEC.parameters)
    assert len(view.parallel.lines) == len(expected.lines) == 5
    for line, data in zip(view.parallel.lines, expected.lines, strict=True):
        np.testing.assert_allclose(line.getOriginalDataset()[1], data.positions)
    widths = [line.opts["pen"].widthF() for line in view.parallel.lines]
    best_line = [d.trial for d, w in zip(expected.lines, widths, strict=True) if w == max(widths)]
    assert best_line == [results.best.trial.index]
    assert scatter_data(results, SPEC.parameters)[0].axis.log


def test_repeats_group_as_mean_and_spread(view):
    spec = SweepSpec(BASE, SPEC.parameters, repeats=2)
    shown = outcomes(spec)
    view.show_sweep(spec, shown)
    results = sweep_results(shown)
    proxy = view.table.model()
    assert proxy.rowCount() == 16 and "Seed" in [
        proxy.headerData(c, Qt.Orientation.Horizontal) for c in range(proxy.columnCount())]
    view.group_check.setChecked(True)
    assert proxy.rowCount() == len(results.groups) == 8
    best = [i for i, g in enumerate(results.groups) if g.is_best]
    assert bold_rows(view) == best
    group = results.groups[0]  # trials 1 and 9, both finished
    assert proxy.index(0, 2).data() == "#1, #9" and proxy.index(0, 3).data() == "2 of 2"
    assert proxy.index(0, 4).data() == f"{group.mean:.4g}"
    assert proxy.index(0, 5).data() == f"± {(group.high - group.low) / 2:.3g}"
    assert view.scatter.points is None and "±1 sd" in view.scatter.note.text()
    view.group_check.setChecked(False)
    assert proxy.rowCount() == 16 and view.scatter.points is not None


def test_run_menu_sweep_opens_the_dialog_over_the_current_settings(window):
    window.run_setup.epochs_spin.setValue(4)
    window.sweep_action.trigger()
    dialog = window.sweep_dialog
    assert dialog is not None and dialog.isVisible()
    assert dialog.base == window._current_config() and dialog.base.epochs == 4
    assert not dialog.compiled_model  # the demo model brings no optimizer of its own
    dialog.reject()


def test_a_row_is_not_red_before_its_values_are_typed(dialog):
    """Issue 30, finding 9f: a new row's empty values were outlined red at once."""
    row = dialog.rows[0]
    assert not dialog.start_button.isEnabled()
    assert row.message.text().startswith("give the values to try")
    assert row.message.property("role") == "hint" and not row.values.property("invalid")
    assert dialog.problems_label.isHidden()
    row.values.setText("1e-3")
    row.values.clear()  # typed, then erased: now they are missing
    assert row.message.property("role") == "error" and row.values.property("invalid") is True
    assert not dialog.problems_label.isHidden()
    assert "Fix the values of Learning rate" in dialog.problems_label.text()
