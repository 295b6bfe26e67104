"""The main window's tool dialogs: About, Check my setup, the scaling test, the batch
finder, Train across machines, the evaluation of a model file and the Sweep dialog
(which sweep_actions.py makes and answers).

A mixin of `MainWindow`, kept apart so the window module holds the panels and the
run; it uses the window's `telemetry`, `run_setup`, `gpu_panel`, `controller`,
`banner`, `log`, `store` and `runs_panel`. One dialog of each kind is open at a time,
in the attribute named for it (`about_dialog`, ...), None while closed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QSettings
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QDialog

from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.devices.nvml import GpuInventory
from mgpu_gui.core.events import RunStarted, RunStatus
from mgpu_gui.gui.widgets.focus import return_focus_on_close

# Each dialog's module loads when it first opens: the first window paints sooner.
if TYPE_CHECKING:
    from mgpu_gui.core.children.supervisor import RunOutcome
    from mgpu_gui.gui.dialogs.about import AboutDialog
    from mgpu_gui.gui.dialogs.batch_finder import BatchFinderDialog
    from mgpu_gui.gui.dialogs.cluster import ClusterDialog
    from mgpu_gui.gui.dialogs.doctor import DoctorDialog
    from mgpu_gui.gui.dialogs.evaluation import EvaluationDialog
    from mgpu_gui.gui.dialogs.scaling import ScalingDialog
    from mgpu_gui.gui.dialogs.sweep import SweepDialog

EVALUATE_FINISHED_KEY = "run/evaluate_finished"
DIALOGS = ("about_dialog", "doctor_dialog", "scaling_dialog", "batch_dialog", "cluster_dialog",
           "evaluation_dialog", "sweep_dialog")


class ToolDialogs:
    about_dialog: AboutDialog | None = None
    doctor_dialog: DoctorDialog | None = None
    scaling_dialog: ScalingDialog | None = None
    batch_dialog: BatchFinderDialog | None = None
    cluster_dialog: ClusterDialog | None = None
    evaluation_dialog: EvaluationDialog | None = None
    sweep_dialog: SweepDialog | None = None

    def close_dialogs(self) -> None:
        """For the window's close: each dialog's child process (TensorFlow) ends with it."""
        for name in DIALOGS:
            dialog = getattr(self, name)
            if dialog is not None:
                dialog.close()

    def show_about(self) -> AboutDialog:
        """Versions, TensorFlow's asked in a child process; opens at once."""
        def make() -> AboutDialog:
            from mgpu_gui.gui.dialogs.about import AboutDialog

            dialog = AboutDialog(self.telemetry.inventory, self)
            dialog.check_setup_requested.connect(self.check_setup)
            return dialog

        return self._show_dialog("about_dialog", make, fresh=False)

    def check_setup(self) -> DoctorDialog:
        """The doctor's findings ("Check my setup…"); TensorFlow asked in a child process."""
        from mgpu_gui.gui.dialogs.doctor import DoctorDialog

        return self._show_dialog(
            "doctor_dialog", lambda: DoctorDialog(self.telemetry.inventory, self), fresh=False)

    def show_scaling_test(self) -> ScalingDialog:
        """The scaling test for the current model, data and devices."""
        from mgpu_gui.gui.dialogs.scaling import ScalingDialog

        return self._show_dialog(
            "scaling_dialog", lambda: ScalingDialog(self, self._current_config()), fresh=True)

    def show_batch_finder(self) -> BatchFinderDialog:
        """The batch-size finder for the current model, data and devices; "Use N per GPU"
        sets the run setup's batch."""
        def make() -> BatchFinderDialog:
            from mgpu_gui.gui.dialogs.batch_finder import BatchFinderDialog

            dialog = BatchFinderDialog(self, self._current_config())
            dialog.use_batch.connect(self.run_setup.batch_spin.setValue)
            return dialog

        return self._show_dialog("batch_dialog", make, fresh=True)

    def train_across_machines(self) -> ClusterDialog:
        """The cluster dialog for the current settings; its Start starts this machine as
        the chief (one CPU replica per worker where there is no GPU)."""
        config = self._current_config()
        if config.devices.kind is DeviceKind.CPU:
            config = config.replace(devices=DeviceSelection(kind=DeviceKind.CPU))

        def make() -> ClusterDialog:
            from mgpu_gui.gui.dialogs.cluster import ClusterDialog

            dialog = ClusterDialog(config, self)
            dialog.accepted.connect(lambda: self._start_chief(dialog))
            return dialog

        return self._show_dialog("cluster_dialog", make, fresh=True)

    def _start_chief(self, dialog: ClusterDialog) -> None:
        if self.controller.is_running() or dialog.spec is None:
            return
        self.banner.clear()  # a refusal comes back to the window's `_start_refused`
        self.controller.start_cluster(dialog.config, dialog.spec, resume=dialog.resume)
        self.log.append_message(
            "Starting as the chief of a multi-worker run; on each other machine run:\n"
            + dialog.commands.toPlainText())

    def evaluate_model_file(self) -> EvaluationDialog | None:
        """The run setup's trained model file on its data, in the Evaluation view."""
        config = self._current_config()
        if Path(config.model).suffix.lower() not in (".keras", ".h5", ".hdf5"):
            self.banner.show_error(
                "Evaluate the model file: choose a trained .keras or .h5 file in Model first "
                "(a run's own model: Evaluate… in the Runs tab).")
            return None

        def make() -> EvaluationDialog:
            from mgpu_gui.gui.dialogs.evaluation import EvaluationDialog, Subject

            return EvaluationDialog(Subject.of_files(config), None, self)

        return self._show_dialog("evaluation_dialog", make, fresh=True)

    def make_evaluate_finished_action(self) -> QAction:
        """The Run menu's switch: a completed run opens in the Evaluation view (remembered)."""
        act = QAction("Evaluate each &finished run", self)
        act.setCheckable(True)
        # Off by default: a window over the curves after every run hid the "Run completed"
        # notice, which offers "View evaluation" instead.
        act.setChecked(QSettings().value(EVALUATE_FINISHED_KEY, False, type=bool))
        act.setStatusTip("When a run completes, open its Evaluation view at once: every test "
                         "(else validation) sample is predicted in a background process. "
                         "Off: the run's notice offers View evaluation")
        act.toggled.connect(lambda on: QSettings().setValue(EVALUATE_FINISHED_KEY, on))
        self.evaluate_finished_action = act
        return act

    def evaluation_of_finished_run(self, outcome: RunOutcome
                                   ) -> Callable[[], EvaluationDialog | None] | None:
        """How to open the Evaluation view of the window's run that has ended: a completed
        one with held-out samples; None for any other."""
        if (self.last_run is None or self.store is None
                or outcome.status not in (RunStatus.COMPLETED, RunStatus.EARLY_STOPPED)):
            return None
        started = next((e for e in outcome.events if isinstance(e, RunStarted)), None)
        if started is None or not (started.val_samples or started.test_samples):
            return None  # nothing held out to judge the model by
        # One row found by its unique folder: cheap, and newer than the table's rows.
        record = self.store.find_dir(self.last_run.path)
        return None if record is None else lambda: self.runs_panel.evaluate_run(record)

    def _current_config(self) -> RunConfig:
        return self.run_setup.build_config(self.gpu_panel.device_selection())

    def _show_dialog(self, name: str, make: Callable[[], QDialog], *, fresh: bool) -> Any:
        """One dialog of each kind, kept in attribute `name` while open. `fresh` replaces an
        open one: it was made for settings that may have changed since."""
        dialog = getattr(self, name)
        if dialog is not None and fresh:
            dialog.close()  # its children (a TensorFlow process) end with it
            dialog = None
        if dialog is None:
            dialog = make()
            setattr(self, name, dialog)
            dialog.finished.connect(lambda _=None, d=dialog: self._forget_dialog(name, d))
            return_focus_on_close(dialog)
        dialog.show()
        dialog.raise_()
        return dialog

    def _forget_dialog(self, name: str, dialog: QDialog) -> None:
        if getattr(self, name) is dialog:
            setattr(self, name, None)
        dialog.deleteLater()

    def _forward_inventory(self, inventory: GpuInventory) -> None:
        for dialog in (self.about_dialog, self.doctor_dialog):
            if dialog is not None:
                dialog.set_inventory(inventory)
