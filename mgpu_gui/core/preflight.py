"""Checks that need no TensorFlow, run before a run folder or a worker exists.

Bad input is refused in milliseconds with the same messages the worker would
give later, and leaves no files behind. What only the built model can tell (a
`.py` builder's shapes) is checked again in the worker.
"""

from __future__ import annotations

import importlib.util

from mgpu_gui.core import fit_check
from mgpu_gui.core.config import DEMO, RunConfig
from mgpu_gui.core.datafile import DataInfo, LabelKind, inspect_data
from mgpu_gui.core.errors import DataError, ModelError, UserError
from mgpu_gui.core.modelfile import ModelFileInfo, inspect_model_file, lambda_refused


def check(config: RunConfig, replicas: int) -> tuple[ModelFileInfo | None, DataInfo]:
    """Raise the first problem found; return what was learned for display."""
    if config.tensorboard and importlib.util.find_spec("tensorboard") is None:
        raise UserError("TensorBoard logs need the tensorboard package, which TensorFlow 2.21 "
                        "no longer installs: pip install 'mgpu-gui[tensorboard]', or train "
                        "without --tensorboard.")
    model = None if config.model == DEMO else inspect_model_file(config.model)
    data = inspect_data(config.data, image_size=config.image_size)
    if config.validation_data is not None:
        inspect_data(config.validation_data, image_size=config.image_size)
    if model is not None:
        # A legacy multi-GPU wrapper's slicing Lambdas never run: the template is rebuilt
        # from its config. Only Lambdas inside the template would run code.
        lambdas = model.wrapper.template_lambdas if model.wrapper else model.lambda_layers
        if lambdas and not config.allow_unsafe_code:
            raise ModelError(lambda_refused(model, ", ".join(lambdas)))
        if model.input_shape is not None and data.x_shape is not None:
            fit_check.check_input_shape(model.input_shape, data.x_shape)
        if data.label_kind is LabelKind.SPARSE:
            fit_check.check_label_range(model.output_units, data.label_max, data.num_classes)
    train, _, _ = data.split_counts(config.validation_split)
    global_batch = config.batch_per_replica * replicas
    if train < global_batch:
        raise DataError(
            f"the training set has {train} samples, fewer than one global batch "
            f"({global_batch} = {config.batch_per_replica} per replica x {replicas} replicas); "
            f"lower the batch per replica or use fewer replicas.")
    return model, data
