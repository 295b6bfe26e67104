"""`mgpu-train runs`: the run history, past and running."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from mgpu_gui.cli.common import add_store_argument, open_store, say_interrupted
from mgpu_gui.core.runs.store import RunRecord


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("runs", help="list past and running runs")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--prune", action="store_true",
                   help="first remove the runs whose folders were deleted from the history")
    add_store_argument(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    store = open_store(args)
    say_interrupted(store.reconcile())
    if args.prune:
        for record in store.prune():
            print(f"Removed run {record.id} ({record.name}) from the history: its folder "
                  f"{record.run_dir} was deleted.", file=sys.stderr)
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


def _best_text(record: RunRecord) -> str:
    if record.best_value is None or record.best_epoch is None:
        return "-"
    return f"{record.best_metric} {record.best_value:.4g} (epoch {record.best_epoch + 1})"


def _record_json(record: RunRecord) -> dict:
    data = dataclasses.asdict(record)
    data["run_dir"] = str(record.run_dir)
    data["status"] = record.status.value
    return data
