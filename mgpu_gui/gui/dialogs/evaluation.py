"""How good a run's model is: its figures, the confusion matrix, and a cell's samples.

Opened from the Runs tab. A run evaluated before opens at once from the run
history; otherwise the evaluator child predicts every sample of its test (else
validation) split, with progress and Cancel, and the result is kept in the
run's folder and the history. The predictions are read in a background thread
(they back the list of a cell's samples, most confident mistakes first). A
model that does not classify gets its MAE and MSE and a residual plot instead.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QModelIndex, QObject, QSize, Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from mgpu_gui.core.config import DeviceSelection, RunConfig
from mgpu_gui.core.devices.nvml import query_inventory
from mgpu_gui.core.devices.plan import plan_devices
from mgpu_gui.core.evaluation import report
from mgpu_gui.core.evaluation.metrics import TOP_K, ClassifierMetrics, top_classes
from mgpu_gui.core.evaluation.result import PREDICTIONS_FILE, EvaluationResult
from mgpu_gui.core.evaluation.samples import SampleOrigins
from mgpu_gui.core.events import (
    EvaluationDone,
    EvaluationFailed,
    EvaluationProgress,
    PredictionsMade,
)
from mgpu_gui.core.runs.folder import RunDir
from mgpu_gui.core.runs.store import RunRecord, RunStore
from mgpu_gui.core.tools.evaluate_job import EvaluateJob, EvaluateRequest, PredictRequest
from mgpu_gui.gui.dialogs.cell_samples import CellSamples, Predictions
from mgpu_gui.gui.jobs.child_job import ChildJobRunner
from mgpu_gui.gui.theme import plot_colors
from mgpu_gui.gui.widgets.confusion import CellText, ConfusionModel, ConfusionView
from mgpu_gui.gui.widgets.plot_export import install_export
from mgpu_gui.gui.widgets.plots import color_plot
from mgpu_gui.gui.widgets.runs_table import short_name
from mgpu_gui.gui.widgets.screen_fit import fit_to_screen
from mgpu_gui.gui.widgets.try_sample import TrySample

SCORE_COLUMNS = ("Class", "Precision", "Recall", "F1", "Support")


@dataclass(frozen=True)
class Loaded:
    """An evaluation with the predictions it came from (one row per sample)."""

    result: EvaluationResult
    samples: Predictions


@dataclass(frozen=True)
class Subject:
    """What is evaluated: a run (its model, its own data settings; the result is kept in
    its folder and its history row), or a model file on data the user picked (kept only
    while the view is open)."""

    title: str
    run_dir: RunDir | None = None
    run_id: int | None = None
    model_file: Path | None = None
    settings: RunConfig | None = None  # a model file's: the data and how to read it

    @classmethod
    def of_run(cls, record: RunRecord) -> Subject:
        return cls(short_name(record), RunDir(record.run_dir), record.id)

    @classmethod
    def of_files(cls, settings: RunConfig) -> Subject:
        """The run setup's model file on its data, read with its settings."""
        model = Path(settings.model)
        return cls(f"{model.name} on {Path(settings.data).name}", model_file=model,
                   settings=settings)

    def model(self) -> Path | None:
        """The model file (a run's: a file system look, so off the GUI thread)."""
        return self.run_dir.trained_model() if self.run_dir is not None else self.model_file

    def config(self) -> RunConfig:
        """The data settings (a run's config.json: off the GUI thread)."""
        if self.run_dir is not None:
            return self.run_dir.read_config()
        assert self.settings is not None
        return self.settings


class _Progress(QObject):
    evaluating = Signal()  # none was kept: the evaluator child starts
    changed = Signal(int, int)  # samples done, of


class EvaluationJob:
    """Off the GUI thread: the kept evaluation (the run store, the run folder), else the
    devices (NVML) and the evaluator child; then the predictions."""

    def __init__(self, subject: Subject, folder: Path, store: Path | None,
                 progress: _Progress):
        self.subject, self.folder, self.store, self.progress = subject, folder, store, progress
        self._job: EvaluateJob | None = None
        self._cancelled = False

    def run(self) -> Loaded | EvaluationFailed:
        result = self._stored()
        if result is None:
            self.progress.evaluating.emit()
            model = self.subject.model()
            if model is None:
                return EvaluationFailed("This run has no trained model yet: finish at least "
                                        "one epoch first.", "", True)
            config = self.subject.config()
            request = EvaluateRequest(model, config, plan_devices(config.devices,
                                                                  query_inventory()),
                                      output=self.folder)
            self._job = EvaluateJob(request, on_progress=self._progress)
            if self._cancelled:
                return EvaluationFailed("The evaluation was cancelled.", "Cancelled", False)
            outcome = self._job.run()
            if not isinstance(outcome, EvaluationDone):
                assert isinstance(outcome, EvaluationFailed)
                return outcome
            result = EvaluationResult.from_dict(outcome.result)
            if self.store is not None and self.subject.run_id is not None:
                with RunStore(self.store) as store:  # this thread's own connection
                    store.save_evaluation(self.subject.run_id, result)
        predictions = self.folder / PREDICTIONS_FILE
        names = result.classifier.class_names if result.classifier is not None else ()
        with np.load(predictions) as kept:
            return Loaded(result, Predictions(
                predictions, kept["labels"], kept["outputs"], SampleOrigins.from_arrays(kept),
                names, result.split.words))

    def _stored(self) -> EvaluationResult | None:
        """The run's kept evaluation, if its folder still has the predictions."""
        if self.store is None or self.subject.run_id is None:
            return None
        with RunStore(self.store) as store:
            stored = store.evaluation(self.subject.run_id)
        return stored if (self.folder / PREDICTIONS_FILE).is_file() else None

    def cancel(self) -> None:
        self._cancelled = True
        if self._job is not None:
            self._job.cancel()

    def _progress(self, event: EvaluationProgress) -> None:
        self.progress.changed.emit(event.done, event.total)


class TryFileJob:
    """Off the GUI thread: one image file through the model (the predict child)."""

    def __init__(self, subject: Subject, path: Path):
        self.subject, self.path = subject, path
        self._job: EvaluateJob | None = None

    def run(self) -> PredictionsMade | EvaluationFailed:
        model = self.subject.model()
        if model is None:
            return EvaluationFailed("This run has no trained model.", "", True)
        plan = plan_devices(DeviceSelection(replicas=1), query_inventory())
        self._job = EvaluateJob(PredictRequest(model, (self.path,), plan, top=TOP_K))
        outcome = self._job.run()
        assert not isinstance(outcome, EvaluationDone)
        return outcome

    def cancel(self) -> None:
        if self._job is not None:
            self._job.cancel()


class EvaluationDialog(QDialog):
    def __init__(self, subject: Subject, store: RunStore | None = None,
                 parent: QWidget | None = None):
        """A run's subject keeps its result in its folder and in `store` (read and written
        off the GUI thread); a model file's in a temporary folder, gone with the view."""
        super().__init__(parent)
        self.subject = subject
        self.loaded: Loaded | None = None
        self.setWindowTitle(f"Evaluation of {subject.title}")
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.pages = QStackedWidget(self)
        self.pages.addWidget(self._progress_page())
        self.results = QWidget(self)
        self.pages.addWidget(self.results)
        layout = QVBoxLayout(self)
        layout.addWidget(self.pages)
        fit_to_screen(self, QSize(1000, 680))
        self._progress = _Progress(self)
        self._progress.changed.connect(self._on_progress)
        self._jobs = ChildJobRunner(self)
        self._jobs.finished.connect(self._ended)
        self._tries = ChildJobRunner(self)
        self._tries.finished.connect(self._tried)
        self._progress.evaluating.connect(lambda: self.status.setText(
            "Evaluating every test (else validation) sample in a background process…"))
        if subject.run_dir is not None:
            folder = subject.run_dir.path
        else:
            self._scratch = tempfile.TemporaryDirectory(prefix="mgpu-evaluation-")
            folder = Path(self._scratch.name)
            self.destroyed.connect(self._scratch.cleanup)
        self.status.setText("Reading the evaluation…")
        self._jobs.start(EvaluationJob(subject, folder, None if store is None else store.path,
                                       self._progress))

    # -- waiting ------------------------------------------------------------------------
    def _progress_page(self) -> QWidget:
        page = QWidget(self)
        self.status = QLabel(page)
        self.status.setWordWrap(True)
        self.bar = QProgressBar(page)
        self.bar.setRange(0, 0)
        self.bar.setAccessibleName("Evaluation progress")
        self.cancel_button = QPushButton("Cancel", page)
        self.cancel_button.clicked.connect(self.close)
        layout = QVBoxLayout(page)
        layout.addStretch(1)
        layout.addWidget(self.status)
        layout.addWidget(self.bar)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(self.cancel_button)
        layout.addLayout(row)
        layout.addStretch(1)
        return page

    def _on_progress(self, done: int, total: int) -> None:
        self.bar.setRange(0, total)
        self.bar.setValue(done)
        self.status.setText(f"Predicted {done:,} of {total:,} samples…")

    def _ended(self, outcome: Loaded | EvaluationFailed) -> None:
        if isinstance(outcome, EvaluationFailed):
            self.status.setText(f"The evaluation failed: {outcome.message}")
            self.bar.hide()
            self.cancel_button.setText("Close")
            return
        self.loaded = outcome
        self._fill(outcome)
        self.pages.setCurrentWidget(self.results)

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        self._jobs.shutdown()  # kills a running evaluator child
        self._tries.shutdown()
        if hasattr(self, "cell"):
            self.cell.shutdown()
        super().closeEvent(event)

    # -- results -----------------------------------------------------------------------
    def _fill(self, loaded: Loaded) -> None:
        layout = QVBoxLayout(self.results)
        summary = QLabel(report.summary(loaded.result), self.results)
        summary.setWordWrap(True)
        summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(summary)
        labels = loaded.result.multi_label
        if labels is not None:
            layout.addWidget(QLabel(
                f"Independent labels, each said yes at a probability of {labels.threshold:g} "
                "or more: per label, and averaged over every decision (micro) or every "
                "label (macro, weighted by support).", self.results))
            self.scores = _scores_table(self.results, report.csv_rows(labels),
                                        "Per-label precision, recall, F1, support")
            layout.addWidget(self.scores, 1)
            return
        metrics = loaded.result.classifier
        if metrics is None:
            layout.addWidget(QLabel("This model does not classify (its loss predicts values): "
                                    "its mean absolute and squared errors are above, and each "
                                    "sample's error against its target below.", self.results))
            layout.addWidget(self._residual_plot(loaded), 1)
            return
        splitter = QSplitter(Qt.Orientation.Horizontal, self.results)
        splitter.addWidget(self._matrix_side(metrics))
        splitter.addWidget(self._tables_side(metrics))
        splitter.setStretchFactor(0, 5)
        splitter.setStretchFactor(1, 4)
        layout.addWidget(splitter, 1)

    def _matrix_side(self, metrics: ClassifierMetrics) -> QWidget:
        side = QWidget(self.results)
        self.cell_text = QComboBox(side)
        self.cell_text.addItems([t.value for t in CellText])
        self.cell_text.setAccessibleName("Confusion matrix cells show")
        self.matrix = ConfusionView(side)
        self.matrix_model = ConfusionModel(metrics, self.palette())
        self.matrix.setModel(self.matrix_model)
        self.cell_text.currentTextChanged.connect(
            lambda text: self.matrix_model.set_text(CellText(text)))
        self.matrix.clicked.connect(self.show_cell)
        row = QHBoxLayout()
        row.addWidget(QLabel("Confusion matrix (rows: true class, columns: predicted)", side))
        row.addStretch(1)
        row.addWidget(self.cell_text)
        layout = QVBoxLayout(side)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(row)
        layout.addWidget(self.matrix, 1)
        return side

    def _tables_side(self, metrics: ClassifierMetrics) -> QWidget:
        side = QWidget(self.results)
        self.scores = _scores_table(side, report.csv_rows(metrics),
                                    "Per-class precision, recall, F1, support")
        loaded = self.loaded
        assert loaded is not None
        self.cell = CellSamples(loaded.samples, side)
        self.try_sample = TrySample(loaded.result.samples, side)
        self.try_sample.file_chosen.connect(self.try_file)
        self.try_sample.sample_chosen.connect(self.try_number)
        self.cell.sample_chosen.connect(self._listed_sample_clicked)
        layout = QVBoxLayout(side)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.scores, 1)
        layout.addWidget(self.cell, 2)
        layout.addWidget(self.try_sample)
        return side

    def try_file(self, path: Path) -> None:
        self.try_sample.top.show_message(f"Predicting {path.name}…")
        self._tries.start(TryFileJob(self.subject, path))

    def _tried(self, outcome: PredictionsMade | EvaluationFailed) -> None:
        if isinstance(outcome, EvaluationFailed):
            self.try_sample.top.show_message(outcome.message)
            return
        row = outcome.rows[0]
        if row["error"]:
            self.try_sample.top.show_message(row["error"])
            return
        self.try_sample.top.show_top(f"{Path(row['file']).name} ({outcome.inputs}):",
                                 [(name, p) for name, p in row["top"]])

    def _listed_sample_clicked(self, sample: int) -> None:
        """A sample of a cell's list: its top classes in "Try a sample"."""
        self.try_sample.number.setValue(sample)
        self.try_number(sample)

    def try_number(self, sample: int) -> None:
        """A sample of the evaluated split: its top classes from the kept predictions."""
        assert self.loaded is not None and self.loaded.result.classifier is not None
        p = self.loaded.samples
        true = p.names[int(p.labels[sample])]
        self.try_sample.top.show_top(f"Sample #{sample} of the {p.split} split (true: {true}):",
                                     top_classes(p.outputs[sample], p.names))

    def show_cell(self, index: QModelIndex) -> None:
        """The samples of class `index.row()` predicted as `index.column()`."""
        self.cell.show_cell(index.row(), index.column())

    def _residual_plot(self, loaded: Loaded) -> QWidget:
        p = loaded.samples
        targets = p.labels.reshape(len(p.labels), -1)[:, 0].astype(np.float64)
        outputs = p.outputs.reshape(len(p.outputs), -1)[:, 0].astype(np.float64)
        plot = pg.PlotWidget(self.results)
        colors = plot_colors(self.palette())
        color_plot(plot, colors)
        plot.setLabel("bottom", "target")
        plot.setLabel("left", "prediction − target")
        plot.addItem(pg.ScatterPlotItem(targets, outputs - targets, size=5,
                                        brush=pg.mkBrush(colors.val), pen=None))
        plot.addLine(y=0, pen=pg.mkPen(colors.axis))
        plot.setAccessibleName("Residuals: each sample's prediction error against its target")
        run = self.subject.run_dir
        install_export(plot, lambda: run.path if run is not None else None)
        return plot


def _scores_table(parent: QWidget, rows: list[tuple[str, float, float, float, int]],
                  name: str) -> QTableWidget:
    table = _table(parent, SCORE_COLUMNS, name)
    table.setRowCount(len(rows))
    for r, (label, precision, recall, f1, support) in enumerate(rows):
        for c, value in enumerate((label, f"{precision:.3f}", f"{recall:.3f}", f"{f1:.3f}",
                                   str(support))):
            table.setItem(r, c, QTableWidgetItem(value))
    return table


def _table(parent: QWidget, columns: tuple[str, ...], name: str) -> QTableWidget:
    table = QTableWidget(0, len(columns), parent)
    table.setHorizontalHeaderLabels(list(columns))
    table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
    table.verticalHeader().setVisible(False)
    table.verticalHeader().setDefaultSectionSize(table.fontMetrics().height() + 6)
    header = table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
    header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)  # names
    table.setAccessibleName(name)
    return table

