"""How a job object that was moved to a QThread ends its work there.

Why: a QObject defined in Python and destroyed in the job's thread (the `deleteLater` run
as that thread ends) takes the GIL inside Qt's destructor, while it holds the lock Qt's
signal-slot bookkeeping shares with other objects; the GUI thread, holding the GIL, blocked
on that lock connecting a new plot's signals. Both waited forever (CI 29, a window test:
native stacks of both threads). Handed back to the GUI thread first, the job is destroyed
there, where the GIL is taken before any Qt lock.
"""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication, QObject, QThread


def end_in_thread(job: QObject) -> None:
    """The last call of `job.run()` in its thread: the job goes back to the GUI thread
    (to be deleted there), then the thread's event loop ends."""
    app = QCoreApplication.instance()
    if app is not None:
        job.moveToThread(app.thread())
    QThread.currentThread().quit()
