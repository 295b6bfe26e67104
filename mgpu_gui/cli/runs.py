"""`mgpu-train runs`: the run history, past and running; a run's note and tags.

`runs` lists (filtered by --tag, --status, --search, in the Runs tab's search
language, core/runs/search.py); `runs note ID TEXT` and `runs tag ID TAG...`
annotate one run; `runs export ID... -o FILE.csv` writes their epochs and settings
(core/runs/epoch_table.py); `runs prune ID... | --all` frees disk space (core/runs/disk.py:
old checkpoints go, best, last and the resume backup stay). The listing shows each
run's size; `--json` adds its environment record (versions, file hashes:
core/runs/environment.py) from its folder.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from mgpu_gui.cli.common import add_store_argument, open_store, say_interrupted
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.eventtext import best_text
from mgpu_gui.core.runs import disk
from mgpu_gui.core.runs.checkpoints import format_bytes
from mgpu_gui.core.runs.environment import read_environment
from mgpu_gui.core.runs.epoch_table import export_csv
from mgpu_gui.core.runs.run_differences import RunDifference, differences, stored_settings
from mgpu_gui.core.runs.search import RunQuery
from mgpu_gui.core.runs.store import RunRecord, RunState, RunStore
from mgpu_gui.core.runs.storedb import ReadOnlyStoreError
from mgpu_gui.core.runs.tags import check_tags


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("runs", help="list past and running runs; note, tag and export them",
                       description="Without a command: list the runs, newest first.")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--prune", action="store_true",
                   help="first remove the runs whose folders were deleted from the history "
                        "(`runs prune` frees disk space instead)")
    p.add_argument("--tag", action="append", default=[], metavar="TAG",
                   help="only runs with this tag (repeat: with all of them)")
    p.add_argument("--status", action="append", default=[],
                   choices=[state.value for state in RunState],
                   help="only runs in this state (repeat: in any of them)")
    p.add_argument("--search", default="", metavar="TEXT",
                   help="only runs whose name, model, data, note or tags contain every word; "
                        "also takes tag:T status:S name: model: data: note: words")
    add_store_argument(p)
    actions = p.add_subparsers(dest="runs_command", metavar="{note,tag,export,prune}")
    note = actions.add_parser("note", help="set a run's note (\"\" clears it)")
    note.add_argument("run", metavar="ID", help="run id, name or folder")
    note.add_argument("text", metavar="TEXT", help="the note; \"\" clears it")
    tag = actions.add_parser("tag", help="tag a run (--untag: take the tags off)")
    tag.add_argument("run", metavar="ID", help="run id, name or folder")
    tag.add_argument("tags", nargs="+", metavar="TAG",
                     help="one word each (commas separate too)")
    tag.add_argument("--untag", action="store_true", help="take these tags off the run")
    export = actions.add_parser(
        "export", help="write runs' per-epoch metrics and settings to a CSV file",
        description="One row per run and epoch: run id, name, status, tags, epoch (from 0), "
                    "wall time, duration, samples/s, learning rate, every metric, then "
                    "every setting as a column named setting.NAME.")
    export.add_argument("runs", nargs="+", metavar="ID", help="run ids, names or folders")
    export.add_argument("-o", "--output", type=Path, required=True, metavar="FILE.csv",
                        help="the CSV file to write (replaced if it exists)")
    prune = actions.add_parser(
        "prune", help="free disk space: remove runs' old checkpoints (best and last stay)",
        description="Removes model files in a run's checkpoints/ other than best.keras and "
                    "last.keras, backup epochs that were never committed, files of writers "
                    "that died mid-write and the decoded-image cache (a resume rebuilds it). "
                    "Best, last, the resume backup, exported models, events and logs stay. "
                    "A running run is skipped.")
    prune.add_argument("runs", nargs="*", metavar="ID", help="run ids, names or folders")
    prune.add_argument("--all", action="store_true", help="every run whose folder exists")
    prune.add_argument("--dry-run", action="store_true",
                       help="say what would be removed and freed; remove nothing")
    prune.add_argument("--json", action="store_true", help="print JSON")
    for command in (note, tag, export, prune):
        add_store_argument(command)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    listing = args.runs_command in (None, "export") and not args.prune
    store = _open_for_reading(args) if listing else open_store(args)
    if args.runs_command == "export":
        return _export(store, args)
    if args.runs_command == "prune":
        return _prune(store, args)
    if args.runs_command is not None:
        return _annotate(store, args)
    if not store.read_only:
        say_interrupted(store.reconcile())
    if args.prune:
        for record in store.prune():
            print(f"Removed run {record.id} ({record.name}) from the history: its folder "
                  f"{record.run_dir} was deleted.", file=sys.stderr)
    query = RunQuery.parse(args.search).narrowed(tags=args.tag, statuses=args.status)
    every = store.runs()
    records = [r for r in every if query.matches(r)]
    if args.json:
        print(json.dumps([_record_json(r) for r in records], indent=2))
    elif query and not records:
        print("No run matches; `mgpu-train runs` lists them all.")
    else:
        print(format_runs(records, differences(every, stored_settings(store.config_texts()))))
    return 0


def _open_for_reading(args: argparse.Namespace) -> RunStore:
    """A store that cannot be written (a read-only mount) is still listed, as it is."""
    try:
        return open_store(args)
    except ReadOnlyStoreError:
        store = RunStore(args.store, read_only=True)
        print(f"note: the run store {store.path} is read-only: listed as it is (runs "
              "interrupted since are not marked; notes, tags and pruning need it writable).",
              file=sys.stderr)
        return store


def _annotate(store: RunStore, args: argparse.Namespace) -> int:
    run_id = store.resolve(args.run).id
    if args.runs_command == "note":
        record = store.set_note(run_id, args.text)
        print(f"Run {record.id} ({record.name}): " + (
            "note set." if record.note else "note cleared."))
    else:
        # One argument is one tag (commas separate too): a quoted "a b" is refused, not
        # silently made into two tags.
        tags = check_tags(t for arg in args.tags for t in arg.split(",") if t.strip())
        record = store.tag(run_id, tags, untag=args.untag)
        print(f"Run {record.id} ({record.name}): tags "
              f"{', '.join(record.tags) if record.tags else 'none'}.")
    return 0


def _export(store: RunStore, args: argparse.Namespace) -> int:
    run_ids = list(dict.fromkeys(store.resolve(ref).id for ref in args.runs))
    print(export_csv(store, run_ids, args.output))
    return 0


def _prune(store: RunStore, args: argparse.Namespace) -> int:
    if bool(args.runs) == args.all:
        raise UserError("Give the runs to prune (ids, names or folders) or --all, not both.")
    if args.all:
        records = [r for r in store.runs() if r.folder_exists]
    else:  # every id is resolved before anything is removed
        records = list({r.id: r for r in map(store.resolve, args.runs)}.values())
    plans = [(r, disk.plan_prune(r.run_dir) if args.dry_run else disk.prune(r.run_dir))
             for r in records]
    total = sum(plan.frees for _, plan in plans)
    if args.json:
        print(json.dumps({"dry_run": args.dry_run, "frees": total, "runs": [
            {"id": r.id, "name": r.name, "run_dir": str(r.run_dir), "frees": plan.frees,
             "files": [str(path) for path in plan.remove], "skipped": plan.skipped or None,
             "problems": list(plan.problems)} for r, plan in plans]}, indent=2))
        return 0
    verb = "would free" if args.dry_run else "freed"
    for record, plan in plans:
        head = f"Run {record.id} ({record.name}): "
        if plan.skipped:
            print(head + f"skipped: {plan.skipped}.")
        elif not plan.remove:
            print(head + "nothing to prune.")
        else:
            print(head + f"{verb} {format_bytes(plan.frees)} ({plan.what()}).")
        for problem in plan.problems:
            print(f"warning: could not remove {problem}", file=sys.stderr)
    print(f"{verb.capitalize()} {format_bytes(total)} in total"
          + (" (dry run: nothing was removed)." if args.dry_run else "."))
    return 0


def format_runs(records: list[RunRecord], differs: dict[int, RunDifference]) -> str:
    """`differs`: what sets each run apart from the run before it of its name."""
    if not records:
        return "No runs yet: train one with `mgpu-train`."
    header = ("ID", "STATUS", "STARTED", "MODEL", "DIFFERS", "DEVICES", "EPOCHS", "BEST",
              "TAGS", "SIZE", "FOLDER")
    rows = [header] + [(
        str(r.id), r.status.value.replace("_", " "),
        time.strftime("%Y-%m-%d %H:%M", time.localtime(r.started or r.created)),
        Path(r.model).name, differs[r.id].text if r.id in differs else "-", _devices_text(r),
        f"{r.epochs_done}/{r.epochs}", _best_text(r),
        ",".join(r.tags) or "-", _size_text(disk.measure(r.run_dir)),
        str(r.run_dir) + ("" if r.folder_exists else " (deleted)"),
    ) for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    table = "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False))
                      + "  " + row[-1] for row in rows)
    if any(not r.folder_exists for r in records):
        table += ("\nA run marked (deleted) lost its folder: it cannot be resumed or "
                  "exported; `mgpu-train runs --prune` removes such runs.")
    return table


def _devices_text(record: RunRecord) -> str:
    if not record.replicas:
        return "-"
    kind = "GPU" if record.device_kind == "gpu" else "CPU replica"
    return f"{record.replicas} {kind}{'s' if record.replicas != 1 else ''}"


def _size_text(size: disk.RunSize | None) -> str:
    return "-" if size is None else format_bytes(size.total)


def _best_text(record: RunRecord) -> str:
    return best_text(record.best_metric, record.best_value, record.best_epoch) or "-"


def _record_json(record: RunRecord) -> dict:
    data = dataclasses.asdict(record)
    data["run_dir"] = str(record.run_dir)
    data["status"] = record.status.value
    environment = read_environment(record.run_dir)  # kept in the folder, not the store
    data["environment"] = None if environment is None else environment.to_dict()
    size = disk.measure(record.run_dir)
    data["size"] = None if size is None else dataclasses.asdict(size) | {"total": size.total}
    return data
