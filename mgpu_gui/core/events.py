"""Typed training events and their JSON-lines form.

The worker emits these to a sink; the worker process writes them as one JSON
object per line on its event channel and into the run's `events.jsonl`; the
supervisor (CLI, GUI) parses them back into the same classes.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Protocol

from mgpu_gui.core.plain import to_plain


class RunStatus(StrEnum):
    COMPLETED = "completed"
    EARLY_STOPPED = "early_stopped"
    STOPPED = "stopped"  # the user asked; the backup allows a resume
    FAILED = "failed"


class Phase(StrEnum):
    """Where a failure happened; a SETUP failure leaves nothing worth keeping."""

    SETUP = "setup"
    TRAINING = "training"
    EXPORT = "export"


@dataclass(frozen=True)
class Event:
    type: ClassVar[str] = "event"
    t: float = field(default_factory=time.time, kw_only=True)

    def to_json(self) -> str:
        data = {"type": self.type}
        data.update(to_plain(dataclasses.asdict(self)))
        return json.dumps(data, allow_nan=True)


@dataclass(frozen=True)
class ChildFailure(Event):
    """A child's work failed (processes/failure.py makes these); each kind of child has
    its own subclass, so a reader knows whose failure it is."""

    message: str  # for the user
    error_type: str  # the exception's class; empty when the child died without saying
    user_error: bool  # the input was at fault (a UserError), not the code
    traceback: str = ""  # for a bug report


@dataclass(frozen=True)
class RunStarted(Event):
    type: ClassVar[str] = "run_started"
    run_dir: str
    device_kind: str  # "gpu" or "cpu"
    devices: list[str]  # what TensorFlow trains on, e.g. "/job:localhost/.../GPU:0"
    device_names: list[str]  # what a person recognises, e.g. "GPU 0: NVIDIA H100 (GPU-…)"
    num_replicas: int
    batch_per_replica: int
    global_batch: int
    train_samples: int
    val_samples: int
    test_samples: int
    steps_per_epoch: int
    dropped_per_epoch: int
    epochs: int
    initial_epoch: int
    model_name: str
    params: int
    cross_device_ops: str
    tf_version: str
    keras_version: str
    summary: str = ""
    # What the run trains with ("" and None in records from before they were kept):
    optimizer: str = ""  # the optimizer's class, e.g. "RMSprop"
    learning_rate: float | None = None  # at the start (None: a schedule of the file's)
    optimizer_source: str = ""  # a CompileSource: the run's settings, the file's, an override
    file_optimizer: str = ""  # the model file's own optimizer, when it came compiled
    mesh: str = ""  # the data x model mesh asked for, e.g. "2x2" (issue 31); "": none


@dataclass(frozen=True)
class BatchEnd(Event):
    type: ClassVar[str] = "batch_end"
    epoch: int  # 0-based
    batch: int  # 0-based, within the epoch
    steps: int  # steps in this epoch
    metrics: dict[str, float]
    samples_per_s: float
    learning_rate: float | None = None
    input_wait: float | None = None  # share of the steps' time spent waiting for the batch


@dataclass(frozen=True)
class EpochEnd(Event):
    type: ClassVar[str] = "epoch_end"
    epoch: int  # 0-based
    epochs: int
    metrics: dict[str, float]  # train and val_* metrics as Keras reports them
    samples_per_s: float
    duration_s: float
    learning_rate: float | None = None
    best: bool = False  # this epoch is the best so far on the monitored metric
    input_wait: float | None = None  # as BatchEnd's, over the epoch (None: not measured)


class SetupStep(StrEnum):
    """What a run's worker does before its first batch: minutes on a busy machine (a
    MobileNet's first step took 2.5 on two shared cores), where the run must not look dead
    (issue 30, finding 3)."""

    DATA = "reading the data"
    MODEL = "building the model"
    REHEARSAL = "rehearsing the run before epoch 1"
    FIRST_STEP = "compiling the first step"


@dataclass(frozen=True)
class SetupProgress(Event):
    type: ClassVar[str] = "setup_progress"
    step: str  # a SetupStep


@dataclass(frozen=True)
class StageStarted(Event):
    """A transfer-learning run (RunConfig.freeze_epochs) begins one of its two stages: 1
    trains the head with the backbone frozen, 2 fine-tunes the backbone's top layers."""

    type: ClassVar[str] = "stage_started"
    stage: int  # 1 or 2
    first_epoch: int  # 0-based: the stage's first epoch
    epochs: int  # the run's total
    trainable_params: int
    learning_rate: float | None  # None: a schedule of the model file's
    unfrozen_layers: int = 0  # stage 2: the backbone layers it trains (BatchNorm excluded)
    backbone_layers: int = 0  # all of the backbone's layers


@dataclass(frozen=True)
class LogMessage(Event):
    type: ClassVar[str] = "log"
    message: str
    level: str = "info"


@dataclass(frozen=True)
class ClusterFormed(Event):
    """Every worker of a multi-worker run, as TensorFlow gathered them at the start."""

    type: ClassVar[str] = "cluster_formed"
    workers: list[dict[str, Any]]  # per worker: index, address, host, chief, devices
    this_worker: int  # the index of the worker that emitted this event


@dataclass(frozen=True)
class CheckpointSaved(Event):
    type: ClassVar[str] = "checkpoint_saved"
    kind: str  # "best", "last" or "backup"
    path: str
    epoch: int


@dataclass(frozen=True)
class ModelExported(Event):
    type: ClassVar[str] = "model_exported"
    path: str
    format: str
    verified: bool
    max_abs_diff: float


@dataclass(frozen=True)
class ExportNotMade(Event):
    """One requested format could not be exported (its check failed); the run still
    completes, with its other formats and checkpoints: its training is not lost."""

    type: ClassVar[str] = "export_not_made"
    format: str
    message: str


@dataclass(frozen=True)
class Evaluated(Event):
    type: ClassVar[str] = "evaluated"
    dataset: str  # "test"
    metrics: dict[str, float]
    samples: int
    dropped: int


@dataclass(frozen=True)
class RunFinished(Event):
    type: ClassVar[str] = "run_finished"
    status: RunStatus
    epochs_done: int
    best_epoch: int | None = None
    best_metric: str | None = None
    best_value: float | None = None
    message: str = ""


@dataclass(frozen=True)
class RunFailed(Event):
    type: ClassVar[str] = "run_failed"
    message: str  # for the user: what went wrong and what to do
    phase: Phase
    error_type: str
    traceback: str = ""  # for a bug report, shown one click away
    resumable: bool = True  # the failing UserError's `resumable`: may a resume be suggested?
    user_error: bool = False  # the input's fault (a UserError), not a bug or a crash


@dataclass(frozen=True)
class ExportDone(Event):
    """The export child wrote and verified a model (`mgpu-train export|unwrap`, the GUI)."""

    type: ClassVar[str] = "export_done"
    path: str
    format: str
    verified: bool
    max_abs_diff: float  # NaN when not verified
    classes_path: str | None = None


@dataclass(frozen=True)
class ExportFailed(ChildFailure):
    """An export child (or its verifier) failed; nothing was written."""

    type: ClassVar[str] = "export_failed"


@dataclass(frozen=True)
class ExportReloaded(Event):
    """The export verifier reloaded the export and saved its predictions to `predictions`."""

    type: ClassVar[str] = "export_reloaded"
    predictions: str  # an .npz of the outputs, in tf.nest order


@dataclass(frozen=True)
class Diagnosed(Event):
    """A verdict: at an epoch's end (`epoch`, 0-based) or within one (`epoch` None).
    Made by the run's supervisor (core/runs/diagnosis.py), not the worker: it is in no
    events.jsonl."""

    type: ClassVar[str] = "diagnosed"
    kind: str  # a VerdictKind
    input_wait: float | None
    utilization: float | None
    text: str
    epoch: int | None = None

    @property
    def line(self) -> str | None:
        """The run log's and the terminal's line: one per epoch."""
        return None if self.epoch is None else f"Epoch {self.epoch + 1}: {self.text}"


def parse_event(line: str) -> Event:
    """One JSON line back into its event class; unknown fields are ignored."""
    data = json.loads(line)
    cls = EVENT_TYPES[data.pop("type")]
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {k: v for k, v in data.items() if k in names}
    if cls is RunFinished:
        kwargs["status"] = RunStatus(kwargs["status"])
    if cls is RunFailed:
        kwargs["phase"] = Phase(kwargs["phase"])
    return cls(**kwargs)


class EventSink(Protocol):
    def emit(self, event: Event) -> None: ...


class ListSink:
    """Keeps events in memory: for tests and in-process runs."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def emit(self, event: Event) -> None:
        self.events.append(event)

    def of(self, cls: type[Event]) -> list[Any]:
        return [e for e in self.events if isinstance(e, cls)]


# -- the file inspector child (processes/inspector.py, core/children/inspector.py) ----------
@dataclass(frozen=True)
class InspectorReady(Event):
    """The inspector child is up and capped its address space at `memory_limit` bytes."""

    type: ClassVar[str] = "inspector_ready"
    memory_limit: int


@dataclass(frozen=True)
class FileInspected(Event):
    """What the file holds: a ModelFileInfo or DataInfo as plain data (paths as text)."""

    type: ClassVar[str] = "file_inspected"
    info: dict[str, Any]


@dataclass(frozen=True)
class InspectFailed(Event):
    """The file could not be read; `message` is for the user."""

    type: ClassVar[str] = "inspect_failed"
    message: str
    error_type: str
    user_error: bool  # a UserError (or the memory cap): the file is at fault, not the code


# -- the model probe (processes/model_probe.py, core/children/model_probe.py) ----------------
@dataclass(frozen=True)
class ModelProbed(Event):
    """The probe child built the run's model on the CPU."""

    type: ClassVar[str] = "model_probed"
    summary: str
    params: int
    input_shape: list[int | None]  # without the batch axis
    output_units: int | None
    log: list[str] = field(default_factory=list)  # what loading the model said
    builder: str = ""  # the function of a .py model file that built it
    # One per model variable: {"path", "shape", "dtype", "layer", "trainable"} (a
    # `mesh.layout.VariableInfo`), for the mesh layout and memory plan.
    variables: list[dict[str, Any]] = field(default_factory=list)
    # The compiled optimizer as the memory plan's slot table names it ("adam",
    # "sgd-momentum"): the file's own when its compile is kept, else the run's.
    optimizer: str = ""


@dataclass(frozen=True)
class ModelProbeFailed(Event):
    """The model could not be built (or the probe died without saying); `message` is for
    the user, `error_type` "DataError" points at the data, anything else at the model."""

    type: ClassVar[str] = "model_probe_failed"
    message: str
    error_type: str
    traceback: str = ""  # for a bug report
    log: list[str] = field(default_factory=list)


# -- the TensorFlow facts child (processes/tf_facts.py, core/tools/tf_facts.py) --------------
@dataclass(frozen=True)
class TfFactsGathered(Event):
    """What TensorFlow says about this machine: a `doctor.TfFacts` as plain data."""

    type: ClassVar[str] = "tf_facts_gathered"
    facts: dict[str, Any]


# -- the data content check (processes/data_check.py, core/children/data_check.py) ----------
@dataclass(frozen=True)
class DataCheckProgress(Event):
    """How far the data check got; also its heartbeat (the parent's stall watchdog)."""

    type: ClassVar[str] = "data_check_progress"
    what: str  # "x_train of data.npz", "images in flowers/"
    done: int
    total: int


@dataclass(frozen=True)
class DataChecked(Event):
    """Every value (or image) of the data was read and found usable."""

    type: ClassVar[str] = "data_checked"
    values: int  # numbers checked for NaN/Inf
    images_decoded: int
    images_header_only: int  # beyond the decode limit only headers are read
    seconds: float


@dataclass(frozen=True)
class DataCheckFailed(Event):
    """The data is unusable (`user_error`) or the check itself failed; `message` is for
    the user."""

    type: ClassVar[str] = "data_check_failed"
    message: str
    error_type: str
    user_error: bool


# -- evaluation (processes/evaluator.py, core/tools/evaluate_job.py) ------------------------
@dataclass(frozen=True)
class EvaluationProgress(Event):
    type: ClassVar[str] = "evaluation_progress"
    done: int  # samples predicted
    total: int


@dataclass(frozen=True)
class EvaluationDone(Event):
    """The evaluation's result (an `EvaluationResult` as a dict), and where it was kept."""

    type: ClassVar[str] = "evaluation_done"
    result: dict
    path: str | None  # its evaluation.json; None when it was kept nowhere


@dataclass(frozen=True)
class EvaluationFailed(ChildFailure):
    type: ClassVar[str] = "evaluation_failed"


@dataclass(frozen=True)
class PredictionsMade(Event):
    """`predict`'s answer: per file its top classes, or why it could not be read."""

    type: ClassVar[str] = "predictions_made"
    rows: list  # {"file", "top": [[class, probability], ...], "error"}
    inputs: str  # what was done to each file, and whether the model's card said so


@dataclass(frozen=True)
class SamplesDrawn(Event):
    """Pictures of evaluated samples (processes/sample_images.py): base64 PNGs of the
    request's picks from `first` on ("" for one that cannot be decoded); `final`, with no
    pictures, after the last."""

    type: ClassVar[str] = "samples_drawn"
    first: int
    pngs: list
    final: bool


@dataclass(frozen=True)
class SamplesDrawFailed(ChildFailure):
    type: ClassVar[str] = "samples_draw_failed"


# -- the Data view (processes/data_overview.py, core/children/data_overview.py) --------------
@dataclass(frozen=True)
class DataOverviewed(Event):
    """The Data view's figures so far: a `DataOverview` as plain data; `final` on the last."""

    type: ClassVar[str] = "data_overviewed"
    overview: dict[str, Any]
    final: bool


@dataclass(frozen=True)
class DataOverviewFailed(ChildFailure):
    """The data could not be read (`user_error`) or the overview itself failed."""

    type: ClassVar[str] = "data_overview_failed"


# -- the augmentation preview (processes/augment_preview.py, core/augment_preview.py) --------
@dataclass(frozen=True)
class AugmentPreviewRow(Event):
    """Image `index` of `total` in the augmentation preview: base64 PNGs of it as training
    resizes it, then of its variants; or no pictures and `error`, why it cannot be read."""

    type: ClassVar[str] = "augment_preview_row"
    index: int
    total: int
    label: str  # its class
    name: str  # its file's name
    pngs: list
    error: str = ""


@dataclass(frozen=True)
class AugmentPreviewDone(Event):
    type: ClassVar[str] = "augment_preview_done"
    rows: int


@dataclass(frozen=True)
class AugmentPreviewFailed(ChildFailure):
    type: ClassVar[str] = "augment_preview_failed"


def _event_classes(cls: type[Event]) -> list[type[Event]]:
    return [cls, *(c for sub in cls.__subclasses__() for c in _event_classes(sub))]


# Every event class is defined above, so whoever parses knows every type: the registry
# does not depend on which other modules happen to be imported.
EVENT_TYPES: dict[str, type[Event]] = {
    cls.type: cls for cls in _event_classes(Event) if cls not in (Event, ChildFailure)}
