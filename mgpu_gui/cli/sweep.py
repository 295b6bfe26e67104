"""`mgpu-train sweep`: grid and random search through the job queue.

`start` takes train's flags (declared once, in common); a flag given a list
(`--lr 1e-3,3e-3`) or a range (`--lr log:1e-4..1e-2:5`) is swept, parsed by
core/sweeps/space, and any other sweepable setting by `--vary NAME=VALUES`. Each trial
is a queued job, so the sweep goes on when this terminal closes; `--wait` follows it
to the end and prints the table.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from mgpu_gui.cli.common import (
    FLAGS,
    add_store_argument,
    add_train_arguments,
    config_from_args,
    open_store,
)
from mgpu_gui.core.children.inspector import file_inspector
from mgpu_gui.core.children.queue_runner import ensure_runner
from mgpu_gui.core.children.supervisor import check_inputs
from mgpu_gui.core.config import RunConfig, is_model_file
from mgpu_gui.core.devices.nvml import query_inventory
from mgpu_gui.core.errors import ConfigError
from mgpu_gui.core.runs.compare import setting_text
from mgpu_gui.core.runs.store import RunStore
from mgpu_gui.core.sweeps.results import SweepResults
from mgpu_gui.core.sweeps.space import Parameter, parse_parameter, sweepable
from mgpu_gui.core.sweeps.store import (
    SweepView,
    cancel_sweep,
    extend_sweep,
    list_sweeps,
    load_sweep,
    start_sweep,
    sweep_estimate,
)
from mgpu_gui.core.sweeps.trials import DEFAULT_METRIC, Search, SweepSpec, reported_metrics

POLL_S = 2.0
# SweepSpec's fields as the flags that set them, for error lines.
SPEC_FLAGS = {"samples": "--random", "repeats": "--repeats", "max_parallel": "--max-parallel",
              "gpus_per_trial": "--gpus-per-trial", "grace": "--grace", "metric": "--metric",
              "parameters": "the swept settings (a train flag with a list, or --vary)"}
SWEPT_FLAGS = {flag: name for name, flag in FLAGS.items() if name in sweepable()}


def register(sub: argparse._SubParsersAction) -> None:
    sweep = sub.add_parser(
        "sweep", help="grid or random search: one queued run per trial",
        description="Each trial of a sweep is a queued job: trials on different GPUs run at "
                    "the same time, and the sweep goes on after this terminal closes.")
    actions = sweep.add_subparsers(dest="sweep_command", required=True)
    start = actions.add_parser(
        "start", help="start a sweep; takes train's flags, with lists or ranges to sweep",
        description="Give a train flag several values to sweep it: --lr 1e-3,3e-3 (a list), "
                    "--lr log:1e-4..1e-2:5 or --batch lin:16..64:4 (ranges, ends included; a "
                    "random search may leave out the count). Separate values that hold "
                    "commas with ';' (--augment 'off;flip,rotate=0.1'). --name names the "
                    "sweep; its runs are NAME-t0, NAME-t1, ... tagged sweep-ID.")
    swept = {}  # dest -> setting: train's flags that take one value each
    for action in add_train_arguments(start):
        found = [SWEPT_FLAGS[o] for o in action.option_strings if o in SWEPT_FLAGS]
        if found and action.nargs != 0:
            # Read as text: a list or a range is typed by its setting (core/sweeps/space).
            action.type, action.choices, swept[action.dest] = None, None, found[0]
    start.set_defaults(swept=swept)
    _add_vary(start)
    start.add_argument("--random", type=int, metavar="N",
                       help="random search: N settings drawn from the values and ranges "
                            "(default: the grid of every combination)")
    start.add_argument("--random-seed", type=int, default=0, help="the draws' seed (default 0)")
    start.add_argument("--repeats", type=int, default=1,
                       help="runs of each setting, with seeds --seed, --seed + 1, ...")
    start.add_argument("--max-parallel", type=int, default=1,
                       help="most trials at once, on different GPUs (default 1)")
    start.add_argument("--gpus-per-trial", type=int,
                       help="GPUs each trial claims (default --replicas; a swept --replicas "
                            "wins)")
    start.add_argument("--median-stop", action="store_true",
                       help="stop a trial whose best --metric is worse than the median of the "
                            "others' at the same epoch (after --grace epochs, with 3 others)")
    start.add_argument("--grace", type=int, default=2, help="epochs before the median rule")
    start.add_argument("--metric", default=DEFAULT_METRIC,
                       help="the metric that ranks the trials (default val_loss)")
    start.add_argument("--wait", action="store_true",
                       help="follow the sweep to its end, then print the table and the best")
    listing = actions.add_parser("list", help="the sweeps and how far each is")
    listing.add_argument("--json", action="store_true", help="print JSON")
    show = actions.add_parser("show", help="a sweep's table of trials and its best")
    show.add_argument("id", type=int)
    show.add_argument("--json", action="store_true", help="print JSON")
    cancel = actions.add_parser("cancel", help="drop the waiting trials, stop the running "
                                "ones (resumable)")
    cancel.add_argument("id", type=int)
    extend = actions.add_parser("extend", help="add values, random draws or repeats")
    extend.add_argument("id", type=int)
    _add_vary(extend)
    extend.add_argument("--random", type=int, default=0, metavar="N",
                        help="N more random draws")
    extend.add_argument("--repeats", type=int, help="repeats of each setting, in all")
    extend.add_argument("--wait", action="store_true", help="follow the sweep to its end")
    for command in (start, listing, show, cancel, extend):
        add_store_argument(command)
    sweep.set_defaults(func=run)


def _add_vary(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--vary", action="append", default=[], metavar="SETTING=VALUES",
                        help="sweep any run setting by its name, e.g. "
                             "--vary early_stopping.patience=3,5 (the names: "
                             f"{', '.join(n for n in sweepable() if n not in FLAGS)}, or "
                             "those of train's flags)")


def run(args: argparse.Namespace) -> int:
    store = open_store(args)
    command = args.sweep_command
    try:
        if command == "start":
            return _start(store, args)
        if command == "extend":
            return _extend(store, args)
    except ConfigError as error:
        raise ConfigError([(_flag(field), message) for field, message in error.problems]
                          ) from None
    if command == "list":
        return _list(store, args)
    if command == "show":
        view = load_sweep(store, args.id)
        print(json.dumps(view.to_dict(), indent=2) if args.json else format_view(view))
        return 0
    done = cancel_sweep(store, args.id)
    print(f"Sweep {args.id}: {len(done.dropped)} waiting trial(s) dropped, "
          f"{len(done.stopping)} running trial(s) stopping at the next batch (resumable).")
    return 0


def _flag(field: str) -> str:
    if field in SPEC_FLAGS:
        return SPEC_FLAGS[field]
    return FLAGS.get(field, f"--vary {field}" if field in sweepable() else field)


def _start(store: RunStore, args: argparse.Namespace) -> int:
    parameters, base = _swept(args)
    parameters += _varied(args.vary, base)
    spec = SweepSpec(
        base, tuple(parameters), Search.RANDOM if args.random is not None else Search.GRID,
        samples=args.random or 0, random_seed=args.random_seed, repeats=args.repeats,
        gpus_per_trial=args.gpus_per_trial, max_parallel=args.max_parallel,
        metric=args.metric, median_stop=args.median_stop, grace=args.grace)
    # A compiled model file trains with its own optimizer and reports its own metrics.
    compiled = is_model_file(base.model) and file_inspector().inspect_model(base.model).compiled
    spec.check(compiled_model=compiled, reported=reported_metrics(base, compiled))
    # The model and data once, as `train` checks them (each trial's own settings, such as
    # a swept batch size, when it starts).
    check_inputs(base, query_inventory())
    print(sweep_estimate(store, spec).text)
    name = base.run_name or Path(base.model).stem or "sweep"
    sweep_id = start_sweep(store, spec, name, allow_busy=args.allow_busy,
                           compiled_model=compiled)
    ensure_runner(store.path)
    record = load_sweep(store, sweep_id).record
    print(f"Sweep {sweep_id} ({record.name}): {record.trials} trials queued, at most "
          f"{spec.max_parallel} at once; their runs are tagged sweep-{sweep_id}. "
          f"See `mgpu-train sweep show {sweep_id}`.")
    return _wait(store, sweep_id) if args.wait else 0


def _extend(store: RunStore, args: argparse.Namespace) -> int:
    base = load_sweep(store, args.id).spec.base
    added = extend_sweep(store, args.id, _varied(args.vary, base), samples=args.random,
                         repeats=args.repeats)
    ensure_runner(store.path)
    print(f"Sweep {args.id}: {len(added)} more trial(s) queued "
          f"({', '.join(map(str, added))}).")
    return _wait(store, args.id) if args.wait else 0


def _swept(args: argparse.Namespace) -> tuple[list[Parameter], RunConfig]:
    """Train flags given several values, as parameters checked against the base config
    (the flags given one value, typed by their setting)."""
    found: list[tuple[str, str]] = []  # (setting, text)
    values = vars(args).copy()
    for dest, name in args.swept.items():
        text = values[dest]
        if text is None:
            continue
        setting = sweepable()[name]
        # Commas may belong to one value of a free text setting (an augment spec).
        separators = ";" if setting.kind is str and not setting.choices else ",;"
        if any(s in text for s in separators) or text.partition(":")[0] in ("log", "lin"):
            found.append((name, text))
            values[dest] = None
            continue
        try:
            values[dest] = setting.parse(text)
        except ValueError as error:
            raise ConfigError([(name, str(error))]) from None
    base = config_from_args(argparse.Namespace(**values))
    return [parse_parameter(name, text, base) for name, text in found], base


def _varied(texts: list[str], base: RunConfig) -> list[Parameter]:
    found = []
    for text in texts:
        name, equals, values = text.partition("=")
        if not equals:
            raise ConfigError([("--vary", f"{text!r} is not SETTING=VALUES, e.g. "
                                          "early_stopping.patience=3,5")])
        found.append(parse_parameter(name.strip(), values, base))
    return found


def _list(store: RunStore, args: argparse.Namespace) -> int:
    sweeps = list_sweeps(store)
    if args.json:
        print(json.dumps([{"id": s.id, "name": s.name, "created": s.created,
                           "cancelled": s.cancelled, "trials": s.trials,
                           "counts": {k.value: v for k, v in s.counts.items()},
                           "swept": list(s.spec.swept)} for s in sweeps], indent=2))
        return 0
    if not sweeps:
        print("No sweeps yet. Start one with `mgpu-train sweep start --lr 1e-3,3e-3`.")
    for record in sweeps:
        created = time.strftime("%m-%d %H:%M", time.localtime(record.created))
        print(f"sweep {record.id:<4} {created}  {record.name}: "
              f"{', '.join(record.spec.swept)}; {record.trials} trials: {record.state_text}")
    return 0


def _wait(store: RunStore, sweep_id: int) -> int:
    """Progress lines until every trial ended, then the table; Ctrl-C stops only the
    waiting (the sweep goes on)."""
    said = ""
    try:
        while True:
            view = load_sweep(store, sweep_id)
            if view.record.state_text != said:
                said = view.record.state_text
                print(f"{time.strftime('%H:%M:%S')} sweep {sweep_id}: {said}", flush=True)
            if view.record.ended:
                break
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        print(f"\nStopped waiting; the sweep goes on (`mgpu-train sweep show {sweep_id}`).",
              file=sys.stderr)
        return 130
    print(format_view(view))
    return 0


def format_view(view: SweepView) -> str:
    """The trials' table (the best marked *), the repeats' means, and the best."""
    results = view.results
    wide = max([len("settings"), *(len(row.trial.label) for row in results.rows)])
    status = max([len("status"), *(len(row.status.text) for row in results.rows)])
    lines = [f"Sweep {view.record.id} ({view.record.name}): {view.record.state_text}",
             f"{'':2}{'trial':>5}  {'settings':<{wide}}  {'status':<{status}}  "
             f"{results.metric:>10}  epoch"]
    for row in results.rows:
        value = "" if row.best is None else _number(row.best.best)
        epoch = "" if row.best is None else str(row.best.best_epoch + 1)
        lines.append(f"{'*' if row.is_best else '':2}{row.trial.number:>5}  "
                     f"{row.trial.label:<{wide}}  {row.status.text:<{status}}  {value:>10}  "
                     f"{epoch}".rstrip())
    lines += _groups(results)
    best = results.best
    if best is None:
        lines.append("No trial has finished with a value of "
                     f"{results.metric} yet.")
    else:
        assert best.best is not None
        run_id = view.jobs[best.trial.index].run_id
        lines.append(f"Best: trial {best.trial.number} ({best.trial.label}): {results.metric} "
                     f"{_number(best.best.best)} at epoch {best.best.best_epoch + 1} "
                     f"(run {run_id})")
    return "\n".join(lines)


def _groups(results: SweepResults) -> list[str]:
    if len(results.groups) == len(results.rows):
        return []  # no repeats
    lines = ["Repeats (mean, low..high of the finished):"]
    for group in results.groups:
        settings = " ".join(f"{n.rpartition('.')[2]}={setting_text(v)}"
                            for n, v in group.values.items())
        spread = ("no finished trial" if group.mean is None else
                  f"{_number(group.mean)} ({_number(group.low)}..{_number(group.high)}) over "
                  f"{group.finished}")
        lines.append(f"{'*' if group.is_best else '':2}{settings}: {spread}")
    return lines


def _number(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.4g}"
