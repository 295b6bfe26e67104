"""The window's first paint waits for nothing it does not show (issue 30, finding 11):
the plots (pyqtgraph) are built and the Data view's modules imported right after it.
No TensorFlow; the window test runs in a fresh process, where nothing is imported yet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from PySide6.QtWidgets import QLabel

from mgpu_gui.gui.widgets.next_paint import after_next_paint

ROOT = Path(__file__).resolve().parents[1]

FIRST_PAINT = r"""
import json, os, sys
from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtWidgets import QApplication
from mgpu_gui.gui.jobs.telemetry_source import TelemetrySource
from mgpu_gui.gui.main_window import MainWindow
from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState

app = QApplication([])
window = MainWindow(telemetry=TelemetrySource(
    inventory=GpuInventory(state=NvmlState.NO_DRIVER, message="none (test)")))
seen = {}

class FirstPaint(QObject):
    def eventFilter(self, obj, event):
        if event.type() == QEvent.Type.Paint and not seen and obj.isWidgetType() \
                and obj.window() is window:
            seen["at_paint"] = sorted(m for m in ("pyqtgraph", "mgpu_gui.gui.panels.curves",
                                                  "mgpu_gui.gui.dialogs.data_view")
                                      if m in sys.modules)
        return False

def after():
    seen["built"] = window.curves_slot.is_built()
    seen["plots"] = len(window.curves.plot_widgets())
    print(json.dumps(seen))
    os._exit(0)

watcher = FirstPaint()
app.installEventFilter(watcher)
window.show()
QTimer.singleShot(3000, after)
app.exec()
"""


def test_after_next_paint_runs_once_the_widget_has_painted(qtbot):
    label = QLabel("x")
    qtbot.addWidget(label)
    ran: list[bool] = []
    after_next_paint(label, lambda: ran.append(label.isVisible()))
    qtbot.wait(50)
    assert ran == []  # not shown, not painted: not yet
    label.show()
    qtbot.waitUntil(lambda: ran == [True])
    label.repaint()
    qtbot.wait(50)
    assert ran == [True]  # once


def test_the_window_paints_before_the_plots_are_built_then_builds_them(tmp_path):
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "HOME": str(tmp_path),
           "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "MGPU_GUI_STORE": str(tmp_path / "runs.sqlite3"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", FIRST_PAINT], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["at_paint"] == []  # no pyqtgraph, no curves panel, no Data view yet
    assert seen["built"] and seen["plots"] >= 5  # then they are there, unasked
