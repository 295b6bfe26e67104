"""Child entry for the checks that need TensorFlow: build the run's model, on the CPU.

    python -m mgpu_gui.processes.model_probe CONFIG_JSON_PATH RESULT_JSON_PATH

It loads or builds the run's model the way training does (same `load_model`,
same input shape and class count from the data), but under the default
strategy on the CPU, and writes what it found to RESULT_JSON_PATH (the format
and the parent's side: `mgpu_gui.core.tools.model_probe`). The result goes to
a file, not stdout, because user code (a `.py` builder) and TensorFlow print
freely; stdout is sent to stderr so nothing the user's code prints can be
mistaken for a result. TensorFlow is imported inside `probe()` only.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path
from typing import Any

from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.tools.model_probe import write_result


def probe(config: RunConfig) -> dict[str, Any]:
    """Build the model of `config` on the CPU; the result dict (never raises)."""
    lines: list[str] = []
    try:
        return {"ok": True, **_build(config, lines.append), "log": lines}
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

    model = models.load_model(config, tf.distribute.get_strategy(), input_shape=data.x_shape,
                              num_classes=data.num_classes, log=log,
                              custom_objects_file=config.custom_objects)
    label_max = data.label_max if data.label_kind is LabelKind.SPARSE else None
    models.check_model_fits_data(model, data.x_shape, data.num_classes, label_max)
    inputs = getattr(model, "inputs", None) or []
    input_shape = list(inputs[0].shape[1:]) if len(inputs) == 1 else list(data.x_shape)
    return {
        "summary": models.model_summary(model),
        "params": int(model.count_params()),
        "input_shape": input_shape,
        "output_units": models.output_layer_info(model)[0],
    }


def _failure(message: str, exc: BaseException, lines: list[str]) -> dict[str, Any]:
    return {
        "ok": False,
        "message": message,
        "error_type": type(exc).__name__,
        "traceback": "".join(traceback.format_exception(exc)),
        "log": lines,
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m mgpu_gui.processes.model_probe CONFIG_JSON_PATH "
              "RESULT_JSON_PATH", file=sys.stderr)
        return 2
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before TensorFlow is imported: CPU only
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # Whatever user code prints goes to stderr; the result file is the only output.
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    config_path, result_path = Path(args[0]), Path(args[1])
    try:
        config = RunConfig.from_json(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError, UserError) as exc:
        result = _failure(f"cannot read the run settings {config_path}: {exc}", exc, [])
    else:
        result = probe(config)
    write_result(result_path, result)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
