"""`mgpu-train find-batch`: the per-GPU batch-size finder from a terminal.

Tries growing batches on one device, each in a short-lived worker process,
until one runs out of memory (or passes --memory-cap), narrows down between the
last that fit and the first that did not, and prints each probe and the
largest batch that fits, with a recommendation that keeps a margin. It takes
the train command's flags (model, data, devices, and whatever else changes a
step's memory), so the batch is found for the run those flags describe.
Nothing here imports TensorFlow.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from mgpu_gui.cli.common import (
    EXIT_FAILED,
    EXIT_STOPPED,
    add_train_arguments,
    child_output,
    config_from_args,
)
from mgpu_gui.cli.console import LiveLine
from mgpu_gui.core.children.runner import cancel_on_interrupt
from mgpu_gui.core.errors import ConfigError
from mgpu_gui.core.tools.batch_finder import BatchFinder, BatchProgress, BatchRequest
from mgpu_gui.core.tools.batch_search import (
    DEFAULT_MARGIN,
    DEFAULT_MAX_BATCH,
    DEFAULT_MIN_STEPS,
    DEFAULT_PRECISION,
    DEFAULT_START,
    DEFAULT_STEPS,
    BatchReport,
    ProbeStatus,
    SearchSettings,
    describe,
    format_memory,
    format_table,
    parse_memory,
    peak_text,
)
from mgpu_gui.core.tools.phases import phase_text

SEARCH_FLAGS = {"start": "--start-batch", "max_batch": "--max-batch", "precision": "--tolerance",
                "margin": "--margin", "steps": "--probe-steps", "min_steps": "--min-steps",
                "memory_cap": "--memory-cap"}
# Train flags that change nothing about a step's memory: accepted, not shown in --help.
_HIDDEN = {"batch_per_replica", "epochs", "learning_rate", "early_stopping", "es_patience",
           "es_monitor", "reduce_lr", "rl_factor", "rl_patience", "output_dir", "run_name",
           "export_formats", "tensorboard", "summary", "scale_lr", "warmup_epochs"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "find-batch", help="find the largest batch per GPU that fits in memory",
        description="Try growing batches per device (8, 16, 32, ...), each in a short-lived "
                    "worker process on one GPU (or one CPU replica), until one runs out of "
                    "memory or passes --memory-cap (or leaves fewer than --min-steps steps per "
                    "epoch); then narrow down. Prints every probe, the largest batch that "
                    "fits, and a recommendation with a safety margin. A "
                    "probe that runs out of memory fails alone, in its own process.")
    add_train_arguments(p, hidden=_HIDDEN, helps={
        "json": "print the probes and the result as JSON",
        "quiet": "print only the result (no probe lines)"})
    p.add_argument("--memory-cap", metavar="SIZE",
                   help="the most memory a probe may use, e.g. 600MB, 12GiB (MB/GB: powers "
                        "of 1000; MiB/GiB, M/G: of 1024). On CPU it bounds the process's peak "
                        "resident memory (default: the memory available now); on a GPU, "
                        "the engine's allocator peak on the device (default: until out of memory)")
    p.add_argument("--max-batch", type=int, default=DEFAULT_MAX_BATCH,
                   help=f"the largest batch per device to try (default {DEFAULT_MAX_BATCH}; "
                        f"the training set may allow less)")
    p.add_argument("--start-batch", type=int, default=DEFAULT_START,
                   help=f"the first batch per device to try; it doubles from there "
                        f"(default {DEFAULT_START})")
    p.add_argument("--tolerance", type=float, default=DEFAULT_PRECISION,
                   help=f"stop narrowing down once the largest batch that fit and the "
                        f"smallest that did not are this fraction apart (default "
                        f"{DEFAULT_PRECISION}; 0: to a multiple of 8)")
    p.add_argument("--margin", type=float, default=DEFAULT_MARGIN,
                   help=f"the recommendation is this fraction below the largest batch that "
                        f"fits, rounded down to a multiple of 8 (default {DEFAULT_MARGIN})")
    p.add_argument("--min-steps", type=int, default=DEFAULT_MIN_STEPS,
                   help=f"the fewest steps per epoch of the training set a batch may leave "
                        f"on your devices: no larger batch is tried (default "
                        f"{DEFAULT_MIN_STEPS}; when even 1 per device leaves fewer, 1 is tried)")
    p.add_argument("--probe-steps", type=int, default=DEFAULT_STEPS,
                   help=f"training steps per probe (default {DEFAULT_STEPS})")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    settings = SearchSettings(start=args.start_batch, max_batch=args.max_batch,
                              precision=args.tolerance, margin=args.margin,
                              steps=args.probe_steps, min_steps=args.min_steps)
    found = settings.problems()
    if found:
        raise ConfigError([(SEARCH_FLAGS.get(name, name), text) for name, text in found])
    cap = parse_memory(args.memory_cap) if args.memory_cap else None
    show = ProbePrinter(sys.stderr, config.engine, quiet=args.quiet)
    finder = BatchFinder(BatchRequest(config, settings, cap), on_progress=show.progress,
                         on_report=show.report,
                         on_output=child_output(args))
    plan = finder.plan()  # UserErrors before any process starts
    show.heading(plan.device_name, plan.cap_bytes, plan.cap_source)
    interrupted = cancel_on_interrupt(finder.cancel, "batch search")
    report = finder.run()
    show.close()
    if args.json:
        print(report.to_json())
    else:
        if not args.quiet:
            print(format_table(report))
        print(describe(report))
        for note in report.notes:
            print(f"note: {note}")
    if interrupted():
        return EXIT_STOPPED
    return 0 if report.recommended is not None else EXIT_FAILED


class ProbePrinter:
    """A line per probe on stderr (a live phase line on a terminal)."""

    def __init__(self, out: TextIO, engine: str, quiet: bool = False):
        self.engine = engine
        self.quiet = quiet
        self.term = LiveLine(out, live=out.isatty() and not quiet)
        self._shown = 0

    def heading(self, device: str, cap: int | None, source: str) -> None:
        if self.quiet:
            return
        limit = "until out of memory" if cap is None else f"memory cap {format_memory(cap)}"
        if source == "available memory":
            limit += " (the memory available now)"
        self.term.line(f"Probing batch sizes on {device}, {limit}; each probe is a fresh process.")

    def progress(self, p: BatchProgress) -> None:
        if p.phase in ("starting", "building", "training"):
            what = phase_text(p.phase, self.engine)
            self.term.show(f"[probe {p.probe}] batch {p.batch}: {what}…")

    def report(self, report: BatchReport) -> None:
        for probe in report.probes[self._shown:]:
            self._shown += 1
            if self.quiet or probe.status is ProbeStatus.CANCELLED:
                continue
            took = f", {probe.seconds:.1f} s" if probe.seconds is not None else ""
            verdict = "fits" if probe.fits else probe.status.value
            self.term.line(f"[probe {self._shown}] batch {probe.batch}: {verdict}, peak "
                       f"{peak_text(probe)}{took}"
                       + (f": {probe.message}" if probe.message and not probe.fits else ""))

    def close(self) -> None:
        self.term.close()


__all__ = ["register", "run"]
