"""`mgpu-train resume`: continue a stopped, failed or interrupted run."""

from __future__ import annotations

import argparse

from mgpu_gui.cli.common import (
    add_output_arguments,
    add_store_argument,
    open_store,
    say_interrupted,
    supervise,
)
from mgpu_gui.core.children.supervisor import prepare_resume


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("resume", help="continue a stopped, failed or interrupted run "
                       "from its last complete epoch")
    p.add_argument("run", help="a run id or name from `mgpu-train runs`, or a run folder")
    add_output_arguments(p)
    add_store_argument(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    store = open_store(args)
    say_interrupted(store.reconcile(), skip=args.run)
    record = store.resolve(args.run)
    return supervise(prepare_resume(record.run_dir, store=store), args, store)
