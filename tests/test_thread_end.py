"""A job object moved to a QThread is destroyed on the GUI thread, never in its own.

CI 29 hung in a window test: the job's thread ran its `deleteLater` as it ended, Qt's
destructor took the GIL under a signal-slot lock the GUI thread (holding the GIL) was
waiting for (mgpu_gui/gui/jobs/thread_end.py).
"""

from __future__ import annotations

import threading

from PySide6.QtCore import QObject, QThread, Signal, Slot

from mgpu_gui.gui.jobs.thread_end import end_in_thread


class _Job(QObject):
    done = Signal()

    def __init__(self, destroyed_in: list[str]):
        super().__init__()
        # A plain function (not a method of this object): it runs as the object goes.
        self.destroyed.connect(lambda: destroyed_in.append(threading.current_thread().name))

    @Slot()
    def run(self) -> None:
        self.done.emit()
        end_in_thread(self)


def test_a_jobs_object_goes_back_to_the_gui_thread_and_is_deleted_there(qtbot):
    destroyed_in: list[str] = []
    thread = QThread()
    job = _Job(destroyed_in)
    job.moveToThread(thread)
    thread.started.connect(job.run)
    thread.finished.connect(job.deleteLater)  # as the app's jobs have it
    with qtbot.waitSignal(thread.finished, timeout=5000):
        thread.start()
    assert thread.wait(5000)
    qtbot.waitUntil(lambda: destroyed_in != [], timeout=5000)
    assert destroyed_in == [threading.main_thread().name]
