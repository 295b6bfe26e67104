"""models: loading inside the strategy's scope, compiling, sync BN, labels, fit checks.

In-process TensorFlow on one CPU replica (MirroredStrategy(["/cpu:0"])) with
tiny models, so the scope really is a distribution strategy's.
"""

from __future__ import annotations

import os
import sys
import types
import warnings
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

from mgpu_gui.core.config import RunConfig  # noqa: E402
from mgpu_gui.core.datasets import fit_check  # noqa: E402
from mgpu_gui.core.errors import DataError, ModelError  # noqa: E402
from mgpu_gui.core.modelfiles.inspection import inspect_model_file  # noqa: E402
from mgpu_gui.engine import data_source, models, pipeline  # noqa: E402

pytestmark = pytest.mark.slow  # Keras models built under a strategy in this process

RNG = np.random.default_rng(0)
X = RNG.random((32, 4), dtype=np.float32)
Y = RNG.integers(0, 3, 32)


@pytest.fixture(scope="module")
def strategy():
    return tf.distribute.MirroredStrategy(["/cpu:0"])


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """Real model files: Keras 3 `.keras` (compiled, Lambda) and a tf_keras compiled `.h5`."""
    folder = tmp_path_factory.mktemp("models")
    out: dict[str, Path] = {}
    inp = keras.Input((4,), name="x")
    hidden = keras.layers.BatchNormalization(name="bn")(keras.layers.Dense(8, name="h")(inp))
    model = keras.Model(inp, keras.layers.Dense(3, activation="softmax", name="out")(hidden))
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(X, Y, epochs=1, verbose=0)  # built optimizer: reloads without a mismatch warning
    out["compiled"] = folder / "compiled.keras"
    model.save(out["compiled"])

    lam = keras.Sequential([keras.Input((4,)), keras.layers.Lambda(lambda t: t * 2, name="dbl"),
                            keras.layers.Dense(3)])
    out["lambda"] = folder / "lambda.keras"
    lam.save(out["lambda"])

    import tf_keras

    legacy = tf_keras.Sequential([tf_keras.layers.InputLayer((4,)),
                                  tf_keras.layers.Dense(8, activation="relu"),
                                  tf_keras.layers.Dense(3, activation="softmax")])
    legacy.compile(tf_keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy",
                   metrics=["accuracy"])
    legacy.fit(X, Y, epochs=1, verbose=0)
    out["legacy"] = folder / "legacy.h5"
    with warnings.catch_warnings():  # tf_keras: "HDF5 ... is considered legacy" (the point here)
        warnings.simplefilter("ignore", UserWarning)
        legacy.save(out["legacy"])
    return out


def _load(strategy, model: str | Path, *, shape=(4,), classes=3, **settings):
    lines: list[str] = []
    config = RunConfig(model=str(model), **settings)
    result = models.load_model(config, strategy, input_shape=shape, num_classes=classes,
                               log=lines.append)
    return result, "\n".join(lines)


def _write_py(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "net.py"
    path.write_text("import keras\n\n" + body)
    return path


def _is_mirrored(model) -> bool:
    return isinstance(model.weights[0].value, tf.distribute.DistributedValues)


def test_real_files_inspected(files):
    info = inspect_model_file(files["compiled"])
    assert (info.input_shape, info.output_units, info.output_activation) == ((4,), 3, "softmax")
    assert info.compiled and info.loss == "sparse_categorical_crossentropy"
    legacy = inspect_model_file(files["legacy"])
    assert (legacy.format, legacy.input_shape, legacy.output_units) == ("h5", (4,), 3)
    assert legacy.compiled and legacy.keras_version.startswith("2.")
    assert inspect_model_file(files["lambda"]).lambda_layers == ("dbl",)


def test_compiled_keras_file_keeps_its_settings_and_trains(strategy, files):
    model, log = _load(strategy, files["compiled"], optimizer="sgd")
    assert _is_mirrored(model)
    assert type(model.optimizer).__name__ == "Adam"
    assert "its own optimizer (Adam)" in log
    model.fit(X, Y, epochs=1, batch_size=16, verbose=0)


def test_compiled_legacy_h5_compiles_from_training_config_and_fits(strategy, files):
    model, log = _load(strategy, files["legacy"])
    assert _is_mirrored(model)
    assert type(model.optimizer).__name__ == "Adam"
    assert float(model.optimizer.learning_rate.numpy()) == pytest.approx(0.01)  # not 1e-3
    assert "compiled as saved in legacy.h5" in log
    history = model.fit(X, Y, epochs=1, batch_size=16, verbose=0)  # no "Unknown variable"
    assert 0.0 <= history.history["accuracy"][0] <= 1.0


def test_demo_model_is_built_in_scope_and_compiled(strategy, monkeypatch):
    def build_demo_model(input_shape, num_classes):
        return keras.Sequential([keras.Input(input_shape), keras.layers.Dense(num_classes)])

    fake = types.SimpleNamespace(build_demo_model=build_demo_model)
    monkeypatch.setitem(sys.modules, "mgpu_gui.engine.demo", fake)
    model, log = _load(strategy, "demo", classes=3)
    assert _is_mirrored(model)
    loss = model.loss
    assert isinstance(loss, keras.losses.SparseCategoricalCrossentropy) and loss.from_logits
    assert "taken as logits" in log
    model.fit(X, Y, epochs=1, batch_size=16, verbose=0)


@pytest.mark.parametrize("signature", ["input_shape, num_classes", "num_classes, input_shape=None",
                                       ""])
def test_py_build_model(strategy, tmp_path, signature):
    body = (f"def build_model({signature}):\n"
            "    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, "
            "activation='sigmoid')])\n")
    model, log = _load(strategy, _write_py(tmp_path, body), classes=2)
    assert _is_mirrored(model)
    assert model.loss == "binary_crossentropy"
    assert "build_model(" in log


@pytest.mark.parametrize(("body", "expected"), [
    ("def build_model():\n    x = 1\n    raise ValueError('no such layer size')\n",
     r"build_model\(\) failed at line 5: ValueError: no such layer size"),
    ("def build_model():\n    keras.Sequential()\n", r"returned None.*return model"),
    ("def build_model():\n    return 'a model'\n", r"returned a builtins.str, not a keras.Model"),
    ("def build_model(depth):\n    pass\n", r"requires depth"),
    ("def build_model(:\n", r"net.py, line 3: syntax error"),
    ("def make():\n    pass\n", r"defines none of build_model\(\), create_model\(\)"),
    ("1 / 0\n\ndef build_model():\n    pass\n", r"failed on import at line 3: ZeroDivisionError"),
])
def test_py_build_model_errors(strategy, tmp_path, body, expected):
    with pytest.raises(ModelError, match=expected):
        _load(strategy, _write_py(tmp_path, body))


@pytest.mark.parametrize(("body", "builder", "called"), [
    ("def create_model():\n", None, "create_model() (found by its name)"),
    ("def create_model():\n    raise AssertionError\ndef net():\n", "net",
     "net() (named by --builder)"),
])
def test_py_builder_by_another_name(strategy, tmp_path, body, builder, called):
    """The classic notebooks' create_model(), or any function --builder names; the log
    says which one built the model."""
    body += "    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])\n"
    model, log = _load(strategy, _write_py(tmp_path, body), builder=builder)
    assert _is_mirrored(model) and model.output_shape == (None, 3)
    assert f"with net.py: {called}" in log


def test_lambda_refused_without_permission_and_loaded_with_it(strategy, files):
    with pytest.raises(ModelError, match=r"Lambda layer \(dbl\).*--allow-unsafe-code"):
        _load(strategy, files["lambda"])
    model, log = _load(strategy, files["lambda"], allow_unsafe_code=True)
    assert "safe_mode off" in log
    np.testing.assert_allclose(model.layers[0](X[:2]), X[:2] * 2)


def test_truncated_and_custom_layer_files(strategy, files, tmp_path):
    data = files["compiled"].read_bytes()
    (tmp_path / "cut.keras").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError, match="truncated or damaged"):
        _load(strategy, tmp_path / "cut.keras")

    @keras.saving.register_keras_serializable(package="tests")
    class Twice(keras.layers.Layer):
        def call(self, x):
            return x * 2

    path = tmp_path / "custom.keras"
    keras.Sequential([keras.Input((4,)), Twice(), keras.layers.Dense(3)]).save(path)
    del keras.saving.get_custom_objects()["tests>Twice"]  # as in a fresh worker process
    with pytest.raises(ModelError, match=r"'Twice'.*provide custom_objects.*'tests>Twice': Twice"):
        _load(strategy, path)
    objects = tmp_path / "objects.py"
    objects.write_text("import keras\n\nclass Twice(keras.layers.Layer):\n"
                       "    def call(self, x):\n        return x * 2\n\n"
                       "custom_objects = {'tests>Twice': Twice}\n")
    config = RunConfig(model=str(path))
    model = models.load_model(config, strategy, input_shape=(4,), num_classes=3,
                              log=lambda _: None, custom_objects_file=objects)
    assert type(model.layers[0]).__name__ == "Twice"


def test_sync_batchnorm_rewrites_nested_layers_and_keeps_weights(strategy, tmp_path):
    block = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4),
                              keras.layers.BatchNormalization(name="inner_bn")], name="block")
    inp = keras.Input((4,))
    out = keras.layers.Dense(3)(keras.layers.BatchNormalization(name="outer_bn")(block(inp)))
    original = keras.Model(inp, out)
    original.set_weights([RNG.random(w.shape).astype("float32") + 0.5
                          for w in original.get_weights()])
    path = tmp_path / "bn.keras"
    original.save(path)
    model, log = _load(strategy, path, sync_batchnorm=True)
    bns = [layer for layer in model._flatten_layers()
           if isinstance(layer, keras.layers.BatchNormalization)]
    assert len(bns) == 2 and all(bn.synchronized for bn in bns)
    assert "rebuilt 2 BatchNormalization" in log
    for old, new in zip(original.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_array_equal(old, new)
    model.fit(X, Y, epochs=1, batch_size=16, verbose=0)
    unchanged, _ = _load(strategy, path)
    assert not any(layer.synchronized for layer in unchanged._flatten_layers()
                   if isinstance(layer, keras.layers.BatchNormalization))


def test_loss_wants_onehot_and_label_conversion(strategy, files):
    model, _ = _load(strategy, files["compiled"])
    assert models.loss_wants_onehot(model) is False
    model.compile("adam", keras.losses.CategoricalCrossentropy())
    assert models.loss_wants_onehot(model) is True
    model.compile("adam", "mse")
    assert models.loss_wants_onehot(model) is None

    def mapped(y, wants_onehot, kind):
        relabel, line = models.label_mapper(wants_onehot, kind, 3)
        if relabel is None:
            return None, line
        ds = pipeline.relabeled(tf.data.Dataset.from_tensor_slices((np.zeros((len(y), 2)), y)),
                                relabel, 3)
        by_tf = np.stack([label.numpy() for _, label in ds])
        # The Python pipeline (no TensorFlow) changes them the same way.
        np.testing.assert_array_equal(data_source.relabeled(y, relabel, 3), by_tf)
        return by_tf, line

    onehot, line = mapped(np.array([0, 2, 1]), True, "sparse")
    np.testing.assert_array_equal(onehot, np.eye(3)[[0, 2, 1]])
    assert "to one-hot" in line
    ints, line = mapped(onehot.astype("float32"), False, "onehot")
    np.testing.assert_array_equal(ints, [0, 2, 1])
    assert "to class ids" in line
    same, line = mapped(np.array([0, 1]), False, "sparse")
    assert line is None and same is None
    with pytest.raises(DataError, match="labels go up to 5"):  # checked before any mapping
        fit_check.check_label_range(3, 5, 3)


def test_check_model_fits_data(strategy, files):
    model, _ = _load(strategy, files["compiled"])
    models.check_model_fits_data(model, (4,), 3, 2)
    with pytest.raises(ModelError, match=r"expects inputs of shape \(4,\), but the data has "
                                         r"\(64, 64, 3\)"):
        models.check_model_fits_data(model, (64, 64, 3), 3, 2)
    with pytest.raises(DataError, match=r"labels go up to 4.*3 unit\(s\)"):
        models.check_model_fits_data(model, (4,), 5, 4)


def test_model_summary_shows_the_wrapped_model():
    inner = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="core_dense")],
                             name="template")
    inp = keras.Input((4,))
    wrapper = keras.Model(inp, keras.layers.Activation("linear")(inner(inp)), name="wrapper")
    text = models.model_summary(wrapper)
    assert "'wrapper' wraps 'template'" in text and "core_dense" in text
    assert "Total params: 15" in text
