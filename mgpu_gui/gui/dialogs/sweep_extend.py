"""Extend… of the Sweep view: more values of the swept settings, more repeats, more draws.

One row per swept setting (the Sweep dialog's ParameterRow, its setting fixed) takes
more values in the same syntax, read by core/sweeps/space.py; an empty row adds
none. The dialog plans the extension against the trials the sweep has
(`SweepSpec.extended`, `plan_trials`), says how many new trials it makes and keeps
its button off while that is none or anything is wrong. Its button only asks
(`extend_requested`); the caller queues the trials and answers `started` (the dialog
closes) or `refuse` (it says why and stays).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QVBoxLayout,
    QWidget,
)

from mgpu_gui.core.errors import ConfigError
from mgpu_gui.core.sweeps.space import Parameter
from mgpu_gui.core.sweeps.trials import Search, SweepSpec, Trial, plan_trials, trial_problems
from mgpu_gui.gui.jobs.background_job import spin_box
from mgpu_gui.gui.widgets.field_cells import STYLE, hint_label
from mgpu_gui.gui.widgets.setting_names import setting_label
from mgpu_gui.gui.widgets.sweep_parameter import ParameterRow

MAX_MORE = 10_000  # more random draws at once (as the Sweep dialog's most)
MIN_WIDTH = 520  # the values fields show a few values and their placeholder whole


class SweepExtendDialog(QDialog):
    """More trials for a sweep; `new` holds what they would be while nothing is wrong."""

    extend_requested = Signal(object, int, object)  # tuple[Parameter, ...], samples, repeats

    def __init__(self, spec: SweepSpec, trials: Sequence[Trial], parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Extend the sweep")
        self.setAccessibleName("Extend the sweep")
        self.setStyleSheet(STYLE)
        self.spec = spec
        self.trials = list(trials)
        self.new: list[Trial] = []
        self.asking = False  # the button was clicked; the caller has not answered yet
        about = QLabel("New trials are queued with the sweep's; trials it already has are "
                       "not run again.", wordWrap=True)
        form = QFormLayout()
        self.rows: list[ParameterRow] = []
        for parameter in spec.parameters:
            row = ParameterRow(parameter.name)
            row.setting.hide()  # more of this setting's values (the form names it)
            row.remove.hide()
            row.values.setAccessibleName(f"More values of {setting_label(parameter.name)}")
            row.values.setPlaceholderText(f"more values; it has {parameter.text}")
            row.changed.connect(self.check)
            self.rows.append(row)
            form.addRow(setting_label(parameter.name), row)
        self.repeats_spin = spin_box(spec.repeats, 100, spec.repeats, "Repeats in all",
                                     "Runs of each setting in all, with seeds seed, seed+1, …")
        form.addRow("&Repeats", self.repeats_spin)
        self.samples_spin = spin_box(0, MAX_MORE, 0, "More random trials",
                                     "Settings to draw on top of those drawn so far")
        self.samples_spin.setVisible(spec.search is Search.RANDOM)
        if spec.search is Search.RANDOM:
            form.addRow("More &random trials", self.samples_spin)
        self.total_label = hint_label("New trials", role=None)
        self.problems_label = QLabel(wordWrap=True)
        self.problems_label.setProperty("role", "error")
        self.problems_label.setAccessibleName("Extension problems")
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.add_button = self.buttons.addButton("&Add trials",
                                                 QDialogButtonBox.ButtonRole.AcceptRole)
        self.add_button.setAccessibleName("Add trials")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(about)
        layout.addLayout(form)
        layout.addWidget(self.total_label)
        layout.addWidget(self.problems_label)
        layout.addWidget(self.buttons)
        self.repeats_spin.valueChanged.connect(self.check)
        self.samples_spin.valueChanged.connect(self.check)
        self.check()
        self.setMinimumWidth(MIN_WIDTH)

    def more(self) -> tuple[Parameter, ...]:
        return tuple(row.parameter for row in self.rows if row.parameter is not None)

    def check(self) -> None:
        """Read the rows (an empty one adds no values) and plan the new trials."""
        problems: list[tuple[str, str]] = []
        for row in self.rows:
            if row.values.text().strip():
                row.check(self.spec.base)
                problems += [(row.name, message) for message in row.problems]
            else:
                row.parameter, row.problems = None, []
        self.new = []
        if not problems:
            try:
                extended = self.spec.extended(self.more(), samples=self.samples_spin.value(),
                                              repeats=self.repeats_spin.value())
                extended.check()
                self.new = plan_trials(extended, self.trials)
                problems = trial_problems(extended, self.new)
            except ConfigError as error:
                problems = error.problems
        if problems:
            self.new = []
        for row in self.rows:  # each setting's problems on its row
            row.show_verdict([m for f, m in problems if f == row.name and m not in row.problems])
        on_rows = {row.name for row in self.rows}
        self.problems_label.setText("<br>".join(
            f"<b>{html.escape(setting_label(field))}</b>: {html.escape(message)}"
            for field, message in problems if field not in on_rows))
        self.problems_label.setVisible(bool(self.problems_label.text()))
        count = len(self.new)
        self.total_label.setText(
            f"{count} new trial{'s' if count != 1 else ''} to queue"
            if count else "" if problems else
            "No new trials yet: give more values, repeats or random trials.")
        self.add_button.setEnabled(bool(self.new) and not self.asking)

    def accept(self) -> None:
        self.check()
        if not self.new:
            return
        self.asking = True
        self.add_button.setEnabled(False)
        self.extend_requested.emit(self.more(), self.samples_spin.value(),
                                   self.repeats_spin.value())

    def refuse(self, message: str) -> None:
        self.asking = False
        self.check()
        self.problems_label.setText(html.escape(message).replace("\n", "<br>"))
        self.problems_label.setVisible(True)

    def started(self) -> None:
        super().accept()
