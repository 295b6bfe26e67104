"""Sweeps in the run store: what the GUI and `mgpu-train sweep` call.

A sweep is a row of the `sweeps` table (its name and SweepSpec as JSON) and its trials
are queued jobs tagged with it (their index and swept values on the job), so a sweep
lives as long as the queue does: the queue runner starts its trials when their GPUs
are free, caps how many run at once and applies the median rule
(`core/sweeps/runner.py`), whether or not an app is open. Each trial's run is tagged
`sweep-<id>` in the Runs tab. What a trial is now comes from its job and its run;
its best metric from the run's stored epochs.

Nothing here starts the queue runner (`core.children.queue_runner.ensure_runner`):
the caller does, as for any queued job.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mgpu_gui.core.devices.nvml import GpuInventory, query_inventory
from mgpu_gui.core.errors import ConfigError, UserError
from mgpu_gui.core.runs.compare import ComparedRun, flatten
from mgpu_gui.core.runs.queue import JobQueue, JobState, QueuedJob, insert_job
from mgpu_gui.core.runs.store import RunState, RunStore
from mgpu_gui.core.runs.storedb import retry
from mgpu_gui.core.sweeps.estimate import PastRun, SweepEstimate, estimate
from mgpu_gui.core.sweeps.plots import ParallelCoordinates, Scatter, parallel_data, scatter_data
from mgpu_gui.core.sweeps.results import SweepResults, TrialOutcome, TrialStatus, sweep_results
from mgpu_gui.core.sweeps.space import Parameter
from mgpu_gui.core.sweeps.trials import SweepSpec, Trial, plan_trials, trial_problems

# A trial's run ended this way: its status in the sweep (a stop with a reason from the
# runner is the median rule's; an interrupted run is stopped, resumable, like a user's stop).
_RUN_STATUS = {
    RunState.RUNNING: TrialStatus.RUNNING, RunState.COMPLETED: TrialStatus.COMPLETED,
    RunState.EARLY_STOPPED: TrialStatus.EARLY_STOPPED, RunState.STOPPED: TrialStatus.STOPPED,
    RunState.FAILED: TrialStatus.FAILED, RunState.INTERRUPTED: TrialStatus.STOPPED,
}
_JOB_STATUS = {
    JobState.QUEUED: TrialStatus.WAITING, JobState.STARTING: TrialStatus.WAITING,
    JobState.CANCELLED: TrialStatus.DROPPED, JobState.FAILED: TrialStatus.FAILED,
}


def sweep_tag(sweep_id: int) -> str:
    """The tag each trial's run gets, so the Runs tab can show one sweep's runs."""
    return f"sweep-{sweep_id}"


@dataclass(frozen=True)
class SweepRecord:
    """One sweep as `list_sweeps` gives it: its setup and how many trials are where."""

    id: int
    name: str
    spec: SweepSpec
    created: float
    cancelled: bool
    counts: Mapping[TrialStatus, int]  # trials per status; absent: none

    @property
    def trials(self) -> int:
        return sum(self.counts.values())

    @property
    def ended(self) -> bool:
        """No trial waits or runs (it may still be extended)."""
        return not (self.counts.get(TrialStatus.WAITING) or self.counts.get(TrialStatus.RUNNING))

    @property
    def state_text(self) -> str:
        """E.g. "3 completed, 2 running, 3 waiting", in TrialStatus order."""
        words = [f"{self.counts[s]} {s.text}" for s in TrialStatus if self.counts.get(s)]
        return ", ".join(words or ["no trials"]) + (", cancelled" if self.cancelled else "")


@dataclass(frozen=True)
class SweepView:
    """One sweep read whole: each trial's outcome, the results table, and each trial's
    job (its run id once started, to open it), for the Sweep view and `sweep show`."""

    record: SweepRecord
    outcomes: tuple[TrialOutcome, ...]  # in trial order
    results: SweepResults
    jobs: Mapping[int, QueuedJob]  # trial index -> its job

    @property
    def spec(self) -> SweepSpec:
        return self.record.spec

    def scatter(self) -> tuple[Scatter, ...]:
        return scatter_data(self.results, self.spec.parameters)

    def parallel(self) -> ParallelCoordinates:
        return parallel_data(self.results, self.spec.parameters)

    def to_dict(self) -> dict[str, Any]:
        """For `sweep show --json`: the setup, and a row per trial."""
        best = self.results.best
        return {
            "id": self.record.id, "name": self.record.name, "created": self.record.created,
            "cancelled": self.record.cancelled, "spec": self.spec.to_dict(),
            "metric": self.results.metric,
            "best_trial": None if best is None else best.trial.index,
            "trials": [{
                "index": row.trial.index, "values": row.trial.to_dict()["values"],
                "seed": row.trial.seed, "status": row.status.value, "message": row.message,
                "job_id": self.jobs[row.trial.index].id,
                "run_id": self.jobs[row.trial.index].run_id,
                "best": None if row.best is None else _number(row.best.best),
                "best_epoch": None if row.best is None else row.best.best_epoch + 1,
            } for row in self.results.rows]}


@dataclass(frozen=True)
class CancelledSweep:
    dropped: tuple[int, ...]  # trial indices taken off the queue
    stopping: tuple[int, ...]  # trial indices whose runs stop at their next batch (resumable)


def start_sweep(store: RunStore, spec: SweepSpec, name: str, *,
                inventory: GpuInventory | None = None, allow_busy: bool = False,
                compiled_model: bool = False) -> int:
    """Plan the sweep's trials and queue one job per trial, all in one transaction;
    returns the sweep's id. A refused spec or trial raises ConfigError (or UserError, for
    devices) before anything is written. `compiled_model`: the model file brings its own
    compiled optimizer (SweepSpec.problems)."""
    spec.check(compiled_model=compiled_model)
    name = name.strip() or spec.base.run_name or "sweep"
    trials = plan_trials(spec)
    return _queue(store, None, spec, name, trials, inventory, allow_busy)


def extend_sweep(store: RunStore, sweep_id: int, more: Sequence[Parameter] = (), *,
                 samples: int = 0, repeats: int | None = None,
                 inventory: GpuInventory | None = None) -> list[int]:
    """Add values of the swept settings (`more`), random draws (`samples` more) or repeats
    (`repeats` in all); queues only the trials the sweep lacks and returns their indices.
    A cancelled sweep extended runs again (its new trials)."""
    record = _record(store, sweep_id)
    jobs = _jobs(store, sweep_id)
    spec = record.spec.extended(more, samples=samples, repeats=repeats)
    spec.check()
    new = plan_trials(spec, [_trial(job) for job in jobs])
    if not new:
        raise UserError(f"Sweep {sweep_id} already has every trial of those values; give "
                        f"new values, more random samples or more repeats.")
    allow_busy = any(job.allow_busy for job in jobs)
    _queue(store, sweep_id, spec, record.name, new, inventory, allow_busy)
    return [trial.index for trial in new]


def _queue(store: RunStore, sweep_id: int | None, spec: SweepSpec, name: str,
           trials: Sequence[Trial], inventory: GpuInventory | None, allow_busy: bool) -> int:
    problems = trial_problems(spec, trials)
    if problems:
        raise ConfigError(problems)
    inventory = inventory if inventory is not None else query_inventory()
    queue = JobQueue(store)
    configs = [queue.checked(trial.config.replace(run_name=f"{name}-t{trial.number}"), inventory,
                             allow_busy=allow_busy) for trial in trials]
    spec_json = json.dumps(spec.to_dict())

    def write() -> int:
        with store.database.write() as db:
            if sweep_id is None:
                found = int(db.execute(
                    "INSERT INTO sweeps (name, spec, created) VALUES (?, ?, ?)",
                    (name, spec_json, time.time())).lastrowid)
            else:
                found = sweep_id
                db.execute("UPDATE sweeps SET spec = ?, cancelled = 0 WHERE id = ?",
                           (spec_json, sweep_id))
            for trial, config in zip(trials, configs, strict=True):
                stored = trial.to_dict()
                insert_job(db, config, allow_busy, sweep_id=found, trial_index=trial.index,
                           trial={"repeat": stored["repeat"], "values": stored["values"]})
            return found

    return int(retry(write))


def list_sweeps(store: RunStore) -> list[SweepRecord]:
    """Every sweep, newest first, with its trials counted by status."""
    rows = store.database.db.execute(
        "SELECT q.sweep_id, q.state, q.stop_reason, q.run_id, r.status FROM queue q "
        "LEFT JOIN runs r ON r.id = q.run_id WHERE q.sweep_id IS NOT NULL").fetchall()
    counts: dict[int, Counter[TrialStatus]] = {}
    for row in rows:
        status = trial_status(JobState(row["state"]), row["run_id"],
                              None if row["status"] is None else RunState(row["status"]),
                              row["stop_reason"])
        counts.setdefault(row["sweep_id"], Counter())[status] += 1
    return [_sweep(row, counts.get(row["id"], Counter())) for row in store.database.db.execute(
        "SELECT * FROM sweeps ORDER BY id DESC")]


def load_sweep(store: RunStore, sweep_id: int) -> SweepView:
    """The sweep with every trial's outcome and its results table (milliseconds per trial:
    each trial's epochs are read; off the GUI thread)."""
    spec = _record(store, sweep_id).spec
    jobs = _jobs(store, sweep_id)
    outcomes = [_outcome(store, job) for job in jobs]
    counts = Counter(outcome.status for outcome in outcomes)
    record = _sweep(_sweep_row(store, sweep_id), counts)
    return SweepView(record, tuple(outcomes), sweep_results(outcomes, spec.metric),
                     {job.trial_index: job for job in jobs})


def cancel_sweep(store: RunStore, sweep_id: int) -> CancelledSweep:
    """Drop the waiting trials and stop the running ones (resumable), through the queue's
    cancel; the sweep is marked so the runner starts none of it meanwhile."""
    _record(store, sweep_id)

    def mark() -> None:
        with store.database.write() as db:
            db.execute("UPDATE sweeps SET cancelled = 1 WHERE id = ?", (sweep_id,))

    retry(mark)
    queue = JobQueue(store)
    dropped, stopping = [], []
    for job in _jobs(store, sweep_id):
        status = _status(store, job)
        if status not in (TrialStatus.WAITING, TrialStatus.RUNNING):
            continue
        try:
            cancelled = queue.cancel(job.id)
        except UserError:  # it ended meanwhile
            continue
        (stopping if cancelled.cancel_requested else dropped).append(job.trial_index)
    return CancelledSweep(tuple(dropped), tuple(stopping))


def sweep_estimate(store: RunStore, spec: SweepSpec) -> SweepEstimate:
    """The sweep's size and time (SweepEstimate.text), timed by the last stored run of each
    model and data it trains, `spec.max_parallel` trials at a time."""
    trials = plan_trials(spec)
    return estimate(trials, past_runs(store, {(t.config.model, t.config.data) for t in trials}),
                    at_once=spec.max_parallel)


# When a sweep's trial could have started: its job queued, or the last of its sweep's
# runs that ended before it was made (a slot freed): from then on, the wait is the
# runner's picking it up, which the next sweep's trials pay too.
_READY = ("SELECT MAX(q.created, COALESCE((SELECT MAX(r2.ended) FROM queue q2 JOIN runs r2 "
          "ON r2.id = q2.run_id WHERE q2.sweep_id = q.sweep_id AND r2.ended <= r.created), "
          "0)) FROM queue q WHERE q.run_id = r.id AND q.sweep_id IS NOT NULL")


def past_runs(store: RunStore, keys: set[tuple[str, str]]) -> list[PastRun]:
    """Ended runs of these (model, data) with their mean seconds per epoch and their time
    outside the epochs (from when it could start, `_READY`, else its creation, to its end;
    known for a run of one attempt only: a resumed run's span holds its pause)."""
    found = []
    for model, data in keys:
        rows = store.database.db.execute(
            "SELECT r.name, r.ended, r.created, r.attempts, AVG(e.duration_s) AS pace, "
            f"SUM(e.duration_s) AS trained, ({_READY}) AS ready FROM runs r "
            "JOIN epochs e ON e.run_id = r.id "
            "WHERE r.model = ? AND r.data = ? AND r.ended IS NOT NULL AND e.duration_s > 0 "
            "GROUP BY r.id", (model, data)).fetchall()
        found += [PastRun(row["name"], model, data, row["ended"], row["pace"],
                          max(0.0, row["ended"] - (row["ready"] or row["created"])
                              - row["trained"])
                          if row["attempts"] <= 1 else 0.0) for row in rows]
    return found


def trial_status(state: JobState, run_id: int | None, run: RunState | None,
                 stop_reason: str) -> TrialStatus:
    """A trial's status from its job's state and, once started, its run's."""
    if state is not JobState.STARTED:
        return _JOB_STATUS[state]
    if run_id is None or run is None:
        return TrialStatus.DROPPED  # its run was deleted
    if run is RunState.STOPPED and stop_reason:
        return TrialStatus.MEDIAN_STOPPED
    return _RUN_STATUS[run]


def trial_curves(store: RunStore, jobs: Sequence[QueuedJob]) -> dict[int, ComparedRun]:
    """The per-epoch metrics of each trial that has trained an epoch, by trial index."""
    found = {}
    for job in jobs:
        if job.run_id is None:
            continue
        try:
            events = store.series_events(job.run_id, batches=False)
        except UserError:  # its run was deleted meanwhile
            continue
        run = ComparedRun.from_events(_trial(job).label, events, settings=flatten(job.config),
                                      run_id=job.run_id)
        if run.epochs:
            found[job.trial_index] = run
    return found


def sweep_jobs(store: RunStore, sweep_id: int) -> list[QueuedJob]:
    """The sweep's jobs in trial order."""
    return _jobs(store, sweep_id)


def load_spec(store: RunStore, sweep_id: int) -> tuple[SweepSpec, bool]:
    """The sweep's spec and whether it was cancelled."""
    record = _record(store, sweep_id)
    return record.spec, record.cancelled


def _outcome(store: RunStore, job: QueuedJob) -> TrialOutcome:
    trial = _trial(job)
    run = trial_curves(store, [job]).get(job.trial_index)
    status = _status(store, job)
    message = job.message
    if job.run_id is not None:
        try:
            message = store.get(job.run_id).message
        except UserError:
            message = "Its run was deleted."
    if status is TrialStatus.MEDIAN_STOPPED:
        message = job.stop_reason
    return TrialOutcome(trial, status, run, message)


def _status(store: RunStore, job: QueuedJob) -> TrialStatus:
    run = None
    if job.run_id is not None:
        try:
            run = store.get(job.run_id).status
        except UserError:
            run = None
    return trial_status(job.state, job.run_id, run, job.stop_reason)


def _trial(job: QueuedJob) -> Trial:
    assert job.trial is not None and job.trial_index is not None, "not a sweep's job"
    return Trial.from_dict({**job.trial, "index": job.trial_index,
                            "config": job.config.to_dict()})


def _jobs(store: RunStore, sweep_id: int) -> list[QueuedJob]:
    queue = JobQueue(store)
    return [queue.get(row[0]) for row in store.database.db.execute(
        "SELECT id FROM queue WHERE sweep_id = ? ORDER BY trial_index", (sweep_id,))]


def _sweep_row(store: RunStore, sweep_id: int):
    row = store.database.db.execute("SELECT * FROM sweeps WHERE id = ?", (sweep_id,)).fetchone()
    if row is None:
        raise UserError(f"There is no sweep {sweep_id} in the run store {store.path}; "
                        f"`mgpu-train sweep list` lists them.")
    return row


def _record(store: RunStore, sweep_id: int) -> SweepRecord:
    return _sweep(_sweep_row(store, sweep_id), Counter())


def _sweep(row, counts: Mapping[TrialStatus, int]) -> SweepRecord:
    return SweepRecord(row["id"], row["name"], SweepSpec.from_dict(json.loads(row["spec"])),
                       row["created"], bool(row["cancelled"]), dict(counts))


def _number(value: float) -> float | None:
    return value if math.isfinite(value) else None
