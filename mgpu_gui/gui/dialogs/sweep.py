"""Run ▸ Sweep…: many runs of the current setup over chosen settings' values.

The run setup's current settings are the base; each row varies one sweepable
setting (core/sweeps/space.py reads its values, the CLI's parser). The dialog
builds a `SweepSpec` as it is edited and checks it with the core's validators
(`SweepSpec.problems`, `trial_problems`, the base's `RunConfig.problems`): every
problem is named, on its row where it has one, and Start stays disabled while any
is left. Before starting it says the size (trials x epochs) and a time from the
last similar run (core/sweeps/estimate.py); the past runs come from a callable the
window passes, called once in a background thread (a store query grows with the
history), so it must open its own store connection.

Start emits `start_requested(spec, name)` and waits: queueing the trials is the
caller's, which closes the dialog (`started`) or says why the store refused (`refuse`).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

from PySide6.QtCore import QSize, Signal
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QRadioButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.runs.compare import Direction, direction
from mgpu_gui.core.sweeps.estimate import PastRun, estimate
from mgpu_gui.core.sweeps.median import MIN_GRACE
from mgpu_gui.core.sweeps.trials import (
    DEFAULT_METRIC,
    Search,
    SweepSpec,
    plan_trials,
    reported_metrics,
    trial_problems,
)
from mgpu_gui.gui.jobs.background_job import source_name, spin_box
from mgpu_gui.gui.jobs.child_job import ChildJobRunner
from mgpu_gui.gui.widgets.field_cells import STYLE, hint_label
from mgpu_gui.gui.widgets.screen_fit import fit_to_screen
from mgpu_gui.gui.widgets.setting_names import setting_label
from mgpu_gui.gui.widgets.sweep_parameter import ParameterRow, setting_order

PastRuns = Callable[[], Sequence[PastRun]]  # runs to time the sweep by (from the store)
METRICS = ("val_loss", "val_accuracy", "loss", "accuracy")
# The sweep's own fields, as this dialog labels them (SweepSpec.problems names them).
SWEEP_FIELDS = {"parameters": "Vary", "samples": "Trials", "repeats": "Repeats",
                "gpus_per_trial": "GPUs per trial", "max_parallel": "At once",
                "grace": "Median rule", "metric": "Rank by"}
MAX_TRIALS = 10_000  # a random search's draws; more would take long to plan, let alone run


class _PastRunsJob:
    """The window's past-runs callable, run in ChildJobRunner's thread."""

    def __init__(self, read: PastRuns):
        self.read = read

    def run(self) -> list[PastRun] | str:
        try:
            return list(self.read())
        except Exception as error:  # a locked store costs the estimate, not the dialog
            return f"earlier runs could not be read: {error}"

    def cancel(self) -> None:
        """Nothing to stop: a store query ends on its own."""


class SweepDialog(QDialog):
    """The sweep's settings over a base RunConfig; `spec` is None while anything is wrong."""

    start_requested = Signal(object, str)  # SweepSpec, the sweep's name

    def __init__(self, base: RunConfig, *, compiled_model: bool = False,
                 past_runs: PastRuns | None = None, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Sweep")
        self.setAccessibleName("Sweep")
        self.setStyleSheet(STYLE)  # outlined fields and red messages, as in the run setup
        self.base = base
        self.compiled_model = compiled_model
        self.spec: SweepSpec | None = None
        self.problems: list[tuple[str, str]] = []  # (field, message), as shown
        self.past: list[PastRun] | None = None if past_runs is not None else []
        self._past_note = ""
        self.rows: list[ParameterRow] = []
        self.starting = False  # Start was clicked; the caller has not answered yet

        about = QLabel(
            f"Each trial is a run of the current setup ({source_name(base.model)} on "
            f"{source_name(base.data)}, {base.epochs} epochs) with one combination of the "
            "values below. Trials are queued: they run when their GPUs are free, also with "
            "this window closed.", wordWrap=True)
        about.setAccessibleName("What a sweep does")
        self.name_edit = QLineEdit()
        self.name_edit.setAccessibleName("Sweep name")
        self.name_edit.setToolTip("How the sweep is listed; empty: named after what it varies")
        self.rows_box = QVBoxLayout()
        self.rows_box.setContentsMargins(0, 0, 0, 0)
        self.add_button = QPushButton("&Add a setting")
        self.add_button.setAccessibleName("Add a setting to vary")
        self.add_button.setToolTip("Vary one more setting: a grid tries every combination")
        self.add_button.clicked.connect(lambda: self.add_row(self._unused_setting()))
        rows_widget = QWidget()
        rows_layout = QVBoxLayout(rows_widget)
        rows_layout.setContentsMargins(0, 0, 0, 0)
        rows_layout.addLayout(self.rows_box)
        add_row = QHBoxLayout()
        add_row.addWidget(self.add_button)
        add_row.addStretch(1)
        rows_layout.addLayout(add_row)
        rows_layout.addStretch(1)
        self.rows_scroll = QScrollArea()
        self.rows_scroll.setWidget(rows_widget)
        self.rows_scroll.setWidgetResizable(True)
        self.rows_scroll.setAccessibleName("Settings to vary")
        self.rows_scroll.setFrameShape(QScrollArea.Shape.NoFrame)

        self.grid_radio = QRadioButton("&Grid: every combination")
        self.grid_radio.setAccessibleName("Grid search")
        self.random_radio = QRadioButton("&Random:")
        self.random_radio.setAccessibleName("Random search")
        self.random_radio.setToolTip("Draw settings at random: a range is drawn from whole "
                                     "(log-uniformly for log:), a list's values alike")
        self.grid_radio.setChecked(True)
        group = QButtonGroup(self)
        group.addButton(self.grid_radio)
        group.addButton(self.random_radio)
        self.samples_spin = spin_box(1, MAX_TRIALS, 8, "Random trials",
                                     "How many settings to draw (each drawn once)")
        self.samples_spin.setSuffix(" trials")
        self.seed_spin = spin_box(0, 2**31 - 1, 0, "Random search seed",
                                  "The same seed draws the same trials")
        self.seed_spin.setPrefix("seed ")
        self.repeats_spin = spin_box(1, 100, 1, "Repeats",
                                     "Runs of each setting, with seeds seed, seed+1, …: their "
                                     "mean and spread show how much is chance")
        replicas = base.devices.replicas
        self.gpus_spin = spin_box(0, 64, 0, "GPUs per trial",
                                  "GPUs each trial claims; a swept GPU count wins for its "
                                  "trials")
        self.gpus_spin.setSpecialValueText(
            f"as set up ({replicas})" if replicas is not None else "as set up")
        self.parallel_spin = spin_box(1, 64, 1, "Trials at once",
                                      "The most trials running at the same time, each on "
                                      "GPUs of its own")
        self.metric_combo = QComboBox()
        self.metric_combo.setEditable(True)
        self.metric_combo.addItems(METRICS)
        self.metric_combo.setCurrentText(DEFAULT_METRIC)
        self.metric_combo.setAccessibleName("Metric that ranks the trials")
        self.metric_combo.lineEdit().setAccessibleName("Metric that ranks the trials")
        self.metric_combo.setToolTip("The trials' best value of this metric ranks them")
        self.metric_hint = QLabel()
        self.metric_hint.setProperty("role", "hint")
        self.median_check = QCheckBox("Stop clearly worse trials early (median rule), after")
        self.median_check.setAccessibleName("Median stopping")
        self.median_check.setToolTip(
            "A trial whose best so far is worse than the median of the other trials at the "
            "same epoch (at least 3 of them) is stopped; off by default")
        self.grace_spin = spin_box(MIN_GRACE, 1000, MIN_GRACE, "Median rule grace epochs",
                                   f"Epochs every trial trains before it can be judged (at "
                                   f"least {MIN_GRACE})")
        self.grace_spin.setSuffix(" epochs")
        self.override_check = QCheckBox("Override the model file's optimizer")
        self.override_check.setAccessibleName("Override the model file's optimizer")
        self.override_check.setToolTip(
            "The model file brings its own compiled optimizer and learning rate; trials train "
            "with the ones set here instead (same as --override-compile)")
        self.override_check.setChecked(base.override_compile)
        self.override_check.setVisible(compiled_model)
        self.total_label = hint_label("Sweep size and time", lines=2, role=None)
        self.problems_label = QLabel(wordWrap=True)
        self.problems_label.setProperty("role", "error")
        self.problems_label.setAccessibleName("Sweep problems")

        search = QHBoxLayout()
        for widget in (self.grid_radio, self.random_radio, self.samples_spin, self.seed_spin):
            search.addWidget(widget)
        search.addStretch(1)
        trials = QHBoxLayout()
        for text, widget in (("R&epeats", self.repeats_spin), ("G&PUs per trial", self.gpus_spin),
                             ("At &once", self.parallel_spin)):
            label = QLabel(text)
            label.setBuddy(widget)
            trials.addWidget(label)
            trials.addWidget(widget)
            trials.addSpacing(8)
        trials.addStretch(1)
        rank = QHBoxLayout()
        rank.addWidget(self.metric_combo)
        rank.addWidget(self.metric_hint)
        rank.addStretch(1)
        median = QHBoxLayout()
        median.addWidget(self.median_check)
        median.addWidget(self.grace_spin)
        median.addStretch(1)
        form = QFormLayout()
        form.addRow("&Name", self.name_edit)
        form.labelForField(self.name_edit).setBuddy(self.name_edit)
        form.addRow("Vary", self.rows_scroll)
        form.addRow("Search", search)
        form.addRow("Trials", trials)
        form.addRow("Rank by", rank)
        form.addRow("", median)
        form.addRow("", self.override_check)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.start_button = self.buttons.addButton("&Start sweep",
                                                   QDialogButtonBox.ButtonRole.AcceptRole)
        self.start_button.setAccessibleName("Start sweep")
        self.start_button.setToolTip("Queue every trial; they start as GPUs free up")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(about)
        layout.addLayout(form, 1)
        layout.addWidget(self.total_label)
        layout.addWidget(self.problems_label)
        layout.addWidget(self.buttons)

        for signal in (self.samples_spin.valueChanged, self.seed_spin.valueChanged,
                       self.repeats_spin.valueChanged, self.gpus_spin.valueChanged,
                       self.parallel_spin.valueChanged, self.grace_spin.valueChanged,
                       self.grid_radio.toggled, self.median_check.toggled,
                       self.override_check.toggled, self.metric_combo.currentTextChanged):
            signal.connect(self.check)
        self.reader = ChildJobRunner(self)
        if past_runs is not None:
            self.reader.finished.connect(self._past_read)
            self.reader.start(_PastRunsJob(past_runs))
        self.add_row("learning_rate")
        fit_to_screen(self, QSize(760, 620))

    # -- rows ------------------------------------------------------------------------------

    def add_row(self, name: str, text: str = "") -> ParameterRow:
        row = ParameterRow(name, text)
        row.changed.connect(self.check)
        row.remove_requested.connect(self._remove_row)
        self.rows.append(row)
        self.rows_box.addWidget(row)
        row.values.setFocus()
        self.check()
        return row

    def _remove_row(self, row: ParameterRow) -> None:
        self.rows.remove(row)
        row.deleteLater()
        self.check()

    def _unused_setting(self) -> str:
        used = {row.name for row in self.rows}
        names = setting_order()
        return next((name for name in names if name not in used), names[0])

    # -- the spec and its problems ---------------------------------------------------------

    def sweep_name(self) -> str:
        typed = self.name_edit.text().strip()
        return typed or " × ".join(setting_label(row.name) for row in self.rows) or "sweep"

    def check(self) -> None:
        """Build the spec from the widgets and name everything that keeps it from starting."""
        base = self.base.replace(override_compile=self.override_check.isChecked())
        random = self.random_radio.isChecked()
        self.samples_spin.setEnabled(random)
        self.seed_spin.setEnabled(random)
        self.grace_spin.setEnabled(self.median_check.isChecked())
        metric = self.metric_combo.currentText().strip()
        self.metric_hint.setText(("lower is better" if direction(metric) is Direction.MIN
                                  else "higher is better") if metric else "")
        parameters = [p for row in self.rows if (p := row.check(base)) is not None]
        spec = SweepSpec(
            base, tuple(parameters), Search.RANDOM if random else Search.GRID,
            samples=self.samples_spin.value() if random else 0,
            random_seed=self.seed_spin.value(), repeats=self.repeats_spin.value(),
            gpus_per_trial=self.gpus_spin.value() or None,
            max_parallel=self.parallel_spin.value(), metric=metric,
            median_stop=self.median_check.isChecked(), grace=self.grace_spin.value())
        problems = [(row.name, message) for row in self.rows for message in row.problems]
        problems += [(field, message) for field, message
                     in spec.problems(compiled_model=self.compiled_model,
                                      reported=reported_metrics(base, self.compiled_model))
                     if not (field == "parameters" and self.rows and not parameters)]
        # (With rows but none readable, each row says what it lacks.)
        swept = set(spec.swept)
        problems += [(field, message) for field, message in base.problems()
                     if field not in swept]
        trials = plan_trials(spec) if not problems else []
        problems += trial_problems(spec, trials)
        for row in self.rows:
            row.show_verdict([m for f, m in problems if f == row.name
                              and m not in row.problems])
        self.problems = problems
        self.spec = spec if not problems else None
        # A row's problems are spelled out on it; here they are only named (a row with no
        # values typed yet says what to give, in grey: not named here in red).
        rows = {r.name for r in self.rows}
        waiting = {r.name for r in self.rows if r.awaits_input()}
        lines = [f"<b>{_label(field)}</b>: {html.escape(message)}"
                 for field, message in problems if field not in rows]
        on_rows = [f for f in dict.fromkeys(f for f, _ in problems if f in rows)
                   if f not in waiting]
        if on_rows:
            lines.insert(0, f"Fix the values of {', '.join(map(_label, on_rows))} (said on "
                            f"{'their rows' if len(on_rows) > 1 else 'its row'}).")
        self.problems_label.setText("<br>".join(lines))
        self.problems_label.setVisible(bool(lines))
        self.start_button.setEnabled(self.spec is not None and not self.starting)
        self._show_total(trials)

    def _show_total(self, trials: Sequence) -> None:
        if not trials:
            self.total_label.setText("")
            return
        at_once = self.parallel_spin.value()
        if self.past is None:
            found = estimate(trials, (), at_once=at_once)
            self.total_label.setText(f"{found.trials} trials, {found.epochs} epochs in all; "
                                     "timing it by earlier runs…")
            return
        text = estimate(trials, self.past, at_once=at_once).text
        self.total_label.setText(text + (f" ({self._past_note})" if self._past_note else ""))

    def _past_read(self, outcome: list[PastRun] | str) -> None:
        self.past, self._past_note = (outcome, "") if isinstance(outcome, list) else ([], outcome)
        self.check()

    # -- ending ----------------------------------------------------------------------------

    def accept(self) -> None:
        """Ask to start; the dialog stays open until the caller says `started` (it closes)
        or `refuse` (it says why, and Start is enabled again)."""
        self.check()  # what Start acts on is what the widgets say now
        if self.spec is None:
            return
        self.starting = True
        self.start_button.setEnabled(False)
        self.start_button.setText("Starting…")
        self.start_requested.emit(self.spec, self.sweep_name())

    def refuse(self, message: str) -> None:
        """The store refused the sweep (nothing was queued): say why, under the settings."""
        self.starting = False
        self.start_button.setText("&Start sweep")
        self.check()
        self.problems_label.setText(html.escape(message).replace("\n", "<br>"))
        self.problems_label.setVisible(True)

    def started(self) -> None:
        super().accept()

    def done(self, result: int) -> None:  # Escape, and every other way a dialog ends
        self.reader.shutdown()
        super().done(result)

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 (Qt's name)
        self.reader.shutdown()
        super().closeEvent(event)


def _label(field: str) -> str:
    return html.escape(SWEEP_FIELDS.get(field) or setting_label(field))
