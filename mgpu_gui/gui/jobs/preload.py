"""Import a view's modules on a plain thread before the user first opens it.

Views load their modules when first opened, so the window starts faster; but that
import then runs inside the click's event: 10-30 ms of the GUI thread (more where
no `.pyc` is cached and each module is compiled), the one stall of a first open.
Importing them ahead on a thread moves it off the GUI thread: a click meanwhile
waits only for what is left (Python's per-module import lock), and a compile holds
the GIL for one module at a time, a few milliseconds. Module bodies here define
classes and constants only; no QObject is made, so any thread may run them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


def preload(load: Callable[[], object], name: str) -> threading.Thread:
    """Run `load` (a function holding the view's import statement) on its own thread.

    Not a daemon: an interpreter that exits meanwhile waits for the import to end
    rather than tearing modules down under it.
    """
    thread = threading.Thread(target=load, name=f"preload {name}")
    thread.start()
    return thread
