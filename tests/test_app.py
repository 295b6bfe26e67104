"""The window without training: it opens at once, says when there is no GPU, and
its actions are reachable by keyboard."""

from __future__ import annotations

import threading

from PySide6.QtGui import QKeySequence

from mgpu_gui.core.children import supervisor
from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState
from mgpu_gui.core.errors import UserError
from mgpu_gui.gui.jobs.telemetry_source import TelemetrySource
from mgpu_gui.gui.main_window import MainWindow

NO_GPU = GpuInventory(state=NvmlState.NO_DRIVER, message="No NVIDIA driver found (test).")


def test_window_says_there_is_no_gpu_and_offers_cpu_replicas(qtbot):
    window = MainWindow(telemetry=TelemetrySource(inventory=NO_GPU))
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: "No NVIDIA driver" in window.statusBar().currentMessage())
    assert window.gpu_panel.replicas() == 2
    qtbot.waitUntil(window.train_action.isEnabled)  # the demo defaults are valid
    assert not window.stop_action.isEnabled() and not window.export_action.isEnabled()


def test_actions_have_shortcuts(qtbot):
    window = MainWindow(telemetry=TelemetrySource(inventory=NO_GPU))
    qtbot.addWidget(window)
    shortcuts = {a.text(): a.shortcut() for a in (window.open_action, window.train_action,
                                                  window.stop_action, window.export_action)}
    assert all(not key.isEmpty() for key in shortcuts.values()), shortcuts
    assert shortcuts["&Open model…"] == QKeySequence(QKeySequence.StandardKey.Open)


def test_train_prepares_off_the_gui_thread_and_cannot_be_clicked_twice(qtbot, monkeypatch):
    release = threading.Event()

    def blocked(config, inventory=None, store=None, *, allow_busy=False):
        release.wait(10)  # NVML waking a GPU, a slow disk: the window must not wait
        raise UserError("The data folder is empty.")

    monkeypatch.setattr(supervisor, "prepare_run", blocked)
    window = MainWindow(telemetry=TelemetrySource(inventory=NO_GPU))
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(window.train_action.isEnabled)
    window.train_action.trigger()  # returns while the preparation is blocked
    assert not window.train_action.isEnabled() and window.train_action.text() == "Preparing…"
    window.train_action.trigger()  # a second click does nothing
    release.set()
    qtbot.waitUntil(window.banner.isVisible)
    assert "The data folder is empty." in window.banner.message.text()
    assert window.train_action.isEnabled() and window.train_action.text() == "&Train"
