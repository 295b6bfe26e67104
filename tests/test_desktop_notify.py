"""Desktop notifications: a run's end is said on the desktop while the window is behind,
never while the user looks at it, and a machine without a session bus stays silent.

A fake notifier stands in for the session bus; the window's run ends arrive as the
run controller reports them (no training, no child process).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from PySide6.QtCore import QObject, QSettings
from PySide6.QtWidgets import QWidget

from mgpu_gui.core.children.supervisor import RunOutcome
from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState
from mgpu_gui.core.events import RunFinished, RunStatus
from mgpu_gui.gui import desktop_notify
from mgpu_gui.gui.desktop_notify import DESKTOP_ALERTS_KEY, FreedesktopNotifier, Urgency
from mgpu_gui.gui.main_window import MainWindow
from mgpu_gui.gui.run_notices import run_end_notice
from mgpu_gui.gui.widgets.notifier import Notice, NoticeKind

NO_GPU = GpuInventory(state=NvmlState.NO_DRIVER, message="No NVIDIA driver found (test).")


@dataclass(frozen=True)
class Shown:
    title: str
    text: str
    urgency: Urgency


class FakeNotifier:
    """Records what the desktop would show."""

    def __init__(self) -> None:
        self.shown: list[Shown] = []

    def show(self, title: str, text: str, urgency: Urgency) -> None:
        self.shown.append(Shown(title, text, urgency))


@pytest.fixture
def window(window):
    """conftest's window, its desktop notices heard by a fake."""
    window.desktop_alerts.notifier = FakeNotifier()
    return window


def put_behind(qtbot, win: MainWindow) -> QWidget:
    other = QWidget()  # another window takes the focus: the user looks elsewhere
    qtbot.addWidget(other)
    other.show()
    other.activateWindow()
    qtbot.waitUntil(lambda: other.isActiveWindow() and not win.isActiveWindow())
    return other


def end_runs(win: MainWindow) -> None:
    """A completed and a failed run of the window's own, and an interrupted followed one."""
    win.controller.finished.emit(RunOutcome(RunStatus.COMPLETED, "", events=[RunFinished(
        status=RunStatus.COMPLETED, epochs_done=5, best_epoch=3, best_metric="val_loss",
        best_value=0.0663)]))
    win.controller.finished.emit(RunOutcome(RunStatus.FAILED, "Out of memory on GPU 0.\nmore"))
    win.notifier.notify(run_end_notice("queued-night", "interrupted", 3, 10))


def test_run_ends_reach_the_desktop_only_while_the_window_is_behind(qtbot, window):
    fake = window.desktop_alerts.notifier
    assert not window.desktop_alerts.action.isChecked()  # off in tests (conftest)
    window.desktop_alerts.action.setChecked(True)  # the Run menu's switch, remembered
    assert QSettings().value(DESKTOP_ALERTS_KEY, type=bool) is True

    put_behind(qtbot, window)
    end_runs(window)
    window.notifier.notify(Notice(NoticeKind.DONE, "Export finished", "model.keras"))
    assert [(s.title, s.urgency) for s in fake.shown] == [
        ("Run completed", Urgency.NORMAL), ("Run failed", Urgency.CRITICAL),
        ("Run interrupted", Urgency.NORMAL)]  # not the export: no run ended
    completed, failed, interrupted = (s.text for s in fake.shown)
    assert completed == "The run: all epochs; best val_loss 0.0663 (epoch 4)"
    assert "Out of memory on GPU 0." in failed and "more" not in failed
    assert "queued-night" in interrupted and "3 of 10 epochs" in interrupted

    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    end_runs(window)
    assert len(fake.shown) == 3  # the user is looking: the toast says it

    window.desktop_alerts.action.setChecked(False)
    put_behind(qtbot, window)
    end_runs(window)
    assert len(fake.shown) == 3
    assert QSettings().value(DESKTOP_ALERTS_KEY, type=bool) is False


def test_without_a_session_bus_nothing_is_said_and_nothing_fails(qtbot, monkeypatch):
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    assert not desktop_notify.session_bus_reachable()
    notifier = FreedesktopNotifier(QObject())
    notifier.show("Run failed", "night: Out of memory", Urgency.CRITICAL)
    notifier.show("Run completed", "night: 5 of 5 epochs", Urgency.NORMAL)
    assert notifier._interface is None  # no bus was looked for, none autolaunched
