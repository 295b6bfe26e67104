"""What sets compared runs apart: their differing settings and each metric's best and final.

No Qt: the Compare dialog shows these as a table, and the seed bands
(seed_bands.py) group runs by the same flattened settings. A run's settings
are its RunConfig flattened to dotted names ("early_stopping.patience"), with
JSON values (lists as tuples, so they compare and hash).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.events import EpochEnd, Event
from mgpu_gui.core.runs.environment import RunEnvironment
from mgpu_gui.core.series import LR_NAMES

# Where and how a run reports, not what it trains: never a reason two runs differ, and
# shown only when the user asks for all settings.
NOT_TRAINING = frozenset({"run_name", "output_dir", "batch_event_interval_s", "tensorboard",
                          "export_formats"})
PREFERRED = ("val_loss", "loss", "val_accuracy", "accuracy")
# Metric families where higher is better; everything else (loss, mae, mse, ...) is lower.
_HIGHER = ("acc", "auc", "precision", "recall", "f1", "iou", "r2")
_MISSING = object()  # a run without the setting: unlike any value

Settings = Mapping[str, Any]


class Direction(StrEnum):
    MIN = "min"
    MAX = "max"

    def better(self, a: float, b: float) -> bool:
        """Whether `a` beats `b` (a tie does not)."""
        return a < b if self is Direction.MIN else a > b


def direction(metric: str) -> Direction:
    """Which way `metric` improves: accuracy-like families up, losses and errors down."""
    family = metric.removeprefix("val_").lower()
    return Direction.MAX if any(word in family for word in _HIGHER) else Direction.MIN


def flatten(config: RunConfig | Mapping[str, Any]) -> dict[str, Any]:
    """A config's settings (or its dict, as stored) under dotted names, lists as tuples
    (comparable, hashable)."""
    flat: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}{key}.", inner)
        else:
            flat[prefix[:-1]] = tuple(value) if isinstance(value, list) else value

    walk("", config.to_dict() if isinstance(config, RunConfig) else config)
    return flat


@dataclass(frozen=True)
class MetricSummary:
    """One metric of one run: its best value (by the metric's direction), when, and its
    final value; NaN epochs are skipped for the best, the final is the last epoch's."""

    best: float
    best_epoch: int  # 0-based, as the events count
    final: float


@dataclass(frozen=True)
class ComparedRun:
    """One run as the comparison sees it: per-epoch metrics (`epochs[i]` 0-based, the
    value `metrics[name][i]`), its flattened settings and its environment record."""

    label: str
    epochs: tuple[int, ...]
    metrics: dict[str, tuple[float, ...]]
    settings: dict[str, Any] = field(default_factory=dict)  # {}: unknown (no config)
    environment: RunEnvironment | None = None  # None: not recorded (an older run)
    run_id: int | None = None

    @classmethod
    def from_events(cls, label: str, events: Iterable[Event], **more: Any) -> ComparedRun:
        ends = [e for e in events if isinstance(e, EpochEnd)]
        names = sorted({n for e in ends for n in e.metrics if n not in LR_NAMES})
        return cls(label=label, epochs=tuple(e.epoch for e in ends),
                   metrics={n: tuple(float(e.metrics.get(n, math.nan)) for e in ends)
                            for n in names}, **more)

    def summary(self, metric: str) -> MetricSummary | None:
        """None: the run never recorded a finite value of `metric`."""
        values = self.metrics.get(metric)
        if values is None:
            return None
        way = direction(metric)
        best: tuple[int, float] | None = None
        for epoch, value in zip(self.epochs, values, strict=True):
            if math.isfinite(value) and (best is None or way.better(value, best[1])):
                best = (epoch, value)
        if best is None:
            return None
        return MetricSummary(best=best[1], best_epoch=best[0], final=values[-1])


def metric_choices(runs: Sequence[ComparedRun]) -> list[str]:
    """Every metric some run has: the common ones first (val_loss, loss, ...)."""
    names = {n for run in runs for n in run.metrics}
    first = [n for n in PREFERRED if n in names]
    rest = sorted(names - set(first), key=lambda n: (n.startswith("val_"), n))
    return first + rest


def differing_settings(settings: Sequence[Settings], *, everything: bool = False) -> list[str]:
    """The setting names whose values are not the same in every run (a run without a
    value differs), in RunConfig's order; `everything`: every name, even the equal ones
    and those that only say where a run reports."""
    names: list[str] = []
    for flat in settings:
        names += [name for name in flat if name not in names]
    if everything:
        return names
    return [name for name in names if name not in NOT_TRAINING and _varies(settings, name)]


def _varies(settings: Sequence[Settings], name: str) -> bool:
    return len({flat.get(name, _MISSING) for flat in settings}) > 1


def numeric(values: Iterable[Any]) -> bool:
    """Whether a setting's values make a number scale (bools are categories)."""
    present = [v for v in values if v is not None]
    return bool(present) and all(isinstance(v, int | float) and not isinstance(v, bool)
                                 for v in present)


def setting_text(value: Any) -> str:
    """A setting's value as the table shows it."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, tuple):
        return ", ".join(setting_text(v) for v in value) or "–"
    return str(value)




class ColumnKind(StrEnum):
    RUN = "run"
    SETTING = "setting"
    BEST = "best"
    FINAL = "final"
    ENVIRONMENT = "environment"


@dataclass(frozen=True)
class Column:
    kind: ColumnKind
    name: str  # the setting, metric or environment fact
    title: str
    differs: bool = False  # its values are not all the same


@dataclass(frozen=True)
class Cell:
    text: str
    key: float | str | None  # what it sorts by; None: no value (sorted last)
    tip: str = ""
    mark: bool = False  # best in its column (BEST), or unlike most runs (ENVIRONMENT)


@dataclass(frozen=True)
class ComparisonTable:
    """Rows follow the runs' order; `cells[row][column]`."""

    columns: tuple[Column, ...]
    cells: tuple[tuple[Cell, ...], ...]


def comparison_table(runs: Sequence[ComparedRun], *, everything: bool = False
                     ) -> ComparisonTable:
    """The Compare table: the run, its settings that differ (`everything`: all), the best
    and final value of each metric, then the environment facts that differ (all with
    `everything`); a differing environment fact marks the runs unlike the others."""
    settings = [run.settings for run in runs]
    names = differing_settings(settings, everything=everything)
    columns = [Column(ColumnKind.RUN, "run", "Run")]
    columns += [Column(ColumnKind.SETTING, name, name, _varies(settings, name))
                for name in names]
    metrics = metric_choices(runs)
    for metric in metrics:
        columns += [Column(ColumnKind.BEST, metric, f"best {metric}"),
                    Column(ColumnKind.FINAL, metric, f"final {metric}")]
    facts = [run.environment.facts() if run.environment else {} for run in runs]
    for fact in dict.fromkeys(name for shown in facts for name in shown):
        known = {shown.get(fact) for shown in facts} - {None}
        if len(known) > 1 or everything:
            columns.append(Column(ColumnKind.ENVIRONMENT, fact, fact, len(known) > 1))
    summaries = [{m: run.summary(m) for m in metrics} for run in runs]
    rows = []
    for index, run in enumerate(runs):
        row = []
        for column in columns:
            if column.kind is ColumnKind.RUN:
                row.append(Cell(run.label, run.label))
            elif column.kind is ColumnKind.SETTING:
                value = run.settings.get(column.name)
                row.append(Cell(setting_text(value), _sort_key(value)))
            elif column.kind is ColumnKind.ENVIRONMENT:
                row.append(_fact_cell(column.name, [shown.get(column.name) for shown in facts],
                                      index))
            else:
                row.append(_metric_cell(column, summaries, index))
        rows.append(tuple(row))
    return ComparisonTable(tuple(columns), tuple(rows))


def _metric_cell(column: Column, summaries: Sequence[Mapping[str, MetricSummary | None]],
                 index: int) -> Cell:
    summary = summaries[index][column.name]
    if summary is None:
        return Cell("–", None, f"No {column.name} was recorded in this run.")
    if column.kind is ColumnKind.FINAL:
        return Cell(f"{summary.final:.4g}", summary.final)
    way = direction(column.name)
    bests = [s[column.name].best for s in summaries if s[column.name] is not None]
    champion = min(bests) if way is Direction.MIN else max(bests)
    return Cell(f"{summary.best:.4g}", summary.best,
                f"Epoch {summary.best_epoch + 1}; {'lower' if way is Direction.MIN else 'higher'}"
                f" is better", mark=len(bests) > 1 and summary.best == champion)


def _fact_cell(fact: str, values: Sequence[str | None], index: int) -> Cell:
    value = values[index]
    if value is None:
        return Cell("–", None, "Not recorded: the run predates environment records, or its "
                               "worker could not write one.")
    known = [v for v in values if v is not None]
    # The most common value is the reference; a tie goes to the first run's.
    common = max(dict.fromkeys(known), key=known.count)
    odd = value != common
    return Cell(value, value, f"Most of these runs have {fact} {common}." if odd else "",
                mark=odd)


def _sort_key(value: Any) -> float | str | None:
    if value is None:
        return None
    if isinstance(value, int | float):  # bools too: off before on
        return float(value)
    return setting_text(value)
