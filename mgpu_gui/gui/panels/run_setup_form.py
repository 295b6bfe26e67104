"""The run setup's form: the widgets of a RunConfig, and the problems shown on them.

`RunSetupForm` maps a RunConfig to the widgets (`RunSetupLayout`,
run_setup_layout.py) and back, and shows each problem: its field outlined
with the message in its tooltip, the first said beside Train with every field
named there as a link to it (widgets/problem_line.py), the fields named in a
closed section's header, the messages spelled out below the whole form, where
a message that comes and goes moves no field. A blank field nobody has typed
in yet is not outlined red for what it lacks: beside Train it is the next step.
It checks nothing itself; `RunSetupPanel` (run_setup.py) adds the checks, hints,
files and settings.
"""

from __future__ import annotations

import contextlib
import math
import os
import shlex
from collections.abc import Iterator

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import QCheckBox, QScrollArea, QWidget

from mgpu_gui.core.augment import AugmentSpecError
from mgpu_gui.core.config import (
    ALL_LAYERS,
    DEMO,
    DeviceSelection,
    EarlyStoppingConfig,
    LRScalingConfig,
    RunConfig,
)
from mgpu_gui.core.datasets.inspection import DataInfo
from mgpu_gui.core.engines import Engine
from mgpu_gui.core.modelfiles.builtins import ARCHITECTURES, IMAGENET, NO_WEIGHTS, architecture
from mgpu_gui.core.runs.finish_hook import parse_command
from mgpu_gui.gui.panels.run_setup_layout import RunSetupLayout
from mgpu_gui.gui.widgets.engine_choice import SYNC_BN_ON_JAX, XLA_ON_JAX
from mgpu_gui.gui.widgets.problem_line import Problem
from mgpu_gui.gui.widgets.setting_names import FIELD_NAMES

NOT_IMAGES = ("Augmentation transforms images: choose an image folder as the data to use it. "
              "The transforms ticked here come back with the next image folder.")


class RunSetupForm(RunSetupLayout):
    """The settings of the next run, as widgets; `edited` follows every change."""

    edited = Signal()  # any setting changed (not while `set_config` fills the widgets)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._loading = False
        # The boxes the JAX engine decides (XLA, sync BN) -> the user's (checked, tooltip).
        self._held: dict[QCheckBox, tuple[bool, str]] = {}
        self._shown = RunConfig()  # the last config set: its fields this form has no widget for
        self._said: tuple[dict[str, str], DataInfo | None] = ({}, None)  # show_problems' last
        self.set_config(RunConfig())  # signals are connected below: no `edited` yet
        self._update_data_widgets()
        self._connect()

    def build_config(self, devices: DeviceSelection | None = None) -> RunConfig:
        """The RunConfig these widgets describe (not validated); the settings the form has
        no widget for (export formats, metrics, custom objects, …) are those of the config
        last set, so a past run's settings come back whole."""
        kind = self.data_kind.currentData()
        data = DEMO if kind == "demo" else (self.data_edit.text().strip() or DEMO)
        model = self.model_edit.text().strip() or DEMO
        arch = architecture(model)
        engine = self.engine_combo.engine()
        return self._shown.replace(
            model=model,
            # An architecture without ImageNet weights trains from scratch: its default.
            pretrained=(self.pretrained_combo.currentText().strip() or None)
            if arch is not None and arch.has_imagenet else None,
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
            # JAX compiles with XLA anyway, and takes no jit_compile flag.
            jit_compile=engine is not Engine.JAX and self.xla_check.isChecked(),
            cache=self.cache_combo.currentData(),
            image_size=(self.height_spin.value(), self.width_spin.value()),
            # The user's own choice, kept for TensorFlow (JAX synchronizes BatchNorm anyway).
            sync_batchnorm=self._own_choice(self.sync_bn),
            # Kept for a model with a backbone, but only such a model is fine-tuned.
            freeze_epochs=self.freeze_spin.value() if self._has_backbone() else 0,
            unfreeze=self.unfreeze_combo.currentText().strip() or ALL_LAYERS,
            fine_tune_lr=self._fine_tune_lr(),
            # Kept ticked for other data, but only an image folder is augmented.
            augment=self.augment_picker.spec() if kind == "images" else "",
            output_dir=self.output_edit.text().strip() or "~/mgpu-runs",
            on_finish=self._on_finish()[0],
            engine=engine.value,
            mesh=self.mesh_combo.mesh(),
        )

    def set_config(self, config: RunConfig) -> None:
        """Show `config` in the widgets (the fields this panel has)."""
        self._shown = config
        with self._quiet():
            self._hold_for_engine(False, restore=False)  # the boxes take the config's values
            self.model_edit.setText(config.model)
            self._weights_choice = config.pretrained or IMAGENET
            self.pretrained_combo.setCurrentText(self._weights_choice)
            self._update_model_widgets()
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
            self.cache_combo.setCurrentIndex(max(self.cache_combo.findData(config.cache), 0))
            self.height_spin.setValue(config.image_size[0])
            self.width_spin.setValue(config.image_size[1])
            self.sync_bn.setChecked(config.sync_batchnorm)
            self.freeze_spin.setValue(config.freeze_epochs)
            self.unfreeze_combo.setCurrentText(str(config.unfreeze))
            self.fine_tune_lr_edit.setText(
                "" if config.fine_tune_lr is None else f"{config.fine_tune_lr:g}")
            self._update_transfer_widgets()
            # A spec the form cannot show (from another version) is left for the check to name.
            with contextlib.suppress(AugmentSpecError):
                self.augment_picker.set_spec(config.augment)
            self._update_augment_note()
            self.output_edit.setText(config.output_dir)
            self.on_finish_edit.setText(shlex.join(config.on_finish))
            self.engine_combo.set_engine(config.engine)
            self._update_engine_widgets()
            self.mesh_combo.set_mesh(config.mesh)
        self._edited()

    def train_from_scratch(self) -> None:
        """Start the built-in architecture from no pretrained weights (the offer made when
        they could not be downloaded)."""
        self.pretrained_combo.setCurrentText(NO_WEIGHTS)

    def set_enabled_for_run(self, enabled: bool) -> None:
        """Lock the settings while a run uses them (enabled=False), unlock after."""
        self._form.setEnabled(enabled)
        for section in self.sections.values():
            section.body.setEnabled(enabled)  # the headers still open, to look

    def input_problems(self, config: RunConfig) -> dict[str, str]:
        """`config.problems()` (from `build_config`), said in terms of these widgets."""
        problems: dict[str, str] = {}
        for field, message in config.problems():
            problems.setdefault(field, message)
        if config.fine_tune_lr is not None and math.isnan(config.fine_tune_lr):
            problems["fine_tune_lr"] = (f"{self.fine_tune_lr_edit.text().strip()} is not a "
                                        "number; type e.g. 0.0001 or 1e-4, or leave it empty.")
        if "learning_rate" in problems and math.isnan(config.learning_rate):
            problems["learning_rate"] = (f"{self.lr_edit.text().strip() or 'nothing'} is not a "
                                         "number; type e.g. 0.001 or 1e-3.")
        unsplit = self._on_finish()[1]
        if unsplit:
            problems["on_finish"] = unsplit
        kind = self.data_kind.currentData()
        if kind != "demo" and not self.data_edit.text().strip():
            problems["data"] = ("choose the .npz file" if kind == "npz"
                                else "choose the image folder") + " (Browse…, or drop it here)."
        elif kind == "npz" and os.path.isdir(os.path.expanduser(config.data)):
            problems.setdefault("data", "this is a folder; choose 'Image folder' as the source.")
        elif kind == "images" and os.path.isfile(os.path.expanduser(config.data)):
            problems.setdefault("data", "this is a file; choose '.npz file' as the source.")
        if kind == "images" and not os.path.isdir(os.path.expanduser(config.data)):
            # The Data field says what to fix; "augmentation needs an image folder" would
            # only repeat it, to a user who chose one.
            problems.pop("augment", None)
        return problems

    def show_problems(self, problems: dict[str, str], data: DataInfo | None) -> None:
        """Each problem on its field and its section's header, the first said beside Train
        and all spelled out below the form (those of blank fields not typed in yet: beside
        Train only); without problems, what `data` holds beside Train."""
        self._said = (problems, data)
        for name, field in self._fields.items():
            field.show(problems.get(name))
        cells = self._fields
        said = [Problem(f if f in cells else "", FIELD_NAMES.get(f, f) or "Settings", message,
                        f in cells and cells[f].awaits_input())
                for f, message in problems.items()]
        wrong = [problem for problem in said if not problem.awaits_input]
        for section in self.sections.values():
            section.show_problems([p.name for p in wrong
                                   if self._section_of.get(p.field) is section])
        self.problems_label.setText("<br>".join(
            f"<b>{_escape(p.name)}</b>: {_escape(p.message)}" for p in wrong))
        self.problems_label.setVisible(bool(wrong))
        self.summary_label.show_problems(said)
        if problems:
            return
        if data is not None:
            classes = f", {data.num_classes} classes" if data.num_classes else ""
            shape = "×".join(str(d) for d in data.x_shape) if data.x_shape else "?"
            self.summary_label.setText(f"✓ Ready: {data.train_samples:,} samples{classes}, "
                                       f"input {shape}.")
        else:
            self.summary_label.setText("✓ Ready.")

    def go_to_field(self, name: str) -> None:
        """Field `name` in view, its section opened, the cursor in it and its problem
        outlined even while blank: what a click on its name beside Train does."""
        cell = self._fields.get(name)
        if cell is None:
            return
        cell.reveal()
        self.show_problems(*self._said)
        section = self._section_of.get(name)
        if section is not None:
            section.set_open(True)
        widget = cell.widgets[0]
        widget.setFocus()
        # Once the opened section is laid out: before, the field has no place to scroll to.
        QTimer.singleShot(0, self, lambda: _scroll_to(widget))

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

    def _connect(self) -> None:
        self.summary_label.field_clicked.connect(self.go_to_field)
        for edit in (self.model_edit, self.data_edit, self.lr_edit, self.output_edit,
                     self.on_finish_edit,
                     self.pretrained_combo.lineEdit(), self.unfreeze_combo.lineEdit(),
                     self.fine_tune_lr_edit):
            edit.textChanged.connect(self._edited)
        self.model_edit.textChanged.connect(self._update_model_widgets)
        self.model_edit.textChanged.connect(self._update_transfer_widgets)
        self.pretrained_combo.lineEdit().textChanged.connect(self._update_transfer_widgets)
        self.freeze_spin.valueChanged.connect(self._update_transfer_widgets)
        for spin in (self.width_spin, self.height_spin, self.split_spin, self.batch_spin,
                     self.epochs_spin, self.patience_spin, self.freeze_spin):
            spin.valueChanged.connect(self._edited)
        for box in (self.allow_code, self.early_stop, self.sync_bn, self.scale_lr,
                    self.xla_check, self.compile_source.override):
            box.toggled.connect(self._edited)
        self.warmup_spin.valueChanged.connect(self._edited)
        self.optimizer_combo.currentIndexChanged.connect(self._edited)
        self.precision_combo.currentIndexChanged.connect(self._edited)
        self.cache_combo.currentIndexChanged.connect(self._edited)
        self.mesh_combo.currentIndexChanged.connect(self._edited)
        self.engine_combo.currentIndexChanged.connect(self._update_engine_widgets)
        self.engine_combo.currentIndexChanged.connect(self._edited)
        self.scale_lr.toggled.connect(self.warmup_spin.setEnabled)
        self.data_kind.currentIndexChanged.connect(self._update_data_widgets)
        self.data_kind.currentIndexChanged.connect(self._edited)
        self.early_stop.toggled.connect(self.patience_spin.setEnabled)
        self.augment_picker.changed.connect(self._update_augment_note)
        self.augment_picker.changed.connect(self._edited)

    def _learning_rate(self) -> float:
        try:
            return float(self.lr_edit.text().strip())
        except ValueError:
            return math.nan

    def _on_finish(self) -> tuple[tuple[str, ...], str]:
        """The on-finish command's words, and why the line cannot be split (else "")."""
        try:
            return parse_command(self.on_finish_edit.text()), ""
        except ValueError as error:
            return (), f"{error}; close the quote, or write a quote meant as text as \\'."

    def _fine_tune_lr(self) -> float | None:
        text = self.fine_tune_lr_edit.text().strip()
        try:
            return float(text) if text else None
        except ValueError:
            return math.nan

    def _has_backbone(self) -> bool:
        """Whether the model may have a pretrained backbone to freeze: a built-in with
        pretrained weights, or a model file (its builder or file says when it is built)."""
        model = self.model_edit.text().strip() or DEMO
        arch = architecture(model)
        if arch is None:
            return model != DEMO
        return arch.has_imagenet and self.pretrained_combo.currentText().strip() != NO_WEIGHTS

    def _update_transfer_widgets(self) -> None:
        """Freezing only for a model with a backbone; what to fine-tune only when frozen."""
        possible = self._has_backbone()
        self.freeze_spin.setEnabled(possible)
        fine_tune = possible and self.freeze_spin.value() > 0
        self.unfreeze_combo.setEnabled(fine_tune)
        self.fine_tune_lr_edit.setEnabled(fine_tune)
        self.sections["schedule"].set_note(
            f"{self.freeze_spin.value()} frozen, then fine-tune" if fine_tune else "")

    def _update_engine_widgets(self) -> None:
        """What the engine does, below it and (for JAX) in the closed section's header."""
        jax = self.engine_combo.engine() is Engine.JAX
        self.engine_hint.setText(self.engine_combo.hint())
        self.sections["speed"].set_note("JAX engine" if jax else "")
        self._hold_for_engine(jax)
        self.mesh_combo.set_model_parallel(jax)

    def _hold_for_engine(self, jax: bool, *, restore: bool = True) -> None:
        """On JAX, XLA and synchronized BatchNorm are what the engine does anyway: their
        boxes show it, ticked and disabled; the user's own choices come back on TensorFlow
        (`restore` False: drop them, the caller sets the boxes)."""
        for box, tip in ((self.xla_check, XLA_ON_JAX), (self.sync_bn, SYNC_BN_ON_JAX)):
            if jax and box not in self._held:
                self._held[box] = (box.isChecked(), box.toolTip())
                box.setChecked(True)
                box.setToolTip(tip)
                box.setEnabled(False)
            elif not jax and box in self._held:
                checked, own_tip = self._held.pop(box)
                if restore:
                    box.setChecked(checked)
                box.setToolTip(own_tip)
                box.setEnabled(True)

    def _own_choice(self, box: QCheckBox) -> bool:
        """A box as the user set it, also while the engine holds it."""
        return self._held[box][0] if box in self._held else box.isChecked()

    def _update_model_widgets(self) -> None:
        """A built-in shows its weights where a model file's code consent goes (the panel
        shows that for a file whose Lambda layers would run); one without ImageNet weights
        shows 'none', and the choice comes back with the next one."""
        arch = architecture(self.model_edit.text().strip())
        self.weights_box.setVisible(arch is not None)
        fixed = arch is not None and not arch.has_imagenet
        if fixed and self.pretrained_combo.isEnabled():
            self._weights_choice = self.pretrained_combo.currentText()
            self.pretrained_combo.setCurrentText(NO_WEIGHTS)
        elif not fixed and not self.pretrained_combo.isEnabled():
            self.pretrained_combo.setCurrentText(self._weights_choice)
        self.pretrained_combo.setEnabled(not fixed)

    def _update_data_widgets(self) -> None:
        kind = self.data_kind.currentData()
        self.data_path_row.setVisible(kind != "demo")
        self.size_row.setVisible(kind == "images")
        self.augment_picker.set_unavailable("" if kind == "images" else NOT_IMAGES)
        self._update_augment_note()
        self.data_edit.setPlaceholderText(
            "path/to/data.npz" if kind == "npz" else "folder with one subfolder per class")

    def _update_augment_note(self) -> None:
        """In the header, seen while the section is closed: how many transforms apply."""
        section = self.sections["augmentation"]
        if not self.augment_picker.isEnabled():
            section.set_note("image folders only")
            section.note.setToolTip(NOT_IMAGES)
            return
        augmentation = self.augment_picker.augmentation()
        count = len(augmentation.active)
        section.set_note(f"{count} transform{'s' if count != 1 else ''}" if count else "off")
        section.note.setToolTip(augmentation.describe())

    def _set_data_widgets(self, data: str, kind: str | None = None) -> None:
        if kind is None:
            kind = "demo" if data == DEMO else "images" if os.path.isdir(
                os.path.expanduser(data)) else "npz"
        self.data_kind.setCurrentIndex(self.data_kind.findData(kind))
        if data != DEMO:
            self.data_edit.setText(data)
        self._update_data_widgets()


def model_choices() -> list[tuple[str, str]]:
    """The model list's fixed entries: 'demo', then each built-in architecture, explained."""
    choices = [(DEMO, "The demo: a small ConvNet for the bundled 8x8 digits.")]
    for arch in ARCHITECTURES.values():
        weights = "ImageNet weights" if arch.has_imagenet else "no pretrained weights"
        choices.append((arch.name, f"Built-in {arch.family}: {arch.params_10_classes / 1e6:.1f} "
                                   f"M parameters (10 classes), {weights}; built for the "
                                   f"data's image size (32x32 or more) and classes."))
    return choices


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _scroll_to(widget: QWidget) -> None:
    """Scroll the scroll area that holds `widget` (the window's, around the form) to it."""
    area = widget.parentWidget()
    while area is not None and not isinstance(area, QScrollArea):
        area = area.parentWidget()
    if area is not None:
        area.ensureWidgetVisible(widget)
