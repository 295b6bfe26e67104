"""Preparing a run off the GUI thread: the GPU listing, claims, preflight and the run folder.

Before a worker starts, `prepare_run` lists the GPUs through NVML (nvmlInit alone
can take seconds while a GPU wakes up), asks NVML which processes use them, reads
the model and data headers and creates the run folder. `RunPreparer` does all of
that in a QThread with a run-store connection of its own (a connection serves one
thread); the PreparedRun, or the UserError that refused it, is queued back to the
GUI thread. A result of a preparation cancelled meanwhile is discarded, not started.
"""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot

from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.devices.nvml import query_inventory
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.runs.cluster import (
    ClusterSpec,
    check_port_free,
    one_replica_per_cpu_worker,
    write_cluster,
)
from mgpu_gui.core.runs.store import RunStore
from mgpu_gui.gui.jobs.thread_end import end_in_thread

if TYPE_CHECKING:  # the supervisor loads in the preparing thread, at the first Train
    from mgpu_gui.core.children.supervisor import PreparedRun


class StartKind(StrEnum):
    TRAIN = "train"
    RESUME = "resume"
    CHIEF = "chief"  # this machine as the chief of a multi-worker run


@dataclass(frozen=True)
class StartRequest:
    """What to prepare; handed back with a refusal, so the caller can ask and retry."""

    kind: StartKind
    config: RunConfig | None = None  # TRAIN, CHIEF
    run_folder: Path | None = None  # RESUME, and a CHIEF that resumes
    spec: ClusterSpec | None = None  # CHIEF
    allow_busy: bool = False

    def allowing_busy(self) -> StartRequest:
        """The same request once the user said yes to GPUs busy outside the app."""
        return replace(self, allow_busy=True)


def prepare(request: StartRequest, store: RunStore | None) -> PreparedRun:
    """Everything before the worker starts; blocking (NVML, files): never on the GUI thread."""
    from mgpu_gui.core.children.supervisor import prepare_resume, prepare_run

    if request.kind is StartKind.RESUME:
        assert request.run_folder is not None
        return prepare_resume(request.run_folder, store=store, allow_busy=request.allow_busy)
    assert request.config is not None
    if request.kind is StartKind.TRAIN:
        return prepare_run(request.config, store=store, allow_busy=request.allow_busy)
    assert request.spec is not None
    inventory = query_inventory()
    check_port_free(request.spec.port)
    if request.run_folder is not None:
        run = prepare_resume(request.run_folder, inventory, store)
    else:
        run = prepare_run(one_replica_per_cpu_worker(request.config, inventory), inventory,
                          store)
    try:
        write_cluster(run.run_dir, request.spec)
    except BaseException:
        run.release()
        raise
    return run


def discard(run: PreparedRun, store: RunStore | None) -> None:
    """Undo a preparation nobody wants any more: a new run leaves no trace, a resumed one
    stays as it was (resumable)."""
    run.release()
    if run.resumed:
        return
    if store is not None and run.run_id is not None:
        with contextlib.suppress(UserError):
            store.delete(run.run_id)
    shutil.rmtree(run.run_dir.path, ignore_errors=True)


class _Preparation(QObject):
    """Lives in its QThread for one request."""

    done = Signal(int, object, object)  # generation, PreparedRun | None, UserError | None

    def __init__(self, generation: int, request: StartRequest, store_path: Path | None):
        super().__init__()
        self.generation, self.request, self.store_path = generation, request, store_path

    @Slot()
    def run(self) -> None:
        run, error = None, None
        try:
            store = RunStore(self.store_path) if self.store_path is not None else None
            try:
                run = prepare(self.request, store)
            finally:
                if store is not None:
                    store.close()
        except UserError as refused:
            error = refused
        except Exception as failed:  # a bug must not leave the window waiting
            error = UserError(f"The run could not be prepared: {failed!r}")
        self.done.emit(self.generation, run, error)
        end_in_thread(self)


class RunPreparer(QObject):
    """Prepares one run at a time in a QThread; `prepared(PreparedRun)` or
    `refused(StartRequest, UserError)` on the GUI thread. After `cancel()`, the pending
    result is discarded and `cancelled()` says so."""

    prepared = Signal(object)  # PreparedRun
    refused = Signal(object, object)  # StartRequest, UserError
    cancelled = Signal()
    _done = Signal(int, object, object)  # queued from the preparation thread

    def __init__(self, store: RunStore | None, parent: QObject | None = None):
        """`store`: the GUI thread's run store; the preparation opens its own connection
        to the same file, and a discarded run is removed through this one."""
        super().__init__(parent)
        self.store = store
        self._generation = 0
        self._request: StartRequest | None = None
        self._thread: QThread | None = None
        self._job: _Preparation | None = None  # referenced: it has no parent in its thread
        self._done.connect(self._deliver, Qt.ConnectionType.QueuedConnection)

    def is_busy(self) -> bool:
        return self._thread is not None

    def start(self, request: StartRequest) -> None:
        if self._thread is not None:
            raise RuntimeError("a run is already being prepared")
        self._generation += 1
        self._request = request
        thread = QThread(self)
        job = _Preparation(self._generation, request,
                           self.store.path if self.store is not None else None)
        job.moveToThread(thread)
        thread.started.connect(job.run)
        job.done.connect(self._done)
        thread.finished.connect(job.deleteLater)
        self._thread, self._job = thread, job
        thread.start()

    def cancel(self) -> None:
        """The pending result is discarded when it comes (NVML calls cannot be cut short)."""
        if self._thread is not None:
            self._generation += 1

    def wait(self, timeout_ms: int) -> bool:
        return self._thread is None or self._thread.wait(timeout_ms)

    def _deliver(self, generation: int, run: PreparedRun | None, error: UserError | None
                 ) -> None:
        if self._thread is not None:
            self._thread.wait()
            self._thread.deleteLater()
        self._thread, self._job = None, None
        request, self._request = self._request, None
        if generation != self._generation:
            if run is not None:
                discard(run, self.store)
            self.cancelled.emit()
        elif run is not None:
            self.prepared.emit(run)
        else:
            self.refused.emit(request, error)

