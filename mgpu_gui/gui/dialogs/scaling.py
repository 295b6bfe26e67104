"""The scaling test dialog: time the chosen model on 1, 2, ... N devices and plot it.

`ScalingDialog` holds the settings, the progress, the plots, the table, the
recommendation and the CSV / PNG export; a `ScalingController` runs the test
in the background (one worker process per count), so TensorFlow never loads
in this process and the window never waits.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import (
    QComboBox,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSplitter,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.tools.phases import phase_text
from mgpu_gui.core.tools.scaling import (
    DEFAULT_STEPS,
    DEFAULT_THRESHOLD,
    DEFAULT_WARMUP,
    ScalePoint,
    ScalingMode,
    ScalingReport,
    device_word,
    parse_counts,
    recommend,
    wait_text,
    write_csv,
)
from mgpu_gui.core.tools.scaling_runner import ScaleProgress, ScaleRequest, ScaleRunner
from mgpu_gui.gui.jobs.background_job import (
    JobDialog,
    error_html,
    labelled_grid,
    source_name,
    spin_box,
)
from mgpu_gui.gui.jobs.scaling_job import ScalingController
from mgpu_gui.gui.widgets.save_file import ask_save_path
from mgpu_gui.gui.widgets.scaling_plot import ScalingPlot, render_png
from mgpu_gui.gui.widgets.screen_fit import fit_to_screen
from mgpu_gui.gui.widgets.tables import read_only_table

COLUMNS = ("Devices", "Global batch", "Per device", "Samples/s", "Speed-up", "Efficiency",
           "Input wait", "Step median", "Step p10–p90", "Status")


class ScalingDialog(JobDialog):
    """Settings, progress, plots, table, recommendation and export of a scaling test.

    `config` is the run the main window would start (model, data, devices,
    batch per device); the test measures that run on 1, 2, ... N devices.
    """

    CANCELLING = "Cancelling: the running count's process is being stopped…"

    def __init__(self, parent: QWidget | None = None, config: RunConfig | None = None, *,
                 runner_factory=ScaleRunner):
        super().__init__(parent, "Scaling test", ScalingController(runner_factory=runner_factory))
        self.config = config or RunConfig()
        self.report: ScalingReport | None = None
        self._build()
        self._set_running(False)
        fit_to_screen(self, QSize(1100, 820))

    # -- layout ----------------------------------------------------------------
    def _build(self) -> None:
        config, selection = self.config, self.config.devices
        what = QLabel(f"<b>{source_name(config.model)}</b> on <b>{source_name(config.data)}</b>")
        what.setToolTip(f"Model: {config.model}\nData: {config.data}\n"
                        "Change them in the run setup.")
        what.setAccessibleName("Model and data measured")
        what.setWordWrap(True)  # long file names: two lines rather than a wider dialog
        self.max_spin = spin_box(1, len(selection.gpus) or 64,
                              len(selection.gpus) or selection.replicas or 2,
                              "Largest device count",
                              "Time 1, 2, ... up to this many devices (the first N of the "
                              "chosen GPUs, or N CPU replicas)")
        self.max_spin.setSuffix(f" {_devices_text(selection)}")
        self.counts_edit = QLineEdit()
        self.counts_edit.setPlaceholderText("1, 2, … N")
        self.counts_edit.setAccessibleName("Device counts to time")
        self.counts_edit.setToolTip("Optional: only these counts, e.g. 1,2,4,8")
        self.mode_combo = QComboBox()
        self.mode_combo.addItem("Weak: batch per device fixed", ScalingMode.WEAK)
        self.mode_combo.addItem("Strong: global batch fixed", ScalingMode.STRONG)
        self.mode_combo.setAccessibleName("Scaling mode")
        self.mode_combo.setToolTip("Weak: every device keeps its batch, the global batch grows."
                                   "\nStrong: the global batch stays, each device gets a share.")
        self.batch_spin = spin_box(1, 1 << 16, config.batch_per_replica, "Batch per device",
                                "Samples per device per step (weak scaling)")
        self.global_spin = spin_box(1, 1 << 20, config.batch_per_replica * self.max_spin.value(),
                                 "Global batch", "Samples per step over all devices (strong "
                                 "scaling); counts it does not divide are skipped")
        self.steps_spin = spin_box(2, 10_000, DEFAULT_STEPS, "Timed steps",
                                "Steps timed per count, after the warm-up")
        self.warmup_spin = spin_box(1, 1_000, DEFAULT_WARMUP, "Warm-up steps",
                                 "Untimed steps first; the first one compiles the step")
        self.threshold_spin = spin_box(1, 100, round(DEFAULT_THRESHOLD * 100),
                                    "Efficiency threshold",
                                    "The recommendation is the largest count at or above this "
                                    "efficiency (speed-up / devices)")
        self.threshold_spin.setSuffix(" %")
        self.mode_combo.currentIndexChanged.connect(self._on_mode)
        self.threshold_spin.valueChanged.connect(self._on_threshold)

        settings = QGroupBox("What to measure")
        grid = QGridLayout(settings)
        grid.addWidget(QLabel("Model and data"), 0, 0, Qt.AlignmentFlag.AlignTop)
        grid.addWidget(what, 0, 1, 1, 5)  # a row of its own: file names can be long
        labelled_grid(grid, [
            (("&Devices, up to", self.max_spin), ("&Counts", self.counts_edit)),
            (("&Scaling", self.mode_combo), ("&Batch per device", self.batch_spin),
             ("&Global batch", self.global_spin)),
            (("&Timed steps", self.steps_spin), ("&Warm-up steps", self.warmup_spin),
             ("Efficiency t&hreshold", self.threshold_spin)),
        ], first_row=1)
        self._on_mode()

        run_row = self._run_row(
            "&Run scaling test", "Run scaling test",
            "Time each count in its own worker process, one after the other",
            "Cancel test", "Cancel scaling test",
            "Stop now: the running count's process is killed", "Scaling test progress")
        self.progress_bar.setRange(0, 1000)
        self.status = QLabel("Ready.")
        self.status.setAccessibleName("Scaling test status")
        self.status.setWordWrap(True)

        self.plot = ScalingPlot()
        self.plot.clear(self.max_spin.value())
        self.max_spin.valueChanged.connect(self._show_empty_plot)
        self.table = read_only_table(COLUMNS, "Scaling figures per device count")
        self.recommendation = QLabel("Run the test to get a recommendation.")
        self.recommendation.setAccessibleName("Recommendation")
        self.recommendation.setWordWrap(True)
        self.recommendation.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        # Its own text colour too: a dark theme's light text would vanish on the light green.
        self.recommendation.setStyleSheet("QLabel { padding: 6px; background: #f1f8e9; "
                                          "color: #1b3d1b; border: 1px solid #c5e1a5; "
                                          "border-radius: 4px; }")
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.plot)
        splitter.addWidget(self.table)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)

        self.csv_button = QPushButton("Export &CSV…")
        self.csv_button.setAccessibleName("Export figures as CSV")
        self.csv_button.setToolTip("One row per device count, for a spreadsheet")
        self.csv_button.clicked.connect(self._ask_csv)
        self.png_button = QPushButton("Export &PNG…")
        self.png_button.setAccessibleName("Export plot as PNG")
        self.png_button.setToolTip("The plots with a title and the recommendation")
        self.png_button.clicked.connect(self._ask_png)
        close = QPushButton("Close")
        close.setAccessibleName("Close scaling test")
        close.clicked.connect(self.close)
        bottom = QHBoxLayout()
        bottom.addWidget(self.csv_button)
        bottom.addWidget(self.png_button)
        bottom.addStretch(1)
        bottom.addWidget(close)

        layout = QVBoxLayout(self)
        layout.addWidget(settings)
        layout.addLayout(run_row)
        layout.addWidget(self.status)
        layout.addWidget(splitter, 1)
        layout.addWidget(self.recommendation)
        layout.addLayout(bottom)

    # -- running ---------------------------------------------------------------
    def request(self) -> ScaleRequest:
        """The test the settings describe; UserError for a bad counts list."""
        selection, k = self.config.devices, self.max_spin.value()
        if selection.gpus:
            devices = DeviceSelection(kind=DeviceKind.GPU, gpus=selection.gpus[:k])
        else:
            devices = DeviceSelection(kind=selection.kind, replicas=k)
        text = self.counts_edit.text().strip()
        counts = tuple(parse_counts(text, k)) if text else None
        mode = ScalingMode(self.mode_combo.currentData())
        return ScaleRequest(
            config=self.config.replace(devices=devices,
                                       batch_per_replica=self.batch_spin.value()),
            mode=mode, counts=counts, steps=self.steps_spin.value(),
            warmup=self.warmup_spin.value(),
            global_batch=self.global_spin.value() if mode is ScalingMode.STRONG else None,
            threshold=self.threshold_spin.value() / 100)

    def start(self) -> None:
        try:
            request = self.request()
        except UserError as error:
            self._on_failed(str(error))
            return
        self.report = None
        self.plot.clear(self.max_spin.value())
        self.table.setRowCount(0)
        self.recommendation.setText("Measuring…")
        self.progress_bar.setValue(0)
        self.status.setText("Planning the counts…")
        self._set_running(True)
        self.controller.start(request)

    def _set_running(self, running: bool) -> None:
        self.start_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)
        for widget in (self.max_spin, self.counts_edit, self.mode_combo, self.batch_spin,
                       self.global_spin, self.steps_spin, self.warmup_spin):
            widget.setEnabled(not running)
        self._on_mode()
        has_figures = self.report is not None and bool(self.report.ok_points())
        self.csv_button.setEnabled(not running and self.report is not None)
        self.png_button.setEnabled(not running and has_figures)

    def _show_empty_plot(self) -> None:
        if self.report is None:  # before the first test: its devices are the spin's
            self.plot.clear(self.max_spin.value())

    def _on_progress(self, p: ScaleProgress) -> None:
        self.progress_bar.setValue(round(1000 * p.fraction))
        label = f"{p.devices} {device_word(self._kind(), p.devices)}"
        phase = phase_text(p.phase, self.config.engine)
        if p.phase == "timing" and p.steps:
            phase = f"timing step {p.step} of {p.steps}"
        self.status.setText(f"Count {p.index + 1} of {p.total}: {label}, {phase}…")

    def _on_failed(self, message: str) -> None:
        self.status.setText(error_html(message))
        self.recommendation.setText("No recommendation: the test did not run.")

    def _on_finished(self, report: ScalingReport | None) -> None:
        if report is not None:
            self.show_report(report)
            done = len(report.ok_points())
            self.status.setText(f"Done: {done} of {len(report.points)} counts measured."
                                if not any(p.status.value == "cancelled" for p in report.points)
                                else f"Cancelled: {done} of {len(report.points)} counts "
                                     f"measured.")
            self.progress_bar.setValue(1000)
        self._set_running(False)
        self.start_button.setFocus()  # not the spin box the disabled widgets passed it to

    def _kind(self) -> str:
        if self.report is not None:
            return self.report.device_kind
        return "gpu" if self.config.devices.gpus else self.config.devices.kind.value

    # -- figures ---------------------------------------------------------------
    def show_report(self, report: ScalingReport) -> None:
        """Show figures (also a partial report while the test runs)."""
        self.report = report
        self.plot.set_report(report)
        self._fill_table(report)
        rec = report.recommendation
        text = rec.sentence if rec else "No count was measured, so there is no recommendation."
        self.recommendation.setText(" ".join([text, *report.notes]))
        self._set_running(self.controller.is_running())

    def _fill_table(self, report: ScalingReport) -> None:
        self.table.setRowCount(len(report.points))
        rec = report.recommendation.devices if report.recommendation else None
        for row, p in enumerate(report.points):
            cells = _cells(p)
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                align = Qt.AlignmentFlag.AlignRight if col < len(cells) - 1 else (
                    Qt.AlignmentFlag.AlignLeft)
                item.setTextAlignment(align | Qt.AlignmentFlag.AlignVCenter)
                if p.devices == rec:
                    font = QFont(item.font())
                    font.setBold(True)
                    item.setFont(font)
                if col == COLUMNS.index("Efficiency") and p.efficiency is not None:
                    good = p.efficiency >= report.threshold
                    item.setForeground(QColor("#2e7d32" if good else "#c62828"))
                if col == COLUMNS.index("Status") and p.message:
                    item.setToolTip(p.message)
                self.table.setItem(row, col, item)

    def _on_threshold(self) -> None:
        if self.report is None:
            return
        threshold = self.threshold_spin.value() / 100
        report = self.report
        self.show_report(dataclasses.replace(
            report, threshold=threshold,
            recommendation=recommend(report.points, threshold, report.device_kind)))

    def _on_mode(self) -> None:
        strong = ScalingMode(self.mode_combo.currentData()) is ScalingMode.STRONG
        running = self.controller.is_running()
        self.global_spin.setEnabled(strong and not running)
        self.batch_spin.setEnabled(not strong and not running)

    # -- export ----------------------------------------------------------------
    def export_csv(self, path: Path) -> Path:
        if self.report is None:
            raise UserError("There are no figures to export yet: run the test first.")
        return write_csv(self.report, path)

    def export_png(self, path: Path) -> Path:
        if self.report is None or not self.report.ok_points():
            raise UserError("There is no plot to export yet: run the test first.")
        return render_png(self.report, path)

    def _ask_csv(self) -> None:
        self._ask_and_export("Export scaling figures", "scaling.csv", "CSV (*.csv)", ".csv",
                             self.export_csv)

    def _ask_png(self) -> None:
        self._ask_and_export("Export scaling plot", "scaling.png", "PNG image (*.png)", ".png",
                             self.export_png)

    def _ask_and_export(self, title: str, name: str, filters: str, suffix: str, write) -> None:
        target = ask_save_path(self, title, Path.home() / name, filters, suffix)
        if target is None:
            return
        try:
            written = write(target)
        except (OSError, UserError) as error:
            self._on_failed(f"Could not write {target}: {error}")
            return
        self.status.setText(f"Wrote {written}")


def _cells(p: ScalePoint) -> list[str]:
    status = p.status.value if not p.message else f"{p.status.value}: {p.message}"
    if not p.ok:
        return [str(p.devices), str(p.global_batch), str(p.batch_per_replica or "–"), "–",
                "–", "–", "–", "–", "–", status]
    assert p.step_median_s is not None and p.step_p10_s is not None
    assert p.step_p90_s is not None and p.speedup is not None and p.efficiency is not None
    return [str(p.devices), str(p.global_batch), str(p.batch_per_replica),
            f"{p.samples_per_s:,.0f}", f"{p.speedup:.2f}×", f"{p.efficiency:.0%}",
            wait_text(p.input_wait).replace("-", "–"), f"{p.step_median_s * 1000:.1f} ms",
            f"{p.step_p10_s * 1000:.1f}–{p.step_p90_s * 1000:.1f} ms", status]


def _devices_text(selection: DeviceSelection) -> str:
    """What the count spin counts: the chosen GPUs (first k), CPU replicas, or either."""
    if selection.gpus:
        return f"of the {len(selection.gpus)} chosen GPUs"
    if selection.kind is DeviceKind.CPU:
        return "CPU replicas"
    if selection.kind is DeviceKind.GPU:
        return "GPUs"
    return "GPUs (CPU replicas without one)"

