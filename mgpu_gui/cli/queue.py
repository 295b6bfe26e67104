"""`mgpu-train queue`: queue runs for when their GPUs are free, list and cancel them.

The queue lives in the run store, shared with the app; a queue runner process
(started here on demand) starts each job when its devices are free and keeps
going after this terminal closes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from mgpu_gui.cli.common import (
    add_store_argument,
    add_train_arguments,
    config_from_args,
    open_store,
)
from mgpu_gui.core.children.queue_runner import ensure_runner
from mgpu_gui.core.children.supervisor import check_inputs
from mgpu_gui.core.devices.nvml import query_inventory
from mgpu_gui.core.runs.queue import (
    JobQueue,
    QueuedJob,
    config_summary,
    job_json,
    runner_log_path,
    runner_pid,
)


def register(sub: argparse._SubParsersAction) -> None:
    queue = sub.add_parser(
        "queue", help="queue runs to start when their GPUs are free; list, cancel",
        description="Runs queued here (or in the app) start as soon as the devices they ask "
                    "for are free; runs on different GPUs go at the same time. A queue runner "
                    "process starts them and keeps going after this terminal closes.")
    actions = queue.add_subparsers(dest="queue_command", required=True)
    listing = actions.add_parser("list", help="waiting and running jobs")
    listing.add_argument("--all", action="store_true",
                         help="also jobs whose run ended, cancelled ones, and those that "
                              "could not start")
    listing.add_argument("--json", action="store_true", help="print JSON")
    add = actions.add_parser("add", help="queue a run; takes the options of `mgpu-train train`")
    add_train_arguments(add)
    cancel = actions.add_parser("cancel", help="take waiting jobs off the queue, or stop a "
                                "started job's run (it stays resumable)")
    cancel.add_argument("jobs", nargs="+", type=int, metavar="JOB", help="job ids")
    actions.add_parser("start", help="start the queue runner if jobs wait and none runs "
                       "(after a reboot, say)")
    for command in (listing, add, cancel):
        add_store_argument(command)
    queue.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    store = open_store(args)
    store.reconcile()  # a run whose worker died with its runner is not listed running
    queue = JobQueue(store)
    command = args.queue_command
    if command == "add":
        config, inventory = config_from_args(args), query_inventory()
        check_inputs(config, inventory)  # refused now, as `train` refuses it
        job = queue.add(config, inventory, allow_busy=args.allow_busy)
        ensure_runner(store.path)
        if args.json:
            print(json.dumps(job_json(job, queue)))
        elif not args.quiet:
            print(f"Queued job {job.id} ({job.name}): {config_summary(job.config)}. It starts "
                  f"when its devices are free; see `mgpu-train queue list`.")
        return 0
    if command == "cancel":
        for job_id in args.jobs:
            job = queue.cancel(job_id)
            print(f"Job {job.id} ({job.name}): " + (
                "cancelled." if not job.cancel_requested else
                f"stopping its run {job.run_id} at the next batch; resume it later with "
                f"`mgpu-train resume {job.run_id}`."))
        return 0
    if command == "start":
        started = queue.waiting() and ensure_runner(store.path)
        print("Queue runner started." if started else
              "Nothing to do: no job waits, or a queue runner already runs.")
        return 0
    jobs = queue.jobs(finished=args.all)
    if args.json:
        print(json.dumps([job_json(job, queue) for job in jobs], indent=2))
        return 0
    print(format_jobs(jobs, queue))
    pid = runner_pid(store.path)
    if pid is not None:
        print(f"\nQueue runner: pid {pid}; its log: {runner_log_path(store.path)}")
    elif queue.waiting():
        print("\nNo queue runner is running, so waiting jobs will not start: "
              "`mgpu-train queue start` (the app starts it too).", file=sys.stderr)
    return 0


def format_jobs(jobs: list[QueuedJob], queue: JobQueue) -> str:
    if not jobs:
        return "The queue is empty. Add a run with `mgpu-train queue add` (train's options)."
    lines = []
    for job in jobs:
        queued = time.strftime("%m-%d %H:%M", time.localtime(job.created))
        lines.append(f"job {job.id:<4} {queued}  {job.name}: {config_summary(job.config)}")
        lines.append(f"          {queue.describe(job)}")
    return "\n".join(lines)
