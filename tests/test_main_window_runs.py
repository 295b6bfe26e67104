"""The window's runs that take longest: a stop, then a resume from the Runs tab; a run that
fails, then one that works (the rest: tests/test_main_window.py)."""

from __future__ import annotations

import numpy as np
import pytest

from mgpu_gui.core.events import BatchEnd, RunStarted, RunStatus
from mgpu_gui.core.runs.store import RunState as StoreState
from mgpu_gui.gui.jobs.run_controller import RunState
from tests.helpers.main_window import RUN_TIMEOUT_MS, tiny_runs, train

pytestmark = pytest.mark.slow


@pytest.fixture
def window(window, tmp_path):
    with tiny_runs(window, tmp_path) as win:
        yield win


def test_stop_mid_run_then_resume_from_the_runs_tab(qtbot, window):
    window.run_setup.set_config(window.run_setup.build_config().replace(epochs=4))

    def stop_in_second_epoch(event):
        if isinstance(event, BatchEnd) and event.epoch >= 1 and window.stop_action.isEnabled():
            window.stop_action.trigger()

    window.controller.event.connect(stop_in_second_epoch)
    assert train(qtbot, window).status is RunStatus.STOPPED
    window.controller.event.disconnect(stop_in_second_epoch)
    panel = window.runs_panel
    window.show_runs()
    # The run started from the GUI is in the table once the refresh at its end is read.
    qtbot.waitUntil(lambda: [r.status for r in panel.records()] == [StoreState.STOPPED])
    [record] = panel.records()
    done = record.epochs_done
    assert 1 <= done < 4
    panel.select_runs([record.id])
    assert panel.resume_action.isEnabled()

    at_start = []  # what the window shows when the resumed worker reports
    window.controller.event.connect(lambda e: isinstance(e, RunStarted) and at_start.append(
        (e.initial_epoch, window.progress.epoch_label.text(),
         list(window.curves.series("val_loss")[0]))))
    with qtbot.waitSignal(window.controller.finished, timeout=RUN_TIMEOUT_MS) as finished:
        panel.buttons["resume"].click()
        assert not panel.resume_action.isEnabled() and not window.train_action.isEnabled()
        qtbot.waitUntil(lambda: window.controller.state is RunState.RUNNING)  # prepared
        # The stored curves are back before the worker has started TensorFlow.
        assert list(window.curves.series("val_loss")[0]) == [float(e + 1) for e in range(done)]
        assert not panel.resume_action.isEnabled() and not window.train_action.isEnabled()
    assert finished.args[0].status is RunStatus.COMPLETED, finished.args[0].message
    assert at_start == [(done, f"Epoch {done + 1}/4", [float(e + 1) for e in range(done)])]

    curves = window.curves
    assert list(curves.series("val_loss")[0]) == [1.0, 2.0, 3.0, 4.0]  # no epoch twice
    assert list(curves.series("loss:epoch")[0]) == [1.0, 2.0, 3.0, 4.0]
    assert np.all(np.diff(curves.series("loss")[0]) > 0)  # batches: no step twice
    assert window.progress.total_bar.value() == window.progress.total_bar.maximum()
    stored = window.store.get(record.id)
    assert stored.status is StoreState.COMPLETED and stored.epochs_done == stored.epochs == 4
    assert stored.attempts == 2
    assert window.store.epoch_numbers(record.id) == [0, 1, 2, 3]
    qtbot.waitUntil(lambda: panel.records()[0].status is StoreState.COMPLETED)
    assert not panel.resume_action.isEnabled()
    assert "Resuming the run" in window.log.log.toPlainText()

def test_a_failing_run_shows_its_message_and_the_next_run_works(qtbot, window, tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("def build_model(input_shape, num_classes):\n"
                      "    raise ValueError('the layer sizes do not add up')\n")
    window.run_setup.set_model_path(broken)
    qtbot.waitUntil(lambda: window.train_action.isEnabled(), timeout=10_000)
    assert train(qtbot, window).status is RunStatus.FAILED
    assert window.banner.isVisible()
    assert "the layer sizes do not add up" in window.banner.message.text()
    window.run_setup.set_model_path("demo")
    qtbot.waitUntil(lambda: window.train_action.isEnabled(), timeout=10_000)
    assert train(qtbot, window).status is RunStatus.COMPLETED
    assert not window.banner.isVisible()
