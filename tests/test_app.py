"""The app's window (a minimal one until the desktop-app issue)."""

from __future__ import annotations

from mgpu_gui.gui.main_window import MainWindow


def test_window_shows_the_device_state(qtbot):
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    assert window.windowTitle() == "mgpu-gui"
    assert "NVIDIA" in window.devices_view.toPlainText()  # the no-driver reason, or the GPUs
