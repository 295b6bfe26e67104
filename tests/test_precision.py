"""Speed options: mixed precision, XLA, and the linear learning-rate scaling rule.

The hint and the rule are plain functions; Keras-side pieces run in-process on
tiny models (the global dtype policy is put back after each); real data-parallel
runs use one 2-replica host process (helpers/replica_host.py) for the module.
"""

from __future__ import annotations

import json
import math
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest

from mgpu_gui.cli import common
from mgpu_gui.cli import main as cli
from mgpu_gui.core.children.supervisor import prepare_run
from mgpu_gui.core.config import DeviceKind, DeviceSelection, LRScalingConfig, RunConfig
from mgpu_gui.core.devices.nvml import GpuInfo, GpuInventory, NvmlState
from mgpu_gui.core.devices.precision_hint import cpu_flags, precision_hint
from mgpu_gui.core.events import (
    BatchEnd,
    EpochEnd,
    LogMessage,
    ModelExported,
    RunFailed,
    RunFinished,
    RunStatus,
)
from mgpu_gui.core.lr_schedule import LinearScaling
from mgpu_gui.engine import xla

pytestmark = pytest.mark.slow  # Keras policies and XLA in this process

NO_GPU = GpuInventory(state=NvmlState.NO_DRIVER, gpus=(), driver_version=None,
                      cuda_driver_version=None, message="No NVIDIA driver (test).")


def gpu(index: int, cc: tuple[int, int] | None, name: str = "Test GPU") -> GpuInfo:
    return GpuInfo(index=index, name=name, uuid=f"GPU-{index}", pci_bus_id=None,
                   memory_total=None, compute_capability=cc)


# -- the precision hint (no TensorFlow) ----------------------------------------
@pytest.mark.parametrize("precision, caps, words, warning", [
    ("float32", [(8, 0), (9, 0)], "compute capability 8.0, the lowest) support "
                                  "mixed_bfloat16 and mixed_float16", False),
    ("mixed_bfloat16", [(8, 6)], "This GPU (compute capability 8.6) supports mixed_bfloat16",
     False),
    ("mixed_bfloat16", [(8, 0), (7, 0)], "needs compute capability 8.0 (Ampere) or newer: "
                                         "GPU 1 (V100) would emulate it", True),
    ("mixed_float16", [(7, 5)], "Loss scaling", False),
    ("mixed_float16", [(6, 1)], "need compute capability 7.0 (Volta) or newer", True),
    ("mixed_bfloat16", [None], "does not give these GPUs' compute capability", False),
])
def test_precision_hint_follows_the_compute_capability(precision, caps, words, warning):
    gpus = [gpu(i, cc, "V100" if cc == (7, 0) else "A100") for i, cc in enumerate(caps)]
    hint = precision_hint(precision, gpus)
    assert words in hint.text and hint.warning is warning, hint


def test_precision_hint_on_cpu_replicas_reads_the_cpu_flags(tmp_path):
    with_bf16 = frozenset({"avx2", "avx512f", "avx512_bf16"})
    assert not precision_hint("mixed_bfloat16", cpu=with_bf16).warning
    assert "avx512_bf16" in precision_hint("mixed_bfloat16", cpu=with_bf16).text
    plain = precision_hint("mixed_bfloat16", cpu=frozenset({"avx2"}))
    assert plain.warning and "slower than float32" in plain.text
    assert precision_hint("mixed_float16", cpu=with_bf16).warning
    assert "float32" in precision_hint("float32", cpu=frozenset()).text
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse avx512_bf16 amx_bf16\n\n")
    assert cpu_flags(str(cpuinfo)) == frozenset({"fpu", "sse", "avx512_bf16", "amx_bf16"})
    assert cpu_flags(str(tmp_path / "missing")) == frozenset()


# -- the linear scaling rule ------------------------------------------------------
def test_linear_scaling_rule_with_warmup():
    rule = LinearScaling(base_lr=0.01, replicas=4, warmup_epochs=2, steps_per_epoch=5)
    assert rule.scaled_lr == pytest.approx(0.04)
    # Per step from the base: the last warm-up step trains at the scaled LR.
    steps = [rule.lr_at(e, s) for e in range(3) for s in range(5)]
    assert steps[0] == pytest.approx(0.01 + 0.03 / 10)
    assert steps[9] == pytest.approx(0.04) and steps[10:] == [pytest.approx(0.04)] * 5
    assert all(b > a for a, b in zip(steps[:10], steps[1:10], strict=False))
    assert [rule.lr_at_epoch_end(e) for e in range(3)] == pytest.approx([0.025, 0.04, 0.04])
    assert rule.describe() == "base LR 0.01 → scaled 0.04 (× 4 replicas), warm-up 2 epochs"
    assert LinearScaling(1e-3, 1, 0).describe() == (
        "base LR 0.001 → scaled 0.001 (× 1 replica), no warm-up")


def test_speed_options_are_checked_and_set_from_the_cli():
    problems = dict(RunConfig(precision="float8", epochs=3,
                              lr_scaling=LRScalingConfig(enabled=True, warmup_epochs=3)).problems())
    assert "use one of float32, mixed_bfloat16, mixed_float16" in problems["precision"]
    assert "leaves no epoch of the 3 at the scaled" in problems["lr_scaling.warmup_epochs"]
    assert RunConfig(lr_scaling=LRScalingConfig(warmup_epochs=-1)).problems() == [
        ("lr_scaling.warmup_epochs", "must be 0 or more, got -1")]
    args = cli.build_parser().parse_args(
        ["train", "--precision", "mixed_bfloat16", "--xla", "--scale-lr", "--warmup-epochs", "2"])
    config = common.config_from_args(args)
    assert (config.precision, config.jit_compile, config.lr_scaling) == (
        "mixed_bfloat16", True, LRScalingConfig(enabled=True, warmup_epochs=2))
    assert RunConfig.from_json(config.to_json()) == config
    assert common.FLAGS["lr_scaling.warmup_epochs"] == "--warmup-epochs"


def test_xla_compile_errors_are_told_apart():
    class InvalidArgumentError(Exception):  # the name is what counts (no TensorFlow here)
        pass

    unsupported = InvalidArgumentError(
        "Graph execution error:\n\nDetected unsupported operations when trying to compile "
        "graph __forward_call_3044[] on XLA_CPU_JIT: PyFunc (No registered 'PyFunc' OpKernel "
        "for XLA_CPU_JIT devices compatible with node {{node np_1/PyFunc}})")
    assert xla.compile_error(unsupported) == "no XLA kernel for PyFunc on XLA_CPU_JIT"
    device = InvalidArgumentError(
        "Trying to access resource dense/kernel/replica_1 located in device CPU:1 from device "
        "CPU:0\n Cf. https://www.tensorflow.org/xla/known_issues#tfvariable_on_a_different_device")
    assert "xla/known_issues" in xla.compile_error(device)
    shapes = InvalidArgumentError("logits and labels must be broadcastable")
    assert xla.compile_error(shapes) is None
    assert xla.compile_error(ValueError("XLA_CPU_JIT")) is None  # not TensorFlow's op error


# -- Keras, in-process ------------------------------------------------------------
@pytest.fixture
def keras_float32():
    """Keras, with the global dtype policy put back to float32 afterwards."""
    import keras

    yield keras
    keras.mixed_precision.set_global_policy("float32")


def test_warmup_sets_the_lr_per_step_and_reduce_lr_waits_for_its_end(keras_float32):
    keras = keras_float32
    from mgpu_gui.engine.callbacks import AfterWarmup, LinearWarmup

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(40, 4)).astype("float32"), rng.integers(0, 2, size=40)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation="softmax")])
    model.compile(keras.optimizers.SGD(0.1), "sparse_categorical_crossentropy")
    rule = LinearScaling(0.1, 2, warmup_epochs=2, steps_per_epoch=4)
    seen: list[float] = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            seen.append(float(self.model.optimizer.learning_rate.numpy()))

    # min_delta=100: no epoch counts as an improvement, so every watched epoch reduces.
    reduce = keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=0,
                                               min_delta=100, verbose=0)
    model.fit(x, y, batch_size=10, epochs=5, verbose=0, shuffle=False,
              callbacks=[LinearWarmup(rule), Record(), AfterWarmup(reduce, 2)])
    expected = [rule.lr_at(e, s) for e in range(2) for s in range(4)]
    assert seen[:8] == pytest.approx(expected, rel=1e-6)
    # Epoch 2 starts at the scaled LR. ReduceLROnPlateau's first epoch sets its baseline,
    # its first reduction follows epoch 3 (watching the warm-up, it would follow epoch 2).
    assert seen[8:] == pytest.approx([0.2] * 4 + [0.2] * 4 + [0.1] * 4, rel=1e-6)


def test_a_float32_file_takes_the_mixed_policy_with_a_float32_output_and_exports_float32(
        keras_float32, tmp_path):
    keras = keras_float32
    import tensorflow as tf

    from mgpu_gui.engine import models
    from mgpu_gui.engine.export import export_model
    from mgpu_gui.engine.precision import float32_policies, layer_policies

    saved = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(3, activation="softmax", name="out")])
    saved.compile("adam", "sparse_categorical_crossentropy")
    saved.fit(np.ones((4, 8), "float32"), np.zeros(4), verbose=0)  # the optimizer has state
    saved.save(tmp_path / "f32.keras")
    lines: list[str] = []
    config = RunConfig(model=str(tmp_path / "f32.keras"), precision="mixed_float16")
    model = models.load_model(config, tf.distribute.get_strategy(), input_shape=(8,),
                              num_classes=3, log=lines.append)
    policies = layer_policies(model)
    assert sorted(policies.values()) == ["float32", "mixed_float16", "mixed_float16"]
    assert policies["out"] == "float32"
    assert type(model.optimizer).__name__ == "LossScaleOptimizer"
    assert any("2 layer(s) of the file were saved with the float32" in line for line in lines)
    x = np.ones((2, 8), "float32")
    assert model(x).dtype == "float32"
    with float32_policies(model) as changed:
        assert changed == 2 and set(layer_policies(model).values()) == {"float32"}
    assert layer_policies(model) == policies

    export_model(model, tmp_path / "plain.keras", "keras", sample_x=x, verify=False)
    assert set(keras_file_policies(tmp_path / "plain.keras").values()) == {"float32"}
    assert layer_policies(model) == policies  # put back after the export


# -- real data-parallel runs (2 CPU replicas) --------------------------------------
@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("speed")
    rng = np.random.default_rng(0)
    centers = rng.normal(0, 3, size=(3, 8))

    def blobs(n):
        y = rng.integers(0, 3, size=n)
        return (centers[y] + rng.normal(0, 1, size=(n, 8))).astype("float32"), y.astype("int64")

    x_train, y_train = blobs(250)  # 7 steps of 32 per epoch
    x_val, y_val = blobs(64)
    np.savez(root / "blobs.npz", x_train=x_train, y_train=y_train, x_val=x_val, y_val=y_val)
    (root / "dense.py").write_text(textwrap.dedent("""
        import keras

        def build_model(input_shape, num_classes):
            return keras.Sequential([
                keras.Input(input_shape),
                keras.layers.Dense(16, activation="relu", name="hidden"),
                keras.layers.Dense(num_classes, activation="softmax", name="classes"),
            ], name="dense")
    """))
    # tf.numpy_function has no XLA kernel: XLA cannot compile this model.
    (root / "numpy_layer.py").write_text(textwrap.dedent("""
        import keras
        import tensorflow as tf

        @keras.saving.register_keras_serializable(package="test")
        class NumpyZeros(keras.layers.Layer):
            def call(self, x):
                zeros = tf.numpy_function(lambda a: a * 0, [x], x.dtype)
                zeros.set_shape(x.shape)
                return x + zeros

        custom_objects = {"test>NumpyZeros": NumpyZeros}

        def build_model(input_shape, num_classes):
            return keras.Sequential([
                keras.Input(input_shape),
                keras.layers.Dense(16, activation="relu"),
                NumpyZeros(),
                keras.layers.Dense(num_classes, activation="softmax"),
            ], name="numpy_layer")
    """))
    return {"data": root / "blobs.npz", "dense": root / "dense.py",
            "numpy_layer": root / "numpy_layer.py"}


def start(files, model: Path, tmp_path: Path, **overrides):
    config = RunConfig(
        model=str(model), data=str(files["data"]), epochs=3, batch_per_replica=16,
        output_dir=str(tmp_path), devices=DeviceSelection(kind=DeviceKind.CPU, replicas=2),
        batch_event_interval_s=0.0, seed=7,
    ).replace(**overrides)
    return prepare_run(config, NO_GPU).run_dir


def only(events, cls):
    return [e for e in events if isinstance(e, cls)]


def keras_file_policies(path: Path) -> dict[str, str]:
    """Layer name -> dtype policy as a `.keras` file records it (no Keras needed)."""
    with zipfile.ZipFile(path) as archive:
        layers = json.loads(archive.read("config.json"))["config"]["layers"]
    return {layer["config"]["name"]: layer["config"]["dtype"]["config"]["name"]
            for layer in layers if layer["class_name"] != "InputLayer"}


@pytest.mark.slow
def test_bfloat16_run_with_xla_trains_on_the_scaled_lr_resumes_on_schedule_exports_float32(
        host, files, tmp_path):
    run_dir = start(files, files["dense"], tmp_path, precision="mixed_bfloat16",
                    jit_compile=True, learning_rate=0.01,
                    lr_scaling=LRScalingConfig(enabled=True, warmup_epochs=2))
    rule = LinearScaling(0.01, 2, warmup_epochs=2, steps_per_epoch=7)
    code, events = host.run(run_dir.path, stop_at=(1, 2))  # stop in the second epoch
    assert code == 0, only(events, RunFailed)
    assert only(events, RunFinished)[0].status is RunStatus.STOPPED
    first = only(events, EpochEnd)
    assert [e.learning_rate for e in first] == pytest.approx([rule.lr_at_epoch_end(0)], rel=1e-6)
    logs = [e.message for e in only(events, LogMessage)]
    assert any("output layer ('classes') computes in float32" in m for m in logs), logs
    assert any(m.startswith("XLA on") for m in logs) and not any("XLA could not" in m
                                                               for m in logs)
    assert keras_file_policies(run_dir.last_checkpoint) == {
        "hidden": "mixed_bfloat16", "classes": "float32"}

    code, events = host.run(run_dir.path)  # resume in epoch 2 of the 2-epoch warm-up
    assert code == 0, only(events, RunFailed)
    assert only(events, RunFinished)[0].status is RunStatus.COMPLETED
    rest = only(events, EpochEnd)
    assert [e.epoch for e in rest] == [1, 2]
    assert [e.learning_rate for e in rest] == pytest.approx([0.02, 0.02], rel=1e-6)
    ramp = [e.learning_rate for e in only(events, BatchEnd) if e.epoch == 1]
    # The warm-up goes on from epoch 2 (a restart would begin at 0.01).
    assert ramp[0] > rule.lr_at_epoch_end(0) and ramp == sorted(ramp), ramp
    losses = [e.metrics["loss"] for e in first + rest]
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0], losses

    exported = only(events, ModelExported)[0]
    assert exported.verified  # reloaded in a fresh process without GPUs, same predictions
    assert set(keras_file_policies(Path(exported.path)).values()) == {"float32"}
    import keras

    model = keras.saving.load_model(exported.path, compile=False)
    prediction = model(np.zeros((2, 8), "float32"), training=False)
    assert keras.backend.standardize_dtype(prediction.dtype) == "float32"


@pytest.mark.slow
def test_float16_with_xla_falls_back_when_the_model_cannot_compile(host, files, tmp_path):
    run_dir = start(files, files["numpy_layer"], tmp_path, precision="mixed_float16",
                    jit_compile=True, epochs=2, custom_objects=str(files["numpy_layer"]))
    code, events = host.run(run_dir.path)
    assert code == 0, only(events, RunFailed)
    warnings = [e.message for e in only(events, LogMessage) if e.level == "warning"]
    assert warnings == [
        "XLA could not compile this model (no XLA kernel for PyFunc on XLA_CPU_JIT). The run "
        "goes on without XLA (jit_compile off): epoch 1 starts again. Turn XLA off for this "
        "model to skip the attempt."]
    logs = [e.message for e in only(events, LogMessage)]
    assert any("loss scaling on (LossScaleOptimizer around Adam)" in m for m in logs), logs
    assert [e.epoch for e in only(events, EpochEnd)] == [0, 1]
    assert only(events, RunFinished)[0].status is RunStatus.COMPLETED
    exported = only(events, ModelExported)[0]
    assert exported.verified
    assert set(keras_file_policies(Path(exported.path)).values()) == {"float32"}
