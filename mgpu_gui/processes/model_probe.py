"""Child entry for the checks that need TensorFlow: build the run's model, on the CPU.

    python -m mgpu_gui.processes.model_probe --events-fd N  < config.json

It loads or builds the run's model (a `RunConfig` as JSON on stdin) the way
training does (same `load_model`, same input shape and class count from the
data), but under the default strategy on the CPU, and ends with `ModelProbed`
or `ModelProbeFailed` as a JSON line on the inherited pipe `N` (the parent's
side: `mgpu_gui.core.children.model_probe`). User code (a `.py` builder) and
TensorFlow print freely, so stdout is sent to stderr and the result travels
only on the events pipe. TensorFlow is imported inside `probe()` only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from mgpu_gui.core.children.model_probe import ProbeOutcome
from mgpu_gui.core.config import DEMO, RunConfig, is_model_file
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.events import ModelProbed, ModelProbeFailed
from mgpu_gui.core.modelfiles.builder import py_builder
from mgpu_gui.core.modelfiles.builtins import NO_WEIGHTS
from mgpu_gui.core.modelfiles.inspection import inspect_model_file
from mgpu_gui.core.plain import to_plain


def probe(config: RunConfig) -> ProbeOutcome:
    """Build the model of `config` on the CPU; what was built or why not (never raises)."""
    lines: list[str] = []
    try:
        return ModelProbed(**_build(config, lines.append), log=lines)
    except UserError as exc:
        return _failure(str(exc), exc, lines)
    except Exception as exc:  # a bug or an unexpected library error: keep the traceback
        return _failure(f"Building the model failed unexpectedly: {type(exc).__name__}: {exc}",
                        exc, lines)


def _build(config: RunConfig, log: Any) -> dict[str, Any]:
    from mgpu_gui.core.datasets.inspection import LabelKind, inspect_data

    data = inspect_data(config.data, image_size=config.image_size)
    if data.x_shape is None:  # only image folders without a size; RunConfig always has one
        raise UserError("the data gives no input shape; set the image size.")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # again, in case probe() is called in-process
    import tensorflow as tf

    from mgpu_gui.engine import models
    from mgpu_gui.engine.memory_check import model_variables, optimizer_key
    from mgpu_gui.engine.output_head import output_layer_info

    if not is_model_file(config.model) and config.model != DEMO:
        # A built-in's layers and sizes do not depend on its weights: none are downloaded.
        config = config.replace(pretrained=NO_WEIGHTS)
    model = models.load_model(config, tf.distribute.get_strategy(), input_shape=data.x_shape,
                              num_classes=data.num_classes, log=log,
                              custom_objects_file=config.custom_objects)
    label_max = data.label_max if data.label_kind is LabelKind.SPARSE else None
    models.check_model_fits_data(model, data.x_shape, data.num_classes, label_max)
    if config.freeze_epochs:
        from mgpu_gui.engine.transfer import find_backbone

        find_backbone(model, Path(config.model).name)
    info = inspect_model_file(config.model) if is_model_file(config.model) else None
    inputs = getattr(model, "inputs", None) or []
    input_shape = list(inputs[0].shape[1:]) if len(inputs) == 1 else list(data.x_shape)
    return {
        "summary": models.model_summary(model),
        "params": int(model.count_params()),
        "input_shape": input_shape,
        "output_units": output_layer_info(model)[0],
        "builder": py_builder(info, config.builder) if info and info.format == "py" else "",
        "variables": [to_plain(dataclasses.asdict(variable))
                      for variable in model_variables(model)],
        "optimizer": optimizer_key(model.optimizer),
    }


def _failure(message: str, exc: BaseException, lines: list[str]) -> ModelProbeFailed:
    return ModelProbeFailed(message, type(exc).__name__,
                            "".join(traceback.format_exception(exc)), lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mgpu_gui.processes.model_probe")
    parser.add_argument("--events-fd", type=int, required=True)
    args = parser.parse_args(argv)
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before TensorFlow is imported: CPU only
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # Whatever user code prints goes to stderr; the events pipe carries the only result.
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    with os.fdopen(args.events_fd, "w", buffering=1, encoding="utf-8") as pipe:
        try:
            config = RunConfig.from_dict(json.loads(sys.stdin.read()))
        except (ValueError, TypeError, UserError) as exc:
            result: ProbeOutcome = _failure(f"cannot read the run settings: {exc}", exc, [])
        else:
            result = probe(config)
        pipe.write(result.to_json() + "\n")
    return 0 if isinstance(result, ModelProbed) else 1


if __name__ == "__main__":
    sys.exit(main())
