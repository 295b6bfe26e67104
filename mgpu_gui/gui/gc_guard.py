"""Python's cyclic garbage collection on the GUI thread only.

A Qt object left in a reference cycle is destroyed when the collector finds it, in
whichever thread happened to trigger the collection. In the suite (CI 11) a Compare
reader's thread (a QThread reading the store) triggered one: it destroyed an earlier
window's QObject there and waited for the GIL, while the GUI thread, holding the GIL,
destroyed another widget and waited for the Qt object lock the reader held. Both waited
forever (py-spy: `gc_collect_main` -> `QObject::~QObject` -> `GilState::acquire` in the
reader; `QObject::~QObject` -> `QBasicMutex::lockInternal` on the GUI thread): the
"window-fixture hang" of issue 28. So automatic collection is off, and the GUI thread
collects a generation when its threshold is passed (a full collection at most every
FULL_EVERY_S), checked every `INTERVAL_MS`. Qt applications with worker threads have
long done the same (calibre's GarbageCollector).
"""

from __future__ import annotations

import gc
import time

from PySide6.QtCore import QObject, QTimer

INTERVAL_MS = 500
# A full collection walks every object. Python makes one only when a quarter of the old
# objects is new (a count it does not expose), so here at most one this often: without
# the limit the inner test loop took 25 % more CPU.
FULL_EVERY_S = 10.0
_last_full = 0.0


def collect_due() -> None:
    """The collection automatic collection would have made by now: the oldest generation
    due (a full one at most every FULL_EVERY_S)."""
    global _last_full
    count, threshold = gc.get_count(), gc.get_threshold()
    if count[2] > threshold[2] and time.monotonic() - _last_full >= FULL_EVERY_S:
        gc.collect(2)
        _last_full = time.monotonic()
        return
    for generation in (1, 0):
        if count[generation] > threshold[generation]:
            gc.collect(generation)
            return


class MainThreadCollector(QObject):
    """Install once, on the GUI thread, with the application as parent."""

    def __init__(self, parent: QObject) -> None:
        super().__init__(parent)
        gc.disable()
        self._timer = QTimer(self)
        self._timer.setInterval(INTERVAL_MS)
        self._timer.timeout.connect(collect_due)
        self._timer.start()
