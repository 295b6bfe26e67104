"""The "Run" panel: model, data and training settings, checked as the user types.

Instant checks (no TensorFlow: `RunConfig.problems`, then the model and data
files and the output folder through `SetupChecker`, which reads a file again
only when it changed) run ~150 ms after the last change and outline the field
that is wrong, with the core's message under it. The data check (NaN/Inf,
labels, classes, images that do not decode: seconds) follows in its child
(`DataContentCheck`); what it finds becomes the Data field's problem. Everything shown about the
files is keyed by the model and data paths it was read from: the moment either
path changes, those facts go (build status and summary, file notices, sample
counts, the files' problems), and the checks read the new files after the pause.
What only a built model can tell (a `.py` builder, "Show summary") runs in a
probe child process (`BuildCheck`); a newer request kills the older probe. The
widgets are `RunSetupForm`'s. This module never imports TensorFlow or Keras.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QFileDialog, QWidget

from mgpu_gui.core.augment_preview import PreviewRequest
from mgpu_gui.core.config import DEMO, MODEL_SUFFIXES, RunConfig, is_model_file
from mgpu_gui.core.datasets import batching as data_mod
from mgpu_gui.core.datasets.inspection import DataInfo
from mgpu_gui.core.devices.nvml import GpuInfo
from mgpu_gui.core.devices.precision_hint import precision_hint
from mgpu_gui.core.errors import UserError, WeightsUnavailable
from mgpu_gui.core.events import RunFailed
from mgpu_gui.core.lr_schedule import LinearScaling, format_lr
from mgpu_gui.core.modelfiles.compile_facts import CompileFacts
from mgpu_gui.core.modelfiles.info import ModelFileInfo
from mgpu_gui.core.runs import preflight
from mgpu_gui.gui.jobs.build_check import BuildCheck
from mgpu_gui.gui.jobs.data_content import DataContentCheck
from mgpu_gui.gui.jobs.preload import preload
from mgpu_gui.gui.jobs.setup_check import SetupChecker
from mgpu_gui.gui.panels.run_setup_form import RunSetupForm, model_choices
from mgpu_gui.gui.widgets.error_banner import BannerAction
from mgpu_gui.gui.widgets.next_paint import after_next_paint
from mgpu_gui.gui.widgets.recent_files import RecentFiles

if TYPE_CHECKING:  # the Data view's and the preview's modules load when they first open
    from mgpu_gui.gui.dialogs.augment_preview import AugmentPreviewDialog
    from mgpu_gui.gui.dialogs.data_view import DataViewDialog

SETTINGS_GROUP = "run_setup"
CHECK_DELAY_MS = 150
WARNING_COLOR = "#b06000"
# Problems after which the data check has nothing (or not the right files) to read.
CONTENT_BLOCKERS = frozenset({"data", "validation_data", "image_size"})


class RunSetupPanel(RunSetupForm):
    """Model, data and training settings of the next run."""

    config_changed = Signal()  # after the (debounced) checks of a change ran
    validity_changed = Signal(bool)
    summary_ready = Signal(str)
    _read_ended = Signal()  # from a reading thread: a read a check did not wait for ended

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("RunSetupPanel")
        self.setAcceptDrops(True)
        self._replicas = 1
        self._gpus: tuple[GpuInfo, ...] = ()
        self._valid: bool | None = None
        self._problems: dict[str, str] = {}
        self._data_info: DataInfo | None = None
        self.model_info: ModelFileInfo | None = None
        self._facts_paths: tuple[str, str] | None = None  # (model, data) the facts describe
        self._checker = SetupChecker(on_ready=self._read_ended.emit)
        self._read_ended.connect(self.check_now, Qt.ConnectionType.QueuedConnection)
        self._check_timer = QTimer(self)
        self._check_timer.setSingleShot(True)
        self._check_timer.setInterval(CHECK_DELAY_MS)
        self._check_timer.timeout.connect(self.check_now)
        self._build = BuildCheck(self)
        self._build.status.connect(self.model_status.setText)
        self._build.summary_ready.connect(self.summary_ready)
        self._build.finished.connect(self.check_now)
        self._content = DataContentCheck(self)
        self._content.progress.connect(self._show_content_progress)
        self._content.finished.connect(self.check_now)
        self._recent = RecentFiles(self.model_combo, f"{SETTINGS_GROUP}/recent_models",
                                   model_choices())
        self.data_view: DataViewDialog | None = None  # the Data view, while open
        self.augment_view: AugmentPreviewDialog | None = None  # the preview, while open
        # The Data view's modules, imported ahead of its first open once the window is up.
        after_next_paint(self, lambda: preload(_load_data_view, "Data view"))
        self._connect_panel()
        self._update_preview_button()
        self._load_recent()
        self.check_now()

    # -- public API ---------------------------------------------------------
    def set_replicas(self, replicas: int, gpus: Sequence[GpuInfo] | None = None) -> None:
        """How many replicas (GPUs or CPU devices) the run will use; updates the global batch.

        `gpus`, the GPUs chosen (none: CPU replicas), decide the precision hint;
        None keeps the last ones given.
        """
        self._replicas = max(1, int(replicas))
        if gpus is not None:
            self._gpus = tuple(gpus)
        self.mesh_combo.set_devices(self._replicas)
        self._show_mesh()
        self._update_batch_text()
        self._update_speed_hints()
        self._edited()

    def replicas(self) -> int:
        return self._replicas

    def is_valid(self) -> bool:
        return bool(self._valid)

    def problems(self) -> dict[str, str]:
        """Field name -> message of every problem found by the last check."""
        return dict(self._problems)

    def set_model_path(self, path: str | os.PathLike[str]) -> None:
        self.model_edit.setText(str(path))
        with self._quiet():
            self._recent.add(str(path))

    def set_data_path(self, path: str | os.PathLike[str]) -> None:
        self._set_data_widgets(str(path))

    def recent_models(self) -> list[str]:
        return self._recent.paths()

    def failure_offer(self, failed: RunFailed, train: Callable[[], None]
                      ) -> BannerAction | None:
        """What the banner offers for a run that failed: training from scratch, when a
        built-in's pretrained weights could not be downloaded; the action starts that run
        (`train`), as it says (issue 30: it only changed the setting)."""
        if failed.error_type != WeightsUnavailable.__name__:
            return None

        def from_scratch() -> None:
            self.train_from_scratch()
            train()

        return BannerAction("Train from scratch", from_scratch)

    def show_summary(self) -> None:
        """Build the model in a probe process; the result arrives via `summary_ready`."""
        self.check_now()
        self._build.show_summary(self.build_config())

    def preview_data(self) -> DataViewDialog:
        """The Data view of the data picked now; it replaces one open for older data."""
        from mgpu_gui.gui.dialogs.data_view import DataViewDialog

        if self.data_view is not None:
            self.data_view.close()  # its child ends with it
        config = self.build_config()
        # The window's child, not the form's: the form's style sheet would slow its polish.
        dialog = self.data_view = DataViewDialog(config.data, config.image_size, self.window())
        dialog.finished.connect(lambda _=None: self._forget_data_view(dialog))
        dialog.show()
        return dialog

    def preview_augmentation(self) -> AugmentPreviewDialog:
        """The augmentation preview, following the settings while it is open (one at a time)."""
        from mgpu_gui.gui.dialogs.augment_preview import AugmentPreviewDialog

        if self.augment_view is not None:
            self.augment_view.raise_()
            return self.augment_view
        dialog = self.augment_view = AugmentPreviewDialog(*self._augment_request(),
                                                          self.window())
        dialog.finished.connect(lambda _=None: self._forget_augment_view(dialog))
        dialog.show()
        return dialog

    def check_now(self) -> None:
        """Run the instant checks now (normally ~150 ms after the last change)."""
        self._check_timer.stop()
        config = self.build_config()
        known = self.input_problems(config)
        found = self._checker.check(config, self._replicas, known)
        readable = found.data is not None and not CONTENT_BLOCKERS & found.problems.keys()
        self._content.follow(preflight.content_request(config, found.model) if readable else None)
        content = self._content.problem()
        if content is not None:  # the data's damage, not the batch it cannot fill (reads cached)
            found = self._checker.check(config, self._replicas, {**known, "data": content})
        problems, self._data_info, self.model_info = found.problems, found.data, found.model
        self._facts_paths = (config.model, config.data)
        self._build.follow(config, instant_problems=bool(problems or found.reading))
        failed = self._build.problem()
        if failed is not None:
            problems.setdefault(*failed)
        self._problems = problems
        self.show_problems(problems, self._data_info)
        if not problems and found.reading:
            self.summary_label.setText(f"Reading {' and '.join(found.reading)}…")
        elif not problems and self._content.is_running():
            self.summary_label.setText("Checking the data…")
        # What the file is does not depend on the data: shown even when they do not fit.
        file_info = self.model_info if is_model_file(config.model) else None
        self._show_code_consent(file_info)
        self.wrapper_notice.show_for(file_info)
        self._show_compile_facts(file_info.compile if file_info is not None else None)
        self._update_batch_text()
        self._update_speed_hints()
        self.config_changed.emit()
        valid = not problems and not found.reading
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
        self._checker.shutdown()
        self._build.shutdown()
        self._content.shutdown()
        self.wrapper_notice.shutdown()
        if self.data_view is not None:
            self.data_view.close()
        if self.augment_view is not None:
            self.augment_view.close()

    # -- reacting to changes ------------------------------------------------
    def _show_mesh(self) -> None:
        """The grid of the devices as the mesh lays them out: GPU indices, or c0, c1, …"""
        names = ([str(gpu.index) for gpu in self._gpus][:self._replicas] if self._gpus
                 else [f"c{i}" for i in range(self._replicas)])
        self.mesh_grid.show_mesh(self.mesh_combo.shape(), names)

    def _connect_panel(self) -> None:
        self.edited.connect(self._check_timer.start)
        self.mesh_combo.currentIndexChanged.connect(self._show_mesh)
        # Facts about the old files go at once, not after the checks' pause.
        self.model_edit.textChanged.connect(self._drop_stale_facts)
        self.data_edit.textChanged.connect(self._drop_stale_facts)
        self.data_kind.currentIndexChanged.connect(self._drop_stale_facts)
        # The hints follow each keystroke; the checks wait for the pause.
        self.lr_edit.textChanged.connect(self._update_speed_hints)
        self.scale_lr.toggled.connect(self._update_speed_hints)
        self.warmup_spin.valueChanged.connect(self._update_speed_hints)
        self.precision_combo.currentIndexChanged.connect(self._update_speed_hints)
        self.batch_spin.valueChanged.connect(self._update_batch_text)
        self.model_browse.clicked.connect(self._browse_model)
        self.data_browse.clicked.connect(self._browse_data)
        self.output_browse.clicked.connect(self._browse_output)
        self.summary_button.clicked.connect(self.show_summary)
        self.data_preview.clicked.connect(self.preview_data)
        self.data_kind.currentIndexChanged.connect(self._update_preview_button)
        self.data_edit.textChanged.connect(self._update_preview_button)
        self.augment_preview.clicked.connect(self.preview_augmentation)
        self.edited.connect(self._follow_augmentation)
        self.compile_source.override.toggled.connect(self._update_compile_note)

    def _drop_stale_facts(self) -> None:
        """The model or data path changed: withdraw what was read or built from the old ones.

        Left on screen are only the problems the config shows by itself (no file read);
        the debounced check reads the new files and shows what they hold.
        """
        config = self.build_config()
        if self._facts_paths == (config.model, config.data):
            return
        if self._facts_paths is not None and self._facts_paths[0] != config.model:
            # Override is a choice about one file's optimizer, not about the next file.
            self.compile_source.override.setChecked(False)
        self._facts_paths = None
        self._build.drop_stale(config)
        self._content.follow(None)
        self._data_info = self.model_info = None
        self._show_code_consent(None)
        self.wrapper_notice.show_for(None)
        self._show_compile_facts(None)
        self._problems = self.input_problems(config)
        self.show_problems(self._problems, None)
        if not self._problems:
            self.summary_label.setText("Checking the files…")
        self._update_batch_text()

    def _show_code_consent(self, file_info: ModelFileInfo | None) -> None:
        """The code consent box only where it decides something: a file whose Lambda layers
        would run. Not for the demo, a built-in, a file not read yet, nor a .py builder:
        that runs as the user's own code whatever the box says."""
        self.allow_code.setVisible(file_info is not None and bool(file_info.code_lambdas))

    def _update_preview_button(self) -> None:
        """Nothing to preview while a file kind is picked but no path given, nor an
        augmentation without an image folder or a transform."""
        self.data_preview.setEnabled(self.data_kind.currentData() == "demo"
                                     or bool(self.data_edit.text().strip()))
        self.augment_preview.setEnabled(self._augment_request()[0] is not None)

    def _augment_request(self) -> tuple[PreviewRequest | None, str]:
        """What the augmentation preview shows for the settings now, or why it cannot."""
        folder = self.data_edit.text().strip()
        if self.data_kind.currentData() != "images" or not folder:
            return None, "Choose an image folder as the data to preview its augmentation."
        spec = self.augment_picker.spec()
        if not spec:
            return None, "Tick a transform to preview it: the images are used as they are."
        size = (self.height_spin.value(), self.width_spin.value())
        return PreviewRequest(folder, size, spec), ""

    def _follow_augmentation(self) -> None:
        self._update_preview_button()
        if self.augment_view is not None:
            self.augment_view.follow(*self._augment_request())

    def _forget_augment_view(self, dialog: AugmentPreviewDialog) -> None:
        if self.augment_view is dialog:
            self.augment_view = None
        dialog.deleteLater()

    def _forget_data_view(self, dialog: DataViewDialog) -> None:
        if self.data_view is dialog:
            self.data_view = None
        dialog.deleteLater()

    def _show_content_progress(self, text: str) -> None:
        if text and not self._problems:
            self.summary_label.setText(text)

    def _show_compile_facts(self, facts: CompileFacts | None) -> None:
        """The file's own optimizer, in its row and in the Optimization header: the section
        may be closed, and the form's optimizer is not what trains unless overridden."""
        self.compile_source.show_for(facts)
        self._update_compile_note()

    def _update_compile_note(self) -> None:
        facts = self.compile_source.facts
        note = "" if facts is None else (
            f"overriding the file's {facts.optimizer}" if self.compile_source.override.isChecked()
            else f"{facts.optimizer} from the model file")
        self.sections["optimization"].set_note(note)

    def _update_speed_hints(self) -> None:
        """The scaled learning rate and what the devices support for the chosen precision."""
        lr = self._learning_rate()
        scaling = self.scale_lr.isChecked() and math.isfinite(lr) and lr > 0
        self.warmup_spin.setEnabled(self.scale_lr.isChecked())
        if scaling:
            text = LinearScaling(lr, self._replicas, self.warmup_spin.value()).describe()
        elif math.isfinite(lr) and lr > 0:
            text = f"not scaled: trains at {format_lr(lr)} on any number of replicas"
        else:
            text = ""
        self.lr_hint.setText(text)
        hint = precision_hint(self.precision_combo.currentData(), self._gpus)
        self.precision_hint.setText(hint.text)
        self.precision_hint.setStyleSheet(f"color: {WARNING_COLOR};" if hint.warning else "")

    def _update_batch_text(self) -> None:
        """The global batch, and from the last data read the steps and dropped samples."""
        replicas = self._replicas
        global_batch = self.batch_spin.value() * replicas
        self.batch_text.setText(f"× {replicas} replica{'s' if replicas != 1 else ''} = "
                                f"{global_batch:,} global")
        info = self._data_info
        if info is None:
            self.batch_hint.setText("Steps per epoch: shown once the data can be read.")
            return
        train, _, _ = info.split_counts(self.split_spin.value() / 100.0)
        steps = data_mod.steps(train, global_batch)
        dropped = data_mod.dropped_per_epoch(train, global_batch)
        self.batch_hint.setText(
            f"{train:,} training samples: {steps:,} step{'s' if steps != 1 else ''} per epoch"
            + (f", {dropped:,} sample{'s' if dropped != 1 else ''} dropped per epoch"
               if dropped else ", none dropped"))

    def _load_recent(self, settings: QSettings | None = None) -> None:
        with self._quiet():
            self._recent.load(settings)

    # -- files: dialogs and drops -------------------------------------------
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

    def _dialog(self, title: str, filters: str, mode: QFileDialog.FileMode,
                accept: Callable[[str], object], current: str) -> QFileDialog:
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


def _load_data_view() -> None:
    """The Data view's modules, imported ahead of its first open (see gui/jobs/preload.py)."""
    import mgpu_gui.gui.dialogs.data_view  # noqa: F401


def _dropped_path(event: QDragEnterEvent | QDropEvent) -> str | None:
    mime = event.mimeData()
    if not mime.hasUrls():
        return None
    for url in mime.urls():
        if url.isLocalFile():
            return url.toLocalFile()
    return None
