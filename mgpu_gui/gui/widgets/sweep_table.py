"""The Sweep view's table: one row per trial, or one per setting with its repeats grouped.

The rows come from core/sweeps/results.py (`sweep_results`); the Compare table's
model shows them (bold and tinted cells mark the best trial's row, sorting keeps
numbers as numbers and missing values last), with tooltips of its own. Grouped,
a row is a setting's repeats: their finished bests' mean and spread (seed_bands).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QTableView, QWidget

from mgpu_gui.core.runs.compare import (
    Cell,
    Column,
    ColumnKind,
    ComparisonTable,
    numeric,
    setting_text,
)
from mgpu_gui.core.runs.seed_bands import BandKind
from mgpu_gui.core.sweeps.results import RepeatGroup, SweepResults, TrialRow
from mgpu_gui.gui.widgets.compare_table import ComparisonModel, comparison_view
from mgpu_gui.gui.widgets.setting_names import setting_label


class SweepTableModel(ComparisonModel):
    """A sweep's trials (or repeat groups) as the Compare table shows runs."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.tips: tuple[str, ...] = ()
        self.results: SweepResults | None = None
        self.grouped = False

    def set_results(self, results: SweepResults, *, grouped: bool) -> None:
        """`results` as sweep_results makes them by default (spread: one sd)."""
        self.results, self.grouped = results, grouped
        columns, self.tips, rows = _group_rows(results) if grouped else _trial_rows(results)
        self.set_table(ComparisonTable(tuple(columns), tuple(rows)),
                       highlight_differences=False)

    def header_tip(self, section: int) -> str:
        return self.tips[section]

    def best_row(self) -> int | None:
        """The source row of the best trial (or group), None while nothing finished."""
        marked = [r for r, cells in enumerate(self.table.cells) if cells and cells[0].mark]
        return marked[0] if marked else None


def sweep_table_view(model: SweepTableModel) -> QTableView:
    view = comparison_view(model)
    view.setAccessibleName("Sweep trials")
    # A few narrow numeric columns: a stretched last one set "epoch of best" far apart.
    view.horizontalHeader().setStretchLastSection(False)
    return view


def _setting_columns(results: SweepResults) -> tuple[list[Column], list[str]]:
    columns = [Column(ColumnKind.SETTING, name, setting_label(name)) for name in results.swept]
    tips = [f"The trial's {name} (varied by the sweep)" for name in results.swept]
    return columns, tips


def _setting_cells(results: SweepResults, values: Any, mark: bool) -> list[Cell]:
    cells = []
    for name in results.swept:
        value = values[name]
        key: float | str = (float(value) if numeric([value]) else setting_text(value))
        cells.append(Cell(setting_text(value) if value != "" else "off", key, mark=mark))
    return cells


def _trial_rows(results: SweepResults) -> tuple[list[Column], list[str], list[tuple[Cell, ...]]]:
    metric = results.metric
    repeats = any(row.trial.repeat for row in results.rows)
    settings, setting_tips = _setting_columns(results)
    columns = [Column(ColumnKind.RUN, "trial", "#"), *settings]
    tips = ["The trial's number, in the order trials are queued", *setting_tips]
    if repeats:
        columns.append(Column(ColumnKind.SETTING, "seed", "Seed"))
        tips.append("The trial's seed: repeats of a setting differ by it")
    columns += [Column(ColumnKind.SETTING, "status", "Status"),
                Column(ColumnKind.BEST, metric, f"Best {metric}"),
                Column(ColumnKind.BEST, "epoch", "Epoch of best")]
    tips += ["Where the trial is; a failed or stopped trial's tooltip says why",
             f"The trial's best {metric} ({results.direction.value} is best); bold: the "
             "sweep's best finished trial",
             f"The epoch (from 1) of the trial's best {metric}"]
    return columns, tips, [_trial_cells(results, row, repeats) for row in results.rows]


def _trial_cells(results: SweepResults, row: TrialRow, repeats: bool) -> tuple[Cell, ...]:
    mark = row.is_best
    cells = [Cell(str(row.trial.number), float(row.trial.number), row.trial.label, mark),
             *_setting_cells(results, row.trial.values, mark)]
    if repeats:
        seed = row.trial.seed
        cells.append(Cell(setting_text(seed), float(seed) if seed is not None else None,
                          mark=mark))
    cells.append(Cell(row.status.text, row.status.text, row.message, mark))
    best = row.best
    if best is None:
        cells += [Cell("", None, mark=mark), Cell("", None, mark=mark)]
    else:
        cells += [Cell(f"{best.best:.4g}", best.best, mark=mark),
                  Cell(str(best.best_epoch + 1), float(best.best_epoch + 1), mark=mark)]
    return tuple(cells)


def _group_rows(results: SweepResults) -> tuple[list[Column], list[str], list[tuple[Cell, ...]]]:
    metric, band = results.metric, BandKind.SD
    settings, setting_tips = _setting_columns(results)
    columns = [*settings, Column(ColumnKind.RUN, "trials", "trials"),
               Column(ColumnKind.SETTING, "finished", "finished"),
               Column(ColumnKind.BEST, metric, f"mean best {metric}"),
               Column(ColumnKind.BEST, "spread", f"spread ({band.words})")]
    tips = [*setting_tips, "The trials of this setting (its repeats, by seed)",
            "How many of its repeats finished with a value",
            f"The mean of its finished repeats' best {metric}; bold: the best setting",
            f"How far its repeats' bests spread: {band.words}"]
    return columns, tips, [_group_cells(results, group) for group in results.groups]


def _group_cells(results: SweepResults, group: RepeatGroup) -> tuple[Cell, ...]:
    mark = group.is_best
    numbers = ", ".join(f"#{i + 1}" for i in group.trials)
    cells = [*_setting_cells(results, group.values, mark),
             Cell(numbers, float(group.trials[0] + 1), mark=mark),
             Cell(f"{group.finished} of {len(group.trials)}", float(group.finished), mark=mark)]
    if group.mean is None or group.low is None or group.high is None:
        cells += [Cell("", None, mark=mark), Cell("", None, mark=mark)]
    elif group.finished < 2:
        cells += [Cell(f"{group.mean:.4g}", group.mean, mark=mark),
                  Cell("", None, "one finished repeat: no spread yet", mark)]
    else:
        sd = (group.high - group.low) / 2
        cells += [Cell(f"{group.mean:.4g}", group.mean, mark=mark),
                  Cell(f"± {sd:.3g}", sd, f"{group.low:.4g} – {group.high:.4g}", mark)]
    return tuple(cells)
