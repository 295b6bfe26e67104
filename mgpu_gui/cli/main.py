"""`mgpu-train`: the headless front end (SSH sessions, scripts, tests, benchmarks).

It drives the same core and worker process as the GUI. This module builds the
top parser, registers each subcommand (one module each, with its own
`register` and handler) and dispatches to `args.func`. Exit 0 on success;
otherwise a one-paragraph message and a non-zero code, with the traceback only
under --debug.
"""

from __future__ import annotations

import argparse
import signal
import sqlite3
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from mgpu_gui.cli import (
    devices,
    doctor,
    evaluate,
    export,
    find_batch,
    inspect,
    layout,
    models,
    predict,
    queue,
    resume,
    runs,
    scale,
    sweep,
    train,
    unwrap,
    worker,
)
from mgpu_gui.cli.common import (
    EXIT_FAILED,
    EXIT_STOPPED,
    EXIT_USAGE,
    FLAGS,
    scratch_command,
)
from mgpu_gui.core.errors import ConfigError, UserError, WeightsUnavailable
from mgpu_gui.core.runs.storedb import STORE_ENV, default_store_path, unusable_store_message

SUBCOMMANDS = (train, resume, runs, queue, sweep, models, devices, doctor, export, evaluate,
               predict, inspect, layout, unwrap, scale, find_batch, worker)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mgpu-train",
        description="Train a Keras model data-parallel on the chosen GPUs (or CPU replicas).",
        epilog="TensorFlow runs in child processes; what it prints (its start-up messages "
               "too) goes to the run folder's worker.log, or for the other commands "
               "(export, unwrap, evaluate, doctor, scale, find-batch) to a log file that an "
               "error names. --debug shows it in the terminal too.",
    )
    parser.add_argument("--debug", action="store_true",
                        help="show tracebacks, and everything the child processes print "
                             "(TensorFlow's start-up among it), which otherwise goes only to "
                             "a run's worker.log or to a log file named on failure; accepted "
                             "anywhere on the command line")
    parser.add_argument("--store", type=Path,
                        help=f"the run history database (default: ${STORE_ENV}, else the "
                             f"user's data folder)")
    sub = parser.add_subparsers(dest="command")
    for command in SUBCOMMANDS:
        command.register(sub)
    return parser


def _with_command(argv: list[str]) -> list[str]:
    """`train` is the default command: `mgpu-train --epochs 3` trains.

    --debug may come anywhere (`mgpu-train export ... --debug`); --store PATH before
    the command (each command that uses the store takes it after, too). A word where
    the command goes is one (train takes none), or argparse says it is not.
    """
    rest = [arg for arg in argv if arg != "--debug"]
    globals_ = ["--debug"] if len(rest) != len(argv) else []
    while rest and (rest[0] == "--store" or rest[0].startswith("--store=")):
        option = rest.pop(0)
        globals_.append(option)
        if option == "--store" and rest:
            globals_.append(rest.pop(0))
    if rest and (not rest[0].startswith("-") or rest[0] in ("-h", "--help")):
        return globals_ + rest
    return globals_ + ["train"] + rest


@contextmanager
def _signal_handlers_restored() -> Iterator[None]:
    """Commands take Ctrl-C and SIGTERM for themselves (stop the run, cancel the child);
    once one returns, whoever called `main` (a shell, a test runner, a program embedding
    the CLI) gets its own handlers back, or it could never be interrupted again."""
    if threading.current_thread() is not threading.main_thread():
        yield  # Python sets handlers only from the main thread
        return
    saved = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in saved.items():
            if handler is not None:  # None: set outside Python, and cannot be set back
                signal.signal(number, handler)


def main(argv: Sequence[str] | None = None) -> int:
    with _signal_handlers_restored():
        return _run_command(list(sys.argv[1:] if argv is None else argv))


def _run_command(words: list[str]) -> int:
    args = build_parser().parse_args(_with_command(words))
    args.command_line = words  # for a failure's advice: the same command with a change
    try:
        return args.func(args)
    except ConfigError as error:
        lines = [f"{FLAGS.get(field, field)}: {message}" for field, message in error.problems]
        print("error: invalid settings:\n  " + "\n  ".join(lines), file=sys.stderr)
        return EXIT_USAGE
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        if isinstance(error, WeightsUnavailable):  # refused before the run (preflight)
            print(f"To train from scratch instead: {scratch_command(words)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_STOPPED
    except sqlite3.DatabaseError as error:  # the store, damaged past its first pages
        store = getattr(args, "store", None) or default_store_path()
        print(f"error: {unusable_store_message(Path(store).absolute(), error)}",
              file=sys.stderr)
        return EXIT_USAGE
    except Exception as error:
        if args.debug:
            raise
        print(f"error: unexpected {type(error).__name__}: {error}\n"
              f"This is a bug; run again with --debug for the traceback.", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
