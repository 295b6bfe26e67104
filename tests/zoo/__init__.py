"""The zoo: small models written after public Keras examples, each taken through the
app's whole life cycle by `tests/benchmarks/zoo.py` (train, stop, resume, evaluate,
predict, export, reload).

Why: the app's tests use a handful of models made for them; users bring the models of
the examples they learned from. Each zoo model follows one such example (its module
docstring names it) and is here for what it exercises: a head (binary, logits,
multi-label, regression), a way of giving the model (a `.py` builder, `create_model()`,
a subclassed model, a `.keras` with custom objects, a legacy multi-GPU `.h5`), or a
kind of layer (augmentation, attention, BatchNorm, depthwise, GRU, bfloat16).

This module only describes them: importing it imports neither Keras nor TensorFlow.
`prepare` writes what an entry needs (data, and a model file an entry makes by code)
into a folder the caller gives, never into the tree.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path

ZOO = Path(__file__).resolve().parent
ENGINES = ("tensorflow", "jax")
ALL_EXPORTS = ("keras", "h5", "savedmodel")  # the CLI's --export choices


@dataclass(frozen=True)
class ZooModel:
    """One zoo entry: how to get its model file, its data, and what to try with it."""

    name: str
    follows: str  # the public example it is written after
    data: str  # a key of tests.zoo.data.WRITERS
    model_file: str = ""  # a file in tests/zoo/ given to --model as it is
    writer: str = ""  # or "module:function" writing the model file into a folder
    engines: tuple[str, ...] = ENGINES  # TensorFlow always; JAX unless TF-only parts
    exports: tuple[str, ...] = ALL_EXPORTS  # --export formats to try
    image: bool = False  # image data: `predict` on raw image files applies
    train_args: tuple[str, ...] = ()  # further `mgpu-train train` flags it needs
    custom_objects: str = ""  # a file in tests/zoo/ for --custom-objects
    reload_atol: float = 1e-4  # export vs checkpoint outputs, the largest difference
    # Refusals after training that are a stated, honest limit (the README's, or one whose
    # message says why and what to do instead): (stage, words of the message). Any other
    # refusal of a trained model counts as a failure.
    known_refusals: tuple[tuple[str, str], ...] = ()
    notes: str = ""

    def __post_init__(self) -> None:
        assert bool(self.model_file) != bool(self.writer), self.name
        assert "tensorflow" in self.engines and set(self.engines) <= set(ENGINES), self.name

    def model_path(self, folder: Path) -> Path:
        """The file for --model: the zoo's own, or written into `folder` (Keras needed)."""
        if self.model_file:
            return ZOO / self.model_file
        module, function = self.writer.split(":")
        return Path(getattr(importlib.import_module(module), function)(folder))

    @property
    def custom_objects_path(self) -> Path | None:
        return ZOO / self.custom_objects if self.custom_objects else None


IMAGE_ARGS = ("--image-size", "32x32")

MODELS: tuple[ZooModel, ...] = (
    ZooModel("binary_mlp", 'keras-io "Imbalanced classification: credit card fraud '
             'detection"', "binary", model_file="binary_mlp.py"),
    ZooModel("mnist_convnet", 'keras-io "Simple MNIST convnet"', "image_npz",
             model_file="mnist_convnet.py", image=True,
             # an .npz-trained model: predict takes image files, says to use evaluate
             known_refusals=(("predict", "trained on arrays"),)),
    ZooModel("xception_small", 'keras-io "Image classification from scratch" (make_model)',
             "image_folder_binary", model_file="xception_small.py", image=True,
             train_args=(*IMAGE_ARGS, "--rescale", "1")),
    ZooModel("resnet_v1", "Keras 2 examples/cifar10_resnet.py (create_model)",
             "image_folder", model_file="resnet20.py", image=True, train_args=IMAGE_ARGS),
    ZooModel("subclassed", 'keras-io "Making new layers and models via subclassing"',
             "image_folder", model_file="subclassed.py", image=True, train_args=IMAGE_ARGS,
             # Keras' .h5 keeps layers, not a subclassed model's class: the rehearsal
             # refuses --export h5 before training (checked once, in the full table).
             exports=("keras", "savedmodel")),
    ZooModel("custom_parts", 'keras-io "Making new layers and models via subclassing" + '
             "custom loss and metric", "tabular", writer="tests.zoo.custom_parts:write_model",
             custom_objects="custom_parts.py"),
    ZooModel("regression_mlp", 'TensorFlow tutorial "Basic regression: Predict fuel '
             'efficiency"', "regression", model_file="regression_mlp.py"),
    ZooModel("multilabel_mlp", 'keras-io "Large-scale multi-label text classification"',
             "multihot", model_file="multilabel_mlp.py"),
    ZooModel("vit_small", 'keras-io "Image classification with Vision Transformer"',
             "image_folder", model_file="vit_small.py", image=True, train_args=IMAGE_ARGS),
    ZooModel("bn_dropout_convnet", "Keras 2 examples/cifar10_cnn.py with BatchNorm",
             "image_folder", model_file="bn_dropout_convnet.py", image=True,
             train_args=(*IMAGE_ARGS, "--sync-bn")),
    ZooModel("mobilenet_like", "Keras Applications MobileNet v1 blocks", "image_folder",
             model_file="mobilenet_like.py", image=True, train_args=IMAGE_ARGS),
    ZooModel("sequence_gru", 'keras-io "Timeseries classification from scratch"',
             "sequence", model_file="sequence_gru.py"),
    ZooModel("keras_app", "keras.applications.MobileNetV3Small(weights=None)",
             "image_folder", model_file="keras_app.py", image=True,
             train_args=(*IMAGE_ARGS, "--rescale", "1")),
    ZooModel("bf16_convnet", 'Keras "Mixed precision" guide (per-layer dtype policy)',
             "image_folder", model_file="bf16_convnet.py", image=True,
             train_args=IMAGE_ARGS, reload_atol=5e-2),
    ZooModel("legacy_multi_gpu", "Keras 2 multi_gpu_model, saved as .h5",
             "tabular", writer="tests.zoo.legacy_multi_gpu:write_model"),
    ZooModel("mobilenet_like_bf16", "Keras Applications MobileNet v1 blocks, "
             "--precision mixed_bfloat16", "image_folder", model_file="mobilenet_like.py",
             image=True, train_args=(*IMAGE_ARGS, "--precision", "mixed_bfloat16"),
             reload_atol=5e-2),
)

BY_NAME = {model.name: model for model in MODELS}


@dataclass
class Prepared:
    """What `prepare` wrote for one entry: the paths the CLI is given."""

    model: str
    data: str
    predict: str | None
    extra: dict[str, str] = field(default_factory=dict)


def prepare(names: list[str], folder: Path) -> dict[str, Prepared]:
    """Write each named entry's data (once per kind) and model file under `folder`.
    Entries with a writer need Keras on the TensorFlow backend in this process."""
    from tests.zoo.data import WRITERS

    folder = Path(folder)
    data_dir, model_dir = folder / "data", folder / "models"
    data_dir.mkdir(parents=True, exist_ok=True)
    model_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    out = {}
    for name in names:
        entry = BY_NAME[name]
        if entry.data not in written:
            written[entry.data] = WRITERS[entry.data](data_dir)
        files = written[entry.data]
        out[name] = Prepared(str(entry.model_path(model_dir)), str(files.path),
                             str(files.predict) if files.predict else None)
    return out
