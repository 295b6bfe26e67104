"""JAX's own failures become plain messages (engine/jax_failures.py, failures.py).

The exceptions are JAX's real ones, raised by jitting small functions of this
file (user code, as a model's `.py` is); only the out-of-memory and XLA runtime
errors are constructed, as JAX raises them with a status text. The same failures
in a real run: tests/test_jax_engine.py.
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="needs jax: pip install -e '.[dev]'")

from mgpu_gui.core.config import DeviceKind, RunConfig  # noqa: E402
from mgpu_gui.core.devices.plan import DevicePlan  # noqa: E402
from mgpu_gui.core.errors import ModelError  # noqa: E402
from mgpu_gui.core.runs.folder import RunDir  # noqa: E402
from mgpu_gui.engine.callbacks import EpochTracker  # noqa: E402
from mgpu_gui.engine.failures import (  # noqa: E402
    ModelCodeError,
    OutOfMemoryError,
    Stage,
    Where,
    XlaError,
    explain_failure,
)
from mgpu_gui.engine.jax_failures import JaxFailureKind, jax_failure  # noqa: E402

pytestmark = [pytest.mark.jax, pytest.mark.slow]  # JAX's own exceptions, raised here
THIS = "test_jax_failures.py"


@pytest.fixture
def where(tmp_path) -> Where:
    plan = DevicePlan(kind=DeviceKind.CPU, replicas=2, names=["CPU 0", "CPU 1"])
    return Where(RunConfig(batch_per_replica=4, engine="jax"), RunDir(tmp_path), plan, 2)


def training(where: Where) -> Where:
    where.stage, where.steps, where.tracker = Stage.TRAINING, 5, EpochTracker(5)
    where.tracker.batch_begun(0, 0)
    return where


def jit_error(function) -> Exception:
    """What jitting `function` raises, re-raised the way Keras re-raises a layer's error:
    `type(error)(message)`, which JAX's tracer errors refuse (AttributeError)."""
    try:
        jax.jit(function)(np.ones(3, "float32"))
    except Exception as error:
        try:
            raise type(error)("Exception encountered when calling Odd.call()")
        except Exception as mangled:
            return mangled
    raise AssertionError("jit did not fail")


def line(function, offset: int = 1) -> int:
    """The number of the line `offset` lines below `function`'s def."""
    return function.__code__.co_firstlineno + offset


def branchy(x):
    if x.sum() > 0:
        return x
    return -x


def to_float(x):
    return x * float(x.mean())


def with_numpy(x):
    return x + np.asarray(x).mean()


def with_tensorflow(x):
    import tensorflow as tf

    return tf.nn.relu(x)


def test_code_jit_cannot_trace_names_the_line_in_setup_and_in_training(where):
    mangled = jit_error(branchy)
    assert isinstance(mangled, AttributeError) and "_error_repr" in str(mangled)
    try:  # a .py builder's failure, as engine/models.py wraps it
        raise ModelError("odd.py: build_model() failed") from mangled
    except ModelError as wrapped:
        explained = explain_failure(wrapped, where)
    assert isinstance(explained, ModelCodeError)
    assert str(explained).startswith(
        "The model's code cannot run under JAX's jit: a Python `if`, `while`, `and`, `or` or "
        f"`not` on a tensor's value in {THIS}, line {line(branchy)}, in branchy: "
        "`if x.sum() > 0:`, while building the model.")
    assert "keras.ops.cond" in str(explained)
    assert str(explained).endswith("then train the run again. The full traceback is in the "
                                   "details.")

    explained = str(explain_failure(jit_error(to_float), training(where)))
    assert (f"a tensor converted to a Python number (float(), int(), .item()) or used where "
            f"a fixed value is needed in {THIS}, line {line(to_float)}, in to_float: "
            f"`return x * float(x.mean())`, in epoch 1 at step 1 of 5.") in explained
    assert "No epoch was completed" in explained and "worker.log in the run folder" in explained
    failure = jax_failure(jit_error(with_numpy))
    assert failure.kind is JaxFailureKind.TRACE and failure.origin.line == line(with_numpy)
    assert failure.what.startswith("a tensor converted to a NumPy array")


def test_tensorflow_ops_on_jax_arrays_point_to_the_tensorflow_engine(where):
    explained = str(explain_failure(jit_error(with_tensorflow), where))
    assert explained.startswith(
        "This model's code runs on the tensorflow engine but not on JAX: it calls TensorFlow "
        f"on the model's tensors while building the model ({THIS}, line "
        f"{line(with_tensorflow, 3)}, in with_tensorflow: `return tf.nn.relu(x)`)")
    assert "--engine tensorflow" in explained and "keras.ops in place of the tf.*" in explained


def test_jax_runtime_errors_out_of_memory_and_xla(where):
    oom = jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 1099511627776 "
                                     "bytes.\nmore")
    explained = explain_failure(oom, training(where))
    assert isinstance(explained, OutOfMemoryError)
    assert str(explained).startswith(
        "Out of memory in epoch 1 at step 1 of 5 on the 2 CPU replicas in use (CPU 0; CPU 1), "
        "with a batch of 4 per replica (global batch 8 = 4 x 2 replicas). Use a smaller batch "
        "per replica, e.g. 2")
    assert str(explained).endswith(
        "JAX said: RESOURCE_EXHAUSTED: Out of memory allocating 1099511627776 bytes.")
    explained = explain_failure(jax.errors.JaxRuntimeError("INTERNAL: YNNPACK operation failed: "
                                                           "error"), where)
    assert isinstance(explained, XlaError)
    assert str(explained).startswith(
        "JAX's compiler or runtime (XLA) failed in epoch 1 at step 1 of 5: INTERNAL: YNNPACK "
        "operation failed: error. This is an error inside JAX, not in the model's Python code.")


def test_an_exception_in_a_pure_callback_names_its_line(where):
    def check(x):
        raise ValueError("bad value in callback")

    def call_back(x):
        return jax.pure_callback(check, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    with pytest.raises(jax.errors.JaxRuntimeError) as raised:
        jax.jit(call_back)(np.ones(3, "float32")).block_until_ready()
    explained = str(explain_failure(raised.value, training(where)))
    assert explained.startswith(
        f"The model's code raised ValueError: bad value in callback in epoch 1 at step 1 of 5 "
        f"({THIS}, line {line(check)}, in check), inside a jax.pure_callback.")


def test_other_errors_are_not_jaxs():
    assert jax_failure(ValueError("shapes differ")) is None
    assert jax_failure(AttributeError("'Sequential' object has no attribute 'fit2'")) is None
