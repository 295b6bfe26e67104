"""The run setup's widgets and where they sit: the simple path first, the rest in sections.

The model, data, batch and epochs come first, then Train with the settings
check beside it, both in view without scrolling at 1280x720; optimization,
speed, schedule and output sit in collapsible sections that remember whether
they were open. Nothing here widens the form: hints and messages wrap, paths
scroll in their line edits. Nothing comes and goes above a field either:
changing hints keep their lines, and the problems are spelled out below the
whole form (see `RunSetupForm.show_problems`), so no row moves under the cursor.
`RunSetupForm` (run_setup_form.py) maps these widgets to a RunConfig.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from mgpu_gui.core.config import ALL_LAYERS, OPTIMIZERS, PRECISIONS
from mgpu_gui.core.devices.precision_hint import LABELS as PRECISION_LABELS
from mgpu_gui.core.modelfiles.builtins import IMAGENET, NO_WEIGHTS
from mgpu_gui.gui.widgets.augment_picker import AugmentPicker
from mgpu_gui.gui.widgets.compile_source import CompileSourceRow
from mgpu_gui.gui.widgets.engine_choice import EngineCombo, InstallNote
from mgpu_gui.gui.widgets.field_cells import (
    STYLE,
    FieldCell,
    align_labels,
    field_cell,
    hint_label,
    row,
)
from mgpu_gui.gui.widgets.mesh_choice import MeshCombo, MeshGrid
from mgpu_gui.gui.widgets.problem_line import ProblemLine
from mgpu_gui.gui.widgets.section import CollapsibleSection
from mgpu_gui.gui.widgets.wrapper_notice import WrapperNotice

DATA_KINDS = (("demo", "Digits (demo)"), ("npz", ".npz file"), ("images", "Image folder"))
SECTIONS = (("optimization", "Optimization"), ("augmentation", "Augmentation"),
            ("speed", "Speed"), ("schedule", "Schedule and stopping"), ("output", "Output"))


class RunSetupLayout(QWidget):
    """The run setup's widgets, each named for screen readers and explained in its tooltip."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setStyleSheet(STYLE)
        self._fields: dict[str, FieldCell] = {}  # config field -> its cell
        self._section_of: dict[str, CollapsibleSection] = {}  # config field -> its section
        self._build_ui()

    def _build_ui(self) -> None:
        """The simple path (model, data, batch, epochs, Train) on top, the rest in sections.

        Nothing in the form widens it: hints and messages wrap, paths scroll in
        their line edits. Nothing comes and goes above a field either (see
        `show_problems`), so a row never moves under the cursor.
        """
        outer = QVBoxLayout(self)
        outer.setContentsMargins(6, 6, 6, 6)
        self._form = QWidget(self)
        essentials = QFormLayout(self._form)
        essentials.setContentsMargins(0, 0, 0, 0)
        essentials.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        outer.addWidget(self._form)
        self._build_model(essentials)
        self._build_data(essentials)
        self._build_batch(essentials)
        outer.addLayout(self._build_train_row())
        self.sections = {key: CollapsibleSection(title, key) for key, title in SECTIONS}
        for section in self.sections.values():
            outer.addWidget(section)
        self._build_optimization(self.sections["optimization"])
        self._build_augmentation(self.sections["augmentation"])
        self._build_speed(self.sections["speed"])
        self._build_schedule(self.sections["schedule"])
        self._build_output(self.sections["output"])
        # Below everything: a message appearing or going here pushes no field.
        self.problems_label = QLabel()
        self.problems_label.setProperty("role", "error")
        self.problems_label.setWordWrap(True)
        self.problems_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.problems_label.setAccessibleName("Problems to fix")
        self.problems_label.hide()
        outer.addWidget(self.problems_label)
        outer.addStretch()
        align_labels([essentials, *(s.form for s in self.sections.values())])

    def _build_model(self, form: QFormLayout) -> None:
        self.model_combo = QComboBox()
        self.model_combo.setEditable(True)
        self.model_combo.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        # Long paths scroll in the line edit; the form keeps its width.
        self.model_combo.setMinimumContentsLength(8)
        self.model_combo.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.model_edit = self.model_combo.lineEdit()
        self.model_edit.setAcceptDrops(False)  # a dropped file goes to the panel's handler
        self.model_edit.setPlaceholderText("demo, a built-in, or a .keras / .h5 / .py file")
        self.model_edit.setAccessibleName("Model file path")
        self.model_browse = QPushButton("Browse…")
        self.summary_button = QPushButton("Show summary")
        self._name(self.model_combo, "Model file",
                   "The model to train: 'demo' (a small convnet), a built-in architecture "
                   "(small_convnet, MobileNetV3, EfficientNetV2, ResNet50V2, ConvNeXt: built "
                   "for the data's image size and classes), a .keras or .h5 file saved "
                   "by Keras, or a .py file whose build_model() (or create_model(), get_model(), "
                   "make_model()) takes input_shape and num_classes. "
                   "Recent files are in the list; you can also drop a file on this panel.")
        self._name(self.model_browse, "Browse for a model file", "Choose a model file.")
        self._name(self.summary_button, "Show model summary",
                   "Build the model in the background (TensorFlow, CPU only) and show its "
                   "layers and parameter count.")
        # Beside the button, two lines kept: "Building model…" and the parameter count
        # that replaces it move nothing.
        self.model_status = hint_label("Model build status", lines=2)
        self.model_status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.wrapper_notice = WrapperNotice()
        status_row = QWidget()
        status_row.setLayout(row([self.summary_button, self.model_status]))
        self._add(form, "Model", "model", [self.model_combo, self.model_browse],
                  below=[status_row, self.wrapper_notice])

        self.allow_code = QCheckBox("Allow code from the model file")
        self._name(self.allow_code, "Allow code from the model file",
                   "Models with Lambda layers store Python code that runs when the model is "
                   "loaded. Such code can do anything your user account can (delete files, "
                   "send data). Tick this only for files you made or trust.")
        self._build_weights()
        # One row for both: a model file may run code, a built-in starts from weights; the
        # form shows the one that applies, and the row keeps its height when they swap. When
        # neither applies (the demo, a plain file) it takes no room: a blank row under the
        # model looked like a layout fault.
        self._add(form, "", "allow_unsafe_code", [self.allow_code, self.weights_box])
        self._fields["pretrained"] = FieldCell((self.pretrained_combo,),
                                               (self.pretrained_combo.toolTip(),))
        self.allow_code.setMinimumHeight(self.weights_box.sizeHint().height())

    def _build_weights(self) -> None:
        self.pretrained_combo = QComboBox()
        self.pretrained_combo.setEditable(True)
        self.pretrained_combo.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.pretrained_combo.addItems([IMAGENET, NO_WEIGHTS])
        self.pretrained_combo.setMinimumContentsLength(8)
        self.pretrained_combo.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.pretrained_combo.lineEdit().setPlaceholderText("imagenet, none or a weights file")
        self._name(self.pretrained_combo, "Pretrained weights",
                   "The built-in architecture's starting weights: imagenet (downloaded by "
                   "Keras on first use, then kept in its cache), none (train from scratch), "
                   "or the path of a weights file (.h5, .keras) of the architecture without "
                   "its top.")
        self.pretrained_combo.lineEdit().setAccessibleName("Pretrained weights")
        self.pretrained_combo.lineEdit().setToolTip(self.pretrained_combo.toolTip())
        label = QLabel("Pretrained")
        label.setBuddy(self.pretrained_combo)
        self.weights_box = QWidget()
        self.weights_box.setLayout(row([label, self.pretrained_combo]))
        self.weights_box.hide()

    def _build_data(self, form: QFormLayout) -> None:
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
        self.data_preview = QPushButton("Preview…")
        self._name(self.data_preview, "Preview the data",
                   "Open the Data view: samples per class, a few samples of each, the input "
                   "shape, dtype and value range, and an image folder's image sizes. Read in "
                   "the background; large folders are sampled, and it says so.")
        self.data_path_row = QWidget()
        self.data_path_row.setLayout(row([self.data_edit, self.data_browse]))
        self._add(form, "Data", "data", [self.data_kind, self.data_preview],
                  below=[self.data_path_row], outline=[self.data_edit])

        self.width_spin, self.height_spin = QSpinBox(), QSpinBox()
        for spin, what in ((self.width_spin, "width"), (self.height_spin, "height")):
            spin.setRange(1, 4096)
            spin.setSuffix(" px")
            self._name(spin, f"Image {what}", f"Images are resized to this {what} on loading; "
                       "the model's input shape must match (height, width, 3).")
        self.size_row = QWidget()
        self.size_row.setLayout(row([QLabel("Image size"), self.width_spin, QLabel("×"),
                                     self.height_spin]))
        self._add(form, "", "image_size", [self.size_row],
                  outline=[self.width_spin, self.height_spin])

        self.split_spin = QSpinBox()
        self.split_spin.setRange(0, 90)
        self.split_spin.setSuffix(" %")
        self._name(self.split_spin, "Validation split",
                   "Share of the training data held out for validation, when the data has no "
                   "validation set of its own (x_val/y_val).")
        self._add(form, "Validation", "validation_split", [self.split_spin])

    def _build_batch(self, form: QFormLayout) -> None:
        self.batch_spin = QSpinBox()
        self.batch_spin.setRange(1, 1 << 16)
        self.batch_text = QLabel()
        self.batch_text.setWordWrap(True)
        self.batch_text.setAccessibleName("Global batch")
        # Steps and dropped samples change with every batch size: two lines kept for them.
        self.batch_hint = hint_label("Steps and dropped samples per epoch", lines=2)
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
        self._add(form, "Batch/GPU", "batch_per_replica", [self.batch_spin, self.batch_text],
                  below=[self.batch_hint])

        self.epochs_spin = QSpinBox()
        self.epochs_spin.setRange(1, 100_000)
        self._name(self.epochs_spin, "Epochs", "Passes over the training data.")
        self._add(form, "Epochs", "epochs", [self.epochs_spin])

    def _build_train_row(self) -> QHBoxLayout:
        """Train, and beside it whether the settings are ready: both seen without scrolling."""
        self.train_button = QToolButton()  # the main window gives it its Train action
        self.train_button.setText("Train")
        self._name(self.train_button, "Train", "Start training with these settings")
        self.train_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.train_button.setMinimumWidth(self.train_button.fontMetrics().horizontalAdvance(
            "Preparing…") + 24)
        # Two lines kept: "Ready" and "⚠ Model: …" take the same room.
        self.summary_label = ProblemLine()
        layout = row([self.train_button, self.summary_label])
        layout.setContentsMargins(0, 6, 0, 6)
        return layout

    def _build_optimization(self, section: CollapsibleSection) -> None:
        self.lr_edit = QLineEdit()
        self.lr_edit.setMaximumWidth(self.lr_edit.fontMetrics().horizontalAdvance("0") * 12)
        self.optimizer_combo = QComboBox()
        self.optimizer_combo.addItems(OPTIMIZERS)
        self._name(self.optimizer_combo, "Optimizer",
                   "Used unless the model file comes compiled with its own optimizer.")
        self._add(section, "Optimizer", "optimizer", [self.optimizer_combo])
        self.compile_source = CompileSourceRow([self.optimizer_combo, self.lr_edit])
        section.form.addRow("", self.compile_source)
        self._name(self.lr_edit, "Learning rate",
                   "Learning rate, e.g. 0.001 or 1e-3. With more replicas the global batch "
                   "grows; a larger learning rate is often needed to match.")
        self._add(section, "Learning rate", "learning_rate", [self.lr_edit])
        self.scale_lr = QCheckBox("Scale with the replicas")
        self._name(self.scale_lr, "Scale the learning rate with the replicas",
                   "Linear scaling rule (Goyal et al. 2017): the learning rate above is the "
                   "base, right for one replica's batch; the run trains at base × replicas, "
                   "because the global batch is that many times larger. The LR rises "
                   "linearly per step from the base to the scaled LR over the warm-up "
                   "epochs, so the first steps do not diverge. ReduceLROnPlateau, when on, "
                   "starts after the warm-up.")
        section.form.addRow("LR scaling", self.scale_lr)
        self.warmup_spin = QSpinBox()
        self.warmup_spin.setRange(0, 10_000)
        self.warmup_spin.setSuffix(" epochs")
        self._name(self.warmup_spin, "Learning-rate warm-up",
                   "Epochs over which the LR rises from the base to the scaled LR "
                   "(5 in Goyal et al.). It must end before the last epoch.")
        # Below the rows that change it, with its lines kept: ticking the box moves nothing.
        self.lr_hint = hint_label("Scaled learning rate", lines=2)
        self.lr_hint.setToolTip(
            "The learning rate the run trains at: the base LR you typed times the replicas "
            "(the global batch is that many times the per-replica batch), reached by a "
            "linear warm-up. The curves' learning-rate plot shows it step by step.")
        self._add(section, "Warm-up", "lr_scaling.warmup_epochs", [self.warmup_spin],
                  below=[self.lr_hint])

    def _build_augmentation(self, section: CollapsibleSection) -> None:
        self.augment_picker = AugmentPicker()
        self._name(self.augment_picker, "Augmentation",
                   "Vary the training images at random each epoch (Keras preprocessing "
                   "layers in the input pipeline), so a small image folder goes further. "
                   "Validation and test images are never changed. Image folders only.")
        self.augment_preview = QPushButton("Preview…")
        self._name(self.augment_preview, "Preview the augmentation",
                   "See a few images of the folder, each with random variants made by the "
                   "transforms ticked here, at these strengths (the training's own layers). "
                   "Needs an image folder and at least one transform.")
        preview_row = QWidget()
        preview_row.setLayout(row([self.augment_preview]))
        # Across the label column too: two transforms a line need the width.
        self._add(section, None, "augment", [self.augment_picker], below=[preview_row])

    def _build_speed(self, section: CollapsibleSection) -> None:
        self.engine_combo = EngineCombo()
        self._name(self.engine_combo, "Engine",
                   "The Keras backend the run trains on: TensorFlow (MirroredStrategy) or JAX "
                   "(DataParallel; JAX compiles with XLA). Only installed engines can be "
                   "chosen; the same model, data and settings train on either.")
        # Beside the short choice, two lines kept: what the engine does (JAX: what it implies).
        self.engine_combo.setMaximumWidth(self.engine_combo.sizeHint().width())
        self.engine_hint = hint_label("Engine", lines=2)
        self.engine_hint.setToolTip("What the engine does with the replicas. On JAX, XLA and "
                                    "synchronized BatchNorm are always on: their boxes below "
                                    "show it.")
        # Always there or never (installed engines are looked up once): it moves no row.
        self.engine_install = InstallNote(self.engine_combo.missing)
        self._add(section, "Engine", "engine", [self.engine_combo, self.engine_hint],
                  below=[self.engine_install])

        self.mesh_combo = MeshCombo()
        self.mesh_combo.setAccessibleName("Mesh")
        self.mesh_grid = MeshGrid()
        self._add(section, "Mesh", "mesh", [self.mesh_combo, self.mesh_grid])

        self.precision_combo = QComboBox()
        for name in PRECISIONS:
            self.precision_combo.addItem(PRECISION_LABELS[name], name)
        self.precision_combo.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.precision_combo.setMinimumContentsLength(12)
        self._name(self.precision_combo, "Precision",
                   "Mixed precision: layers compute in bfloat16 or float16 and keep float32 "
                   "weights, which is faster and takes less memory on GPUs with tensor cores "
                   "(bfloat16: compute capability 8.0 or newer, e.g. A100, RTX 30xx; "
                   "float16: 7.0 or newer, e.g. V100, T4, with loss scaling). The output "
                   "layer computes in float32, and the exported model is float32, so it "
                   "loads and predicts anywhere, also without a GPU.")
        self.precision_hint = hint_label("Precision support", lines=2)
        self.precision_hint.setToolTip("What the chosen GPUs (or this CPU) support, "
                                       "from their compute capability as NVML reports it.")
        self._add(section, "Precision", "precision", [self.precision_combo],
                  below=[self.precision_hint])

        self.xla_check = QCheckBox("XLA (jit_compile)")
        self._name(self.xla_check, "XLA",
                   "Compile the model's forward and backward pass with XLA, per replica: "
                   "fused operations, often faster on GPUs; the first step takes longer. "
                   "On CPU replicas it is usually slower (the demo model: a quarter of the "
                   "samples/s; tests/benchmarks/precision.py). "
                   "A model XLA cannot compile (an operation without an XLA kernel) trains "
                   "without it, with a warning in the log.")
        self._add(section, "", "jit_compile", [self.xla_check])

        self.cache_combo = QComboBox()
        for label, mode in (("Automatic", "auto"), ("In memory", "memory"),
                            ("On local disk", "disk"), ("Off", "off")):
            self.cache_combo.addItem(label, mode)
        self._name(self.cache_combo, "Cache",
                   "Where the decoded samples are kept between epochs, so the GPUs do not "
                   "wait for images to be decoded again. Automatic: in memory when they fit "
                   "1 GiB, else an image folder's on local disk in the run folder (it "
                   "survives a killed worker: a resume reads it again). In memory: whatever "
                   "the size (it must fit the RAM). On local disk: image folders. Off: "
                   "decode every epoch.")
        self._add(section, "Cache", "cache", [self.cache_combo])

        self.sync_bn = QCheckBox("Synchronized BatchNorm")
        self._name(self.sync_bn, "Synchronized BatchNorm",
                   "Synchronized BatchNorm: BatchNormalization layers compute their mean and "
                   "variance over the global batch (all replicas, one all-reduce per layer "
                   "and step) instead of over each replica's per-replica batch alone.\n"
                   "Better with small per-replica batches (under ~32), a bit slower; it "
                   "changes nothing in a model without BatchNormalization layers.")
        self._add(section, "", "sync_batchnorm", [self.sync_bn])

    def _build_schedule(self, section: CollapsibleSection) -> None:
        self.early_stop = QCheckBox("Early stopping")
        self._name(self.early_stop, "Early stopping",
                   "Stop when the validation loss has not improved for 'patience' epochs, "
                   "and keep the best weights.")
        section.form.addRow("", self.early_stop)
        self.patience_spin = QSpinBox()
        self.patience_spin.setRange(0, 10_000)
        self.patience_spin.setSuffix(" epochs")
        self._name(self.patience_spin, "Early stopping patience",
                   "Epochs without improvement before training stops.")
        self._add(section, "Patience", "early_stopping.patience", [self.patience_spin])
        self._build_transfer(section)

    def _build_transfer(self, section: CollapsibleSection) -> None:
        """Transfer learning: the frozen epochs, then what to fine-tune and how fast."""
        self.freeze_spin = QSpinBox()
        self.freeze_spin.setRange(0, 100_000)
        self.freeze_spin.setSuffix(" epochs")
        self.freeze_spin.setSpecialValueText("off")
        self._name(self.freeze_spin, "Freeze the backbone",
                   "Transfer learning in one run: for these first epochs the pretrained "
                   "backbone is frozen and only the new head trains; the rest of the epochs "
                   "fine-tune the backbone. Epochs is the total of both. Needs a model with "
                   "a backbone: a built-in with pretrained weights, or a model file with a "
                   "nested model named 'backbone'. Early stopping watches the fine-tuning.")
        self._add(section, "Freeze", "freeze_epochs", [self.freeze_spin])
        self.unfreeze_combo = QComboBox()
        self.unfreeze_combo.setEditable(True)
        self.unfreeze_combo.addItems([ALL_LAYERS, "10", "20", "50"])
        self.unfreeze_combo.setMinimumContentsLength(4)
        self._name(self.unfreeze_combo, "Layers to fine-tune",
                   "After the frozen epochs: fine-tune all of the backbone's layers, or its "
                   "top N. Its BatchNorm layers stay frozen either way (in inference mode).")
        self._name(self.unfreeze_combo.lineEdit(), "Layers to fine-tune",
                   self.unfreeze_combo.toolTip())
        self.fine_tune_lr_edit = QLineEdit()
        self.fine_tune_lr_edit.setPlaceholderText("LR / 10")
        self.fine_tune_lr_edit.setMaximumWidth(
            self.fine_tune_lr_edit.fontMetrics().horizontalAdvance("0") * 10)
        self._name(self.fine_tune_lr_edit, "Fine-tune learning rate",
                   "The learning rate of the fine-tuning epochs; empty: a tenth of the first "
                   "stage's.")
        self._add(section, "Fine-tune", "unfreeze",
                  [self.unfreeze_combo, QLabel("layers at LR"), self.fine_tune_lr_edit],
                  outline=[self.unfreeze_combo])
        self._fields["fine_tune_lr"] = FieldCell((self.fine_tune_lr_edit,),
                                                 (self.fine_tune_lr_edit.toolTip(),))
        self._section_of["fine_tune_lr"] = section

    def _build_output(self, section: CollapsibleSection) -> None:
        self.output_edit = QLineEdit()
        self.output_edit.setAcceptDrops(False)
        self.output_browse = QPushButton("Browse…")
        self._name(self.output_edit, "Output folder",
                   "Each run gets a subfolder here: checkpoints, logs, the exported model.")
        self._name(self.output_browse, "Browse for the output folder", "Choose the folder.")
        self._add(section, "Folder", "output_dir", [self.output_edit, self.output_browse])
        self.on_finish_edit = QLineEdit()
        self.on_finish_edit.setPlaceholderText("a command, e.g. notify-send 'run ended'")
        self._name(self.on_finish_edit, "On-finish command",
                   "Run when the run ends (completed, stopped or failed), for mail or chat: "
                   "words split as a shell would, but no shell runs it (no pipes or $VARS); "
                   "stopped after 30 s; what it prints goes to the run's worker.log. Its "
                   "environment says which run: MGPU_RUN_ID, MGPU_RUN_NAME, MGPU_RUN_STATUS, "
                   "MGPU_RUN_FOLDER, MGPU_RUN_BEST. It runs also for a queued run, with this "
                   "window closed. Empty: nothing runs.")
        self._add(section, "On finish", "on_finish", [self.on_finish_edit])
    def _name(self, widget: QWidget, name: str, tooltip: str) -> None:
        widget.setAccessibleName(name)
        widget.setToolTip(tooltip)

    def _add(self, where: QFormLayout | CollapsibleSection, label: str | None, name: str,
             widgets: list[QWidget], *, outline: list[QWidget] | None = None,
             below: list[QWidget] | None = None) -> None:
        """A row for config field `name` in a form or a section (see `field_cell`);
        label None: the row spans the label column too."""
        cell, self._fields[name] = field_cell(widgets, outline=outline, below=below)
        if isinstance(where, CollapsibleSection):
            self._section_of[name] = where
            where = where.form
        if label is None:
            where.addRow(cell)
        else:
            where.addRow(label, cell)
