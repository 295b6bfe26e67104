"""RunConfig: everything one training run needs, as plain JSON-able data.

The supervisor (CLI or GUI) builds and validates it, writes it into the run
folder, and the worker reads it back; nothing else crosses that boundary.
Validation here needs neither TensorFlow nor NVML, so it is instant.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from mgpu_gui.core.augment import AugmentSpecError, parse_augment
from mgpu_gui.core.config_types import parse_json, type_problems
from mgpu_gui.core.engines import Engine, InputPipeline, engine_problems, pipeline_problems
from mgpu_gui.core.errors import ConfigError
from mgpu_gui.core.mesh.layout import is_rules
from mgpu_gui.core.mesh.settings import mesh_problems
from mgpu_gui.core.modelfiles.builtins import NO_WEIGHTS, architecture, pretrained_problem
from mgpu_gui.core.plain import to_plain

DEMO = "demo"
MODEL_SUFFIXES = (".keras", ".h5", ".hdf5", ".py")
EXPORT_FORMATS = ("keras", "h5", "savedmodel")
OPTIMIZERS = ("adam", "adamw", "sgd", "rmsprop", "nadam", "adagrad")
# Keras dtype policies a run can choose; see precision.py for what each needs.
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
# Where decoded samples are kept between epochs. auto: in memory when they fit the budget,
# else an image folder's on local disk in the run folder, else nowhere.
CACHE_MODES = ("auto", "memory", "disk", "off")
DEFAULT_RESCALE = 1.0 / 255.0
ALL_LAYERS = "all"
FINE_TUNE_LR_DIVISOR = 10  # the default fine-tune LR is the stage-1 LR over this


class DeviceKind(StrEnum):
    AUTO = "auto"  # all (or the chosen) GPUs when NVML sees some, else CPU replicas
    GPU = "gpu"
    CPU = "cpu"


@dataclass(frozen=True)
class DeviceSelection:
    """Which devices to train on.

    `gpus` names GPUs by NVML index or UUID; `replicas` asks for a count (the
    first N GPUs, or N logical CPU devices when training on CPU).
    """

    kind: DeviceKind = DeviceKind.AUTO
    gpus: tuple[str, ...] = ()
    replicas: int | None = None


@dataclass(frozen=True)
class EarlyStoppingConfig:
    enabled: bool = False
    monitor: str = "val_loss"
    patience: int = 5
    min_delta: float = 0.0
    restore_best_weights: bool = True


@dataclass(frozen=True)
class ReduceLROnPlateauConfig:
    enabled: bool = False
    monitor: str = "val_loss"
    factor: float = 0.5
    patience: int = 3
    min_lr: float = 1e-6


@dataclass(frozen=True)
class LRScalingConfig:
    """The linear scaling rule (Goyal et al. 2017) for a global batch that grows with replicas.

    The learning rate set for the run is the base LR, right for one replica's
    batch; the run trains at base LR x replicas (= x global / per-replica batch),
    reached by a linear warm-up over `warmup_epochs` (see lr_schedule.py).
    """

    enabled: bool = False
    warmup_epochs: int = 5


@dataclass(frozen=True)
class RunConfig:
    model: str = DEMO  # 'demo', a built-in architecture's name, or a model file
    # A built-in's starting weights: 'imagenet', 'none' or a weights file; None: the
    # architecture's default (ImageNet where it has them).
    pretrained: str | None = None
    data: str = DEMO
    validation_data: str | None = None
    validation_split: float = 0.1
    allow_unsafe_code: bool = False
    custom_objects: str | None = None  # a .py whose `custom_objects` dict names custom layers
    builder: str | None = None  # a .py model's builder function; None: the usual names
    devices: DeviceSelection = field(default_factory=DeviceSelection)
    batch_per_replica: int = 64
    epochs: int = 10
    optimizer: str = "adam"
    learning_rate: float = 1e-3
    # A compiled model file trains with its own optimizer and learning rate unless this is set.
    override_compile: bool = False
    loss: str | None = None  # None: chosen from the labels and output layer
    metrics: tuple[str, ...] = ("accuracy",)
    early_stopping: EarlyStoppingConfig = field(default_factory=EarlyStoppingConfig)
    reduce_lr: ReduceLROnPlateauConfig = field(default_factory=ReduceLROnPlateauConfig)
    lr_scaling: LRScalingConfig = field(default_factory=LRScalingConfig)
    precision: str = "float32"  # a Keras dtype policy, one of PRECISIONS
    jit_compile: bool = False  # XLA; falls back to plain execution when the model cannot compile
    image_size: tuple[int, int] = (64, 64)
    rescale: float = DEFAULT_RESCALE  # not used by a built-in: see `input_rescale`
    augment: str = ""  # image folders: training images varied at random (core.augment)
    cache: str = "auto"  # one of CACHE_MODES
    # Run when the run ends (core/runs/finish_hook.py): an argument list, never a shell.
    on_finish: tuple[str, ...] = ()
    sync_batchnorm: bool = False
    # Transfer learning as one run (engine/transfer.py): the first `freeze_epochs` of
    # `epochs` train the head with the backbone frozen, the rest fine-tune the backbone's
    # top `unfreeze` layers ("all" or a count) at `fine_tune_lr` (None: a tenth of the
    # stage-1 learning rate). 0: off. Needs a nested model named "backbone".
    freeze_epochs: int = 0
    unfreeze: str = ALL_LAYERS
    fine_tune_lr: float | None = None
    seed: int | None = 42
    output_dir: str = "~/mgpu-runs"
    run_name: str | None = None
    export_formats: tuple[str, ...] = ("keras",)
    tensorboard: bool = False
    batch_event_interval_s: float = 0.25
    engine: str = Engine.TENSORFLOW.value  # the Keras backend (core/engines.py)
    input_pipeline: str = InputPipeline.AUTO.value  # what feeds the batches (core/engines.py)
    # A data x model mesh over the run's devices (core/mesh): "DATAxMODEL" or "auto"; None
    # (or a model axis of 1) is data parallelism. `layout`: the user's rules, or their file.
    mesh: str | None = None
    layout: str | None = None

    # -- serialisation -------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return to_plain(dataclasses.asdict(self))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        """ConfigError naming every unknown setting and every value of the wrong type."""
        devices = data.get("devices") if isinstance(data, dict) else None
        if isinstance(devices, dict) and isinstance(devices.get("gpus"), list):
            gpus = [str(g) if type(g) is int else g for g in devices["gpus"]]  # [0, 1] too
            data = {**data, "devices": {**devices, "gpus": gpus}}
        problems = type_problems(cls, data)
        if problems:
            raise ConfigError(problems)
        values = dict(data)
        if "devices" in values:
            dev = dict(values["devices"])
            dev["kind"] = DeviceKind(dev.get("kind", "auto"))
            dev["gpus"] = tuple(str(g) for g in dev.get("gpus", ()))
            values["devices"] = DeviceSelection(**dev)
        if "early_stopping" in values:
            values["early_stopping"] = EarlyStoppingConfig(**values["early_stopping"])
        if "reduce_lr" in values:
            values["reduce_lr"] = ReduceLROnPlateauConfig(**values["reduce_lr"])
        if "lr_scaling" in values:
            values["lr_scaling"] = LRScalingConfig(**values["lr_scaling"])
        for name in ("metrics", "export_formats", "image_size", "on_finish"):
            if name in values:
                values[name] = tuple(values[name])
        return cls(**values)

    @classmethod
    def from_json(cls, text: str, source: str = "settings") -> RunConfig:
        """`source`: where the text came from, named in a ConfigError."""
        return cls.from_dict(parse_json(text, source))

    def replace(self, **changes: Any) -> RunConfig:
        return dataclasses.replace(self, **changes)

    @property
    def input_rescale(self) -> float:
        """What the pipeline multiplies pixels by: 1 for a built-in architecture, whose
        own preprocessing inside the model takes raw 0-255 pixels (so does its export)."""
        return 1.0 if architecture(self.model) is not None else self.rescale

    @property
    def augmenting(self) -> bool:
        """Whether training images are varied (False for a spec that does not parse:
        `problems` says so)."""
        try:
            return bool(parse_augment(self.augment).active)
        except AugmentSpecError:
            return False

    @property
    def unfreeze_layers(self) -> int | None:
        """How many of the backbone's top layers stage 2 trains; None: all of them."""
        text = str(self.unfreeze).strip().lower()
        return None if text == ALL_LAYERS else int(text)

    # -- validation ----------------------------------------------------
    def problems(self) -> list[tuple[str, str]]:
        """Every problem that can be seen without TensorFlow, one per field."""
        found: list[tuple[str, str]] = []
        found += _model_problems(self.model)
        found += _pretrained_problems(self)
        if self.custom_objects is not None and (
                problem := custom_objects_problem(Path(os.path.expanduser(self.custom_objects)))):
            found.append(("custom_objects", problem))
        if self.builder is not None and not (
                self.builder.isidentifier() and self.model.lower().endswith(".py")):
            found.append(("builder", f"{self.builder!r} is not a function name"
                          if not self.builder.isidentifier() else
                          "only a .py model file has a builder function"))
        found += _data_problems("data", self.data)
        if self.validation_data is not None:
            found += _data_problems("validation_data", self.validation_data)
        if not 0.0 <= self.validation_split < 1.0:
            found.append(("validation_split", f"must be in [0, 1), got {self.validation_split}"))
        if self.batch_per_replica < 1:
            found.append(
                ("batch_per_replica", f"must be at least 1, got {self.batch_per_replica}")
            )
        if self.epochs < 1:
            found.append(("epochs", f"must be at least 1, got {self.epochs}"))
        if not self.learning_rate > 0:
            found.append(("learning_rate", f"must be positive, got {self.learning_rate}"))
        if self.optimizer.lower() not in OPTIMIZERS:
            found.append(
                ("optimizer", f"unknown optimizer {self.optimizer!r}; "
                              f"use one of {', '.join(OPTIMIZERS)}")
            )
        if self.devices.replicas is not None and self.devices.replicas < 1:
            found.append(("devices.replicas", f"must be at least 1, got {self.devices.replicas}"))
        if self.devices.gpus and self.devices.kind is DeviceKind.CPU:
            found.append(("devices.gpus", "GPUs were chosen but the device kind is CPU"))
        if self.devices.gpus and self.devices.replicas not in (None, len(self.devices.gpus)):
            found.append(
                ("devices.replicas", f"{self.devices.replicas} replicas asked for but "
                 f"{len(self.devices.gpus)} GPUs chosen; give one or the other")
            )
        if len(self.image_size) != 2 or min(self.image_size) < 1:
            found.append(("image_size", f"must be two positive sizes, got {self.image_size}"))
        if not self.rescale > 0:
            found.append(("rescale", f"must be positive, got {self.rescale}"))
        found += _augment_problems(self.augment, self.data)
        found += _cache_problems(self.cache, self.data)
        if self.on_finish and shutil.which(self.on_finish[0]) is None:
            found.append(("on_finish", f"the on-finish command {self.on_finish[0]!r} is not "
                                       "an executable file nor on the PATH"))
        for fmt in self.export_formats:
            if fmt not in EXPORT_FORMATS:
                found.append(("export_formats",
                              f"unknown format {fmt!r}; use {', '.join(EXPORT_FORMATS)}"))
        for name, sub in (("early_stopping", self.early_stopping), ("reduce_lr", self.reduce_lr)):
            if sub.patience < 0:
                found.append((f"{name}.patience", f"must be 0 or more, got {sub.patience}"))
        if not 0 < self.reduce_lr.factor < 1:
            found.append(("reduce_lr.factor",
                          f"must be between 0 and 1, got {self.reduce_lr.factor}"))
        if self.precision not in PRECISIONS:
            found.append(("precision", f"unknown precision {self.precision!r}; "
                                       f"use one of {', '.join(PRECISIONS)}"))
        warmup = self.lr_scaling.warmup_epochs
        if warmup < 0:
            found.append(("lr_scaling.warmup_epochs", f"must be 0 or more, got {warmup}"))
        elif self.lr_scaling.enabled and warmup >= self.epochs:
            found.append(("lr_scaling.warmup_epochs",
                          f"a warm-up of {warmup} epoch{'s' if warmup != 1 else ''} leaves no "
                          f"epoch of the {self.epochs} at the scaled learning rate; use fewer "
                          f"warm-up epochs (or more epochs)"))
        if self.batch_event_interval_s < 0:
            found.append(("batch_event_interval_s", "must be 0 or more"))
        found += _transfer_problems(self)
        found += engine_problems(self.engine, jit_compile=self.jit_compile)
        found += pipeline_problems(self.engine, self.input_pipeline,
                                   augment=self.augmenting, cache=self.cache,
                                   export_formats=self.export_formats)
        found += mesh_problems(self.mesh, self.layout, self.engine)
        return found

    def check(self) -> None:
        """Raise ConfigError listing every problem, before anything starts."""
        found = self.problems()
        if found:
            raise ConfigError(found)

    @property
    def output_path(self) -> Path:
        return Path(os.path.expanduser(self.output_dir))

    def custom_objects_source(self) -> str | None:
        """Where the run's saved models find their custom objects: the --custom-objects
        file, else a `.py` model's own file (its classes count)."""
        if self.custom_objects is not None:
            return self.custom_objects
        if self.model.lower().endswith(".py") and is_model_file(self.model):
            return self.model
        return None

    def with_absolute_paths(self, base: Path | None = None) -> RunConfig:
        """Every file and folder as an absolute path, a relative one taken from `base` (None:
        the current folder), so that a resume, an evaluation or a queue runner started in
        another folder finds the same files. The demo and built-in names stay names."""
        def absolute(path: str | None) -> str | None:
            if path is None or path == DEMO:
                return path
            return os.path.abspath(os.path.join(base or os.getcwd(), os.path.expanduser(path)))

        model = self.model if architecture(self.model) is not None else absolute(self.model)
        return self.replace(model=model, data=absolute(self.data),
                            validation_data=absolute(self.validation_data),
                            custom_objects=absolute(self.custom_objects),
                            output_dir=absolute(self.output_dir),
                            layout=self.layout if is_rules(self.layout) else absolute(self.layout))


def _augment_problems(spec: str, data: str) -> list[tuple[str, str]]:
    try:
        augmentation = parse_augment(spec)
    except AugmentSpecError as error:
        return [("augment", str(error))]
    if augmentation.active and not _is_image_folder(data):
        return [("augment", "augmentation transforms images: it needs an image folder as the "
                            "data (one subfolder per class); turn it off for arrays")]
    return []


def _cache_problems(mode: str, data: str) -> list[tuple[str, str]]:
    if mode not in CACHE_MODES:
        return [("cache", f"{mode!r} is not a cache mode; one of {', '.join(CACHE_MODES)}")]
    if mode == "disk" and not _is_image_folder(data):
        return [("cache", "a disk cache holds decoded images: it needs an image folder as the "
                          "data; arrays are read into memory whole, use auto")]
    return []


def _is_image_folder(data: str) -> bool:
    return data != DEMO and Path(os.path.expanduser(data)).is_dir()


def custom_objects_problem(path: Path) -> str | None:
    """What is wrong with a --custom-objects file (None: nothing seen without running it)."""
    if not path.is_file() or path.suffix != ".py":
        return f"{path} is not a .py file; give the file that defines the `custom_objects` dict"
    return None


def is_model_file(model: str) -> bool:
    """Whether `model` names a file: neither 'demo' nor a built-in architecture."""
    return model != DEMO and architecture(model) is None


def _model_problems(model: str) -> list[tuple[str, str]]:
    if model == DEMO or architecture(model) is not None:
        return []
    path = Path(os.path.expanduser(model))
    if not path.exists():
        return [("model", f"model file not found: {path}. Check the path, or use 'demo'.")]
    if path.is_dir():
        return [("model", f"{path} is a folder; pick a .keras, .h5 or .py file")]
    if path.suffix.lower() not in MODEL_SUFFIXES:
        return [("model", f"{path.name} is not a model file; use {', '.join(MODEL_SUFFIXES)}")]
    return []


def _pretrained_problems(config: RunConfig) -> list[tuple[str, str]]:
    arch = architecture(config.model)
    if arch is None:
        return [] if config.pretrained is None else [
            ("pretrained", "only a built-in architecture starts from pretrained weights; a "
                           "model file brings its own")]
    found = []
    problem = pretrained_problem(arch, config.pretrained)
    if problem is not None:
        found.append(("pretrained", problem))
    if config.rescale != DEFAULT_RESCALE and config.rescale != 1.0:
        found.append(("rescale", f"{arch.name} takes raw 0-255 pixels and normalises them "
                                 "itself; leave the rescale at its default"))
    return found


def _transfer_problems(config: RunConfig) -> list[tuple[str, str]]:
    freeze = config.freeze_epochs
    if freeze == 0:
        return []
    if freeze < 0:
        return [("freeze_epochs", f"must be 0 (off) or more, got {freeze}")]
    found = []
    arch = architecture(config.model)
    if config.model == DEMO or (arch is not None and not arch.has_imagenet):
        found.append(("freeze_epochs", f"{config.model} has no pretrained backbone to freeze; "
                      "pick a built-in architecture with pretrained weights, or a model file "
                      "with a nested model named 'backbone'"))
    elif arch is not None and config.pretrained == NO_WEIGHTS:
        found.append(("freeze_epochs", "a backbone trained from scratch has nothing to keep "
                      "frozen; use pretrained weights, or set freeze epochs to 0"))
    if freeze >= config.epochs:
        found.append(("freeze_epochs", f"{freeze} frozen epoch(s) leave none of the "
                      f"{config.epochs} to fine-tune; use fewer freeze epochs or more epochs "
                      "(epochs is the total of both stages)"))
    text = str(config.unfreeze).strip().lower()
    if text != ALL_LAYERS and not (text.isdigit() and int(text) > 0):
        found.append(("unfreeze", f"give a number of layers (1 or more) or '{ALL_LAYERS}', "
                                  f"got {config.unfreeze!r}"))
    if config.fine_tune_lr is not None and not config.fine_tune_lr > 0:
        found.append(("fine_tune_lr", f"must be positive, got {config.fine_tune_lr}"))
    if config.lr_scaling.enabled:
        found.append(("lr_scaling.enabled", "the linear scaling rule's warm-up and transfer "
                      "learning's two stages are not combined yet; turn one of them off"))
    return found


def _data_problems(name: str, data: str) -> list[tuple[str, str]]:
    if data == DEMO:
        return []
    path = Path(os.path.expanduser(data))
    if not path.exists():
        return [(name, f"dataset not found: {path}. "
                       "Give an .npz file, an image folder, or 'demo'.")]
    if path.is_file() and path.suffix.lower() != ".npz":
        return [(name, f"{path.name} is not a dataset; "
                       "give an .npz file or a folder of class subfolders")]
    return []
