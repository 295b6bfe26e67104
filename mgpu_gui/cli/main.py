"""`mgpu-train`: the headless front end (SSH sessions, scripts, tests, benchmarks).

It drives the same core and worker process as the GUI. Exit 0 on success;
otherwise a one-paragraph message and a non-zero code, with the traceback only
under --debug.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from mgpu_gui.cli.console import LiveLine
from mgpu_gui.cli.find_batch import add_find_batch_parser, cmd_find_batch
from mgpu_gui.cli.queue import add_queue_parser, cmd_queue
from mgpu_gui.cli.scale import add_scale_parser
from mgpu_gui.cli.worker import add_worker_parser, cmd_worker
from mgpu_gui.core.children.supervisor import (
    PreparedRun,
    RunOutcome,
    WorkerProcess,
    prepare_resume,
    prepare_run,
)
from mgpu_gui.core.config import (
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
from mgpu_gui.core.errors import ConfigError, UserError
from mgpu_gui.core.events import BatchEnd, Event, RunFailed, RunFinished, RunStarted, RunStatus
from mgpu_gui.core.eventtext import event_lines, finished_line
from mgpu_gui.core.progress import Progress, format_duration, format_metrics, format_rate
from mgpu_gui.core.runs.folder import RunDir
from mgpu_gui.core.runs.store import RunRecord, RunStore
from mgpu_gui.core.runs.storedb import STORE_ENV, StoreError

COMMANDS = ("train", "resume", "runs", "queue", "devices", "doctor", "export", "inspect",
            "unwrap", "scale", "find-batch", "worker")
FLAGS = {  # RunConfig fields as the flags a CLI user typed
    "model": "--model", "data": "--data", "validation_data": "--val-data",
    "validation_split": "--val-split", "batch_per_replica": "--batch-per-replica",
    "epochs": "--epochs", "learning_rate": "--lr", "optimizer": "--optimizer",
    "devices.replicas": "--replicas", "devices.gpus": "--gpus", "image_size": "--image-size",
    "rescale": "--rescale", "export_formats": "--export", "custom_objects": "--custom-objects",
    "early_stopping.patience": "--es-patience", "reduce_lr.patience": "--rl-patience",
    "reduce_lr.factor": "--rl-factor", "precision": "--precision", "jit_compile": "--xla",
    "lr_scaling.warmup_epochs": "--warmup-epochs",
}
EXIT_FAILED, EXIT_USAGE, EXIT_STOPPED = 1, 2, 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mgpu-train",
        description="Train a Keras model data-parallel on the chosen GPUs (or CPU replicas).",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks and worker output")
    parser.add_argument("--store", type=Path,
                        help=f"the run history database (default: ${STORE_ENV}, else the "
                             f"user's data folder)")
    sub = parser.add_subparsers(dest="command")
    train = sub.add_parser("train", help="train a model (the default command)")
    _add_train_arguments(train)
    resume = sub.add_parser("resume", help="continue a stopped, failed or interrupted run "
                            "from its last complete epoch")
    resume.add_argument("run", help="a run id or name from `mgpu-train runs`, or a run folder")
    _add_output_arguments(resume)
    runs = sub.add_parser("runs", help="list past and running runs")
    runs.add_argument("--json", action="store_true", help="print JSON")
    for command in (train, resume, runs):  # also accepted after the command
        command.add_argument("--store", type=Path, default=argparse.SUPPRESS,
                             help="the run history database")
    devices = sub.add_parser("devices", help="list the GPUs NVML sees")
    devices.add_argument("--json", action="store_true", help="print JSON")
    doctor = sub.add_parser(
        "doctor", help="check the setup: driver and CUDA as TensorFlow sees them, the GPUs "
        "TensorFlow sees vs NVML, NCCL; says what to fix (exit 1 on an error)")
    doctor.add_argument("--json", action="store_true", help="print the facts and findings "
                        "as JSON")
    export = sub.add_parser("export", help="export a trained model to another format")
    export.add_argument("source", type=Path, help="a run folder or a .keras/.h5 model file")
    export.add_argument("-o", "--output", type=Path, required=True)
    export.add_argument("--format", choices=EXPORT_FORMATS,
                        help="default: from the output's suffix (.keras, .h5; else savedmodel)")
    inspect = sub.add_parser("inspect", help="say what a model file holds (no TensorFlow, "
                             "no code from the file)")
    inspect.add_argument("file", type=Path, help="a .keras, .h5 or .py model file")
    unwrap = sub.add_parser("unwrap", help="recover the plain model from a legacy multi-GPU "
                            "wrapper file and write it, verified")
    unwrap.add_argument("file", type=Path, help="a .h5 or .keras model file")
    unwrap.add_argument("-o", "--output", type=Path, required=True,
                        help="a .keras or .h5 file, or a SavedModel folder")
    unwrap.add_argument("--format", choices=EXPORT_FORMATS,
                        help="default: from the output's suffix (.keras, .h5; else savedmodel)")
    unwrap.add_argument("--custom-objects", dest="custom_objects", type=Path,
                        help="a .py defining a `custom_objects` dict for custom layers")
    add_scale_parser(sub)
    add_find_batch_parser(sub)
    add_queue_parser(sub, _add_train_arguments)
    add_worker_parser(sub, _add_train_arguments)
    return parser


def _add_train_arguments(p: argparse.ArgumentParser) -> None:
    d = RunConfig()
    p.add_argument("--config", type=Path, help="a RunConfig JSON file; flags override it")
    p.add_argument("--model", help=f"a .keras, .h5 or .py file, or '{DEMO}' (default)")
    p.add_argument("--data", help=f"an .npz file, an image folder, or '{DEMO}' (default)")
    p.add_argument("--val-data", dest="validation_data", help="validation .npz or image folder")
    p.add_argument("--val-split", dest="validation_split", type=float,
                   help=f"fraction held out for validation (default {d.validation_split})")
    dev = p.add_mutually_exclusive_group()
    dev.add_argument("--gpus", help="GPUs by NVML index or UUID, comma separated")
    dev.add_argument("--cpu", action="store_true", help="train on CPU replicas even with GPUs")
    p.add_argument("--replicas", type=int,
                   help="number of GPUs (the first N) or CPU replicas "
                        "(default: all GPUs, or 2 CPU)")
    p.add_argument("--batch-per-replica", "--batch", dest="batch_per_replica", type=int,
                   help=f"samples per replica per step; global batch = this x replicas "
                        f"(default {d.batch_per_replica})")
    p.add_argument("--epochs", type=int, help=f"default {d.epochs}")
    p.add_argument("--optimizer", choices=OPTIMIZERS, help="for uncompiled models (default adam)")
    p.add_argument("--lr", dest="learning_rate", type=float,
                   help=f"learning rate for uncompiled models (default {d.learning_rate})")
    p.add_argument("--loss", help="loss for uncompiled models (default: from the output layer)")
    p.add_argument("--metrics", help="comma separated (default accuracy)")
    p.add_argument("--early-stopping", action="store_true", help="stop when val_loss stalls")
    p.add_argument("--es-patience", type=int, help=f"default {d.early_stopping.patience}")
    p.add_argument("--es-monitor", help="default val_loss")
    p.add_argument("--reduce-lr", action="store_true", help="lower the LR when val_loss stalls")
    p.add_argument("--rl-factor", type=float, help=f"default {d.reduce_lr.factor}")
    p.add_argument("--rl-patience", type=int, help=f"default {d.reduce_lr.patience}")
    p.add_argument("--scale-lr", action="store_true",
                   help="linear scaling rule: train at --lr x replicas (--lr suits one "
                        "replica's batch), reached by a linear warm-up")
    p.add_argument("--warmup-epochs", type=int,
                   help=f"warm-up epochs for --scale-lr (default {d.lr_scaling.warmup_epochs})")
    p.add_argument("--precision", choices=PRECISIONS,
                   help="mixed precision: mixed_bfloat16 needs GPUs of compute capability "
                        ">= 8.0, mixed_float16 >= 7.0 (with loss scaling) to be faster; the "
                        "export is float32 either way (default float32)")
    p.add_argument("--xla", dest="jit_compile", action="store_true",
                   help="compile the model with XLA (jit_compile); a model XLA cannot "
                        "compile trains without it, with a warning")
    p.add_argument("--image-size", help="HxW for image folders (default 64x64)")
    p.add_argument("--rescale", type=float, help="pixel scale for image folders (default 1/255)")
    p.add_argument("--sync-bn", dest="sync_batchnorm", action="store_true",
                   help="synchronize BatchNormalization statistics across replicas")
    p.add_argument("--seed", type=int, help=f"default {d.seed}")
    p.add_argument("--output-dir", "-o", dest="output_dir",
                   help=f"where run folders go (default {d.output_dir})")
    p.add_argument("--name", dest="run_name", help="run folder name (default: the model's)")
    p.add_argument("--export", dest="export_formats",
                   help=f"formats to export at the end: {','.join(EXPORT_FORMATS)} (default keras)")
    p.add_argument("--tensorboard", action="store_true", help="write TensorBoard logs")
    p.add_argument("--allow-unsafe-code", action="store_true",
                   help="let Lambda layers in the model file run their Python code "
                        "(trusted files only)")
    p.add_argument("--custom-objects", dest="custom_objects",
                   help="a .py defining a `custom_objects` dict for models with custom layers")
    p.add_argument("--allow-busy", action="store_true",
                   help="use GPUs that run processes outside this app's runs (another user's "
                        "job, a notebook); without it such GPUs are not taken")
    _add_output_arguments(p)


def _add_output_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print raw events as JSON lines")
    p.add_argument("--quiet", "-q", action="store_true", help="print only the result")
    p.add_argument("--summary", action="store_true", help="print the model summary")


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """RunConfig from --config (if any) with the flags given on top."""
    base = RunConfig.from_json(args.config.read_text()) if args.config else RunConfig()
    changes = {}
    for name in ("model", "data", "validation_data", "validation_split", "batch_per_replica",
                 "epochs", "optimizer", "learning_rate", "loss", "rescale", "seed",
                 "output_dir", "run_name", "custom_objects", "precision"):
        value = getattr(args, name)
        if value is not None:
            changes[name] = value
    for flag in ("sync_batchnorm", "tensorboard", "allow_unsafe_code", "jit_compile"):
        if getattr(args, flag):
            changes[flag] = True
    if args.metrics is not None:
        changes["metrics"] = tuple(m.strip() for m in args.metrics.split(",") if m.strip())
    if args.export_formats is not None:
        changes["export_formats"] = tuple(f.strip() for f in args.export_formats.split(","))
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
    return base.replace(**changes)


def _parse_size(text: str) -> tuple[int, int]:
    parts = text.lower().replace(",", "x").split("x")
    try:
        if len(parts) == 1:
            return int(parts[0]), int(parts[0])
        h, w = (int(p) for p in parts)
        return h, w
    except ValueError:
        raise UserError(f"--image-size {text!r}: give HxW, e.g. 64x64") from None


class ConsoleReporter:
    """Human progress on a terminal: a live line while training, a line per epoch."""

    def __init__(self, out: TextIO, *, quiet: bool, debug: bool, summary: bool = False):
        self.quiet = quiet
        self.debug = debug
        self.summary = summary
        self.term = LiveLine(out, live=out.isatty())
        self.progress = Progress()
        self._last_draw = 0.0
        self._metrics: dict[str, float] = {}

    def handle(self, event: Event) -> None:
        self.progress.update(event)
        if self.quiet:
            return
        if isinstance(event, BatchEnd):
            self._metrics = event.metrics
            if self.term.live and (time.monotonic() - self._last_draw > 0.1
                              or event.batch + 1 == event.steps):
                self._draw()
            return
        if isinstance(event, RunFinished | RunFailed):
            return  # the outcome is reported once, after the worker ended
        lines = event_lines(event, verbose=self.debug)
        if isinstance(event, RunStarted) and self.summary:
            lines.insert(1, event.summary.rstrip())
        for line in lines:
            self.term.line(line)

    def _draw(self) -> None:
        self._last_draw = time.monotonic()
        p = self.progress
        width = 24
        filled = int(width * p.epoch_fraction)
        bar = "#" * filled + "-" * (width - filled)
        text = (f"Epoch {p.epoch + 1}/{p.epochs} [{bar}] {p.step}/{p.steps}  "
                f"{format_metrics(self._metrics)}  {format_rate(p.samples_per_s)}  "
                f"ETA {format_duration(p.epoch_eta())} (total {format_duration(p.total_eta())})")
        self.term.show(text)


def cmd_train(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    store = _open_store_for_training(args)
    return _supervise(prepare_run(config, store=store, allow_busy=args.allow_busy), args, store)


def cmd_resume(args: argparse.Namespace) -> int:
    store = _open_store(args)
    _say_interrupted(store.reconcile(), skip=args.run)
    record = store.resolve(args.run)
    return _supervise(prepare_resume(record.run_dir, store=store), args, store)


def _supervise(run: PreparedRun, args: argparse.Namespace, store: RunStore | None,
               resume_hint: str | None = None) -> int:
    """Run the worker to its end, printing its events; `resume_hint` replaces the
    `mgpu-train resume ID` a stopped or failed run suggests."""
    human = sys.stderr if args.json else sys.stdout
    reporter = ConsoleReporter(human, quiet=args.quiet, debug=args.debug, summary=args.summary)
    if not args.quiet and run.plan.note:
        print(run.plan.note, file=human)
    worker = WorkerProcess(run, on_output=(lambda line: print(line, file=sys.stderr))
                           if args.debug else None, store=store)
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
    return _report_outcome(outcome, human, args.debug, interrupted(), resume_hint or "")


def _open_store(args: argparse.Namespace) -> RunStore:
    store = RunStore(args.store)
    if store.note:
        print(f"note: {store.note}", file=sys.stderr)
    return store


def _open_store_for_training(args: argparse.Namespace) -> RunStore | None:
    """Training goes on without the history when the store cannot be used."""
    try:
        store = _open_store(args)
    except StoreError as error:
        print(f"warning: {error} This run is not recorded in the run history.",
              file=sys.stderr)
        return None
    if not args.quiet:
        _say_interrupted(store.reconcile())
    return store


def _say_interrupted(records: list[RunRecord], skip: str = "") -> None:
    for record in records:
        if skip in (str(record.id), record.name):
            continue
        print(f"note: run {record.id} ({record.name}) was interrupted after "
              f"{record.epochs_done} of {record.epochs} epochs; continue it with: "
              f"mgpu-train resume {record.id}", file=sys.stderr)


def cmd_runs(args: argparse.Namespace) -> int:
    store = _open_store(args)
    _say_interrupted(store.reconcile())
    records = store.runs()
    if args.json:
        print(json.dumps([_record_json(r) for r in records], indent=2))
    else:
        print(format_runs(records))
    return 0


def format_runs(records: list[RunRecord]) -> str:
    if not records:
        return "No runs yet: train one with `mgpu-train`."
    header = ("ID", "STATUS", "STARTED", "MODEL", "DEVICES", "EPOCHS", "BEST", "FOLDER")
    rows = [header] + [(
        str(r.id), r.status.value.replace("_", " "),
        time.strftime("%Y-%m-%d %H:%M", time.localtime(r.started or r.created)),
        Path(r.model).name, _devices_text(r), f"{r.epochs_done}/{r.epochs}", _best_text(r),
        str(r.run_dir) + ("" if r.folder_exists else " (deleted)"),
    ) for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False))
                     + "  " + row[-1] for row in rows)


def _devices_text(record: RunRecord) -> str:
    if not record.replicas:
        return "-"
    kind = "GPU" if record.device_kind == "gpu" else "CPU replica"
    return f"{record.replicas} {kind}{'s' if record.replicas != 1 else ''}"


def _best_text(record: RunRecord) -> str:
    if record.best_value is None or record.best_epoch is None:
        return "-"
    return f"{record.best_metric} {record.best_value:.4g} (epoch {record.best_epoch + 1})"


def _record_json(record: RunRecord) -> dict:
    data = dataclasses.asdict(record)
    data["run_dir"] = str(record.run_dir)
    data["status"] = record.status.value
    return data


def _forward_interrupts(worker: WorkerProcess):
    """First Ctrl-C: stop at the next batch (resumable). Second: kill the worker."""
    count = [0]

    def on_interrupt(signum, frame):
        count[0] += 1
        if count[0] == 1:
            print("\nStopping after the current batch (Ctrl-C again to kill)...",
                  file=sys.stderr, flush=True)
            worker.request_stop()
        else:
            worker.kill()

    signal.signal(signal.SIGINT, on_interrupt)
    signal.signal(signal.SIGTERM, on_interrupt)
    return lambda: count[0] > 0


def _report_outcome(outcome: RunOutcome, out: TextIO, debug: bool, interrupted: bool,
                    resume: str) -> int:
    if outcome.status is RunStatus.FAILED:
        print(f"error: {outcome.message}", file=sys.stderr)
        if debug and outcome.traceback:
            print(outcome.traceback, file=sys.stderr)
        if resume and any(isinstance(e, RunStarted) for e in outcome.events):
            print(resume, file=sys.stderr)
        return EXIT_FAILED
    finished = next(e for e in reversed(outcome.events) if isinstance(e, RunFinished))
    print(finished_line(finished), file=out)
    if outcome.status is RunStatus.STOPPED:
        if resume:
            print(resume, file=out)
        return EXIT_STOPPED if interrupted else 0
    return 0


def cmd_devices(args: argparse.Namespace) -> int:
    from mgpu_gui.core.devices.nvml import format_inventory, query_inventory

    inventory = query_inventory()
    if args.json:
        print(inventory.to_json())
    else:
        print(format_inventory(inventory))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from mgpu_gui.core.devices.nvml import query_inventory
    from mgpu_gui.core.tools.doctor import Facts, NvmlFacts, diagnose, exit_code
    from mgpu_gui.core.tools.doctor_report import findings_to_plain, report
    from mgpu_gui.engine.tf_facts import ask_tensorflow

    if not args.json:
        print("Asking NVIDIA's driver and TensorFlow (TensorFlow starts in a child process, "
              "a few seconds)…", file=sys.stderr)
    facts = Facts(NvmlFacts.from_inventory(query_inventory()), ask_tensorflow())
    findings = diagnose(facts)
    if args.json:
        print(json.dumps({"facts": facts.to_dict(), "findings": findings_to_plain(findings),
                          "ok": exit_code(findings) == 0}, indent=2))
    else:
        print(report(facts, findings))
    return exit_code(findings)


def cmd_export(args: argparse.Namespace) -> int:
    from mgpu_gui.engine.export import export_file  # imports TensorFlow: only for this command

    source = _export_source(args.source.expanduser().absolute())
    output = args.output.expanduser().absolute()  # the verifier runs in another folder
    fmt = args.format or _format_from_suffix(output)
    result = export_file(source, output, fmt)
    print(f"Exported {result.format} model: {result.path} (reloaded in a fresh process, "
          f"max prediction difference {result.max_abs_diff:.2g})")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from mgpu_gui.core.modelfiles.inspection import inspect_model_file

    info = inspect_model_file(args.file)
    print(f"{info.path.name}: {info.format} file, {info.class_name or '?'} "
          f"'{info.name or '?'}' (saved by Keras {info.keras_version or '?'})")
    if info.input_shape is not None:
        print(f"  input shape: {info.input_shape}")
    if info.output_units is not None:
        print(f"  output: {info.output_units} units, activation {info.output_activation}")
    print(f"  compiled: {'yes, loss ' + str(info.loss) if info.compiled else 'no'}")
    if info.wrapper is not None:
        print(f"  {info.wrapper.describe()}")
        print(f"  recover the plain model with: mgpu-train unwrap {args.file} -o "
              f"{info.path.stem}_unwrapped.keras")
    else:
        print("  plain model (no multi-GPU wrapper)")
        if info.lambda_layers:
            print(f"  Lambda layers (run code on load): {', '.join(info.lambda_layers)}")
    return 0


def cmd_unwrap(args: argparse.Namespace) -> int:
    from mgpu_gui.core.modelfiles.inspection import inspect_model_file

    info = inspect_model_file(args.file)
    if info.format == "py":
        raise UserError(f"{info.path.name} is a .py file: there is nothing to unwrap.")
    output = args.output.expanduser().absolute()
    fmt = args.format or _format_from_suffix(output)
    if info.wrapper is None:
        from mgpu_gui.engine.export import export_file

        print(f"{info.path.name} is already a plain model (no multi-GPU wrapper); "
              f"writing it as a verified {fmt} conversion.")
        result = export_file(info.path.absolute(), output, fmt)
    else:
        from mgpu_gui.engine.export import export_model, random_sample
        from mgpu_gui.engine.models import load_custom_objects
        from mgpu_gui.engine.unwrap import recover_model

        custom = load_custom_objects(args.custom_objects) if args.custom_objects else {}
        recovered = recover_model(info.path, custom_objects=custom, log=print)
        model = recovered.model
        result = export_model(model, output, fmt, sample_x=random_sample(model),
                              custom_objects_file=args.custom_objects)
    print(f"Wrote {result.format} model: {result.path} (reloaded in a fresh process, "
          f"max prediction difference {result.max_abs_diff:.2g})")
    return 0


def cmd_scale(args: argparse.Namespace) -> int:
    from mgpu_gui.cli.scale import run_scale

    return run_scale(args, config_from_args(args))


def _export_source(source: Path) -> Path:
    """A run folder stands for its exported model, else its last complete epoch."""
    if not source.is_dir():
        if not source.exists():
            raise UserError(f"{source} does not exist; give a run folder or a .keras/.h5 file.")
        return source
    model = RunDir(source).trained_model()
    if model is not None:
        return model
    raise UserError(f"{source} holds no trained model yet (no model.keras and no "
                    f"checkpoints/last.keras); finish at least one epoch first.")


def _format_from_suffix(output: Path) -> str:
    return {".keras": "keras", ".h5": "h5", ".hdf5": "h5"}.get(output.suffix.lower(), "savedmodel")


def _with_command(argv: list[str]) -> list[str]:
    """`train` is the default command: `mgpu-train --epochs 3` trains.

    The global options (--debug, --store PATH) may come anywhere before the flags.
    """
    globals_: list[str] = []
    rest = list(argv)
    while rest and rest[0] in ("--debug", "--store") or (rest and rest[0].startswith("--store=")):
        option = rest.pop(0)
        globals_.append(option)
        if option == "--store" and rest:
            globals_.append(rest.pop(0))
    if rest and (rest[0] in COMMANDS or rest[0] in ("-h", "--help")):
        return globals_ + rest
    if "--debug" in rest:
        rest.remove("--debug")
        globals_.insert(0, "--debug")
    return globals_ + ["train"] + rest


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(_with_command(list(sys.argv[1:] if argv is None else argv)))
    handlers = {"train": cmd_train, "resume": cmd_resume, "runs": cmd_runs,
                "devices": cmd_devices, "doctor": cmd_doctor, "export": cmd_export,
                "inspect": cmd_inspect,
                "unwrap": cmd_unwrap, "scale": cmd_scale,
                "find-batch": cmd_find_batch,
                "queue": cmd_queue,
                "worker": cmd_worker}
    try:
        return handlers[args.command or "train"](args)
    except ConfigError as error:
        lines = [f"{FLAGS.get(field, field)}: {message}" for field, message in error.problems]
        print("error: invalid settings:\n  " + "\n  ".join(lines), file=sys.stderr)
        return EXIT_USAGE
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_STOPPED
    except Exception as error:
        if args.debug:
            raise
        print(f"error: unexpected {type(error).__name__}: {error}\n"
              f"This is a bug; run again with --debug for the traceback.", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
