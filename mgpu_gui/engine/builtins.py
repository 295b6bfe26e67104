"""Build a built-in architecture (core/modelfiles/builtins.py) for the run's data.

The model is: the raw 0-255 image in, the architecture's own preprocessing,
its Keras Applications backbone without the top (a nested model named
`backbone`, global average pooling), dropout and a softmax Dense head with
the data's class count. MobileNetV3, EfficientNetV2 and ConvNeXt normalise
inside the backbone (`include_preprocessing=True`); ResNet50V2 does not, so
it gets a Rescaling layer of its own first. The pipeline therefore does not
rescale (`RunConfig.input_rescale`), and the export takes raw pixels.

ImageNet weights are downloaded by Keras into its cache on first use. Where
that fails (no network), the run fails before it starts with
`WeightsUnavailable`, naming the file, where to put it, and the way to train
from scratch.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

import keras
from keras import layers

from mgpu_gui.core.errors import ModelError, WeightsUnavailable
from mgpu_gui.core.modelfiles.builtins import (
    BACKBONE,
    IMAGENET,
    NO_WEIGHTS,
    Architecture,
    cached_weights,
    input_problem,
    unavailable_message,
)

Log = Callable[[str], None]
HEAD_DROPOUT = 0.2

# name -> (Keras Applications constructor, whether it takes include_preprocessing)
_APPLICATIONS: dict[str, tuple[Callable[..., keras.Model], bool]] = {
    "mobilenet_v3_small": (keras.applications.MobileNetV3Small, True),
    "mobilenet_v3_large": (keras.applications.MobileNetV3Large, True),
    "efficientnet_v2_b0": (keras.applications.EfficientNetV2B0, True),
    "resnet50_v2": (keras.applications.ResNet50V2, False),
    "convnext_tiny": (keras.applications.ConvNeXtTiny, True),
}


def build_builtin(arch: Architecture, pretrained: str | None, input_shape: tuple[int, ...],
                  num_classes: int, log: Log) -> keras.Model:
    """The uncompiled model of `arch` for `input_shape` (no sample axis) and `num_classes`.

    `pretrained`: 'imagenet', 'none', a weights file, or None for the architecture's
    default. Call inside the strategy's scope.
    """
    shape = tuple(int(d) for d in input_shape)
    problem = input_problem(arch, shape)
    if problem is not None:  # the preflight refused it already; a test host may not have
        raise ModelError(problem)
    weights = arch.default_pretrained if pretrained is None else pretrained
    inputs = keras.Input(shape=shape, name="image")
    if arch.name == "small_convnet":
        features = _small_convnet(inputs)
    else:
        x = inputs
        make, preprocesses = _APPLICATIONS[arch.name]
        if not preprocesses:
            x = layers.Rescaling(1.0 / 127.5, offset=-1.0, name="preprocess")(x)
        backbone = _backbone(arch, make, preprocesses, shape, weights, log)
        # Pretrained: BatchNorm keeps the statistics it learned (inference mode) also when
        # the backbone is fine-tuned (the Keras transfer-learning guide; transfer.py). From
        # scratch its statistics must be learned, so it is called in training mode then.
        features = backbone(x, training=False) if weights != NO_WEIGHTS else backbone(x)
    x = layers.Dropout(HEAD_DROPOUT, name="head_dropout")(features)
    outputs = layers.Dense(num_classes, activation="softmax", name="classes")(x)
    model = keras.Model(inputs, outputs, name=arch.name)
    log(f"built {arch.name} ({arch.family}) for inputs {shape}, {num_classes} classes, "
        f"{model.count_params():,} parameters; {_weights_text(weights)}; it takes raw 0-255 "
        f"pixels ({arch.preprocessing} inside the model), so the pipeline does not rescale")
    return model


def _backbone(arch: Architecture, make: Callable[..., keras.Model], preprocesses: bool,
              shape: tuple[int, ...], weights: str, log: Log) -> keras.Model:
    options: dict[str, Any] = {"include_preprocessing": True} if preprocesses else {}
    source = None if weights == NO_WEIGHTS else (
        IMAGENET if weights == IMAGENET else os.path.expanduser(weights))
    try:
        # MobileNetV3 warns that ImageNet weights of 224x224 load for other sizes: said in
        # the log, where the user reads about the run (a warning would reach stderr only).
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            backbone = make(include_top=False, weights=source, input_shape=shape,
                            pooling="avg", **options)
        for warning in said:
            log(f"{arch.name}: {warning.message}")
    except Exception as error:
        if source == IMAGENET and cached_weights(arch) is None:
            raise WeightsUnavailable(
                unavailable_message(arch, _download_failure(error))) from error
        if source not in (None, IMAGENET):
            raise ModelError(f"could not load the weights file {source} into {arch.name}: "
                             f"{type(error).__name__}: {error}. Give the no-top weights of "
                             f"{arch.name}, or 'imagenet' or 'none'.") from error
        raise
    backbone.name = BACKBONE
    return backbone


def _download_failure(error: BaseException) -> str:
    """Keras' reason for a failed download, without its URL."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text.split(" -- ", 1)[-1]  # Keras: "URL fetch failure on URL: code -- reason"


def _weights_text(weights: str) -> str:
    if weights == NO_WEIGHTS:
        return "no pretrained weights (trained from scratch)"
    if weights == IMAGENET:
        return "ImageNet weights"
    return f"weights from {weights}"


def _small_convnet(inputs: keras.KerasTensor) -> keras.KerasTensor:
    """This app's small ConvNet: three blocks of two 3x3 convolutions with batch
    normalization, max pooling between them, global average pooling at the end, so it
    works at any input size from 32x32 and trains fast from scratch."""
    x = layers.Rescaling(1.0 / 255.0, name="preprocess")(inputs)
    for block, filters in enumerate((32, 64, 128), start=1):
        for conv in (1, 2):
            x = layers.Conv2D(filters, 3, padding="same", use_bias=False,
                              name=f"block{block}_conv{conv}")(x)
            x = layers.BatchNormalization(name=f"block{block}_bn{conv}")(x)
            x = layers.Activation("relu", name=f"block{block}_relu{conv}")(x)
        if block < 3:
            x = layers.MaxPooling2D(2, name=f"block{block}_pool")(x)
    return layers.GlobalAveragePooling2D(name="pool")(x)
