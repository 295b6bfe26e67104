"""The batch-size finder dialog: the largest batch per GPU that fits, and "use it".

`BatchFinderDialog(parent, config)` holds the search settings, each probe as
it finishes, the result and a "Use N per GPU (global batch, steps per epoch)"
button that emits `use_batch(N)`.
A `BatchFinderController` runs the search in a QThread (one short-lived worker
process per batch tried, see core/tools/batch_finder.py), so TensorFlow never
loads in this process and the window never waits. Cancel, Escape and closing
the dialog kill the running probe.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, QSize, Qt, Signal
from PySide6.QtWidgets import (
    QDoubleSpinBox,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from mgpu_gui.core.config import DeviceKind, RunConfig
from mgpu_gui.core.devices.plan import DEFAULT_CPU_REPLICAS
from mgpu_gui.core.tools.batch_finder import BatchFinder, BatchProgress, BatchRequest
from mgpu_gui.core.tools.batch_search import (
    DEFAULT_MARGIN,
    DEFAULT_MAX_BATCH,
    DEFAULT_MIN_STEPS,
    DEFAULT_PRECISION,
    DEFAULT_START,
    BatchReport,
    ProbeStatus,
    SearchSettings,
    describe,
    peak_text,
    probe_verdict,
    use_text,
)
from mgpu_gui.core.tools.phases import phase_text
from mgpu_gui.gui.jobs.background_job import (
    BackgroundJob,
    JobDialog,
    error_html,
    labelled_grid,
    source_name,
    spin_box,
)
from mgpu_gui.gui.widgets.screen_fit import fit_to_screen
from mgpu_gui.gui.widgets.tables import read_only_table

COLUMNS = ("Batch per device", "Peak memory", "Time", "Result")


class BatchFinderController(BackgroundJob):
    """Runs one batch search at a time in the background."""

    def __init__(self, parent: QObject | None = None, *, finder_factory=BatchFinder):
        super().__init__(parent, factory=finder_factory, what="batch search")
        self.finder_factory = finder_factory  # tests pass one that starts a fake probe


class BatchFinderDialog(JobDialog):
    """Find the largest batch per GPU that fits for the run setup's model and data."""

    use_batch = Signal(int)  # the batch per GPU the user chose to use
    CANCELLING = "Cancelling: the running probe's process is being stopped…"

    def __init__(self, parent: QWidget | None = None, config: RunConfig | None = None, *,
                 finder_factory=BatchFinder):
        super().__init__(parent, "Find batch size",
                         BatchFinderController(finder_factory=finder_factory))
        self.config = config or RunConfig()
        self.report: BatchReport | None = None
        self._build()
        self._set_running(False)
        fit_to_screen(self, QSize(760, 600))

    # -- layout ----------------------------------------------------------------
    def _build(self) -> None:
        config = self.config
        cpu = config.devices.kind is DeviceKind.CPU
        what = QLabel(f"<b>{source_name(config.model)}</b> on <b>{source_name(config.data)}</b>, "
                      f"{_devices_text(config)}")
        what.setToolTip(f"Model: {config.model}\nData: {config.data}\n"
                        "Change them in the run setup.")
        what.setAccessibleName("Model, data and devices")
        what.setWordWrap(True)  # long file names and GPU lists: lines, not a wider dialog
        self.cap_spin = QDoubleSpinBox()
        self.cap_spin.setRange(0, 100_000)
        self.cap_spin.setDecimals(2)
        self.cap_spin.setSingleStep(0.5)
        self.cap_spin.setSuffix(" GB")
        self.cap_spin.setSpecialValueText("memory available now" if cpu else "none")
        self.cap_spin.setAccessibleName("Memory cap")
        self.cap_spin.setToolTip(
            "The most memory one probe may use (GB = 1000 MB). On a GPU: the engine "
            "allocator's peak on the device; none means until the GPU runs out. On CPU: the "
            "probe's peak resident memory; none means the memory available when the search "
            "starts.")
        self.max_spin = spin_box(1, 1 << 20, DEFAULT_MAX_BATCH, "Largest batch to try",
                              "Batches per device grow up to this (the training set may "
                              "allow less)")
        self.start_spin = spin_box(1, 1 << 20, DEFAULT_START, "First batch to try",
                                "The search starts here and doubles until one does not fit")
        self.margin_spin = spin_box(0, 90, round(DEFAULT_MARGIN * 100), "Safety margin",
                                 "The recommendation is this much below the largest batch "
                                 "that fits, rounded down to a multiple of 8")
        self.margin_spin.setSuffix(" %")
        self.tolerance_spin = spin_box(0, 90, round(DEFAULT_PRECISION * 100), "Tolerance",
                                    "Stop narrowing down once the largest batch that fit and "
                                    "the smallest that did not are this close")
        self.tolerance_spin.setSuffix(" %")
        self.min_steps_spin = spin_box(1, 10_000, DEFAULT_MIN_STEPS, "Fewest steps per epoch",
                                       "No batch is tried that leaves fewer steps per epoch "
                                       "of the training set on your devices (when even 1 per "
                                       "device leaves fewer, 1 is tried)")

        settings = QGroupBox("What to probe")
        grid = QGridLayout(settings)
        grid.addWidget(QLabel("Run"), 0, 0, Qt.AlignmentFlag.AlignTop)  # by the first line
        grid.addWidget(what, 0, 1, 1, 3)
        labelled_grid(grid, [
            (("&Memory cap", self.cap_spin), ("&Largest batch", self.max_spin)),
            (("&First batch", self.start_spin), ("Safety ma&rgin", self.margin_spin)),
            (("&Tolerance", self.tolerance_spin), ("Fewest &steps", self.min_steps_spin))],
            first_row=1)

        run_row = self._run_row(
            "&Find batch size", "Find batch size",
            "Try growing batches, each in its own short-lived worker process on one device",
            "Cancel search", "Cancel batch search",
            "Stop now: the running probe's process is killed", "Batch search progress")
        self.progress_bar.setRange(0, 1)
        self.status = QLabel("Ready. Each probe starts TensorFlow afresh: a few seconds each.")
        self.status.setAccessibleName("Batch search status")
        self.status.setWordWrap(True)

        self.table = read_only_table(COLUMNS, "Batches tried")
        self.result = QLabel("Run the search to find the largest batch that fits.")
        self.result.setAccessibleName("Batch search result")
        self.result.setWordWrap(True)
        self.result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        self.use_button = QPushButton("Use")
        self.use_button.setAccessibleName("Use the recommended batch size")
        self.use_button.setToolTip("Set the run setup's batch per GPU (or per CPU replica) to "
                                   "the recommendation")
        self.use_button.clicked.connect(self._use)
        close = QPushButton("Close")
        close.setAccessibleName("Close batch finder")
        close.clicked.connect(self.close)
        bottom = QHBoxLayout()
        bottom.addStretch(1)
        bottom.addWidget(self.use_button)
        bottom.addWidget(close)

        layout = QVBoxLayout(self)
        layout.addWidget(settings)
        layout.addLayout(run_row)
        layout.addWidget(self.status)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.result)
        layout.addLayout(bottom)

    # -- running ---------------------------------------------------------------
    def request(self) -> BatchRequest:
        cap = round(self.cap_spin.value() * 1e9) or None
        settings = SearchSettings(start=self.start_spin.value(), max_batch=self.max_spin.value(),
                                  precision=self.tolerance_spin.value() / 100,
                                  margin=self.margin_spin.value() / 100,
                                  min_steps=self.min_steps_spin.value())
        return BatchRequest(self.config, settings, cap)

    def start(self) -> None:
        self.report = None
        self.table.setRowCount(0)
        self.result.setText("Searching…")
        self.status.setText("Checking the model and data…")
        self._set_running(True)
        self.controller.start(self.request())

    def _set_running(self, running: bool) -> None:
        self.start_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)
        for widget in (self.cap_spin, self.max_spin, self.start_spin, self.margin_spin,
                       self.tolerance_spin, self.min_steps_spin):
            widget.setEnabled(not running)
        self.progress_bar.setRange(0, 0 if running else 1)  # busy: the probe count is unknown
        ready = not running and self.report is not None and self.report.recommended is not None
        self.use_button.setEnabled(ready)
        self.use_button.setText("&" + use_text(self.report) if ready else "&Use")

    def _on_progress(self, p: BatchProgress) -> None:
        if p.phase in ("starting", "building", "training"):
            self.status.setText(f"Probe {p.probe}: batch {p.batch} per device, "
                                f"{phase_text(p.phase, self.config.engine)}…")

    def _on_failed(self, message: str) -> None:
        self.status.setText(error_html(message))
        self.result.setText("No result: the search did not run.")

    def _on_finished(self, report: BatchReport | None) -> None:
        if report is not None:
            self.show_report(report)
            tried = sum(p.status is not ProbeStatus.CANCELLED for p in report.probes)
            word = "Cancelled" if report.ended.value == "cancelled" else "Done"
            self.status.setText(f"{word}: {tried} batch size{'s' if tried != 1 else ''} tried.")
        self._set_running(False)
        self.progress_bar.setValue(1)
        self.start_button.setFocus()

    # -- results ---------------------------------------------------------------
    def show_report(self, report: BatchReport) -> None:
        """Show the probes and the result (also a partial report while it runs)."""
        self.report = report
        self.table.setRowCount(len(report.probes))
        for row, probe in enumerate(report.probes):
            peak = peak_text(probe)
            took = "–" if probe.seconds is None else f"{probe.seconds:.1f} s"
            cells = (str(probe.batch), peak, took, probe_verdict(probe, report.cap_bytes))
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                align = Qt.AlignmentFlag.AlignRight if col < 3 else Qt.AlignmentFlag.AlignLeft
                item.setTextAlignment(align | Qt.AlignmentFlag.AlignVCenter)
                if col == 3:
                    item.setToolTip(text)
                self.table.setItem(row, col, item)
        self.result.setText(" ".join([describe(report), *report.notes]))
        self._set_running(self.controller.is_running())

    def _use(self) -> None:
        if self.report is not None and self.report.recommended is not None:
            self.use_batch.emit(self.report.recommended)
            self.accept()

    # -- closing (Escape and the close button: JobDialog) ------------------------
    def accept(self) -> None:
        self.controller.shutdown()
        super().accept()


def _devices_text(config: RunConfig) -> str:
    selection = config.devices
    if selection.gpus:
        return f"GPUs {', '.join(selection.gpus)} (probed on one)"
    if selection.kind is DeviceKind.CPU:
        return f"{selection.replicas or DEFAULT_CPU_REPLICAS} CPU replicas (probed on one)"
    return "all GPUs, or CPU replicas without one (probed on one device)"
