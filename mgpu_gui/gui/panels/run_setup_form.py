"""The run setup's form: the widgets of a RunConfig, and the problems shown on them.

`RunSetupForm` maps a RunConfig to widgets and back, names every widget for
screen readers, and shows each problem on its field. It checks nothing itself;
`RunSetupPanel` (run_setup.py) adds the checks, hints, files and settings.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
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
    OPTIMIZERS,
    PRECISIONS,
    DeviceSelection,
    EarlyStoppingConfig,
    LRScalingConfig,
    RunConfig,
)
from mgpu_gui.core.datasets.inspection import DataInfo
from mgpu_gui.core.devices.precision_hint import LABELS as PRECISION_LABELS
from mgpu_gui.gui.widgets.compile_source import CompileSourceRow
from mgpu_gui.gui.widgets.field_cells import ERROR_COLOR, STYLE, FieldCell, field_cell
from mgpu_gui.gui.widgets.wrapper_notice import WrapperNotice

DATA_KINDS = (("demo", "Digits (demo)"), ("npz", ".npz file"), ("images", "Image folder"))
FIELD_NAMES = {
    "model": "Model", "allow_unsafe_code": "Allow code", "data": "Data",
    "image_size": "Image size", "validation_split": "Validation split",
    "batch_per_replica": "Batch per GPU", "epochs": "Epochs", "optimizer": "Optimizer",
    "learning_rate": "Learning rate", "early_stopping.patience": "Early stopping",
    "output_dir": "Output folder", "lr_scaling.warmup_epochs": "LR warm-up",
    "precision": "Precision", "jit_compile": "XLA",
}


class RunSetupForm(QWidget):
    """The settings of the next run, as widgets; `edited` follows every change."""

    edited = Signal()  # any setting changed (not while `set_config` fills the widgets)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setStyleSheet(STYLE)
        self._loading = False
        self._fields: dict[str, FieldCell] = {}
        self._build_ui()

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
            override_compile=self.compile_source.override.isChecked(),
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
        with self._quiet():
            self.model_edit.setText(config.model)
            self.allow_code.setChecked(config.allow_unsafe_code)
            self._set_data_widgets(config.data)
            self.split_spin.setValue(round(config.validation_split * 100))
            self.batch_spin.setValue(config.batch_per_replica)
            self.epochs_spin.setValue(config.epochs)
            self.optimizer_combo.setCurrentText(config.optimizer.lower())
            self.lr_edit.setText(f"{config.learning_rate:g}")
            self.compile_source.override.setChecked(config.override_compile)
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
        self._edited()

    def set_enabled_for_run(self, enabled: bool) -> None:
        """Lock the settings while a run uses them (enabled=False), unlock after."""
        self._form.setEnabled(enabled)

    def input_problems(self, config: RunConfig) -> dict[str, str]:
        """`config.problems()` (from `build_config`), said in terms of these widgets."""
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
        return problems

    def show_problems(self, problems: dict[str, str], data: DataInfo | None) -> None:
        """Each problem on its field, and all of them (or what `data` holds) in the summary."""
        for name, field in self._fields.items():
            field.show(problems.get(name))
        if problems:
            count = len(problems)
            lines = [f"{FIELD_NAMES.get(f, f) or 'Settings'}: {m}" if f not in self._fields
                     else FIELD_NAMES.get(f, f) for f, m in problems.items()]
            self.summary_label.setText(
                f"<span style='color:{ERROR_COLOR}'>⚠ {count} problem{'s' if count > 1 else ''}"
                f" to fix before training: </span>" + _escape("; ".join(lines)))
        elif data is not None:
            classes = f", {data.num_classes} classes" if data.num_classes else ""
            shape = "×".join(str(d) for d in data.x_shape) if data.x_shape else "?"
            self.summary_label.setText(f"✓ Ready: {data.train_samples:,} samples{classes}, "
                                       f"input {shape}.")
        else:
            self.summary_label.setText("✓ Ready.")

    @contextlib.contextmanager
    def _quiet(self) -> Iterator[None]:
        """Fill widgets without `edited` for every one of them."""
        self._loading = True
        try:
            yield
        finally:
            self._loading = False

    def _edited(self) -> None:
        if not self._loading:
            self.edited.emit()

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
        self.compile_source = CompileSourceRow([self.optimizer_combo, self.lr_edit])
        form.addRow("", self.compile_source)
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
            edit.textChanged.connect(self._edited)
        for spin in (self.width_spin, self.height_spin, self.split_spin, self.batch_spin,
                     self.epochs_spin, self.patience_spin):
            spin.valueChanged.connect(self._edited)
        for box in (self.allow_code, self.early_stop, self.sync_bn, self.scale_lr,
                    self.xla_check, self.compile_source.override):
            box.toggled.connect(self._edited)
        self.warmup_spin.valueChanged.connect(self._edited)
        self.optimizer_combo.currentIndexChanged.connect(self._edited)
        self.precision_combo.currentIndexChanged.connect(self._edited)
        self.scale_lr.toggled.connect(self.warmup_spin.setEnabled)
        self.data_kind.currentIndexChanged.connect(self._update_data_widgets)
        self.data_kind.currentIndexChanged.connect(self._edited)
        self.early_stop.toggled.connect(self.patience_spin.setEnabled)

    def _name(self, widget: QWidget, name: str, tooltip: str) -> None:
        widget.setAccessibleName(name)
        widget.setToolTip(tooltip)

    def _field(self, name: str, widgets: list[QWidget], *, outline: list[QWidget] | None = None,
               extra: list[QWidget] | None = None, below: list[QWidget] | None = None
               ) -> QWidget:
        """The form cell of config field `name` (see `field_cell`)."""
        cell, self._fields[name] = field_cell(FIELD_NAMES.get(name, name), widgets,
                                              outline=outline, extra=extra, below=below)
        return cell

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


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
