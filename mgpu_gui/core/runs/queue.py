"""The job queue: runs waiting in the store for their devices, and who goes next.

Jobs live in the run store, so the queue outlives any app window and is shared
by the GUI and `mgpu-train queue`. One queue runner per store (a process of its
own, `mgpu_gui.processes.queue_runner`, started by `core.children.queue_runner`)
starts a job once its devices are free and supervises its run; a job then is a
run like any other.

The order is first come, first served per device: a job that waits for named
GPUs keeps later jobs off them, so it cannot starve; a later job whose devices
are free meanwhile starts at once (runs on disjoint devices go together).
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import sqlite3
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from mgpu_gui.core.config import DeviceKind, RunConfig
from mgpu_gui.core.devices.nvml import GpuInventory
from mgpu_gui.core.devices.plan import DevicePlan
from mgpu_gui.core.devices.telemetry import ProcessInfo
from mgpu_gui.core.errors import DeviceError, UserError
from mgpu_gui.core.runs import claims
from mgpu_gui.core.runs.store import RunState, RunStore
from mgpu_gui.core.runs.storedb import retry

RUNNER_LOCK_SUFFIX = ".runner.lock"
RUNNER_LOG_SUFFIX = ".runner.log"


class JobState(StrEnum):
    QUEUED = "queued"  # waiting for its devices
    STARTING = "starting"  # the runner is creating its run (milliseconds)
    STARTED = "started"  # its run exists; the run's status says the rest
    CANCELLED = "cancelled"  # taken off the queue before it started
    FAILED = "failed"  # could not start (its settings or files were wrong by then)


@dataclass(frozen=True)
class QueuedJob:
    id: int
    name: str
    config: RunConfig
    state: JobState
    allow_busy: bool
    created: float
    started: float | None
    run_id: int | None
    message: str  # what it waits for, or why it could not start
    cancel_requested: bool
    sweep_id: int | None = None  # a sweep's trial (core/sweeps/store.py)
    trial_index: int | None = None
    trial: Mapping[str, Any] | None = None  # its swept values and repeat, as stored
    stop_reason: str = ""  # why the runner stopped its run (the median rule), if it did

    @property
    def waiting(self) -> bool:
        return self.state is JobState.QUEUED


@dataclass(frozen=True)
class Decision:
    """What the runner does with one queued job now."""

    job: QueuedJob
    plan: DevicePlan | None = None  # start it on these devices
    inventory: GpuInventory | None = None  # the free devices, for prepare_run
    waiting_for: str = ""  # or: why it waits
    error: str = ""  # or: why it can never start


class JobQueue:
    """The queue's rows in one store."""

    def __init__(self, store: RunStore):
        self.store = store
        self._database = store.database

    def add(self, config: RunConfig, inventory: GpuInventory, *,
            allow_busy: bool = False) -> QueuedJob:
        """Queue a run; refuses settings or devices that could never work.

        A GPU busy outside the app right now must be confirmed (`allow_busy`)
        here, as for a run started at once.
        """
        config = self.checked(config, inventory, allow_busy=allow_busy)

        def insert() -> int:
            with self._database.write() as db:
                return insert_job(db, config, allow_busy)

        return self.get(int(retry(insert)))

    def checked(self, config: RunConfig, inventory: GpuInventory, *,
                allow_busy: bool = False) -> RunConfig:
        """The config as a job keeps it (its paths absolute), or the error that keeps
        it off the queue: bad settings, devices this machine lacks, or a GPU busy outside
        the app that `allow_busy` did not confirm."""
        config.check()
        config = config.with_absolute_paths()
        # DeviceError: impossible on this machine. Runs of the app are left out (`held`
        # empty): they end by themselves; a process outside it may never.
        busy = {} if allow_busy else claims.in_use(self._database, inventory.gpus)[1]
        try:
            claims.plan_free(config.devices, inventory, {}, busy, allow_busy)
        except claims.DevicesBusyError as error:
            raise claims.DevicesBusyError(
                error.reason, "Queue it only if that process can share the GPU: confirm in "
                "the app, or add --allow-busy.", error.keys, outside_only=True) from None
        return config

    def jobs(self, *, finished: bool = False) -> list[QueuedJob]:
        """Waiting jobs and those whose run still runs, oldest first (with `finished`,
        every job: cancelled, failed to start, and started ones whose run ended)."""
        where = "" if finished else (
            "WHERE q.state IN ('queued', 'starting') "
            "OR (q.state = 'started' AND r.status = 'running')")
        rows = self._database.db.execute(
            f"SELECT q.* FROM queue q LEFT JOIN runs r ON r.id = q.run_id {where} "
            f"ORDER BY q.id").fetchall()
        return [_job(row) for row in rows]

    def waiting(self) -> list[QueuedJob]:
        return [job for job in self.jobs() if job.waiting]

    def get(self, job_id: int) -> QueuedJob:
        row = self._database.db.execute("SELECT * FROM queue WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise UserError(f"There is no job {job_id} in the queue; see `mgpu-train queue list`.")
        return _job(row)

    def cancel(self, job_id: int, reason: str = "") -> QueuedJob:
        """Take a waiting job off the queue, or ask the runner to stop a started one
        (`reason`: why, when it is not the user's asking: the median rule's verdict)."""
        job = self.get(job_id)
        if job.state is JobState.QUEUED:
            self._update("UPDATE queue SET state = ?, message = ? WHERE id = ? "
                         "AND state = 'queued'", (JobState.CANCELLED.value, "Cancelled.", job_id))
            job = self.get(job_id)
            if job.state is JobState.CANCELLED:
                return job
        if job.state is JobState.STARTED and job.run_id is not None:
            record = self.store.get(job.run_id)
            if record.status is RunState.RUNNING:
                self._update("UPDATE queue SET cancel_requested = 1, stop_reason = ? "
                             "WHERE id = ?", (reason, job_id))
                return self.get(job_id)
        raise UserError(f"Job {job_id} ({job.name}) is {self.describe(job)}; there is nothing "
                        f"to cancel.")

    def mark_starting(self, job_id: int) -> None:
        self._update("UPDATE queue SET state = ? WHERE id = ?",
                     (JobState.STARTING.value, job_id))

    def fail_unfinished_starts(self) -> list[QueuedJob]:
        """For a runner starting up: jobs an earlier runner died while starting.

        Their run may or may not exist; starting them again could train them twice,
        so they fail with a message that says where to look.
        """
        stuck = [job for job in self.jobs() if job.state is JobState.STARTING]
        for job in stuck:
            self.mark_failed(job.id, "The queue runner stopped while starting this job. Its "
                             "run may be in the Runs tab (look for its name); if it is not, "
                             "queue it again.")
        return stuck

    def mark_started(self, job_id: int, run_id: int) -> None:
        self._update("UPDATE queue SET state = ?, run_id = ?, started = ?, message = '' "
                     "WHERE id = ?", (JobState.STARTED.value, run_id, time.time(), job_id))

    def mark_failed(self, job_id: int, message: str) -> None:
        self._update("UPDATE queue SET state = ?, message = ? WHERE id = ?",
                     (JobState.FAILED.value, message, job_id))

    def mark_waiting(self, job_id: int, message: str, *, forget_run: bool = False) -> None:
        """Back in the queue: it could not start after all (another app took a device), or
        its run is to go on (resumed) or, with `forget_run`, to start afresh."""
        self._update("UPDATE queue SET state = ?, message = ?, run_id = CASE WHEN ? THEN NULL "
                     "ELSE run_id END WHERE id = ?",
                     (JobState.QUEUED.value, message, int(forget_run), job_id))

    def set_waiting_for(self, job_id: int, message: str) -> None:
        self._update("UPDATE queue SET message = ? WHERE id = ? AND message != ?",
                     (message, job_id, message))

    def describe(self, job: QueuedJob) -> str:
        """The job's state in a few words, its run's status once it started."""
        if job.state is JobState.QUEUED:
            return f"waiting: {job.message}" if job.message else "queued"
        if job.state is JobState.STARTED and job.run_id is not None:
            try:
                record = self.store.get(job.run_id)
            except UserError:
                return "started (its run was deleted)"
            status = record.status.value.replace("_", " ")
            stopping = ", stop requested" if job.cancel_requested and (
                record.status is RunState.RUNNING) else ""
            return f"run {record.id} {status}{stopping}"
        if job.state is JobState.FAILED and job.message:
            return f"failed: {job.message}"
        return job.state.value

    def _update(self, sql: str, params: tuple) -> None:
        def write() -> None:
            with self._database.write() as db:
                db.execute(sql, params)

        retry(write)


def schedule(jobs: Sequence[QueuedJob], inventory: GpuInventory, held: Mapping[str, str],
             busy: Mapping[str, tuple[ProcessInfo, ...]]) -> list[Decision]:
    """Decide, in queue order, which waiting jobs start now and what the others wait for.

    `held`: device key -> who holds it (live runs). A job that waits for named
    devices reserves them against later jobs.
    """
    taken = dict(held)
    decisions = []
    for job in jobs:
        try:
            plan = claims.plan_free(job.config.devices, inventory, taken, busy, job.allow_busy)
        except claims.DevicesBusyError as wait:
            decisions.append(Decision(job, waiting_for=wait.reason))
            for key in wait.keys:
                taken.setdefault(key, f"job {job.id} ({job.name}), ahead in the queue")
            continue
        except DeviceError as error:
            decisions.append(Decision(job, error=str(error)))
            continue
        for key in claims.plan_keys(plan):
            taken[key] = f"job {job.id} ({job.name}), starting"
        decisions.append(Decision(job, plan=plan, inventory=_only(inventory, plan)))
    return decisions


def insert_job(db: sqlite3.Connection, config: RunConfig, allow_busy: bool, *,
               sweep_id: int | None = None, trial_index: int | None = None,
               trial: Mapping[str, Any] | None = None) -> int:
    """One waiting job's row, inside the caller's write transaction (a sweep queues all
    its trials in one); `config` as `JobQueue.checked` returned it. Returns its id."""
    name = config.run_name or Path(config.model).stem or "run"
    cursor = db.execute(
        "INSERT INTO queue (name, config, state, allow_busy, created, sweep_id, trial_index, "
        "trial) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (name, config.to_json(), JobState.QUEUED.value, int(allow_busy), time.time(), sweep_id,
         trial_index, None if trial is None else json.dumps(trial)))
    return int(cursor.lastrowid)


def _only(inventory: GpuInventory, plan: DevicePlan) -> GpuInventory:
    """The inventory narrowed to the plan's GPUs, so prepare_run plans the same devices."""
    if not plan.gpus:
        return inventory
    chosen = {gpu.index for gpu in plan.gpus}
    return dataclasses.replace(inventory, gpus=tuple(g for g in inventory.gpus
                                                     if g.index in chosen))


def _job(row) -> QueuedJob:
    return QueuedJob(
        id=row["id"], name=row["name"], config=RunConfig.from_json(row["config"]),
        state=JobState(row["state"]), allow_busy=bool(row["allow_busy"]), created=row["created"],
        started=row["started"], run_id=row["run_id"], message=row["message"],
        cancel_requested=bool(row["cancel_requested"]), sweep_id=row["sweep_id"],
        trial_index=row["trial_index"],
        trial=None if row["trial"] is None else json.loads(row["trial"]),
        stop_reason=row["stop_reason"])


# -- the runner process ----------------------------------------------------------------------


def runner_lock_path(store_path: Path) -> Path:
    return store_path.with_name(store_path.name + RUNNER_LOCK_SUFFIX)


def runner_log_path(store_path: Path) -> Path:
    return store_path.with_name(store_path.name + RUNNER_LOG_SUFFIX)


def runner_pid(store_path: Path) -> int | None:
    """The queue runner's pid while one runs for this store."""
    path = runner_lock_path(store_path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        text = path.read_text().strip()
        return int(text) if text.isdigit() else -1
    finally:
        os.close(fd)  # also drops the shared lock, if it was had
    return None


def config_summary(config: RunConfig) -> str:
    """One line for queue listings: model, data, devices, epochs."""
    devices = config.devices
    if devices.gpus:
        where = "GPU " + ",".join(devices.gpus)
    elif devices.kind is DeviceKind.CPU:
        where = f"CPU ×{devices.replicas or 2}"
    else:
        where = f"{devices.replicas} GPU(s)" if devices.replicas else "all GPUs"
    return (f"{Path(config.model).name} on {Path(config.data).name}, {where}, "
            f"{config.epochs} epoch{'s' if config.epochs != 1 else ''}")


def job_json(job: QueuedJob, queue: JobQueue) -> dict:
    return {"id": job.id, "name": job.name, "state": job.state.value,
            "status": queue.describe(job), "run_id": job.run_id, "created": job.created,
            "started": job.started, "allow_busy": job.allow_busy,
            "config": json.loads(job.config.to_json())}
