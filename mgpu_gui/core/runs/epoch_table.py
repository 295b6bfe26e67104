"""Selected runs' per-epoch figures and settings as one table: a row per run and epoch.

What `mgpu-train runs export` writes as CSV, for a spreadsheet or pandas: each epoch
numbered from 1 as the app shows it, when it ended (`ended_local_iso`: ISO 8601 local time
with its UTC offset, for a person and a spreadsheet; `ended_unix_s`: Unix seconds, for a
program), its duration, speed and learning rate, its metrics exactly as the store keeps
them (a float's shortest text that reads back to the same value), then the run's settings
under their dotted names (`compare.flatten`), prefixed "setting." so none can shadow a
metric (a run's `learning_rate` setting is not its epoch's learning rate under a schedule).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mgpu_gui.core.errors import ConfigError, UserError
from mgpu_gui.core.events import EpochEnd
from mgpu_gui.core.runs.compare import flatten
from mgpu_gui.core.runs.store import RunStore

RUN_COLUMNS = ("run_id", "run_name", "status", "tags")
EPOCH_COLUMNS = ("epoch", "ended_local_iso", "ended_unix_s", "duration_s", "samples_per_s",
                 "learning_rate")
SETTING = "setting."


@dataclass(frozen=True)
class EpochTable:
    columns: list[str]
    rows: list[dict[str, Any]]


def epoch_table(store: RunStore, run_ids: Sequence[int]) -> EpochTable:
    """The runs' epochs in the order given, each run's in epoch order. A run whose
    settings this version cannot read (another version's) gets empty setting cells."""
    rows: list[dict[str, Any]] = []
    metrics: set[str] = set()
    settings_order: dict[str, None] = {}  # first seen first, as the config lists them
    for run_id in run_ids:
        record = store.get(run_id)
        try:
            settings = {SETTING + name: _cell(value)
                        for name, value in flatten(store.config(run_id)).items()}
        except ConfigError:
            settings = {}
        settings_order.update(dict.fromkeys(settings))
        epochs = [e for e in store.series_events(run_id, batches=False)
                  if isinstance(e, EpochEnd)]
        for event in epochs:
            metrics.update(event.metrics)
            rows.append({
                "run_id": record.id, "run_name": record.name, "status": record.status.value,
                "tags": " ".join(record.tags), "epoch": event.epoch + 1,
                "ended_local_iso": local_iso(event.t), "ended_unix_s": event.t,
                "duration_s": event.duration_s, "samples_per_s": event.samples_per_s,
                "learning_rate": event.learning_rate, **event.metrics, **settings})
    columns = [*RUN_COLUMNS, *EPOCH_COLUMNS, *sorted(metrics), *settings_order]
    return EpochTable(columns, rows)


def local_iso(t: float) -> str:
    """Unix time `t` as ISO 8601 local time with the offset in force then (DST included),
    so the text reads back to the same instant anywhere."""
    return datetime.fromtimestamp(t, UTC).astimezone().isoformat(timespec="seconds")


def export_csv(store: RunStore, run_ids: Sequence[int], path: Path) -> str:
    """Write the runs' table to `path` (`runs export`, the Runs tab's Export CSV); what
    was written, in words."""
    table = epoch_table(store, run_ids)
    write_csv(table, path)
    return f"Wrote {len(table.rows)} epoch row(s) of {len(run_ids)} run(s) to {path}."


def write_csv(table: EpochTable, path: Path) -> None:
    """One header line, then the rows; a cell a row has no value for is empty."""
    try:
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=table.columns, restval="")
            writer.writeheader()
            writer.writerows(table.rows)
    except OSError as error:
        raise UserError(f"cannot write {path}: {error.strerror or error}; choose another "
                        "file or folder") from None


def _cell(value: Any) -> Any:
    """A setting's value for a CSV cell: lists as JSON (one cell, read back whole)."""
    if isinstance(value, tuple):
        return json.dumps(list(value))
    return "" if value is None else value
