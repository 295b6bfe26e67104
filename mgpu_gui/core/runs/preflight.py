"""Checks that need no TensorFlow, run before a run folder or a worker exists.

Bad input is refused with the same messages the worker would give later, and
leaves no files behind. The data's content (NaN/Inf, labels, classes, images
that do not decode) is checked before the batch arithmetic: a tiny damaged
dataset is refused for its damage, not for being smaller than one batch. What
only the built model can tell (a `.py` builder's shapes and loss) is checked
again in the worker.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from collections.abc import Sequence
from typing import Protocol

from mgpu_gui.core.config import DEMO, DeviceKind, RunConfig, is_model_file
from mgpu_gui.core.datasets import fit_check
from mgpu_gui.core.datasets.content_request import ContentRequest
from mgpu_gui.core.datasets.inspection import DataInfo, DataKind, LabelKind
from mgpu_gui.core.devices.plan import DevicePlan
from mgpu_gui.core.errors import DataError, ModelError, OutputError, UserError
from mgpu_gui.core.evaluation.heads import loss_key
from mgpu_gui.core.events import DataChecked
from mgpu_gui.core.mesh.memory import smallest_gpu
from mgpu_gui.core.mesh.settings import is_auto
from mgpu_gui.core.mesh.shape import meshes_for, parse_mesh
from mgpu_gui.core.modelfiles.builder import py_builder
from mgpu_gui.core.modelfiles.builtins import (
    BACKBONE,
    architecture,
    check_weights_obtainable,
    input_problem,
    no_backbone,
)
from mgpu_gui.core.modelfiles.info import ModelFileInfo, lambda_refused
from mgpu_gui.core.runs import checkpoints


class FileReader(Protocol):
    """Who reads the user's files: the file inspector child (core.children.inspector).

    Passed in rather than imported: untrusted files are parsed in a child, and
    the children package builds on this one.
    """

    def inspect_model(self, path: str | os.PathLike[str]) -> ModelFileInfo: ...

    def inspect_data(self, source: str | os.PathLike[str], *,
                     image_size: Sequence[int] | None = None) -> DataInfo: ...

    def check_content(self, request: ContentRequest) -> DataChecked: ...


def check(config: RunConfig, replicas: int, reader: FileReader,
          disk: bool = True) -> tuple[ModelFileInfo | None, DataInfo]:
    """Raise the first problem found; return what was learned for display.

    `disk=False` leaves out the output folder's checks (writable, free space),
    for callers that check the inputs alone.
    """
    if config.tensorboard and importlib.util.find_spec("tensorboard") is None:
        raise UserError("TensorBoard logs need the tensorboard package, which TensorFlow 2.21 "
                        "no longer installs: pip install 'mgpu-gui[tensorboard]', or train "
                        "without --tensorboard.")
    model = reader.inspect_model(config.model) if is_model_file(config.model) else None
    if model is not None:
        check_builder(config, model)
    data = check_data_for(config, model, reader)
    check_builtin_fits(config, data)
    check_batch_fits(config, replicas, data)
    check_weights(config)
    if disk:
        check_output_disk(config, model)
    return model, data


def check_data_for(config: RunConfig, model: ModelFileInfo | None, reader: FileReader,
                   *, learns: bool = True) -> DataInfo:
    """The run's data (and validation data) read, its content checked (NaN/Inf, labels
    against the loss) and fitted to `model` (shapes, label range, a folder's classes): what
    training checks, and what evaluating a trained model on data checks alike (`learns`
    False: data of one class is judged, not refused)."""
    data = reader.inspect_data(config.data, image_size=config.image_size)
    if config.validation_data is not None:
        reader.inspect_data(config.validation_data, image_size=config.image_size)
    reader.check_content(dataclasses.replace(content_request(config, model), learns=learns))
    if model is not None:
        check_model_fits(config, model, data)
    return data


# Keras loss names (spaces and underscores dropped) of losses that predict values, not classes.
_REGRESSION_LOSSES = frozenset({
    "meansquarederror", "mse", "meanabsoluteerror", "mae", "meanabsolutepercentageerror",
    "mape", "meansquaredlogarithmicerror", "msle", "huber", "huberloss", "logcosh", "poisson",
    "cosinesimilarity", "kld", "kldivergence", "kullbackleiblerdivergence"})


def loss_is_classifier(loss: str) -> bool | None:
    """Whether a Keras loss trains a classifier (None: a loss we do not know)."""
    key = loss_key(loss)
    if "crossentropy" in key or "hinge" in key:
        return True
    return False if key in _REGRESSION_LOSSES else None


def classifier_of(config: RunConfig, model: ModelFileInfo | None) -> tuple[bool | None, str]:
    """Whether the run trains a classifier, and what says so (for a message).

    None when only the built model can tell: a `.py` builder may compile itself.
    """
    if config.loss is not None:
        return loss_is_classifier(config.loss), f"the loss {config.loss}"
    if config.model == DEMO:
        return True, "the demo model"
    if architecture(config.model) is not None:
        return True, f"the built-in {config.model} (a softmax classifier)"
    if model is None or model.format == "py":
        return None, ""
    if model.compiled and model.loss:
        return loss_is_classifier(model.loss), f"{model.path.name} (loss {model.loss})"
    # Every loss the worker picks for an uncompiled model is a classification loss.
    return True, f"{model.path.name} (no loss given: one is chosen for its output)"


def content_request(config: RunConfig, model: ModelFileInfo | None) -> ContentRequest:
    """What the data check reads for this run: the data and any validation data."""
    classifier, why = classifier_of(config, model)
    return ContentRequest(data_sources(config), classifier, why)


def data_sources(config: RunConfig) -> tuple[str, ...]:
    """The training data, then any validation data."""
    return (config.data,) + ((config.validation_data,) if config.validation_data else ())


def check_builder(config: RunConfig, model: ModelFileInfo) -> None:
    """Refuse a `.py` model file without the builder function the run would call, and a
    saved model without the backbone its transfer-learning stages freeze (pure; a `.py`
    builder's backbone shows only when it is built: the probe and the worker check it)."""
    if model.format == "py":
        py_builder(model, config.builder)
    elif config.freeze_epochs and BACKBONE not in model.nested_models:
        raise no_backbone(model.path.name)


def check_model_fits(config: RunConfig, model: ModelFileInfo, data: DataInfo) -> None:
    """Refuse a model that would run code without consent, or whose shapes do not fit the data.

    Pure: works on what was read, so the GUI re-checks without reading the files again.
    """
    if model.code_lambdas and not config.allow_unsafe_code:
        raise ModelError(lambda_refused(model, ", ".join(model.code_lambdas)))
    if model.input_shape is not None and data.x_shape is not None:
        fit_check.check_input_shape(model.input_shape, data.x_shape)
    if data.label_kind is LabelKind.SPARSE:
        fit_check.check_label_range(model.output_units, data.label_max, data.num_classes)
    if data.kind is DataKind.IMAGES:
        fit_check.check_folder_classes(model.output_units, data.class_names)


def check_builtin_fits(config: RunConfig, data: DataInfo) -> None:
    """Refuse data a built-in architecture cannot take: not RGB, or under 32x32 (pure)."""
    arch = architecture(config.model)
    problem = None if arch is None else input_problem(arch, data.x_shape)
    if problem is not None:
        raise DataError(problem)


def check_weights(config: RunConfig) -> None:
    """A built-in's ImageNet weights are in Keras' cache or can be downloaded."""
    arch = architecture(config.model)
    if arch is not None:
        check_weights_obtainable(arch, config.pretrained)


def check_batch_fits(config: RunConfig, replicas: int, data: DataInfo) -> None:
    """Refuse a global batch larger than the training set (pure, like `check_model_fits`)."""
    train, _, _ = data.split_counts(config.validation_split)
    global_batch = config.batch_per_replica * replicas
    if train < global_batch:
        raise DataError(
            f"the training set has {train} samples, fewer than one global batch "
            f"({global_batch} = {config.batch_per_replica} per replica x {replicas} replicas); "
            f"lower the batch per replica or use fewer replicas.")


def check_mesh(config: RunConfig, plan: DevicePlan) -> None:
    """Refuse a mesh that does not span the run's planned devices, and --mesh auto where
    there is no memory to plan by (CPU replicas, GPUs whose memory NVML did not give);
    `prepare_run` resolves it otherwise, from the model probe (pure; the mesh's form and
    engine were checked with the other settings)."""
    if config.mesh is None:
        return
    if is_auto(config.mesh):
        unknown = ("CPU replicas have no memory of their own to plan by"
                   if plan.kind is DeviceKind.CPU else
                   "NVML did not say how much memory the GPUs have"
                   if smallest_gpu(gpu.memory_total for gpu in plan.gpus) is None else None)
        if unknown is None:
            return
        raise UserError(f"--mesh auto picks the smallest model axis that fits the devices' "
                        f"memory, and {unknown}: give --mesh DATAxMODEL (`mgpu-train layout "
                        f"MODEL --devices {plan.replicas} --gpu-memory SIZE` shows the plan "
                        f"and the mesh auto picks).")
    mesh = parse_mesh(config.mesh)
    if mesh is not None and mesh.devices != plan.replicas:
        which = ("CPU replicas (--replicas)" if plan.kind is DeviceKind.CPU else
                 "GPUs (--gpus)" if config.devices.gpus else
                 "GPUs (--replicas)" if config.devices.replicas else "GPUs (all NVML sees)")
        raise UserError(f"--mesh {mesh.flag} spans {mesh.devices} devices ({mesh.data} data "
                        f"x {mesh.model} model), but the run has {plan.replicas} {which}: "
                        f"give {mesh.devices}, or a mesh of {plan.replicas} ("
                        f"{', '.join(m.flag for m in meshes_for(plan.replicas))}).")


def check_output_disk(config: RunConfig, model: ModelFileInfo | None) -> None:
    """Refuse a read-only output folder, or a disk too full for the run's checkpoints.

    A `.py` builder's (or the demo's) size is known only once it is built: then
    only the margin for logs is checked here, and the worker checks the rest.
    """
    root = config.output_path
    existing = checkpoints.nearest_existing(root)
    if not os.access(existing, os.W_OK):
        try:
            readonly = bool(os.statvfs(existing).f_flag & os.ST_RDONLY)
        except OSError:
            readonly = False
        reason = "Read-only file system" if readonly else "Permission denied"
        raise OutputError(f"Cannot write to output folder {root}: {reason}. "
                          f"Choose a folder you can write to (--output-dir).")
    size = checkpoint_estimate(model) if model is not None else None
    need = checkpoints.space_needed(size, len(config.export_formats))
    checkpoints.check_free_space(root, need)


def checkpoint_estimate(model: ModelFileInfo) -> int | None:
    """Bytes of one checkpoint of this model: the file, x3 when it holds no optimizer state."""
    try:
        size = model.path.stat().st_size
    except OSError:
        return None
    if size == 0 or model.format == "py" or model.optimizer_state is None:
        return None
    return size if model.optimizer_state else size * checkpoints.ADAM_FACTOR
