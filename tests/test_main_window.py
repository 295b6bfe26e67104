"""The whole window with the real worker on 2 CPU replicas and tiny runs (resume and a
failed run: tests/test_main_window_runs.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from mgpu_gui.core.config import DeviceKind, DeviceSelection
from mgpu_gui.core.events import BatchEnd, RunStatus
from tests.helpers.main_window import RUN_TIMEOUT_MS, tiny_runs, train

pytestmark = pytest.mark.slow


@pytest.fixture
def window(window, tmp_path):
    with tiny_runs(window, tmp_path) as win:
        yield win


def test_no_gpu_state_defaults_train_on_cpu_replicas_and_the_export_reloads(
        qtbot, window, tmp_path):
    """The no-driver state trains on 2 CPU replicas by default; the finished run's model
    then exports from the window, checked by reloading it in a plain process, without a
    strategy (the exporter's check). (Two tests that each trained the same run, merged.)"""
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
    assert target.is_file() and (tmp_path / "exported.classes.json").is_file()


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
                                              export_formats=(), output_dir={str(tmp_path)!r}))
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
