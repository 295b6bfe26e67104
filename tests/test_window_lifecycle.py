"""The main window's life cycle against its background store readers (no TensorFlow).

The window opens the run store on the GUI thread and three plain threads open their own
connections at once (the Runs tab's reader, the device telemetry reader, the start-up
reconcile); closing it stops them. Opening a store used to take its write lock every
time (a migration transaction even when the schema was current): a reader thread opening
the store while any other connection wrote (a run being recorded, the queue runner,
another app instance) waited up to BUSY_RETRIES x busy timeout, about 110 s, and the
window's close waited for it on the GUI thread.
"""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState
from mgpu_gui.core.runs import storedb
from mgpu_gui.core.runs.store import RunStore

NO_GPU = GpuInventory(state=NvmlState.NO_DRIVER, message="No NVIDIA driver found (test).")
CYCLES = 10


@pytest.fixture
def short_busy(monkeypatch):
    """A lock wait that gives up in about a second, so a regression fails instead of
    hanging for minutes."""
    monkeypatch.setattr(storedb, "BUSY_TIMEOUT_MS", 200)
    monkeypatch.setattr(storedb, "BUSY_RETRIES", 3)


def hold_write_lock(path):
    """Another connection in the middle of a write (as a recorder or another app holds it)."""
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    return writer


def test_a_current_store_opens_and_reads_while_another_connection_writes(
        tmp_path, short_busy):
    path = tmp_path / "runs.sqlite3"
    RunStore(path).close()  # created and migrated
    writer = hold_write_lock(path)
    try:
        started = time.monotonic()
        with RunStore(path) as store:
            assert store.runs() == []
        assert time.monotonic() - started < 0.5
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_the_window_opens_and_closes_promptly_many_times_while_the_store_is_written(
        qtbot, tmp_path, monkeypatch, short_busy):
    """Closed at once (its readers opening the store) or after its first read, with another
    connection holding the write lock every other time."""
    from mgpu_gui.gui.jobs.telemetry_source import TelemetrySource
    from mgpu_gui.gui.main_window import MainWindow

    for cycle in range(CYCLES):
        path = tmp_path / f"store-{cycle}" / "runs.sqlite3"
        monkeypatch.setenv(storedb.STORE_ENV, str(path))
        RunStore(path).close()
        writer = hold_write_lock(path) if cycle % 2 == 0 else None
        try:
            win = MainWindow(telemetry=TelemetrySource(inventory=NO_GPU))
            assert win.store is not None, win.store_problem
            if cycle % 4 < 2:
                win.show()  # and closed at once: the first reads are under way
            else:
                with qtbot.waitSignal(win.runs_panel.refreshed, timeout=5_000):
                    win.show()
            started = time.monotonic()
            win.close()
            assert time.monotonic() - started < 2.0
            assert not win.runs_panel.reader._thread.is_alive()
            assert not win.run_telemetry._thread.is_alive()
            assert not win.reconciler.is_running()
            win.deleteLater()
            qtbot.wait(1)
        finally:
            if writer is not None:
                writer.execute("ROLLBACK")
                writer.close()


def test_a_reconcile_that_outlives_its_window_is_dropped_quietly(qtbot, tmp_path,
                                                                  monkeypatch):
    """A long replay still going when the window closed: nothing is delivered, and the
    thread does not raise on the deleted window."""
    from PySide6.QtCore import QObject
    from shiboken6 import Shiboken

    from mgpu_gui.gui.widgets.resume_offer import StoreReconciler

    path = tmp_path / "runs.sqlite3"
    RunStore(path).close()
    release, entered = threading.Event(), threading.Event()

    def slow_reconcile(store):
        entered.set()
        release.wait(10)
        return []

    monkeypatch.setattr(RunStore, "reconcile", slow_reconcile)
    errors = []
    monkeypatch.setattr(threading, "excepthook", errors.append)
    window = QObject()
    reconciler = StoreReconciler(path, window)
    heard = []
    reconciler.done.connect(heard.append)
    reconciler.failed.connect(heard.append)
    reconciler.start()
    assert entered.wait(5)
    assert not reconciler.stop(0.05)  # still replaying: the close goes on without it
    thread = reconciler._thread
    Shiboken.delete(window)  # the window goes, and its reconciler with it
    release.set()
    thread.join(5)
    qtbot.wait(10)
    assert not thread.is_alive()
    assert errors == [] and heard == []
