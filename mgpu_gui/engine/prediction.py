"""Image files through a model file, prepared as its card says (inside the evaluator child).

Each file is decoded by the one image module (core.datasets.images, as training
decoded it), resized with `tf.image.resize` to the recorded size and times the
recorded rescale: what training's pipeline did. A model without a card
(exported before cards, or saved elsewhere) gets its input size from its input
layer and a rescale of 1/255, and the answer says so. A file that cannot be
read gets its own error row; the others are still predicted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from mgpu_gui.core.errors import DataError, ModelError, UserError
from mgpu_gui.core.evaluation.heads import top_predictions
from mgpu_gui.core.events import PredictionsMade
from mgpu_gui.core.modelfiles.card import IMAGES, InputRecord, ModelCard, card_path, read_card
from mgpu_gui.core.runs.folder import custom_objects_of
from mgpu_gui.core.tools.evaluate_job import PredictRequest
from mgpu_gui.engine.models import run_custom_objects
from mgpu_gui.engine.output_head import output_layer_info
from mgpu_gui.engine.pipeline import decode_file

BATCH = 32
ASSUMED_RESCALE = 1 / 255


def predict_files(request: PredictRequest) -> PredictionsMade:
    # --custom-objects, else a run's model's own classes.
    custom = request.custom_objects or custom_objects_of(request.model)
    try:
        model = keras.saving.load_model(
            request.model, compile=False, safe_mode=True,
            custom_objects=run_custom_objects(custom))
    except Exception as error:  # Keras raises many types for a bad file: all "cannot load"
        raise ModelError(f"could not load {request.model.name}: {type(error).__name__}: "
                         f"{error}") from error
    card = read_card(card_path(request.model, "keras")) or ModelCard()
    inputs, said = _inputs(model, card, request.model)
    if inputs.kind != IMAGES or inputs.image_size is None:
        raise DataError(f"{request.model.name} was trained on arrays (an .npz), not image "
                        "files: predict its samples with `mgpu-train evaluate --data`.")
    units, activation = output_layer_info(model)
    read = partial(top_predictions, units=units, linear_output=activation == "linear",
                   names=card.class_names, k=request.top)
    rows: list[dict] = []
    for start in range(0, len(request.files), BATCH):
        rows += _predict_batch(model, request.files[start:start + BATCH], inputs, read)
    return PredictionsMade(rows=rows, inputs=said)


def prepare_image(path: Path, inputs: InputRecord) -> np.ndarray:
    """One file as the model's input, as training's pipeline made it."""
    assert inputs.image_size is not None
    decoded = decode_file(path)  # RGB, whatever the file holds
    if inputs.channels == 1:  # a model that takes grey images (one saved outside the app)
        decoded = tf.image.rgb_to_grayscale(decoded)
    resized = tf.image.resize(decoded, inputs.image_size)
    return resized.numpy() * np.float32(inputs.rescale)


def _predict_batch(model: keras.Model, files: Sequence[Path], inputs: InputRecord,
                   read: Callable[[np.ndarray], list[list[tuple[str, float]]]]) -> list[dict]:
    rows: list[dict] = [{"file": str(f), "top": [], "error": ""} for f in files]
    ready: list[tuple[int, np.ndarray]] = []
    for index, path in enumerate(files):
        try:
            ready.append((index, prepare_image(path, inputs)))
        except UserError as error:
            rows[index]["error"] = str(error)
    if ready:
        outputs = model(np.stack([x for _, x in ready]), training=False)
        for (index, _), best in zip(ready, read(keras.ops.convert_to_numpy(outputs)),
                                    strict=True):
            rows[index]["top"] = [list(pair) for pair in best]
    return rows


def _inputs(model: keras.Model, card: ModelCard, path: Path) -> tuple[InputRecord, str]:
    if card.inputs is not None:
        return card.inputs, f"{card.inputs.describe()} (as its card records)"
    shape = tuple(model.inputs[0].shape[1:]) if model.inputs else ()
    if len(shape) != 3 or shape[0] is None or shape[1] is None:
        raise ModelError(f"{path.name} has no card saying how its images were prepared, and "
                         f"its input shape {shape} is not that of images (height, width, "
                         "channels); export it from its run to write one.")
    if shape[2] not in (1, 3):
        raise ModelError(f"{path.name} takes inputs of shape {shape}: {shape[2]} channels, "
                         "where images are read as RGB (3) or grey (1). Predict its samples "
                         "with `mgpu-train evaluate --data` instead.")
    assumed = InputRecord(IMAGES, (int(shape[0]), int(shape[1])), int(shape[2]), ASSUMED_RESCALE)
    return assumed, (f"{assumed.describe()}: ASSUMED, {path.name} has no card recording how "
                     "its training prepared images (export it from its run to write one)")
