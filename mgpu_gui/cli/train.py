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
from mgpu_gui.core.datasets.content import DECODE_LIMIT


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train", help="train a model (the default command)",
        description="Train a model data-parallel. Before a run folder or history row exists, "
                    "the model and data are checked: the data's content first (every value "
                    "for NaN/Inf, labels that are whole class ids of at least 2 classes for "
                    "a classifier, every image of a folder decoded as training decodes it: "
                    f"headers only beyond {DECODE_LIMIT:,} files), then the batch "
                    "arithmetic. A problem is one message naming the file (and sample or "
                    "image) and what to do, exit code 2, and nothing left behind. An image "
                    "damaged later stops the run naming the file. Exit codes: 0 trained and "
                    "exported; 1 failed; 2 refused before it started; 3 trained to the end "
                    "but a requested export format could not be made (named; the others "
                    "and the checkpoints are kept); 130 stopped by Ctrl-C.")
    add_train_arguments(p)
    add_store_argument(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    store = open_store_for_training(args)
    return supervise(prepare_run(config, store=store, allow_busy=args.allow_busy), args, store)
