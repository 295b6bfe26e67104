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

from mgpu_gui.cli.console import LiveLine
from mgpu_gui.core.children.runner import cancel_on_interrupt
from mgpu_gui.core.config import DEMO, OPTIMIZERS, PRECISIONS, RunConfig
from mgpu_gui.core.errors import ConfigError, UserError
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

EXIT_FAILED, EXIT_STOPPED = 1, 130
SCALE_FLAGS = {"steps": "--steps", "warmup": "--warmup", "threshold": "--threshold",
               "global_batch": "--global-batch", "counts": "--counts"}
# RunConfig settings that do not change a step's time: the train command's flags for them
# are left out here, with the values config_from_args expects.
_UNUSED = {"epochs": None, "learning_rate": None, "validation_data": None, "output_dir": None,
           "run_name": None, "tensorboard": False, "export_formats": None,
           "early_stopping": False, "es_monitor": None, "es_patience": None,
           "reduce_lr": False, "rl_factor": None, "rl_patience": None,
           "jit_compile": False, "scale_lr": False, "warmup_epochs": None}


def add_scale_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    d = RunConfig()
    p = sub.add_parser(
        "scale", help="scaling test: time training steps on 1, 2, ... N devices",
        description="Time a fixed number of training steps (after a warm-up) on 1, 2, ... N "
                    "GPUs or CPU replicas, each count in its own worker process, and say "
                    "from which count on adding devices stops paying off.")
    p.add_argument("--config", type=Path, help="a RunConfig JSON file; flags override it")
    p.add_argument("--model", help=f"a .keras, .h5 or .py file, or '{DEMO}' (default)")
    p.add_argument("--data", help=f"an .npz file, an image folder, or '{DEMO}' (default)")
    p.add_argument("--val-split", dest="validation_split", type=float,
                   help=f"held out as in training, so the same samples train "
                        f"(default {d.validation_split})")
    dev = p.add_mutually_exclusive_group()
    dev.add_argument("--gpus", help="the GPUs to scale over, by NVML index or UUID, comma "
                     "separated; count k uses the first k of them")
    dev.add_argument("--cpu", action="store_true", help="CPU replicas even with GPUs")
    p.add_argument("--max-devices", "--replicas", dest="replicas", type=int, metavar="N",
                   help="the largest count: the first N GPUs, or N CPU replicas "
                        "(default: all GPUs, or 2 CPU)")
    p.add_argument("--counts", metavar="K,K,...",
                   help="the counts to time, e.g. 1,2,4 (default 1, 2, ... N)")
    p.add_argument("--batch-per-replica", "--batch", dest="batch_per_replica", type=int,
                   help=f"samples per device per step (default {d.batch_per_replica}); kept "
                        f"fixed unless --strong")
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
    p.add_argument("--optimizer", choices=OPTIMIZERS, help="for uncompiled models (default adam)")
    p.add_argument("--loss", help="loss for uncompiled models (default: from the output layer)")
    p.add_argument("--metrics", help="comma separated (default accuracy)")
    p.add_argument("--image-size", help="HxW for image folders (default 64x64)")
    p.add_argument("--rescale", type=float, help="pixel scale for image folders (default 1/255)")
    p.add_argument("--sync-bn", dest="sync_batchnorm", action="store_true",
                   help="synchronize BatchNormalization statistics across replicas")
    p.add_argument("--seed", type=int, help=f"default {d.seed}")
    p.add_argument("--precision", choices=PRECISIONS,
                   help="time under a mixed precision policy, as a run with it would train "
                        "(default float32)")
    p.add_argument("--allow-unsafe-code", action="store_true",
                   help="let Lambda layers in the model file run their Python code")
    p.add_argument("--custom-objects", dest="custom_objects",
                   help="a .py defining a `custom_objects` dict for models with custom layers")
    p.add_argument("--csv", type=Path, help="write the figures as CSV")
    p.add_argument("--png", type=Path, help="write the plot as PNG")
    p.add_argument("--json", action="store_true", help="print the report as JSON, not a table")
    p.set_defaults(**_UNUSED)
    return p


def run_scale(args: argparse.Namespace, config: RunConfig) -> int:
    """The `scale` command, given the RunConfig the train flags describe."""
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
    progress = ProgressPrinter(sys.stderr)
    runner = ScaleRunner(request, on_progress=progress.show,
                         on_output=(lambda line: print(line, file=sys.stderr))
                         if args.debug else None)
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

    def __init__(self, out: TextIO):
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
        what = {"starting": "starting TensorFlow", "building": "building the model",
                "warmup": "warming up (compiling)"}.get(p.phase, "")
        if p.phase == "timing":
            what = f"timing step {p.step}/{p.steps}" if p.steps else "timing"
        self.term.show(f"[{p.index + 1}/{p.total}] {label}: {what}  {p.fraction:.0%}")

    def close(self) -> None:
        self.term.close()


__all__ = ["add_scale_parser", "run_scale"]
