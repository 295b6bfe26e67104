"""`mgpu-train scale`: the scaling test from a terminal.

Times a fixed number of training steps on 1, 2, ... N devices (one worker
process per count), prints a table and a recommendation, and writes CSV, PNG
or JSON on request. Only the --png path imports Qt (offscreen without a
display); nothing here imports TensorFlow.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
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
from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.errors import ConfigError, UserError
from mgpu_gui.core.tools.phases import phase_text
from mgpu_gui.core.tools.scaling import (
    DEFAULT_STEPS,
    DEFAULT_THRESHOLD,
    DEFAULT_WARMUP,
    ScalingMode,
    ScalingReport,
    describe,
    device_word,
    format_table,
    parse_counts,
    write_csv,
)
from mgpu_gui.core.tools.scaling_runner import ScaleProgress, ScaleRequest, ScaleRunner

SCALE_FLAGS = {"steps": "--steps", "warmup": "--warmup", "threshold": "--threshold",
               "global_batch": "--global-batch", "counts": "--counts"}
# Train flags that change nothing about a step's time: accepted, not shown in --help.
_HIDDEN = {"epochs", "learning_rate", "validation_data", "output_dir", "run_name",
           "tensorboard", "export_formats", "early_stopping", "es_monitor", "es_patience",
           "reduce_lr", "rl_factor", "rl_patience", "scale_lr", "warmup_epochs", "allow_busy",
           "jit_compile", "quiet", "summary"}


def register(sub: argparse._SubParsersAction) -> None:
    d = RunConfig()
    p = sub.add_parser(
        "scale", help="scaling test: time training steps on 1, 2, ... N devices",
        description="Time a fixed number of training steps (after a warm-up) on 1, 2, ... N "
                    "GPUs or CPU replicas, each count in its own worker process, and say "
                    "from which count on adding devices stops paying off.")
    add_train_arguments(p, hidden=_HIDDEN, helps={
        "validation_split": f"held out as in training, so the same samples train "
                            f"(default {d.validation_split})",
        "gpus": "the GPUs to scale over, by NVML index or UUID, comma separated; count k "
                "uses the first k of them",
        "cpu": "CPU replicas even with GPUs",
        "replicas": "the largest count: the first N GPUs, or N CPU replicas (default: all "
                    "GPUs, or 2 CPU)",
        "batch_per_replica": f"samples per device per step (default {d.batch_per_replica}); "
                             f"kept fixed unless --strong",
        "precision": "time under a mixed precision policy, as a run with it would train "
                     "(default float32)",
        "allow_unsafe_code": "let Lambda layers in the model file run their Python code",
        "json": "print the report as JSON, not a table"})
    p.add_argument("--max-devices", dest="replicas", type=int, metavar="N",
                   help="the same as --replicas")
    p.add_argument("--counts", metavar="K,K,...",
                   help="the counts to time, e.g. 1,2,4 (default 1, 2, ... N)")
    p.add_argument("--strong", action="store_true",
                   help="strong scaling: keep the global batch fixed (each device gets "
                        "global / count) instead of the batch per device")
    p.add_argument("--global-batch", type=int, metavar="G",
                   help="with --strong: the global batch (default: batch per replica x the "
                        "largest count)")
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS,
                   help=f"timed steps per count (default {DEFAULT_STEPS})")
    p.add_argument("--warmup", type=int, default=DEFAULT_WARMUP,
                   help=f"untimed steps first; the first compiles (default {DEFAULT_WARMUP})")
    p.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                   help=f"lowest efficiency worth the devices, 0-1 (default "
                        f"{DEFAULT_THRESHOLD})")
    p.add_argument("--csv", type=Path, help="write the figures as CSV")
    p.add_argument("--png", type=Path, help="write the plot as PNG")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.jit_compile:
        raise UserError("--xla: the scaling test times steps without XLA, so its figures "
                        "would not be those of an XLA run; leave --xla out.")
    config = config_from_args(args)
    counts = parse_counts(args.counts) if args.counts else None
    if args.global_batch is not None and not args.strong:
        raise UserError("--global-batch is for strong scaling: add --strong, or set the "
                        "batch per device with --batch-per-replica.")
    request = ScaleRequest(
        config=config, mode=ScalingMode.STRONG if args.strong else ScalingMode.WEAK,
        counts=tuple(counts) if counts else None, steps=args.steps, warmup=args.warmup,
        global_batch=args.global_batch, threshold=args.threshold)
    found = request.problems()
    if found:
        raise ConfigError([(SCALE_FLAGS.get(name, name), text) for name, text in found])
    progress = ProgressPrinter(sys.stderr, config.engine)
    runner = ScaleRunner(request, on_progress=progress.show,
                         on_output=child_output(args))
    progress.kind = runner.plan().kind.value  # UserErrors before any process starts
    interrupted = cancel_on_interrupt(runner.cancel, "scaling test")
    report = runner.run()
    progress.close()
    if args.json:
        print(report.to_json())
    else:
        print(describe(report))
        print(format_table(report))
    _export(report, args)
    if interrupted():
        return EXIT_STOPPED
    return 0 if report.ok_points() else EXIT_FAILED


def _export(report: ScalingReport, args: argparse.Namespace) -> None:
    said = sys.stderr if args.json else sys.stdout
    if args.csv is not None:
        print(f"Wrote {write_csv(report, args.csv)}", file=said)
    if args.png is not None:
        if not report.ok_points():
            print("No PNG: no count was measured.", file=said)
            return
        from mgpu_gui.gui.widgets.scaling_plot import save_report_png  # Qt: only for --png

        print(f"Wrote {save_report_png(report, args.png)}", file=said)


class ProgressPrinter:
    """A live line on a terminal; a line per finished count otherwise (logs, CI)."""

    def __init__(self, out: TextIO, engine: str):
        self.engine = engine
        self.term = LiveLine(out, live=out.isatty() and os.environ.get("TERM") != "dumb")
        self.kind = "gpu"  # "gpu" or "cpu", once the counts are planned

    def show(self, p: ScaleProgress) -> None:
        label = f"{p.devices} {device_word(self.kind, p.devices)}"
        if p.phase in ("done", "failed", "skipped", "cancelled"):
            text = f"[{p.index + 1}/{p.total}] {label}: {p.phase}"
            if p.message and p.phase != "done":
                text += f": {p.message}"
            self.term.line(text)
            return
        if not self.term.live:
            return
        what = phase_text(p.phase, self.engine)
        if p.phase == "timing" and p.steps:
            what = f"timing step {p.step}/{p.steps}"
        self.term.show(f"[{p.index + 1}/{p.total}] {label}: {what}  {p.fraction:.0%}")

    def close(self) -> None:
        self.term.close()


__all__ = ["register", "run"]
