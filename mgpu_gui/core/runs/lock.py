"""The lock that marks a run as live: held by its worker for as long as it runs.

A pid can be reused and says nothing across machines; a `flock` on a file in
the run folder is released by the kernel the moment its holder dies, however it
dies. The supervisor takes the lock when it creates or resumes a run and hands
the open file to the worker it starts (the lock belongs to the open file, so it
passes to the child without a gap); from then on only the worker holds it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from mgpu_gui.core.errors import UserError

LOCK_NAME = "run.lock"


class RunBusyError(UserError):
    """Another process is running this run."""


class RunLock:
    """An exclusive, non-blocking lock on one run folder."""

    def __init__(self, fd: int, path: Path):
        self.fd = fd
        self.path = path

    @classmethod
    def acquire(cls, run_folder: Path, *, create: bool = True) -> RunLock:
        path = run_folder / LOCK_NAME
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunBusyError(
                f"The run in {run_folder} is still running: its training process holds the "
                f"run's lock. Stop it first (or wait for it to end).") from None
        except OSError:
            os.close(fd)
            raise
        return cls(fd, path)

    def release(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1


def is_live(run_folder: Path) -> bool:
    """True while some process holds the run's lock (its worker is alive)."""
    try:
        lock = RunLock.acquire(run_folder, create=False)  # a look, not a change
    except RunBusyError:
        return True
    except OSError:
        return False  # no lock file (or no folder): no worker of ours ever held it
    lock.release()
    return False
