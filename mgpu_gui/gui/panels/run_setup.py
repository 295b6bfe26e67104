"""The "Run" panel: model, data and training settings, checked as the user types.

Instant checks (no TensorFlow: `RunConfig.problems`, `inspect_model_file`,
`inspect_data`, `preflight.check`) run ~150 ms after the last change and
outline the field that is wrong, with the core's message under it. What only a
built model can tell (a `.py` builder, "Show summary") runs in a probe child
process (`mgpu_gui.processes.model_probe`) through QProcess; a newer request kills the
older probe. This module never imports TensorFlow or Keras.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from mgpu_gui.core.config import (
    DEMO,
    MODEL_SUFFIXES,
    OPTIMIZERS,
    PRECISIONS,
    DeviceSelection,
    EarlyStoppingConfig,
    LRScalingConfig,
    RunConfig,
)
from mgpu_gui.core.datasets import batching as data_mod
from mgpu_gui.core.datasets.inspection import DataInfo, inspect_data
from mgpu_gui.core.devices.nvml import GpuInfo
from mgpu_gui.core.devices.precision_hint import LABELS as PRECISION_LABELS
from mgpu_gui.core.devices.precision_hint import precision_hint
from mgpu_gui.core.errors import DataError, ModelError, UserError
from mgpu_gui.core.lr_schedule import LinearScaling
from mgpu_gui.core.modelfiles.inspection import inspect_model_file
from mgpu_gui.core.runs import preflight
from mgpu_gui.gui.jobs.model_probe import ModelProbe
from mgpu_gui.gui.widgets.wrapper_notice import WrapperNotice

SETTINGS_GROUP = "run_setup"
MAX_RECENT = 8
CHECK_DELAY_MS = 150
GENERAL = ""  # problems that belong to no field shown here (summary label only)
DATA_KINDS = (("demo", "Digits (demo)"), ("npz", ".npz file"), ("images", "Image folder"))
ERROR_COLOR = "#d93025"
STYLE = f"""
*[invalid="true"] {{ border: 2px solid {ERROR_COLOR}; border-radius: 3px; }}
QAbstractSpinBox[invalid="true"]::up-button, QAbstractSpinBox[invalid="true"]::down-button {{
    width: 14px; }}
QLabel[role="error"] {{ color: {ERROR_COLOR}; }}
QLabel[role="hint"] {{ color: palette(placeholder-text); }}
"""
FIELD_NAMES = {
    "model": "Model", "allow_unsafe_code": "Allow code", "data": "Data",
    "image_size": "Image size", "validation_split": "Validation split",
    "batch_per_replica": "Batch per GPU", "epochs": "Epochs", "optimizer": "Optimizer",
    "learning_rate": "Learning rate", "early_stopping.patience": "Early stopping",
    "output_dir": "Output folder", "lr_scaling.warmup_epochs": "LR warm-up",
    "precision": "Precision", "jit_compile": "XLA",
}
WARNING_COLOR = "#b06000"


@dataclass
class _Field:
    """The widgets outlined when a config field is wrong, and the label for its message."""

    widgets: tuple[QWidget, ...]
    error: QLabel
    tooltips: tuple[str, ...]


class RunSetupPanel(QWidget):
    """Model, data and training settings of the next run."""

    config_changed = Signal()  # after the (debounced) checks of a change ran
    validity_changed = Signal(bool)
    summary_ready = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("RunSetupPanel")
        self.setStyleSheet(STYLE)
        self.setAcceptDrops(True)
        self._replicas = 1
        self._gpus: tuple[GpuInfo, ...] = ()
        self._valid: bool | None = None
        self._problems: dict[str, str] = {}
        self._data_info: DataInfo | None = None
        self._file_cache: tuple[Any, dict[str, str], DataInfo | None] | None = None
        self._probe_key: Any = None  # the build settings the latest probe was asked for
        self._probe_result: dict[str, Any] | None = None
        self._loading = False
        self._check_timer = QTimer(self)
        self._check_timer.setSingleShot(True)
        self._check_timer.setInterval(CHECK_DELAY_MS)
        self._check_timer.timeout.connect(self.check_now)
        self._probe = ModelProbe(self)
        self._probe.started.connect(lambda: self._set_model_status("Building model…"))
        self._probe.finished.connect(self._probe_finished)
        self._fields: dict[str, _Field] = {}
        self._build_ui()
        self._set_model_status("")
        self._load_recent()
        self.check_now()

    # -- public API ---------------------------------------------------------
    def build_config(self, devices: DeviceSelection | None = None) -> RunConfig:
        """The RunConfig these widgets describe (not validated)."""
        kind = self.data_kind.currentData()
        data = DEMO if kind == "demo" else (self.data_edit.text().strip() or DEMO)
        return RunConfig(
            model=self.model_edit.text().strip() or DEMO,
            data=data,
            validation_split=round(self.split_spin.value() / 100.0, 4),
            allow_unsafe_code=self.allow_code.isChecked(),
            devices=devices if devices is not None else DeviceSelection(),
            batch_per_replica=self.batch_spin.value(),
            epochs=self.epochs_spin.value(),
            optimizer=self.optimizer_combo.currentText(),
            learning_rate=self._learning_rate(),
            early_stopping=EarlyStoppingConfig(enabled=self.early_stop.isChecked(),
                                               patience=self.patience_spin.value()),
            lr_scaling=LRScalingConfig(enabled=self.scale_lr.isChecked(),
                                       warmup_epochs=self.warmup_spin.value()),
            precision=self.precision_combo.currentData(),
            jit_compile=self.xla_check.isChecked(),
            image_size=(self.height_spin.value(), self.width_spin.value()),
            sync_batchnorm=self.sync_bn.isChecked(),
            output_dir=self.output_edit.text().strip() or "~/mgpu-runs",
        )

    def set_config(self, config: RunConfig) -> None:
        """Show `config` in the widgets (the fields this panel has)."""
        self._loading = True
        try:
            self.model_edit.setText(config.model)
            self.allow_code.setChecked(config.allow_unsafe_code)
            self._set_data_widgets(config.data)
            self.split_spin.setValue(round(config.validation_split * 100))
            self.batch_spin.setValue(config.batch_per_replica)
            self.epochs_spin.setValue(config.epochs)
            self.optimizer_combo.setCurrentText(config.optimizer.lower())
            self.lr_edit.setText(f"{config.learning_rate:g}")
            self.early_stop.setChecked(config.early_stopping.enabled)
            self.patience_spin.setValue(config.early_stopping.patience)
            self.scale_lr.setChecked(config.lr_scaling.enabled)
            self.warmup_spin.setValue(config.lr_scaling.warmup_epochs)
            index = self.precision_combo.findData(config.precision)
            self.precision_combo.setCurrentIndex(max(index, 0))
            self.xla_check.setChecked(config.jit_compile)
            self.height_spin.setValue(config.image_size[0])
            self.width_spin.setValue(config.image_size[1])
            self.sync_bn.setChecked(config.sync_batchnorm)
            self.output_edit.setText(config.output_dir)
        finally:
            self._loading = False
        self._changed()

    def set_replicas(self, replicas: int, gpus: Sequence[GpuInfo] | None = None) -> None:
        """How many replicas (GPUs or CPU devices) the run will use; updates the global batch.

        `gpus`, the GPUs chosen (none: CPU replicas), decide the precision hint;
        None keeps the last ones given.
        """
        self._replicas = max(1, int(replicas))
        if gpus is not None:
            self._gpus = tuple(gpus)
        self._update_batch_text()
        self._update_speed_hints()
        self._changed()

    def replicas(self) -> int:
        return self._replicas

    def is_valid(self) -> bool:
        return bool(self._valid)

    def problems(self) -> dict[str, str]:
        """Field name -> message of every problem found by the last check."""
        return dict(self._problems)

    def set_enabled_for_run(self, enabled: bool) -> None:
        """Lock the settings while a run uses them (enabled=False), unlock after."""
        self._form.setEnabled(enabled)

    def set_model_path(self, path: str | os.PathLike[str]) -> None:
        self.model_edit.setText(str(path))
        self._add_recent(str(path))

    def set_data_path(self, path: str | os.PathLike[str]) -> None:
        self._set_data_widgets(str(path))

    def show_summary(self) -> None:
        """Build the model in a probe process; the result arrives via `summary_ready`."""
        self.check_now()
        config = self.build_config()
        if not (self._probe.is_running() and self._probe_key == self._build_key(config)):
            self._start_probe(config)

    def check_now(self) -> None:
        """Run the instant checks now (normally ~150 ms after the last change)."""
        self._check_timer.stop()
        config = self.build_config()
        problems, self._data_info = self._instant_problems(config)
        key = self._build_key(config)
        if key != self._probe_key:  # what the probe built (or is building) is out of date
            if self._probe.is_running():
                self._probe.cancel()
                self._set_model_status("")
            self._probe_result = None
            if config.model.lower().endswith(".py") and not problems:
                self._start_probe(config)  # only a built .py model can tell its shapes
        failed = self._probe_result is not None and not self._probe_result.get("ok")
        if failed and self._probe_result is not None:
            field = "data" if self._probe_result.get("error_type") == "DataError" else "model"
            problems.setdefault(field, self._probe_result.get("message", "?"))
        self._show_problems(problems)
        # What the file is does not depend on the data: shown even when they do not fit.
        self.wrapper_notice.show_for(None if config.model == DEMO else self.model_info)
        self._update_batch_text()
        self._update_speed_hints()
        self.config_changed.emit()
        valid = not problems
        if valid != self._valid:
            self._valid = valid
            self.validity_changed.emit(valid)

    def save_settings(self, settings: QSettings | None = None) -> None:
        settings = settings or QSettings()
        config = self.build_config()
        settings.beginGroup(SETTINGS_GROUP)
        settings.setValue("config", config.to_json())
        settings.setValue("data_kind", self.data_kind.currentData())
        settings.setValue("data_path", self.data_edit.text())
        settings.endGroup()
        settings.sync()

    def restore_settings(self, settings: QSettings | None = None) -> None:
        settings = settings or QSettings()
        settings.beginGroup(SETTINGS_GROUP)
        text = settings.value("config", "")
        kind = settings.value("data_kind", "")
        path = settings.value("data_path", "")
        settings.endGroup()
        self._load_recent(settings)
        if text:
            # Settings written by another version may not load: then keep the defaults.
            with contextlib.suppress(ValueError, TypeError, UserError):
                self.set_config(RunConfig.from_json(str(text)))
        if kind and kind != "demo" and path:  # the path typed for a kind, even if invalid
            self._set_data_widgets(str(path), str(kind))
        self.check_now()

    def shutdown(self) -> None:
        """Stop the pending check and kill a running probe (call before closing)."""
        self._check_timer.stop()
        self._probe.shutdown()
        self.wrapper_notice.shutdown()

    # -- building the widgets -----------------------------------------------
    def _build_ui(self) -> None:
        outer = QVBoxLayout(self)
        outer.setContentsMargins(6, 6, 6, 6)
        self._form = QWidget(self)
        form = QFormLayout(self._form)
        form.setContentsMargins(0, 0, 0, 0)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        outer.addWidget(self._form)

        self.model_combo = QComboBox()
        self.model_combo.setEditable(True)
        self.model_combo.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.model_combo.setMinimumContentsLength(14)
        self.model_combo.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.model_edit = self.model_combo.lineEdit()
        self.model_edit.setAcceptDrops(False)  # a dropped file goes to the panel's handler
        self.model_edit.setPlaceholderText("demo, or a .keras / .h5 / .py file")
        self.model_edit.setAccessibleName("Model file path")
        self.model_browse = QPushButton("Browse…")
        self.summary_button = QPushButton("Show summary")
        self.summary_button.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Fixed)
        self._name(self.model_combo, "Model file",
                   "The model to train: 'demo' (a small convnet), a .keras or .h5 file saved "
                   "by Keras, or a .py file with build_model(input_shape, num_classes). "
                   "Recent files are in the list; you can also drop a file on this panel.")
        self._name(self.model_browse, "Browse for a model file", "Choose a model file.")
        self._name(self.summary_button, "Show model summary",
                   "Build the model in the background (TensorFlow, CPU only) and show its "
                   "layers and parameter count.")
        self.model_status = QLabel()
        self.model_status.setProperty("role", "hint")
        self.model_status.setWordWrap(True)
        self.model_status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.model_status.setAccessibleName("Model build status")
        self.wrapper_notice = WrapperNotice()
        form.addRow("Model", self._field("model", [self.model_combo, self.model_browse],
                                         extra=[self.summary_button],
                                         below=[self.model_status, self.wrapper_notice]))

        self.allow_code = QCheckBox("Allow code from the model file")
        self._name(self.allow_code, "Allow code from the model file",
                   "Models with Lambda layers store Python code that runs when the model is "
                   "loaded. Such code can do anything your user account can (delete files, "
                   "send data). Tick this only for files you made or trust.")
        form.addRow("", self._field("allow_unsafe_code", [self.allow_code]))

        self.data_kind = QComboBox()
        for key, label in DATA_KINDS:
            self.data_kind.addItem(label, key)
        self.data_edit = QLineEdit()
        self.data_edit.setAcceptDrops(False)
        self.data_browse = QPushButton("Browse…")
        self._name(self.data_kind, "Data source",
                   "Digits (demo): the bundled 8x8 digits. .npz file: arrays x_train, y_train "
                   "(optional x_val/y_val, x_test/y_test). Image folder: one subfolder per class.")
        self._name(self.data_edit, "Data path", "The .npz file or the image folder.")
        self._name(self.data_browse, "Browse for data", "Choose the .npz file or image folder.")
        self.width_spin, self.height_spin = QSpinBox(), QSpinBox()
        for spin, what in ((self.width_spin, "width"), (self.height_spin, "height")):
            spin.setRange(1, 4096)
            spin.setSuffix(" px")
            self._name(spin, f"Image {what}", f"Images are resized to this {what} on loading; "
                       "the model's input shape must match (height, width, 3).")
        self.size_row = QWidget()
        size_layout = QHBoxLayout(self.size_row)
        size_layout.setContentsMargins(0, 0, 0, 0)
        size_layout.addWidget(QLabel("Image size"))
        size_layout.addWidget(self.width_spin)
        size_layout.addWidget(QLabel("×"))
        size_layout.addWidget(self.height_spin)
        size_layout.addStretch()
        form.addRow("Data", self._field("data", [self.data_kind, self.data_edit,
                                                 self.data_browse], outline=[self.data_edit]))
        form.addRow("", self._field("image_size", [self.size_row],
                                    outline=[self.width_spin, self.height_spin]))

        self.split_spin = QSpinBox()
        self.split_spin.setRange(0, 90)
        self.split_spin.setSuffix(" %")
        self._name(self.split_spin, "Validation split",
                   "Share of the training data held out for validation, when the data has no "
                   "validation set of its own (x_val/y_val).")
        form.addRow("Validation", self._field("validation_split", [self.split_spin]))

        self.batch_spin = QSpinBox()
        self.batch_spin.setRange(1, 1 << 16)
        self.batch_text = QLabel()
        self.batch_text.setAccessibleName("Global batch")
        self.batch_hint = QLabel()
        self.batch_hint.setProperty("role", "hint")
        self.batch_hint.setWordWrap(True)
        self.batch_hint.setAccessibleName("Steps and dropped samples per epoch")
        self._name(self.batch_spin, "Batch per GPU (per replica)",
                   "Per-replica batch: the samples each GPU (replica) processes per step.\n"
                   "The global batch, the samples in one optimizer step, is this times the "
                   "number of replicas; the learning rate you set applies to the global batch.")
        self.batch_text.setToolTip(
            "Global batch = per-replica batch × replicas: the samples in one optimizer step, "
            "split evenly over the replicas. More GPUs with the same per-replica batch means "
            "a bigger global batch (and often a larger learning rate to match).")
        self.batch_hint.setToolTip(
            "Samples dropped per epoch: the training samples left over after the last full "
            "global batch. They are skipped (drop_remainder) because a partial batch can "
            "leave a replica with no samples at all, which breaks Conv2D and BatchNorm. The "
            "data are reshuffled every epoch, so different samples are left out each time.")
        form.addRow("Batch/GPU", self._field("batch_per_replica",
                                             [self.batch_spin, self.batch_text],
                                             below=[self.batch_hint]))

        self.epochs_spin = QSpinBox()
        self.epochs_spin.setRange(1, 100_000)
        self._name(self.epochs_spin, "Epochs", "Passes over the training data.")
        form.addRow("Epochs", self._field("epochs", [self.epochs_spin]))

        self.optimizer_combo = QComboBox()
        self.optimizer_combo.addItems(OPTIMIZERS)
        self._name(self.optimizer_combo, "Optimizer",
                   "Used unless the model file comes compiled with its own optimizer.")
        self.lr_edit = QLineEdit()
        self.lr_edit.setMaximumWidth(90)
        self._name(self.lr_edit, "Learning rate",
                   "Learning rate, e.g. 0.001 or 1e-3. With more replicas the global batch "
                   "grows; a larger learning rate is often needed to match.")
        form.addRow("Optimizer", self._field("optimizer", [self.optimizer_combo]))
        self.lr_hint = QLabel()
        self.lr_hint.setProperty("role", "hint")
        self.lr_hint.setWordWrap(True)
        self.lr_hint.setAccessibleName("Scaled learning rate")
        self.lr_hint.setToolTip(
            "The learning rate the run trains at: the base LR you typed times the replicas "
            "(the global batch is that many times the per-replica batch), reached by a "
            "linear warm-up. The curves' learning-rate plot shows it step by step.")
        form.addRow("Learning rate", self._field("learning_rate", [self.lr_edit],
                                                 below=[self.lr_hint]))
        self.scale_lr = QCheckBox("Scale with the replicas, warm-up")
        self._name(self.scale_lr, "Scale the learning rate with the replicas",
                   "Linear scaling rule (Goyal et al. 2017): the learning rate above is the "
                   "base, right for one replica's batch; the run trains at base × replicas, "
                   "because the global batch is that many times larger. The LR rises "
                   "linearly per step from the base to the scaled LR over the warm-up "
                   "epochs, so the first steps do not diverge. ReduceLROnPlateau, when on, "
                   "starts after the warm-up.")
        self.warmup_spin = QSpinBox()
        self.warmup_spin.setRange(0, 10_000)
        self.warmup_spin.setSuffix(" epochs")
        self._name(self.warmup_spin, "Learning-rate warm-up",
                   "Epochs over which the LR rises from the base to the scaled LR "
                   "(5 in Goyal et al.). It must end before the last epoch.")
        form.addRow("", self._field("lr_scaling.warmup_epochs",
                                    [self.scale_lr, self.warmup_spin],
                                    outline=[self.warmup_spin]))

        self.early_stop = QCheckBox("Early stopping, patience")
        self._name(self.early_stop, "Early stopping",
                   "Stop when the validation loss has not improved for 'patience' epochs, "
                   "and keep the best weights.")
        self.patience_spin = QSpinBox()
        self.patience_spin.setRange(0, 10_000)
        self.patience_spin.setSuffix(" epochs")
        self._name(self.patience_spin, "Early stopping patience",
                   "Epochs without improvement before training stops.")
        form.addRow("", self._field("early_stopping.patience",
                                    [self.early_stop, self.patience_spin]))

        self.sync_bn = QCheckBox("Synchronized BatchNorm")
        self._name(self.sync_bn, "Synchronized BatchNorm",
                   "Synchronized BatchNorm: BatchNormalization layers compute their mean and "
                   "variance over the global batch (all replicas, one all-reduce per layer "
                   "and step) instead of over each replica's per-replica batch alone.\n"
                   "Better with small per-replica batches (under ~32), a bit slower; it "
                   "changes nothing in a model without BatchNormalization layers.")
        form.addRow("", self._field("sync_batchnorm", [self.sync_bn]))

        self.precision_combo = QComboBox()
        for name in PRECISIONS:
            self.precision_combo.addItem(PRECISION_LABELS[name], name)
        self._name(self.precision_combo, "Precision",
                   "Mixed precision: layers compute in bfloat16 or float16 and keep float32 "
                   "weights, which is faster and takes less memory on GPUs with tensor cores "
                   "(bfloat16: compute capability 8.0 or newer, e.g. A100, RTX 30xx; "
                   "float16: 7.0 or newer, e.g. V100, T4, with loss scaling). The output "
                   "layer computes in float32, and the exported model is float32, so it "
                   "loads and predicts anywhere, also without a GPU.")
        self.precision_hint = QLabel()
        self.precision_hint.setProperty("role", "hint")
        self.precision_hint.setWordWrap(True)
        self.precision_hint.setAccessibleName("Precision support")
        self.precision_hint.setToolTip("What the chosen GPUs (or this CPU) support, "
                                       "from their compute capability as NVML reports it.")
        form.addRow("Precision", self._field("precision", [self.precision_combo],
                                             below=[self.precision_hint]))

        self.xla_check = QCheckBox("XLA (jit_compile)")
        self._name(self.xla_check, "XLA",
                   "Compile the model's forward and backward pass with XLA, per replica: "
                   "fused operations, often faster on GPUs; the first step takes longer. "
                   "On CPU replicas it is usually slower (the demo model: a quarter of the "
                   "samples/s; tests/benchmarks/precision.py). "
                   "A model XLA cannot compile (an operation without an XLA kernel) trains "
                   "without it, with a warning in the log.")
        form.addRow("", self._field("jit_compile", [self.xla_check]))

        self.output_edit = QLineEdit()
        self.output_edit.setAcceptDrops(False)
        self.output_browse = QPushButton("…")
        self._name(self.output_edit, "Output folder",
                   "Each run gets a subfolder here: checkpoints, logs, the exported model.")
        self._name(self.output_browse, "Browse for the output folder", "Choose the folder.")
        form.addRow("Output", self._field("output_dir", [self.output_edit, self.output_browse]))

        self.summary_label = QLabel()
        self.summary_label.setWordWrap(True)
        self.summary_label.setAccessibleName("Settings check")
        outer.addWidget(self.summary_label)
        outer.addStretch()

        defaults = RunConfig()
        self.set_config(defaults)  # also wires nothing yet: signals are connected below
        self._update_data_widgets()
        self._connect()

    def _connect(self) -> None:
        for edit in (self.model_edit, self.data_edit, self.lr_edit, self.output_edit):
            edit.textChanged.connect(self._changed)
        for spin in (self.width_spin, self.height_spin, self.split_spin, self.batch_spin,
                     self.epochs_spin, self.patience_spin):
            spin.valueChanged.connect(self._changed)
        for box in (self.allow_code, self.early_stop, self.sync_bn, self.scale_lr,
                    self.xla_check):
            box.toggled.connect(self._changed)
        self.warmup_spin.valueChanged.connect(self._changed)
        self.optimizer_combo.currentIndexChanged.connect(self._changed)
        self.precision_combo.currentIndexChanged.connect(self._changed)
        # The hints follow each keystroke; the checks wait for the pause.
        self.lr_edit.textChanged.connect(self._update_speed_hints)
        self.scale_lr.toggled.connect(self._update_speed_hints)
        self.scale_lr.toggled.connect(self.warmup_spin.setEnabled)
        self.warmup_spin.valueChanged.connect(self._update_speed_hints)
        self.precision_combo.currentIndexChanged.connect(self._update_speed_hints)
        self.data_kind.currentIndexChanged.connect(self._update_data_widgets)
        self.data_kind.currentIndexChanged.connect(self._changed)
        self.early_stop.toggled.connect(self.patience_spin.setEnabled)
        self.batch_spin.valueChanged.connect(self._update_batch_text)
        self.model_browse.clicked.connect(self._browse_model)
        self.data_browse.clicked.connect(self._browse_data)
        self.output_browse.clicked.connect(self._browse_output)
        self.summary_button.clicked.connect(self.show_summary)

    def _name(self, widget: QWidget, name: str, tooltip: str) -> None:
        widget.setAccessibleName(name)
        widget.setToolTip(tooltip)

    def _field(self, name: str, widgets: list[QWidget], *, outline: list[QWidget] | None = None,
               extra: list[QWidget] | None = None, below: list[QWidget] | None = None
               ) -> QWidget:
        """A form cell: the widgets in a row, an extra row, lines below, the error message."""
        cell = QWidget()
        column = QVBoxLayout(cell)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(2)
        column.addLayout(_row(widgets))
        if extra:
            column.addLayout(_row(extra))
        for widget in below or []:
            column.addWidget(widget)
        error = QLabel()
        error.setProperty("role", "error")
        error.setWordWrap(True)
        error.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        error.setAccessibleName(f"{FIELD_NAMES.get(name, name)} problem")
        error.hide()
        column.addWidget(error)
        targets = tuple(outline if outline is not None else widgets[:1])
        self._fields[name] = _Field(targets, error, tuple(w.toolTip() for w in targets))
        return cell

    # -- reacting to changes ------------------------------------------------
    def _changed(self) -> None:
        if not self._loading:
            self._check_timer.start()

    def _learning_rate(self) -> float:
        try:
            return float(self.lr_edit.text().strip())
        except ValueError:
            return math.nan

    def _update_data_widgets(self) -> None:
        kind = self.data_kind.currentData()
        self.data_edit.setVisible(kind != "demo")
        self.data_browse.setVisible(kind != "demo")
        self.size_row.setVisible(kind == "images")
        self.data_edit.setPlaceholderText(
            "path/to/data.npz" if kind == "npz" else "folder with one subfolder per class")

    def _set_data_widgets(self, data: str, kind: str | None = None) -> None:
        if kind is None:
            kind = "demo" if data == DEMO else "images" if os.path.isdir(
                os.path.expanduser(data)) else "npz"
        self.data_kind.setCurrentIndex(self.data_kind.findData(kind))
        if data != DEMO:
            self.data_edit.setText(data)
        self._update_data_widgets()

    def _update_speed_hints(self) -> None:
        """The scaled learning rate and what the devices support for the chosen precision."""
        lr = self._learning_rate()
        scaling = self.scale_lr.isChecked() and math.isfinite(lr) and lr > 0
        self.warmup_spin.setEnabled(self.scale_lr.isChecked())
        self.lr_hint.setText(LinearScaling(lr, self._replicas, self.warmup_spin.value()
                                           ).describe() if scaling else "")
        self.lr_hint.setVisible(scaling)
        hint = precision_hint(self.precision_combo.currentData(), self._gpus)
        self.precision_hint.setText(hint.text)
        self.precision_hint.setStyleSheet(f"color: {WARNING_COLOR};" if hint.warning else "")

    def _update_batch_text(self) -> None:
        replicas = self._replicas
        global_batch = self.batch_spin.value() * replicas
        self.batch_text.setText(f"× {replicas} replica{'s' if replicas != 1 else ''} = "
                                f"{global_batch:,} global")
        info = self._data_info
        self.batch_hint.setVisible(info is not None)
        if info is None:
            self.batch_hint.setText("")
            return
        train, _, _ = info.split_counts(self.split_spin.value() / 100.0)
        steps = data_mod.steps(train, global_batch)
        dropped = data_mod.dropped_per_epoch(train, global_batch)
        self.batch_hint.setText(
            f"{train:,} training samples: {steps:,} step{'s' if steps != 1 else ''} per epoch"
            + (f", {dropped:,} sample{'s' if dropped != 1 else ''} dropped per epoch"
               if dropped else ", none dropped"))

    # -- checks -------------------------------------------------------------
    def _instant_problems(self, config: RunConfig) -> tuple[dict[str, str], DataInfo | None]:
        problems: dict[str, str] = {}
        for field, message in config.problems():
            problems.setdefault(field, message)
        if "learning_rate" in problems and math.isnan(config.learning_rate):
            problems["learning_rate"] = (f"{self.lr_edit.text().strip() or 'nothing'} is not a "
                                         "number; type e.g. 0.001 or 1e-3.")
        kind = self.data_kind.currentData()
        if kind != "demo" and not self.data_edit.text().strip():
            problems["data"] = ("choose the .npz file" if kind == "npz"
                                else "choose the image folder") + " (Browse…, or drop it here)."
        elif kind == "npz" and os.path.isdir(os.path.expanduser(config.data)):
            problems.setdefault("data", "this is a folder; choose 'Image folder' as the source.")
        elif kind == "images" and os.path.isfile(os.path.expanduser(config.data)):
            problems.setdefault("data", "this is a file; choose '.npz file' as the source.")
        output = config.output_path
        if output.exists() and not output.is_dir():
            problems["output_dir"] = f"{output} is a file; choose a folder."
        file_problems, data_info = self._file_problems(config, problems)
        for field, message in file_problems.items():
            problems.setdefault(field, message)
        if "output_dir" not in problems:  # writable, and room for the run's checkpoints
            model = self.model_info if config.model != DEMO else None
            problems.update(_attempt("output_dir",
                                     lambda: preflight.check_output_disk(config, model)))
        return problems, data_info

    def _file_problems(self, config: RunConfig, known: dict[str, str]
                       ) -> tuple[dict[str, str], DataInfo | None]:
        """Problems found by reading the model and data files (cached until they change)."""
        key = (config.model, _stamp(config.model), config.data, _stamp(config.data),
               config.image_size, config.allow_unsafe_code, config.validation_split,
               config.batch_per_replica, self._replicas,
               tuple(f for f in ("model", "data", "image_size", "validation_split") if f in known))
        if self._file_cache is not None and self._file_cache[0] == key:
            return self._file_cache[1], self._file_cache[2]
        problems: dict[str, str] = {}
        data_info = None
        self.model_info = None
        if "model" not in known and config.model != DEMO:
            problems.update(_attempt("model", lambda: self._inspect_model(config.model)))
        if "data" not in known:
            try:
                data_info = inspect_data(config.data, image_size=config.image_size)
            except UserError as exc:
                problems["data"] = str(exc)
            except Exception as exc:  # an unreadable file must not break the panel
                problems["data"] = f"cannot read {config.data}: {type(exc).__name__}: {exc}"
        if "data" not in problems and not set(known) & {"data", "image_size",
                                                        "validation_split"}:
            # Model-vs-data first, with a batch that always fits; then data and batch alone
            # (as with the demo model), so that failure can only be the batch, even when the
            # model file is wrong.
            model_ok = config.model != DEMO and not ({"model"} & (set(known) | set(problems)))
            if model_ok:
                problems.update(_attempt(None, lambda: preflight.check(
                    config.replace(batch_per_replica=1), 1, disk=False)))
            if not problems.keys() - {"model"}:
                problems.update(_attempt("batch_per_replica", lambda: preflight.check(
                    config.replace(model=DEMO), self._replicas, disk=False)))
        self._file_cache = (key, problems, data_info)
        return problems, data_info

    def _inspect_model(self, path: str) -> None:
        self.model_info = inspect_model_file(path)

    def _show_problems(self, problems: dict[str, str]) -> None:
        self._problems = problems
        for name, field in self._fields.items():
            message = problems.get(name)
            field.error.setText(message or "")
            field.error.setVisible(bool(message))
            for widget, tooltip in zip(field.widgets, field.tooltips, strict=True):
                widget.setProperty("invalid", bool(message))
                widget.setToolTip(f"{message}\n\n{tooltip}" if message else tooltip)
                widget.setAccessibleDescription(message or "")
                widget.style().unpolish(widget)
                widget.style().polish(widget)
        if problems:
            count = len(problems)
            lines = [f"{FIELD_NAMES.get(f, f) or 'Settings'}: {m}" if f not in self._fields
                     else FIELD_NAMES.get(f, f) for f, m in problems.items()]
            self.summary_label.setText(
                f"<span style='color:{ERROR_COLOR}'>⚠ {count} problem{'s' if count > 1 else ''}"
                f" to fix before training: </span>" + _escape("; ".join(lines)))
        elif self._data_info is not None:
            info = self._data_info
            classes = f", {info.num_classes} classes" if info.num_classes else ""
            shape = "×".join(str(d) for d in info.x_shape) if info.x_shape else "?"
            self.summary_label.setText(f"✓ Ready: {info.train_samples:,} samples{classes}, "
                                       f"input {shape}.")
        else:
            self.summary_label.setText("✓ Ready.")

    # -- the probe ----------------------------------------------------------
    def _build_key(self, config: RunConfig) -> Any:
        return (config.model, _stamp(config.model), config.data, config.image_size,
                config.allow_unsafe_code, config.sync_batchnorm, config.custom_objects)

    def _start_probe(self, config: RunConfig | None = None) -> None:
        config = config or self.build_config()
        self._probe_key = self._build_key(config)
        self._probe_result = None
        self._probe.start(config)

    def _probe_finished(self, result: dict[str, Any]) -> None:
        self._probe_result = result
        if result.get("ok"):
            shape = "×".join(str(d) for d in result.get("input_shape") or []) or "?"
            units = result.get("output_units")
            self._set_model_status(f"{result.get('params', 0):,} parameters · input {shape}"
                                   + (f" · {units} outputs" if units else ""))
            self.summary_ready.emit(str(result.get("summary", "")))
        else:
            self._set_model_status("The model could not be built:")
        self.check_now()

    def _set_model_status(self, text: str) -> None:
        self.model_status.setText(text)
        self.model_status.setVisible(bool(text))

    # -- files: dialogs, drops, recent ---------------------------------------
    def _browse_model(self) -> None:
        patterns = " ".join(f"*{suffix}" for suffix in MODEL_SUFFIXES)
        self._dialog("Choose a model file", f"Keras models ({patterns});;All (*)",
                     QFileDialog.FileMode.ExistingFile, self.set_model_path,
                     self.model_edit.text())

    def _browse_data(self) -> None:
        folder = self.data_kind.currentData() == "images"
        self._dialog("Choose the image folder" if folder else "Choose the .npz file",
                     "" if folder else "NumPy archives (*.npz);;All (*)",
                     QFileDialog.FileMode.Directory if folder
                     else QFileDialog.FileMode.ExistingFile,
                     self.set_data_path, self.data_edit.text())

    def _browse_output(self) -> None:
        self._dialog("Choose the output folder", "", QFileDialog.FileMode.Directory,
                     self.output_edit.setText, self.output_edit.text())

    def _dialog(self, title: str, filters: str, mode: QFileDialog.FileMode, accept: Any,
                current: str) -> QFileDialog:
        """A window-modal, non-native dialog opened with open(): the event loop keeps running."""
        start = os.path.expanduser(current) if current and current != DEMO else str(Path.home())
        if not os.path.isdir(start):
            start = os.path.dirname(start) or str(Path.home())
        dialog = QFileDialog(self, title, start, filters)
        dialog.setOption(QFileDialog.Option.DontUseNativeDialog)
        dialog.setFileMode(mode)
        if mode is QFileDialog.FileMode.Directory:
            dialog.setOption(QFileDialog.Option.ShowDirsOnly)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.fileSelected.connect(accept)
        dialog.open()
        return dialog

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 (Qt's name)
        if _dropped_path(event) is not None:
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 (Qt's name)
        path = _dropped_path(event)
        if path is None:
            return
        event.acceptProposedAction()
        if os.path.isdir(path) or path.lower().endswith(".npz"):
            self.set_data_path(path)
        else:  # a model file, or something the model check will explain
            self.set_model_path(path)

    def recent_models(self) -> list[str]:
        return [self.model_combo.itemText(i) for i in range(1, self.model_combo.count())]

    def _load_recent(self, settings: QSettings | None = None) -> None:
        settings = settings or QSettings()
        value = settings.value(f"{SETTINGS_GROUP}/recent_models", [])
        recent = [value] if isinstance(value, str) else list(value or [])
        text = self.model_edit.text()
        self._loading = True
        try:
            self.model_combo.clear()
            self.model_combo.addItem(DEMO)
            self.model_combo.addItems([str(p) for p in recent[:MAX_RECENT] if p])
            self.model_edit.setText(text)
        finally:
            self._loading = False

    def _add_recent(self, path: str) -> None:
        if not path or path == DEMO:
            return
        recent = [path, *(p for p in self.recent_models() if p != path)][:MAX_RECENT]
        settings = QSettings()
        settings.setValue(f"{SETTINGS_GROUP}/recent_models", recent)
        settings.sync()
        self._load_recent(settings)


def _row(widgets: list[QWidget]) -> QHBoxLayout:
    """Widgets side by side; text fields and labels take the spare width."""
    row = QHBoxLayout()
    grows = [w for w in widgets if isinstance(w, (QLineEdit, QComboBox, QLabel))
             and w.maximumWidth() > 10_000]
    for widget in widgets:
        row.addWidget(widget, 1 if widget in grows else 0)
    if not grows:
        row.addStretch()
    return row


def _attempt(field: str | None, check: Any) -> dict[str, str]:
    """Run a check; {field: message} for a UserError (field None: ModelError/DataError decide)."""
    try:
        check()
    except UserError as exc:
        if field is None:
            field = ("model" if isinstance(exc, ModelError)
                     else "data" if isinstance(exc, DataError) else GENERAL)
        return {field: str(exc)}
    except Exception as exc:  # an unreadable file must not break the panel
        return {field or GENERAL: f"{type(exc).__name__}: {exc}"}
    return {}


def _stamp(path: str) -> tuple[float, int] | None:
    """mtime and size, so an edited file is checked again; None when there is no file."""
    try:
        stat = os.stat(os.path.expanduser(path))
    except OSError:
        return None
    return stat.st_mtime, stat.st_size


def _dropped_path(event: QDragEnterEvent | QDropEvent) -> str | None:
    mime = event.mimeData()
    if not mime.hasUrls():
        return None
    for url in mime.urls():
        if url.isLocalFile():
            return url.toLocalFile()
    return None


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

