"""What only a built model can tell, kept in step with the run setup.

A `.py` builder's shapes (and any model's summary) need TensorFlow, so a
probe child builds the model (`ModelProbeJob` on a `ChildJobRunner`).
`BuildCheck` remembers which build settings the facts it shows describe: when
they change, the probe made out of date is killed and everything it told (the
status line with its parameter count or build error, the summary, the problem)
is withdrawn at once, whether or not a probe was running. A `.py` builder whose
instant checks pass is then probed again, and a failed build becomes a problem
on the model or the data field.
"""

from __future__ import annotations

from collections.abc import Hashable

from PySide6.QtCore import QObject, Signal

from mgpu_gui.core.children.model_probe import ModelProbeJob, ProbeOutcome
from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.events import ModelProbed
from mgpu_gui.core.mesh.layout import VariableInfo, plan_layout
from mgpu_gui.core.mesh.report import layout_table
from mgpu_gui.core.mesh.settings import mesh_request
from mgpu_gui.core.plain import from_plain
from mgpu_gui.gui.jobs.child_job import ChildJobRunner
from mgpu_gui.gui.jobs.setup_check import file_stamp


def build_key(config: RunConfig) -> Hashable:
    """The settings that decide what the probe builds."""
    return (config.model, file_stamp(config.model), config.data, config.image_size,
            config.allow_unsafe_code, config.sync_batchnorm, config.custom_objects,
            config.builder, bool(config.freeze_epochs))


class BuildCheck(QObject):
    """The model probe's lifecycle for the run setup."""

    status = Signal(str)  # "Building model…", what was built, or "" (nothing to say)
    summary_ready = Signal(str)  # the built model's summary; "" withdraws the last one
    finished = Signal()  # a probe answered: check again, `problem()` may have changed

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.probe = ChildJobRunner(self)
        self._followed: Hashable = None  # the build settings what is shown describes
        self._key: Hashable = None  # the build settings the latest probe was asked for
        self._config: RunConfig | None = None  # the settings of the latest probe
        self._result: ProbeOutcome | None = None
        self.probe.started.connect(lambda: self.status.emit("Building model…"))
        self.probe.finished.connect(self._finished)

    def drop_stale(self, config: RunConfig) -> None:
        """Withdraw at once every fact about other build settings than `config`'s: kill
        their probe, forget its result, clear the status line and the summary."""
        key = build_key(config)
        if key == self._followed:
            return
        self._followed = key
        self.probe.cancel()  # a cancelled probe's outcome is never reported
        self._key = self._result = None
        self.status.emit("")
        self.summary_ready.emit("")

    def follow(self, config: RunConfig, instant_problems: bool) -> None:
        """After a check of `config`: drop what is out of date; probe a `.py` builder the
        instant checks found nothing wrong with, unless it was probed already."""
        self.drop_stale(config)
        if (config.model.lower().endswith(".py") and not instant_problems
                and self._key != self._followed):
            self._start(config)  # only a built .py model can tell its shapes

    def problem(self) -> tuple[str, str] | None:
        """(field, message) of the latest build when it failed."""
        if self._result is None or isinstance(self._result, ModelProbed):
            return None
        field = "data" if self._result.error_type == "DataError" else "model"
        return field, self._result.message

    def show_summary(self, config: RunConfig) -> None:
        """Build `config`'s model unless a probe is building it already."""
        if not (self.probe.is_running() and self._key == build_key(config)):
            self._start(config)

    def _start(self, config: RunConfig) -> None:
        self.drop_stale(config)
        self._key = build_key(config)
        self._config = config
        self._result = None
        self.probe.start(ModelProbeJob(config))

    def shutdown(self) -> None:
        self.probe.shutdown()

    def _finished(self, result: ProbeOutcome) -> None:
        self._result = result
        if isinstance(result, ModelProbed):
            shape = "×".join(str(d) for d in result.input_shape) or "?"
            units = result.output_units
            if result.builder:  # its outputs are the classes: room for the builder's name
                self.status.emit(f"{result.builder}(): {result.params:,} params · input {shape}")
            else:
                self.status.emit(f"{result.params:,} parameters · input {shape}"
                                 + (f" · {units} outputs" if units else ""))
            self.summary_ready.emit(result.summary + mesh_summary(self._config, result))
        else:
            self.status.emit("The model could not be built:")
        self.finished.emit()


def mesh_summary(config: RunConfig | None, built: ModelProbed) -> str:
    """Under the summary, how the variables split over the run's mesh and what each device
    holds (`mgpu-train layout`'s table); nothing for data parallelism."""
    try:
        request = None if config is None else mesh_request(config.mesh, config.layout)
        if request is None:
            return ""
        variables = [from_plain(VariableInfo, entry) for entry in built.variables]
        table = layout_table(plan_layout(variables, request.shape, request.rules))
    except UserError as error:  # the settings' own check names it on its field
        return f"\n\nNo layout on the mesh: {error}"
    return f"\n\nOn --mesh {request.shape.flag}:\n{table}"
