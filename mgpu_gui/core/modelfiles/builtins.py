"""The built-in architectures a run can train without a model file (no TensorFlow here).

Each is built by `mgpu_gui.engine.builtins` for the data's input size and class
count: the Keras Applications backbone without its top, global average
pooling and a softmax Dense head. The architecture's own preprocessing sits
inside the model, so it takes raw 0-255 pixels and the pipeline does not
rescale (`RunConfig.input_rescale`).

The ImageNet weights' file names and URLs are Keras 3's (keras.src.applications);
a test checks them against the download Keras attempts. Parameter counts are
for a 10-class head on 224x224 inputs, measured once (they do not depend on the
input size: every backbone ends in global pooling).
"""

from __future__ import annotations

import os
import socket
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from mgpu_gui.core.errors import ModelError, WeightsUnavailable

IMAGENET, NO_WEIGHTS = "imagenet", "none"
# Transfer learning freezes the nested model of this name: a built-in's Keras Applications
# model, or the pretrained part a model file builds.
BACKBONE = "backbone"
WEIGHTS_SUFFIXES = (".h5", ".hdf5", ".keras")
MIN_SIZE = 32  # every backbone here refuses smaller inputs (Keras' obtain_input_shape)
_KERAS_URL = "https://storage.googleapis.com/tensorflow/keras-applications/"
# A connection to the weights' host within this is "reachable"; offline, a lookup fails
# at once (0.6 s measured) and a dropped route takes this long.
REACH_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class Architecture:
    """One built-in: what `mgpu-train models` lists and what the engine builds."""

    name: str
    family: str
    params_10_classes: int  # parameters with a 10-class head (any input size)
    default_size: int  # the input size its ImageNet weights were trained at
    preprocessing: str  # what the model does to the 0-255 pixels it takes
    weights_file: str | None = None  # the ImageNet (no-top) weights in Keras' cache
    weights_folder: str = ""  # the URL's folder under Keras' storage bucket

    @property
    def has_imagenet(self) -> bool:
        return self.weights_file is not None

    @property
    def weights_url(self) -> str:
        return f"{_KERAS_URL}{self.weights_folder}/{self.weights_file}"

    @property
    def default_pretrained(self) -> str:
        return IMAGENET if self.has_imagenet else NO_WEIGHTS


ARCHITECTURES: dict[str, Architecture] = {a.name: a for a in (
    Architecture("small_convnet", "ConvNet (this app's)", 289_642, 64, "x / 255"),
    Architecture("mobilenet_v3_small", "MobileNetV3", 944_890, 224, "x / 127.5 - 1 (Keras')",
                 "weights_mobilenet_v3_small_224_1.0_float_no_top_v2.h5", "mobilenet_v3"),
    Architecture("mobilenet_v3_large", "MobileNetV3", 3_005_962, 224, "x / 127.5 - 1 (Keras')",
                 "weights_mobilenet_v3_large_224_1.0_float_no_top_v2.h5", "mobilenet_v3"),
    Architecture("efficientnet_v2_b0", "EfficientNetV2", 5_932_122, 224,
                 "x / 255, ImageNet mean and variance (Keras')", "efficientnetv2-b0_notop.h5",
                 "efficientnet_v2"),
    Architecture("resnet50_v2", "ResNetV2", 23_585_290, 224, "x / 127.5 - 1 (this app's layer)",
                 "resnet50v2_weights_tf_dim_ordering_tf_kernels_notop.h5", "resnet"),
    Architecture("convnext_tiny", "ConvNeXt", 27_827_818, 224,
                 "x / 255, ImageNet mean and variance (Keras')", "convnext_tiny_notop.h5",
                 "convnext"),
)}


def architecture(model: str) -> Architecture | None:
    """The built-in named `model`; None for a model file (or 'demo')."""
    return ARCHITECTURES.get(model)


def keras_cache_dir() -> Path:
    """Where Keras keeps downloaded weights: `$KERAS_HOME/models`, else `~/.keras/models`.

    The same choice as Keras 3 (backend.config and utils.file_utils.get_file): a home
    folder that cannot be written falls back to /tmp/.keras, and so does a Keras
    folder that cannot be.
    """
    if "KERAS_HOME" in os.environ:
        base = os.environ["KERAS_HOME"]
    else:
        home = os.path.expanduser("~")
        base = os.path.join(home if os.access(home, os.W_OK) else "/tmp", ".keras")
    base = os.path.expanduser(base)
    if not os.access(base, os.W_OK):
        base = "/tmp/.keras"
    return Path(base) / "models"


def cached_weights(arch: Architecture) -> Path | None:
    """The ImageNet weights file of `arch` in Keras' cache, when it is there."""
    if arch.weights_file is None:
        return None
    path = keras_cache_dir() / arch.weights_file
    return path if path.is_file() else None


def unreachable(url: str, timeout: float = REACH_TIMEOUT_S) -> str | None:
    """Why `url`'s host takes no connection (its lookup, its port), None when it does: no
    download is tried, only whether Keras' download could begin."""
    parts = urllib.parse.urlsplit(url)
    try:
        with socket.create_connection((parts.hostname, parts.port or 443), timeout=timeout):
            return None
    except OSError as error:
        return f"{parts.hostname}: {error.strerror or error or type(error).__name__}"


def check_weights_obtainable(arch: Architecture, pretrained: str | None) -> None:
    """WeightsUnavailable before a run when its ImageNet weights are neither in Keras'
    cache nor downloadable (issue 30, finding 4: the form said Ready and the run failed
    24 s after Train, with no network)."""
    if (pretrained or arch.default_pretrained) != IMAGENET or cached_weights(arch) is not None:
        return
    reason = unreachable(arch.weights_url)
    if reason is not None:
        raise WeightsUnavailable(unavailable_message(
            arch, f"not in Keras' cache, and {reason}"))


def unavailable_message(arch: Architecture, reason: str) -> str:
    """Why the ImageNet weights cannot be had, where to put them, and what else to do."""
    folder = arch.weights_url.rsplit("/", 1)[0] + "/"
    return (f"The ImageNet weights of {arch.name} could not be downloaded ({reason}). "
            f"Download {arch.weights_file} from {folder} and put it in {keras_cache_dir()}/ "
            f"(or give its path as the pretrained weights), or train from scratch "
            f"(pretrained weights: none).")


def pretrained_problem(arch: Architecture, pretrained: str | None) -> str | None:
    """What is wrong with `pretrained` for `arch` (None: fine; None as a choice means the
    architecture's default)."""
    if pretrained is None or pretrained == NO_WEIGHTS:
        return None
    if pretrained == IMAGENET:
        return None if arch.has_imagenet else (
            f"{arch.name} has no ImageNet weights; use 'none' (train from scratch)")
    path = Path(os.path.expanduser(pretrained))
    if not path.is_file():
        return (f"weights file not found: {path}; give 'imagenet', 'none' or a weights "
                f"file ({', '.join(WEIGHTS_SUFFIXES)})")
    if not path.name.lower().endswith(WEIGHTS_SUFFIXES):
        return f"{path.name} is not a Keras weights file; use {', '.join(WEIGHTS_SUFFIXES)}"
    return None


def input_problem(arch: Architecture, shape: tuple[int, ...] | None) -> str | None:
    """Why inputs of `shape` (no sample axis) cannot feed `arch`; None when they can."""
    if shape is None:
        return None
    if len(shape) != 3 or shape[-1] != 3:
        got = "x".join(str(d) for d in shape)
        return (f"{arch.name} takes RGB images (height x width x 3), but the data are {got}; "
                "use an image folder (its images are decoded to 3 channels) or a model file")
    if min(shape[0], shape[1]) < MIN_SIZE:
        return (f"{arch.name} needs images of at least {MIN_SIZE}x{MIN_SIZE}, but the data "
                f"are {shape[0]}x{shape[1]}; choose a larger image size (e.g. 64x64) for an "
                "image folder, or a model file")
    return None


def no_backbone(model_name: str) -> ModelError:
    """Why a model without a backbone cannot train in transfer-learning stages, and what to do."""
    return ModelError(
        f"{model_name} has no backbone to freeze: transfer learning (freeze epochs) needs "
        f"a nested model named '{BACKBONE}' (the built-in architectures have one; in a .py "
        f"builder, build the pretrained part as keras.Model(..., name='{BACKBONE}') and "
        f"call it with training=False). Set freeze epochs to 0 to train it as one.")
