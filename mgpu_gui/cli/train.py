"""`mgpu-train train` (the default command): train a model on the chosen devices."""

from __future__ import annotations

import argparse

from mgpu_gui.cli.common import (
    add_store_argument,
    add_train_arguments,
    config_from_args,
    open_store_for_training,
    supervise,
)
from mgpu_gui.core.children.supervisor import prepare_run


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a model (the default command)")
    add_train_arguments(p)
    add_store_argument(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    store = open_store_for_training(args)
    return supervise(prepare_run(config, store=store, allow_busy=args.allow_busy), args, store)
