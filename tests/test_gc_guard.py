"""Cyclic garbage is collected on the GUI thread only (gui/gc_guard.py): a Qt object
collected on a reader job's thread deadlocked the window tests (issue 28, CI 11)."""

from __future__ import annotations

import gc
import threading
import weakref

from PySide6.QtCore import QObject

from mgpu_gui.gui.gc_guard import INTERVAL_MS, MainThreadCollector


def test_a_qt_object_in_a_cycle_is_collected_by_the_gui_threads_timer(qtbot, qapp):
    collector = MainThreadCollector(qapp)
    try:
        assert not gc.isenabled()
        ended_on: list[str] = []

        class Holder:
            def __init__(self) -> None:
                self.obj = QObject()
                self.obj.destroyed.connect(lambda: ended_on.append(
                    threading.current_thread().name))
                self.me = self  # a cycle: only the collector frees it

        holder = weakref.ref(Holder())
        assert holder() is not None
        # Another thread allocates past the threshold: it must not collect.
        worker = threading.Thread(target=lambda: [[] for _ in range(5 * gc.get_threshold()[0])],
                                  name="reader")
        worker.start()
        worker.join()
        assert holder() is not None and ended_on == []
        qtbot.waitUntil(lambda: holder() is None, timeout=10 * INTERVAL_MS)
        assert ended_on in ([], [threading.main_thread().name])
    finally:
        collector.deleteLater()
        gc.collect()
