"""The queue runner: one process per run store that starts queued jobs and supervises them.

Started on demand (`core.children.queue_runner.ensure_runner`) by the app or `mgpu-train queue
add`, in a session of its own, so closing the window or the terminal neither
stops the queue nor the runs it started. Exactly one runs per store (a `flock`
on `<store>.runner.lock`, holding its pid); it exits once nothing waits and
none of its runs is live. Each started run is supervised here like any other
(`WorkerProcess` records its events in the store); if this process dies, its
workers stop at their next batch and the runs show as interrupted, resumable.
Sweeps' trials are jobs too: here they are capped, judged by the median rule after
each epoch, and resumed by the next runner when one's exit stopped them
(`core/sweeps/runner.py`).
"""

from __future__ import annotations

import argparse
import fcntl
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

from mgpu_gui.core.children.supervisor import (
    PreparedRun,
    WorkerProcess,
    prepare_resume,
    prepare_run,
)
from mgpu_gui.core.devices.nvml import GpuInventory, query_inventory
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.events import EpochEnd
from mgpu_gui.core.runs import claims
from mgpu_gui.core.runs.queue import JobQueue, QueuedJob, runner_lock_path, schedule
from mgpu_gui.core.runs.store import RunState, RunStore
from mgpu_gui.core.sweeps.runner import SweepJudge, admitted, requeue_unfinished
from mgpu_gui.core.sweeps.store import sweep_tag

POLL_S = 1.0
INVENTORY_TTL_S = 30.0  # GPUs rarely come and go; NVML's listing is not free
IDLE_EXIT_S = 10.0

log = logging.getLogger("mgpu_gui.processes.queue_runner")


class QueueRunner:
    """The loop: reconcile, schedule, start, watch for cancels, exit when idle."""

    def __init__(self, store_path: Path, idle_exit_s: float = IDLE_EXIT_S):
        self.store = RunStore(store_path)
        self.queue = JobQueue(self.store)
        self.idle_exit_s = idle_exit_s
        self.workers: dict[int, WorkerProcess] = {}  # job id -> its run's worker
        self.threads: dict[int, threading.Thread] = {}
        self.stopping = threading.Event()
        self._inventory: GpuInventory | None = None
        self._inventory_at = 0.0

    def run(self) -> None:
        self.store.reconcile()  # runs an earlier runner left behind are interrupted
        for job in self.queue.fail_unfinished_starts():
            log.info("job %d: an earlier runner died while starting it", job.id)
        for job in requeue_unfinished(self.store):
            # Numbered from 1, as `sweep show` and the run names number trials.
            what = ("" if job.sweep_id is None
                    else f": sweep {job.sweep_id}'s trial {job.trial_index + 1}")
            log.info("job %d%s waits to go on (run %s)", job.id, what, job.run_id)
        idle_since = time.monotonic()
        while not self.stopping.wait(POLL_S if self.workers or self.queue.waiting() else 0.2):
            self._forget_finished()
            self._cancel_requested()
            waiting = self.queue.waiting()
            if waiting:
                self._start_ready(waiting)
            if waiting or self.workers:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since >= self.idle_exit_s:
                log.info("nothing queued or running: exiting")
                break
        self._stop_all()

    def _inventory_now(self) -> GpuInventory:
        if self._inventory is None or time.monotonic() - self._inventory_at > INVENTORY_TTL_S:
            self._inventory, self._inventory_at = query_inventory(), time.monotonic()
        return self._inventory

    def _start_ready(self, waiting: list[QueuedJob]) -> None:
        inventory = self._inventory_now()
        held, busy = claims.in_use(self.store.database, inventory.gpus)
        ready, capped = admitted(self.store, waiting)
        for job_id, reason in capped.items():
            self.queue.set_waiting_for(job_id, reason)
        for decision in schedule(ready, inventory, held, busy):
            job = decision.job
            if decision.error:
                self.queue.mark_failed(job.id, decision.error)
                log.info("job %d cannot start: %s", job.id, decision.error)
            elif decision.plan is None:
                self.queue.set_waiting_for(job.id, decision.waiting_for)
            else:
                self._start(job, decision.inventory)

    def _start(self, job: QueuedJob, inventory: GpuInventory | None) -> None:
        self.queue.mark_starting(job.id)
        try:
            run = self._prepare(job, inventory)
        except claims.DevicesBusyError as busy:  # another app instance was quicker
            self.queue.mark_waiting(job.id, busy.reason)
            return
        except UserError as error:  # its files or the disk changed since it was queued
            self.queue.mark_failed(job.id, str(error))
            log.info("job %d cannot start: %s", job.id, error)
            return
        assert run.run_id is not None
        self.queue.mark_started(job.id, run.run_id)
        if job.sweep_id is not None:
            self.store.tag(run.run_id, [sweep_tag(job.sweep_id)])
        worker = WorkerProcess(run, store=self.store)
        try:
            worker.start()
        except Exception as error:  # no process could be made: the runner serves on
            run.release()
            self.store.set_status(run.run_id, RunState.FAILED,
                                  f"The training process could not start: {error}")
            log.info("job %d: its training process could not start: %s", job.id, error)
            return
        log.info("job %d started as run %d in %s on %s", job.id, run.run_id, run.run_dir.path,
                 ", ".join(run.plan.names))
        thread = threading.Thread(target=self._supervise, args=(job, worker),
                                  name=f"job-{job.id}", daemon=True)
        self.workers[job.id], self.threads[job.id] = worker, thread
        thread.start()

    def _prepare(self, job: QueuedJob, inventory: GpuInventory | None) -> PreparedRun:
        """A new run, or (a sweep's trial a runner's exit stopped) its run resumed."""
        if job.run_id is None:
            return prepare_run(job.config, inventory, self.store, allow_busy=job.allow_busy)
        return prepare_resume(self.store.get(job.run_id).run_dir, inventory, self.store,
                              allow_busy=job.allow_busy)

    def _supervise(self, job: QueuedJob, worker: WorkerProcess) -> None:
        judge = SweepJudge(self.store.path, job) if job.sweep_id is not None else None
        try:
            for event in worker.events():  # recorded in the store by the worker's recorder
                if judge is not None and isinstance(event, EpochEnd) and judge.after_epoch():
                    log.info("job %d: %s", job.id, judge.verdict.reason)
                    worker.request_stop()  # at once: the main loop would within POLL_S
            outcome = worker.outcome()
        finally:
            if judge is not None:
                judge.close()
        log.info("job %d ended: %s %s", job.id, outcome.status.value, outcome.message)
        if outcome.refused:  # no run is left to show why: the job says it (a failed trial)
            self.queue.mark_failed(job.id, outcome.message)

    def _forget_finished(self) -> None:
        for job_id, thread in list(self.threads.items()):
            if not thread.is_alive():
                del self.threads[job_id], self.workers[job_id]

    def _cancel_requested(self) -> None:
        for job_id, worker in self.workers.items():
            if self.queue.get(job_id).cancel_requested:
                worker.request_stop()

    def _stop_all(self) -> None:
        for worker in self.workers.values():
            worker.request_stop()
        for thread in self.threads.values():
            thread.join()
        self.store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mgpu_gui.processes.queue_runner")
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--idle-exit", type=float, default=IDLE_EXIT_S,
                        help="seconds with nothing queued or running before it exits")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format=f"%(asctime)s queue runner {os.getpid()}: %(message)s")
    store_path = args.store.absolute()
    lock_fd = os.open(runner_lock_path(store_path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another runner serves this store
    os.ftruncate(lock_fd, 0)
    os.write(lock_fd, f"{os.getpid()}\n".encode())
    runner = QueueRunner(store_path, args.idle_exit)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda *_: runner.stopping.set())
    log.info("serving the queue of %s", store_path)
    runner.run()
    os.ftruncate(lock_fd, 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
