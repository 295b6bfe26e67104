"""The whole window with the real worker on 2 CPU replicas and tiny runs."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState
from mgpu_gui.core.events import BatchEnd, RunStarted, RunStatus
from mgpu_gui.core.runs.store import RunState as StoreState
from mgpu_gui.gui.jobs.run_controller import RunState
from mgpu_gui.gui.jobs.telemetry_source import TelemetrySource
from mgpu_gui.gui.main_window import MainWindow

pytestmark = pytest.mark.slow
RUN_TIMEOUT_MS = 180_000
NO_GPU = GpuInventory(state=NvmlState.NO_DRIVER, message="No NVIDIA driver found (test).")


@pytest.fixture
def window(qtbot, tmp_path):
    win = MainWindow(telemetry=TelemetrySource(inventory=NO_GPU))
    qtbot.addWidget(win)
    win.run_setup.set_config(RunConfig(epochs=2, batch_per_replica=32,
                                       output_dir=str(tmp_path / "runs")))
    win.show()
    qtbot.waitUntil(lambda: win.train_action.isEnabled(), timeout=10_000)
    yield win
    if win.controller.is_running():
        win.controller.stop()
        win.controller.wait(RUN_TIMEOUT_MS)


def train(qtbot, win: MainWindow):
    with qtbot.waitSignal(win.controller.finished, timeout=RUN_TIMEOUT_MS) as done:
        win.train_action.trigger()
    return done.args[0]


def test_no_gpu_state_defaults_train_on_cpu_replicas_and_the_export_reloads(
        qtbot, window, tmp_path):
    """The no-driver state trains on 2 CPU replicas by default; the finished run's model
    then exports and reloads in a plain process, without a strategy. (Two tests that each
    trained the same run, merged.)"""
    assert "No NVIDIA driver" in window.statusBar().currentMessage()
    selection = window.gpu_panel.device_selection()
    assert selection == DeviceSelection(kind=DeviceKind.CPU, replicas=2)
    outcome = train(qtbot, window)
    assert outcome.status is RunStatus.COMPLETED, outcome.message
    assert window.notifier.last is not None and window.notifier.last.title == "Run completed"
    qtbot.waitUntil(lambda: len(window.curves.series("loss")[1]) > 0)
    assert len(window.curves.series("val_loss")[1]) == 2
    assert window.progress.total_bar.value() == window.progress.total_bar.maximum()
    assert "num_replicas_in_sync = 2" in window.log.log.toPlainText()
    assert window.export_action.isEnabled()

    target = tmp_path / "exported.keras"
    with qtbot.waitSignal(window.exporter.finished, timeout=RUN_TIMEOUT_MS) as done:
        window.export_to(target, "keras")
    assert done.args[0], done.args[1]
    notice = window.notifier.last  # said over whichever tab shows (test_notifier.py)
    assert notice is not None and notice.title == "Export finished"
    assert "exported.keras" in notice.text and window.notifier.toast.isVisible()
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import keras, numpy as np
        model = keras.saving.load_model({str(target)!r})
        print(model.predict(np.zeros((3, 8, 8, 1)), verbose=0).shape)
    """)], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "(3, 10)", out.stderr[-2000:]


def test_scaling_test_opens_with_the_run_setup(qtbot, window):
    """Run > Scaling test: the chosen model, data and devices; closing leaves nothing running."""
    assert window.scaling_action.isEnabled()
    window.scaling_action.trigger()
    dialog = window.scaling_dialog
    assert dialog is not None and dialog.isVisible()
    assert dialog.config.batch_per_replica == 32
    assert dialog.config.devices == window.gpu_panel.device_selection()
    dialog.close()
    qtbot.waitUntil(lambda: window.scaling_dialog is None)


def test_batch_finder_opens_with_the_run_setup_and_sets_the_batch(qtbot, window):
    window.batch_action.trigger()
    dialog = window.batch_dialog
    assert dialog is not None and dialog.isVisible()
    dialog.use_batch.emit(48)  # what "Use 48 per GPU" does
    assert window.run_setup.batch_spin.value() == 48
    dialog.close()
    qtbot.waitUntil(lambda: window.batch_dialog is None)


def test_stop_mid_run_then_train_again(qtbot, window):
    window.run_setup.set_config(window.run_setup.build_config().replace(epochs=100))
    window.controller.event.connect(
        lambda e: isinstance(e, BatchEnd) and window.stop_action.isEnabled()
        and window.stop_action.trigger())
    outcome = train(qtbot, window)
    assert outcome.status is RunStatus.STOPPED
    assert window.train_action.isEnabled() and not window.stop_action.isEnabled()
    assert window.export_action.isEnabled() or window.last_run is not None


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


def test_closing_mid_run_stops_it_cleanly_first(qtbot, window, monkeypatch):
    monkeypatch.setattr(window, "confirm_stop_on_close", lambda: True)
    window.run_setup.set_config(window.run_setup.build_config().replace(epochs=100))
    with qtbot.waitSignal(window.controller.event, timeout=RUN_TIMEOUT_MS,
                          check_params_cb=lambda e: isinstance(e, BatchEnd)):
        window.train_action.trigger()
    with qtbot.waitSignal(window.controller.finished, timeout=RUN_TIMEOUT_MS) as done:
        window.close()
        assert window.isVisible()  # still open: the run ends first
    assert done.args[0].status is RunStatus.STOPPED
    qtbot.waitUntil(lambda: not window.isVisible())


def test_app_run_leaves_tensorflow_out_of_the_gui_process(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        from PySide6.QtCore import QEventLoop
        from PySide6.QtWidgets import QApplication
        from mgpu_gui.core.config import RunConfig
        from mgpu_gui.gui.main_window import MainWindow
        app = QApplication([])
        app.setOrganizationName("mgpu-gui-tests")
        window = MainWindow()
        window.run_setup.set_config(RunConfig(epochs=1, batch_per_replica=32,
                                              output_dir={str(tmp_path)!r}))
        window.show()
        loop = QEventLoop()
        window.controller.finished.connect(lambda outcome: (print(outcome.status), loop.quit()))
        window.run_setup.check_now()
        window.start_training()
        loop.exec()
        window.close()
        print(sorted(m for m in ("tensorflow", "keras") if m in sys.modules))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, env={**__import__("os").environ,
                                           "QT_QPA_PLATFORM": "offscreen",
                                           "XDG_CONFIG_HOME": str(tmp_path / "config")})
    assert out.stdout.split("\n")[-3:-1] == ["completed", "[]"], out.stdout + out.stderr[-3000:]
