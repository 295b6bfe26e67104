"""What the `mgpu-train` subcommands share: the train flags (declared once), the
RunConfig they describe, the run store, and supervising a training worker.

Imports no subcommand module: they import this.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from mgpu_gui.cli.console import ConsoleReporter
from mgpu_gui.cli.mesh_flags import add_mesh_arguments
from mgpu_gui.core.children.runner import cancel_on_interrupt
from mgpu_gui.core.children.supervisor import PreparedRun, RunOutcome, WorkerProcess
from mgpu_gui.core.config import (
    CACHE_MODES,
    DEMO,
    EXPORT_FORMATS,
    OPTIMIZERS,
    PRECISIONS,
    DeviceKind,
    DeviceSelection,
    EarlyStoppingConfig,
    LRScalingConfig,
    ReduceLROnPlateauConfig,
    RunConfig,
)
from mgpu_gui.core.engines import ENGINES, INPUT_PIPELINES, Engine
from mgpu_gui.core.errors import ConfigError, UserError, WeightsUnavailable
from mgpu_gui.core.events import (
    EvaluationDone,
    EvaluationFailed,
    ExportDone,
    ExportNotMade,
    Phase,
    PredictionsMade,
    RunFailed,
    RunFinished,
    RunStatus,
)
from mgpu_gui.core.eventtext import finished_line
from mgpu_gui.core.modelfiles.builtins import ARCHITECTURES, NO_WEIGHTS
from mgpu_gui.core.runs.finish_hook import parse_command
from mgpu_gui.core.runs.store import RunRecord, RunStore
from mgpu_gui.core.runs.storedb import StoreError
from mgpu_gui.core.tools.evaluate_job import EvaluateJob, EvaluateRequest, PredictRequest
from mgpu_gui.core.tools.export_job import ExportJob, ExportRequest, done_line, failed_text

EXIT_FAILED, EXIT_USAGE, EXIT_STOPPED = 1, 2, 130
EXIT_EXPORT_INCOMPLETE = 3  # trained to the end; a requested export format could not be made
FLAGS = {  # RunConfig fields as the flags a CLI user typed
    "model": "--model", "data": "--data", "validation_data": "--val-data",
    "validation_split": "--val-split", "batch_per_replica": "--batch-per-replica",
    "epochs": "--epochs", "learning_rate": "--lr", "optimizer": "--optimizer",
    "devices.replicas": "--replicas", "devices.gpus": "--gpus", "image_size": "--image-size",
    "rescale": "--rescale", "export_formats": "--export", "custom_objects": "--custom-objects",
    "builder": "--builder", "pretrained": "--pretrained", "augment": "--augment",
    "cache": "--cache", "on_finish": "--on-finish",
    "early_stopping.patience": "--es-patience", "reduce_lr.patience": "--rl-patience",
    "reduce_lr.factor": "--rl-factor", "precision": "--precision", "jit_compile": "--xla",
    "lr_scaling.warmup_epochs": "--warmup-epochs", "lr_scaling.enabled": "--scale-lr",
    "freeze_epochs": "--freeze-epochs", "unfreeze": "--unfreeze",
    "fine_tune_lr": "--fine-tune-lr", "engine": "--engine",
    "input_pipeline": "--input-pipeline", "mesh": "--mesh", "layout": "--layout",
}


class _Flags:
    """Adds flags to a parser: those in `hidden` are accepted but left out of --help,
    those in `helps` get that help text instead (both by dest)."""

    def __init__(self, hidden: Collection[str], helps: Mapping[str, str] | None):
        self.hidden, self.helps = hidden, helps or {}
        self.added: list[argparse.Action] = []

    def __call__(self, target: Any, *names: str, **options: Any) -> None:
        dest = options.get("dest") or names[0].lstrip("-").replace("-", "_")
        if dest in self.hidden:
            options["help"] = argparse.SUPPRESS
        elif dest in self.helps:
            options["help"] = self.helps[dest]
        self.added.append(target.add_argument(*names, **options))


def add_train_arguments(p: argparse.ArgumentParser, *, hidden: Collection[str] = (),
                        helps: Mapping[str, str] | None = None) -> list[argparse.Action]:
    """The train command's flags, the one list every command that describes a run takes
    (`train`, `queue add`, `worker`, `scale`, `find-batch`). `hidden` and `helps` (by
    dest) suit a command where a flag changes nothing or means a bit more. Returns the
    flags added."""
    d = RunConfig()
    add = _Flags(hidden, helps)
    add(p, "--config", type=Path, help="a RunConfig JSON file; flags override it (its "
        "relative paths are taken from its own folder)")
    add(p, "--model", help=f"a .keras, .h5 or .py file, a built-in architecture "
        f"({', '.join(ARCHITECTURES)}; see `mgpu-train models`), or '{DEMO}' (default)")
    add(p, "--pretrained", help="a built-in architecture's starting weights: imagenet "
        "(downloaded by Keras to its cache on first use), none (from scratch) or a weights "
        "file (default: imagenet where the architecture has them)")
    add(p, "--builder", help="the function of a .py model file that returns the model "
        "(default: the first of build_model, create_model, get_model, make_model it defines)")
    add(p, "--data", help=f"an .npz file, an image folder, or '{DEMO}' (default)")
    add(p, "--val-data", dest="validation_data", help="validation .npz or image folder")
    add(p, "--val-split", dest="validation_split", type=float,
        help=f"fraction held out for validation (default {d.validation_split})")
    dev = p.add_mutually_exclusive_group()
    add(dev, "--gpus", help="GPUs by NVML index or UUID, comma separated")
    add(dev, "--cpu", action="store_true", help="train on CPU replicas even with GPUs")
    add(p, "--replicas", type=int,
        help="number of GPUs (the first N) or CPU replicas (default: all GPUs, or 2 CPU)")
    add(p, "--batch-per-replica", "--batch", dest="batch_per_replica", type=int,
        help=f"samples per replica per step; global batch = this x replicas "
             f"(default {d.batch_per_replica})")
    add(p, "--epochs", type=int, help=f"default {d.epochs}")
    add(p, "--optimizer", choices=OPTIMIZERS,
        help="for uncompiled models, or with --override-compile (default adam)")
    add(p, "--lr", dest="learning_rate", type=float,
        help=f"learning rate for uncompiled models, or with --override-compile "
             f"(default {d.learning_rate})")
    add(p, "--override-compile", action="store_true",
        help="train a model file compiled with its own optimizer with --optimizer and --lr "
             "instead (its loss and metrics are kept)")
    add(p, "--loss", help="loss for uncompiled models (default: from the output layer)")
    add(p, "--metrics", help="comma separated (default accuracy)")
    add(p, "--early-stopping", action="store_true", help="stop when val_loss stalls")
    add(p, "--es-patience", type=int, help=f"default {d.early_stopping.patience}")
    add(p, "--es-monitor", help="default val_loss")
    add(p, "--reduce-lr", action="store_true", help="lower the LR when val_loss stalls")
    add(p, "--rl-factor", type=float, help=f"default {d.reduce_lr.factor}")
    add(p, "--rl-patience", type=int, help=f"default {d.reduce_lr.patience}")
    add(p, "--scale-lr", action="store_true",
        help="linear scaling rule: train at --lr x replicas (--lr suits one replica's "
             "batch), reached by a linear warm-up")
    add(p, "--warmup-epochs", type=int,
        help=f"warm-up epochs for --scale-lr (default {d.lr_scaling.warmup_epochs})")
    add(p, "--freeze-epochs", type=int, metavar="N",
        help="transfer learning in one run: train the new head for N epochs with the "
             "backbone (a built-in's pretrained one, or a nested model named 'backbone') "
             "frozen, then fine-tune it for the rest of --epochs, the total (default 0: off)")
    add(p, "--unfreeze", metavar="K|all",
        help="after the frozen epochs, fine-tune the top K layers of the backbone, or all "
             "(BatchNorm layers stay frozen; default all)")
    add(p, "--fine-tune-lr", dest="fine_tune_lr", type=float, metavar="LR",
        help="the learning rate of the fine-tuning epochs (default: a tenth of the first "
             "stage's, e.g. --lr / 10)")
    add(p, "--precision", choices=PRECISIONS,
        help="mixed precision: mixed_bfloat16 needs GPUs of compute capability >= 8.0, "
             "mixed_float16 >= 7.0 (with loss scaling) to be faster; the export is float32 "
             "either way (default float32)")
    add(p, "--xla", dest="jit_compile", action="store_true",
        help="compile the model with XLA (jit_compile); a model XLA cannot compile trains "
             "without it, with a warning")
    add(p, "--engine", choices=ENGINES,
        help="the Keras backend: tensorflow (MirroredStrategy) or jax (DataParallel, "
             "BatchNorm always synchronised; needs the jax extra) (default "
             f"{Engine.TENSORFLOW.value})")
    add(p, "--input-pipeline", dest="input_pipeline", choices=INPUT_PIPELINES,
        help="what feeds the batches: tf.data, or python (a keras PyDataset, the jax engine "
             "only, needs no TensorFlow; no --augment, no disk cache); auto: tf.data where "
             "TensorFlow is installed (default auto)")
    add_mesh_arguments(p, add)
    add(p, "--image-size", help="HxW for image folders (default 64x64)")
    add(p, "--rescale", type=float, help="pixel scale for image folders (default 1/255)")
    add(p, "--augment", metavar="SPEC",
        help="vary the training images of an image folder at random, e.g. "
             "flip,rotate=0.1,zoom=0.2,translate=0.1,contrast=0.2,brightness=0.2 (a bare name "
             "takes that strength; validation and test images stay as they are; off: none)")
    add(p, "--cache", choices=CACHE_MODES,
        help="where decoded samples are kept between epochs: auto (in memory when they fit "
             "1 GiB, else an image folder's on local disk in the run folder), memory, disk "
             "(image folders), off (decode every epoch) (default auto)")
    add(p, "--on-finish", metavar="CMD",
        help="run CMD when the run ends (completed, stopped or failed), e.g. for mail or "
             "chat: split into words as a shell would, run without a shell, stopped after "
             "30 s; MGPU_RUN_ID, _NAME, _STATUS, _FOLDER and _BEST in its environment. A "
             "--config file's command is never run unless given here")
    add(p, "--sync-bn", dest="sync_batchnorm", action="store_true",
        help="synchronize BatchNormalization statistics across replicas")
    add(p, "--seed", type=int, help=f"default {d.seed}")
    add(p, "--output-dir", "-o", dest="output_dir",
        help=f"where run folders go (default {d.output_dir})")
    add(p, "--name", dest="run_name", help="run folder name (default: the model's)")
    add(p, "--export", dest="export_formats",
        help=f"formats to export at the end: {','.join(EXPORT_FORMATS)} (default keras), "
             "or none (export later with `mgpu-train export`)")
    add(p, "--tensorboard", action="store_true", help="write TensorBoard logs")
    add(p, "--allow-unsafe-code", action="store_true",
        help="let Lambda layers in the model file run their Python code (trusted files only)")
    add(p, "--custom-objects", dest="custom_objects",
        help="a .py defining a `custom_objects` dict for models with custom layers")
    add(p, "--allow-busy", action="store_true",
        help="use GPUs that run processes outside this app's runs (another user's job, a "
             "notebook); without it such GPUs are not taken")
    _add_output_arguments(p, add)
    return add.added


def add_output_arguments(p: argparse.ArgumentParser) -> None:
    """How a supervised run prints (`resume` takes these without the train flags)."""
    _add_output_arguments(p, _Flags((), None))


def _add_output_arguments(p: argparse.ArgumentParser, add: _Flags) -> None:
    add(p, "--json", action="store_true", help="print raw events as JSON lines")
    add(p, "--quiet", "-q", action="store_true", help="print only the result")
    add(p, "--summary", action="store_true", help="print the model summary")


def add_store_argument(p: argparse.ArgumentParser,
                       help: str = "the run history database") -> None:
    """--store after the command too (the top parser takes it before)."""
    p.add_argument("--store", type=Path, default=argparse.SUPPRESS, help=help)


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """RunConfig from --config (if any) with the flags given on top."""
    # A file's relative paths are the file's own, from its folder; a flag's from here.
    base = (read_config_file(args.config).with_absolute_paths(args.config.absolute().parent)
            if args.config else RunConfig())
    changes: dict = {}
    if base.on_finish and args.on_finish is None:  # a shared file runs nothing unasked
        print(f"warning: {args.config} names an on-finish command ({shlex.join(base.on_finish)})"
              "; it is not run unless given with --on-finish", file=sys.stderr)
        changes["on_finish"] = ()
    if args.on_finish is not None:
        try:
            changes["on_finish"] = parse_command(args.on_finish)
        except ValueError as error:
            raise ConfigError([("on_finish", str(error))]) from None
    for name in ("model", "data", "validation_data", "validation_split", "batch_per_replica",
                 "epochs", "optimizer", "learning_rate", "loss", "rescale", "seed",
                 "output_dir", "run_name", "custom_objects", "precision", "builder",
                 "pretrained", "augment", "cache", "freeze_epochs", "unfreeze",
                 "fine_tune_lr", "engine", "input_pipeline", "mesh", "layout"):
        value = getattr(args, name)
        if value is not None:
            changes[name] = value
    for flag in ("sync_batchnorm", "tensorboard", "allow_unsafe_code", "jit_compile",
                 "override_compile"):
        if getattr(args, flag):
            changes[flag] = True
    if args.metrics is not None:
        changes["metrics"] = tuple(m.strip() for m in args.metrics.split(",") if m.strip())
    if args.export_formats is not None:  # "none": the checkpoints only, exported later
        changes["export_formats"] = () if args.export_formats.strip() == "none" else tuple(
            f.strip() for f in args.export_formats.split(","))
    if args.image_size is not None:
        changes["image_size"] = _parse_size(args.image_size)
    devices = base.devices
    if args.cpu:
        devices = DeviceSelection(kind=DeviceKind.CPU, replicas=devices.replicas)
    if args.gpus:
        devices = DeviceSelection(kind=DeviceKind.GPU,
                                  gpus=tuple(g.strip() for g in args.gpus.split(",")))
    if args.replicas is not None:
        devices = DeviceSelection(kind=devices.kind, gpus=devices.gpus, replicas=args.replicas)
    changes["devices"] = devices
    es = base.early_stopping
    changes["early_stopping"] = EarlyStoppingConfig(
        enabled=es.enabled or args.early_stopping,
        monitor=args.es_monitor or es.monitor,
        patience=es.patience if args.es_patience is None else args.es_patience,
        min_delta=es.min_delta, restore_best_weights=es.restore_best_weights)
    rl = base.reduce_lr
    changes["reduce_lr"] = ReduceLROnPlateauConfig(
        enabled=rl.enabled or args.reduce_lr, monitor=rl.monitor,
        factor=rl.factor if args.rl_factor is None else args.rl_factor,
        patience=rl.patience if args.rl_patience is None else args.rl_patience,
        min_lr=rl.min_lr)
    scaling = base.lr_scaling
    changes["lr_scaling"] = LRScalingConfig(
        enabled=scaling.enabled or args.scale_lr,
        warmup_epochs=(scaling.warmup_epochs if args.warmup_epochs is None
                       else args.warmup_epochs))
    return base.replace(**changes).with_absolute_paths()


def read_config_file(path: Path) -> RunConfig:
    """A --config file, checked as the flags are: UserError naming the file and what is
    wrong with it, never a traceback."""
    try:
        text = path.read_text(encoding="utf-8")
    except IsADirectoryError:
        raise UserError(f"--config {path} is a folder; give a RunConfig JSON file") from None
    except FileNotFoundError:
        raise UserError(f"--config {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        why = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise UserError(f"--config {path} cannot be read: {why}") from None
    if not text.strip():
        raise UserError(f"--config {path} is empty; give a RunConfig JSON object, e.g. "
                        '{"epochs": 10}')
    try:
        return RunConfig.from_json(text, str(path))
    except ConfigError as error:  # named as in the file, not as the flags that set them
        lines = [message if name == str(path) else f"{name}: {message}"
                 for name, message in error.problems]
        raise UserError(f"--config {path}: " + "; ".join(lines)
                        if len(lines) == 1 else
                        f"--config {path} has {len(lines)} problems:\n  " + "\n  ".join(lines)
                        ) from None


def _parse_size(text: str) -> tuple[int, int]:
    parts = text.lower().replace(",", "x").split("x")
    try:
        if len(parts) == 1:
            return int(parts[0]), int(parts[0])
        h, w = (int(p) for p in parts)
        return h, w
    except ValueError:
        raise UserError(f"--image-size {text!r}: give HxW, e.g. 64x64") from None


# -- exports (`export`, `unwrap`) ------------------------------------------------
def format_from_suffix(output: Path) -> str:
    """An export's format when --format is not given."""
    return {".keras": "keras", ".h5": "h5", ".hdf5": "h5"}.get(output.suffix.lower(), "savedmodel")


def child_output(args: argparse.Namespace) -> Callable[[str], None] | None:
    """With --debug, where every line a child prints goes: stderr (else its log only)."""
    return (lambda line: print(line, file=sys.stderr)) if args.debug else None


def run_export_job(request: ExportRequest, args: argparse.Namespace) -> int:
    """Run the export child to its end: what it logs, then its one-line result, on stdout."""
    job = ExportJob(request, on_log=print, on_output=child_output(args))
    interrupted = cancel_on_interrupt(job.cancel, "export")
    outcome = job.run()
    if isinstance(outcome, ExportDone):
        print(done_line(request.mode, outcome))
        return 0
    if interrupted():
        return EXIT_STOPPED
    # --debug showed the child's output already
    print(f"error: {failed_text(outcome, None if args.debug else job.log)}", file=sys.stderr)
    if outcome.error_type and not outcome.user_error:  # a bug in the child
        print(outcome.traceback.rstrip() if args.debug else
              "This is a bug; run again with --debug for the traceback.", file=sys.stderr)
    return EXIT_USAGE if outcome.user_error else EXIT_FAILED


def run_evaluator(request: EvaluateRequest | PredictRequest, args: argparse.Namespace,
                  what: str, on_log: Callable[[str], None] | None = None
                  ) -> EvaluationDone | PredictionsMade | int:
    """Run the evaluator child to its end: its answer, or the exit code of an interrupt or
    of a failure (said on stderr)."""
    job = EvaluateJob(request, on_log=on_log, on_output=child_output(args))
    interrupted = cancel_on_interrupt(job.cancel, what)
    outcome = job.run()
    if interrupted():
        return EXIT_STOPPED
    if isinstance(outcome, EvaluationFailed):
        return _say_failed(outcome, job.log, args.debug)
    return outcome


def _say_failed(failed: EvaluationFailed, log: Path | None, debug: bool) -> int:
    """Why the evaluator child failed, on stderr; the exit code that says whose fault."""
    print(f"error: {failed.message}", file=sys.stderr)
    if failed.user_error:
        return EXIT_USAGE
    if failed.error_type and failed.traceback:
        print(failed.traceback.rstrip() if debug else
              "This is a bug; run again with --debug for the traceback.", file=sys.stderr)
    if not debug:  # --debug showed the child's output already
        print(f"The evaluator's full output is in {log}", file=sys.stderr)
    return EXIT_FAILED



# -- the run store ---------------------------------------------------------------
def open_store(args: argparse.Namespace) -> RunStore:
    store = RunStore(args.store)
    if store.note:
        print(f"note: {store.note}", file=sys.stderr)
    return store


def open_store_for_training(args: argparse.Namespace) -> RunStore | None:
    """Training goes on without the history when the store cannot be used."""
    try:
        store = open_store(args)
    except StoreError as error:
        print(f"warning: {error} This run is not recorded in the run history.",
              file=sys.stderr)
        return None
    if not args.quiet:
        say_interrupted(store.reconcile())
    return store


def say_interrupted(records: list[RunRecord], skip: str = "") -> None:
    for record in records:
        if skip in (str(record.id), record.name):
            continue
        print(f"note: run {record.id} ({record.name}) was interrupted after "
              f"{record.epochs_done} of {record.epochs} epochs; continue it with: "
              f"mgpu-train resume {record.id}", file=sys.stderr)


# -- supervising a training worker -----------------------------------------------
def supervise(run: PreparedRun, args: argparse.Namespace, store: RunStore | None,
              resume_hint: str | None = None) -> int:
    """Run the worker to its end, printing its events; `resume_hint` replaces the
    `mgpu-train resume ID` a stopped or failed run suggests."""
    human = sys.stderr if args.json else sys.stdout
    reporter = ConsoleReporter(human, quiet=args.quiet, debug=args.debug, summary=args.summary)
    if not args.quiet and run.plan.note:
        print(run.plan.note, file=human)
    if run.plan.warning:
        print(f"warning: {run.plan.warning}", file=sys.stderr)
    worker = WorkerProcess(run, on_output=child_output(args), store=store)
    interrupted = _forward_interrupts(worker)
    worker.start()
    for event in worker.events():
        if args.json:
            print(event.to_json(), flush=True)
        reporter.handle(event)
    outcome = worker.outcome()
    if store is not None:
        store.close()
    if resume_hint is None and run.run_id is not None:
        resume_hint = f"Continue it with: mgpu-train resume {run.run_id}"
    return _report_outcome(outcome, human, args.debug, interrupted(), resume_hint or "",
                           args.command_line)


def scratch_command(command_line: Sequence[str]) -> str:
    """The user's `mgpu-train` command with `--pretrained none`: the same run from scratch."""
    words, skip = [], False
    for word in command_line:
        if skip:
            skip = False
        elif word == "--pretrained":
            skip = True
        elif not word.startswith("--pretrained="):
            words.append(word)
    return shlex.join(["mgpu-train", *words, "--pretrained", NO_WEIGHTS])


def _forward_interrupts(worker: WorkerProcess) -> Callable[[], bool]:
    """First Ctrl-C: stop at the next batch (resumable), or at once when no epoch has
    completed (WorkerProcess.request_stop). Second: kill the worker."""
    count = [0]

    def on_interrupt(signum, frame):
        count[0] += 1
        if count[0] == 1:
            hard = worker.request_stop()
            print("\nStopping: no epoch has completed, so the training process ends now..."
                  if hard else "\nStopping after the current batch (Ctrl-C again to kill)...",
                  file=sys.stderr, flush=True)
        else:
            worker.kill()

    signal.signal(signal.SIGINT, on_interrupt)
    signal.signal(signal.SIGTERM, on_interrupt)
    return lambda: count[0] > 0


def _report_outcome(outcome: RunOutcome, out: TextIO, debug: bool, interrupted: bool,
                    resume: str, command_line: Sequence[str] = ()) -> int:
    if outcome.status is RunStatus.FAILED:
        print(f"error: {outcome.message}", file=sys.stderr)
        if debug and outcome.traceback:
            print(outcome.traceback, file=sys.stderr)
        if resume and outcome.resumable:
            print(resume, file=sys.stderr)
        if any(isinstance(e, RunFailed) and e.error_type == WeightsUnavailable.__name__
               for e in outcome.events):
            print(f"To train from scratch instead: {scratch_command(command_line)}",
                  file=sys.stderr)
        failed = next((e for e in reversed(outcome.events) if isinstance(e, RunFailed)), None)
        # Refused by the worker before the first step (the model's code, its shapes): the
        # run folder is gone again, as for a refusal here, and the exit code says so.
        refused = failed is not None and failed.phase is Phase.SETUP and failed.user_error
        return EXIT_USAGE if refused else EXIT_FAILED
    finished = next(e for e in reversed(outcome.events) if isinstance(e, RunFinished))
    print(finished_line(finished), file=out)
    if outcome.status is RunStatus.STOPPED:
        if resume and outcome.resumable:
            print(resume, file=out)
        return EXIT_STOPPED if interrupted else 0
    return EXIT_EXPORT_INCOMPLETE if any(isinstance(e, ExportNotMade) for e in outcome.events) \
        else 0
