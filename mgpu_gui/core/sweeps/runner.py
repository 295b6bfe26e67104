"""What the queue runner does for sweeps (the app may be closed): start no more of a
sweep's trials at once than it allows, apply the median rule after each epoch of a
running trial, and go on with trials (and plain jobs) a runner's end cut short.

The runner process (`processes/queue_runner.py`) calls these; they read and write
only the store, so they are tested without a runner.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from mgpu_gui.core.runs.compare import ComparedRun
from mgpu_gui.core.runs.queue import JobQueue, QueuedJob
from mgpu_gui.core.runs.store import RunState, RunStore
from mgpu_gui.core.sweeps.median import MedianVerdict, median_verdicts
from mgpu_gui.core.sweeps.store import load_spec, sweep_jobs, trial_curves

RESUMING = "Resumes where it stopped when the queue runner ended."


def admitted(store: RunStore, waiting: Sequence[QueuedJob]
             ) -> tuple[list[QueuedJob], dict[int, str]]:
    """The waiting jobs the queue may schedule now, in order: a sweep's trials only while
    fewer than its max_parallel run, none of a cancelled sweep. The others: job id -> what
    it waits for."""
    running = dict(store.database.db.execute(
        "SELECT q.sweep_id, COUNT(*) FROM queue q LEFT JOIN runs r ON r.id = q.run_id "
        "WHERE q.sweep_id IS NOT NULL AND (q.state = 'starting' OR "
        "(q.state = 'started' AND r.status = 'running')) GROUP BY q.sweep_id").fetchall())
    specs: dict[int, tuple[int, bool]] = {}
    ready, held = [], {}
    for job in waiting:
        if job.sweep_id is None:
            ready.append(job)
            continue
        if job.sweep_id not in specs:
            spec, cancelled = load_spec(store, job.sweep_id)
            specs[job.sweep_id] = (spec.max_parallel, cancelled)
        most, cancelled = specs[job.sweep_id]
        if cancelled:
            held[job.id] = f"sweep {job.sweep_id} was cancelled"
        elif running.get(job.sweep_id, 0) >= most:
            held[job.id] = (f"sweep {job.sweep_id} runs {most} trial{'s' if most != 1 else ''} "
                            f"at once")
        else:
            running[job.sweep_id] = running.get(job.sweep_id, 0) + 1
            ready.append(job)
    return ready, held


def requeue_unfinished(store: RunStore) -> list[QueuedJob]:
    """For a runner starting up: jobs whose runs an earlier runner's end cut short wait
    again, to resume from their last complete epoch when their GPUs are free (a run with
    none starts afresh; the cut-short one stays in the Runs tab). A sweep's trials go on
    when its exit stopped them or its death interrupted them (no one asked for the
    stop); a plain job when its death interrupted it (a stopped plain run is the user's
    Stop: it stays stopped)."""
    queue = JobQueue(store)
    rows = store.database.db.execute(
        "SELECT q.id, r.epochs_done FROM queue q JOIN runs r ON r.id = q.run_id "
        "LEFT JOIN sweeps s ON s.id = q.sweep_id WHERE q.state = 'started' "
        "AND q.cancel_requested = 0 AND r.resume_helps = 1 AND ("
        "(s.id IS NOT NULL AND s.cancelled = 0 AND r.status IN ('stopped', 'interrupted')) "
        "OR (q.sweep_id IS NULL AND r.status = 'interrupted'))").fetchall()
    for job_id, epochs_done in rows:
        queue.mark_waiting(job_id, RESUMING if epochs_done else "", forget_run=not epochs_done)
    return [queue.get(job_id) for job_id, _ in rows]


class SweepJudge:
    """The median rule for one running trial, on a store connection of its own (it runs
    on the thread that supervises the trial's worker)."""

    def __init__(self, store_path: Path, job: QueuedJob):
        self.store = RunStore(store_path)
        self.job = job
        self.verdict: MedianVerdict | None = None

    def after_epoch(self) -> MedianVerdict | None:
        """Judge the trial at its latest epoch; a verdict asks the queue to stop its run
        (as a user's cancel does, with the verdict as the reason). Once per trial."""
        if self.verdict is not None or self.job.sweep_id is None:
            return None
        spec, cancelled = load_spec(self.store, self.job.sweep_id)
        if not spec.median_stop or cancelled:
            return None
        runs = trial_curves(self.store, sweep_jobs(self.store, self.job.sweep_id))
        curves = {index: metric_curve(run, spec.metric) for index, run in runs.items()}
        verdict = median_verdicts(curves, [self.job.trial_index], spec.metric,
                                  grace=spec.grace).get(self.job.trial_index)
        if verdict is not None:
            JobQueue(self.store).cancel(self.job.id, verdict.reason)
            self.verdict = verdict
        return verdict

    def close(self) -> None:
        """After the trial's worker ended: a run the rule stopped says why in the Runs tab."""
        try:
            if self.verdict is not None:
                job = JobQueue(self.store).get(self.job.id)
                if job.run_id is not None and (
                        self.store.get(job.run_id).status is RunState.STOPPED):
                    self.store.set_status(job.run_id, RunState.STOPPED, self.verdict.reason)
        finally:
            self.store.close()


def metric_curve(run: ComparedRun, metric: str) -> list[float]:
    """A trial's values of `metric` indexed by 0-based epoch (NaN where none)."""
    values = run.metrics.get(metric, ())
    curve = [math.nan] * (max(run.epochs) + 1)
    for epoch, value in zip(run.epochs, values, strict=False):
        curve[epoch] = value
    return curve
