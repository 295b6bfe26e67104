"""Mixed precision: which policy the hardware supports, and applying it to a run's model.

Two halves. `precision_hint` and `cpu_flags` are plain Python (the GUI's run
setup shows the hint). The rest imports Keras inside the functions and runs in
the worker, where the policy must be set before the model is built or loaded:

- `set_global_policy` first: layers built by the demo or a `.py` builder take it.
- `apply_policy` after building or loading. A `.keras`/`.h5` file's layers keep
  the policy they were saved with (measured, Keras 3.15: a float32 file loaded
  under `mixed_bfloat16` stays float32), so a loaded model's layers are
  switched in place (their variables stay float32, which is what a mixed policy
  keeps them in). A file saved under the chosen policy keeps its per-layer choices.
  Then the output layer is set to float32, as the Keras guide advises (a
  softmax in float16 can overflow or lose small probabilities); the model's
  own policy follows, so compiling under `mixed_float16` wraps the optimizer in
  a `LossScaleOptimizer` (Keras does that when the model's policy is
  `mixed_float16`; `ensure_loss_scaling` checks and does it otherwise).
- `float32_policies` is a context: the export writes the model with every
  layer back in float32, so it loads and predicts in float32 anywhere, CPUs
  without bfloat16 or float16 kernels included. The weights are the same
  float32 variables; the predictions differ from the mixed model's only by
  its rounding.

Why the thresholds: bfloat16 tensor cores arrived with Ampere (compute
capability 8.0), float16 tensor cores with Volta (7.0). On a GPU without them
the policy runs but emulated, slower than float32. On a CPU, bfloat16 has
instructions on x86 with AVX512-BF16 or AMX; float16 runs on Eigen's emulation
for most operations (oneDNN supports half only with AVX-512 and even there
little of it) and is slower than float32 (see tests/benchmarks/precision.py).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mgpu_gui.core.config import PRECISIONS

if TYPE_CHECKING:
    import keras

    from mgpu_gui.core.devices.nvml import GpuInfo

FLOAT32, BFLOAT16, FLOAT16 = PRECISIONS
MIXED = (BFLOAT16, FLOAT16)
BF16_MIN_CC = (8, 0)  # Ampere: bfloat16 tensor cores
FP16_MIN_CC = (7, 0)  # Volta: float16 tensor cores
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
LABELS = {FLOAT32: "float32 (full precision)", BFLOAT16: "mixed bfloat16",
          FLOAT16: "mixed float16 (loss scaling)"}
Log = Callable[[str], None]


@dataclass(frozen=True)
class PrecisionHint:
    text: str
    warning: bool = False  # the chosen policy will be slower than float32 here


# -- what the hardware supports (no TensorFlow) ----------------------------
def precision_hint(precision: str, gpus: Sequence[GpuInfo] = (),
                   cpu: frozenset[str] | None = None) -> PrecisionHint:
    """What the chosen devices support, and whether `precision` suits them.

    `gpus` are the GPUs the run would use (NVML's compute capability); none
    means CPU replicas, judged by the CPU's flags (`cpu_flags()` by default).
    """
    if gpus:
        return _gpu_hint(precision, gpus)
    return _cpu_hint(precision, cpu_flags() if cpu is None else cpu)


def _gpu_hint(precision: str, gpus: Sequence[GpuInfo]) -> PrecisionHint:
    known = [g for g in gpus if g.compute_capability]
    if not known:
        return PrecisionHint(
            "NVML does not give these GPUs' compute capability: mixed_bfloat16 needs 8.0 "
            "(Ampere) or newer, mixed_float16 7.0 (Volta) or newer to be faster than float32.")
    weakest = min(known, key=lambda g: g.compute_capability or (0, 0))
    cc = weakest.compute_capability or (0, 0)
    which = "This GPU" if len(gpus) == 1 else "The chosen GPUs"
    if cc >= BF16_MIN_CC:
        supports = "mixed_bfloat16 and mixed_float16 (bfloat16 and float16 tensor cores)"
    elif cc >= FP16_MIN_CC:
        supports = "mixed_float16 (float16 tensor cores), not bfloat16"
    else:
        supports = "neither mixed policy at speed (no tensor cores)"
    lowest = "" if len({g.compute_capability for g in known}) == 1 else ", the lowest"
    text = f"{which} (compute capability {cc[0]}.{cc[1]}{lowest}) support{_s(which)} {supports}."
    if len(known) < len(gpus):
        text += " NVML does not give the compute capability of every chosen GPU."
    name = f"GPU {weakest.index} ({weakest.name or 'unknown'})"
    if precision == BFLOAT16 and cc < BF16_MIN_CC:
        return PrecisionHint(f"{text} bfloat16 needs compute capability 8.0 (Ampere) or newer: "
                             f"{name} would emulate it, slower than float32. Use "
                             f"mixed_float16 there.", warning=True)
    if precision == FLOAT16 and cc < FP16_MIN_CC:
        return PrecisionHint(f"{text} float16 tensor cores need compute capability 7.0 "
                             f"(Volta) or newer: on {name} expect no speed-up.", warning=True)
    if precision == FLOAT16:
        text += " Loss scaling keeps small float16 gradients from vanishing."
    return PrecisionHint(text)


def _cpu_hint(precision: str, flags: frozenset[str]) -> PrecisionHint:
    found = [f for f in CPU_BF16_FLAGS if f in flags]
    if precision == FLOAT16:
        return PrecisionHint(
            "On CPU replicas float16 is emulated for most operations and slower than "
            "float32; mixed_float16 is for GPUs with compute capability 7.0 or newer.",
            warning=True)
    if precision == BFLOAT16 and not found:
        return PrecisionHint(
            "This CPU has no bfloat16 instructions (AVX512-BF16 or AMX): mixed_bfloat16 "
            "runs, but slower than float32.", warning=True)
    if precision == BFLOAT16:
        return PrecisionHint(
            f"This CPU has bfloat16 instructions ({', '.join(found)}): mixed_bfloat16 runs; "
            "whether it is faster than float32 depends on the model.")
    return PrecisionHint(
        "Training on CPU replicas: float32. Mixed precision pays off on GPUs with tensor "
        "cores (bfloat16: compute capability 8.0 or newer; float16: 7.0 or newer).")


@functools.lru_cache(maxsize=1)
def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU's feature flags (Linux); empty when they cannot be read."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def _s(subject: str) -> str:
    return "s" if subject.startswith("This") else ""


# -- applying a policy (worker side; Keras imported inside) -----------------
def set_global_policy(precision: str) -> None:
    """Set Keras' global dtype policy; before anything is built or loaded, every run
    (a process may run several jobs, so float32 is set explicitly too)."""
    import keras

    keras.mixed_precision.set_global_policy(precision)


def apply_policy(model: keras.Model, precision: str, *, loaded: bool, input_shape: Sequence[int],
                 log: Log) -> None:
    """Give `model` the run's policy, its output in float32; call inside the strategy's scope."""
    import keras

    layers = _policy_layers(model)
    plain = [layer for layer in layers if not isinstance(layer, keras.Model)]
    # A file saved under the chosen mixed policy keeps its own float32 layers (its output).
    saved_so = precision in MIXED and any(_policy(layer) == precision for layer in plain)
    if loaded and not saved_so:
        switched = [layer for layer in plain if _policy(layer) in PRECISIONS
                    and _policy(layer) != precision]
        was = sorted({_policy(layer) for layer in switched})
        for layer in switched:
            layer.dtype_policy = precision
        if switched:
            log(f"precision: {len(switched)} layer(s) of the file were saved with the "
                f"{' and '.join(was)} policy (a loaded layer keeps it); switched to {precision}")
    for inner in (layer for layer in layers if isinstance(layer, keras.Model)):
        if _policy(inner) in PRECISIONS:
            inner.dtype_policy = precision  # LossScaleOptimizer follows the model's policy
    if precision == FLOAT32:
        return
    outputs = _float32_outputs(model)
    names = ", ".join(f"'{layer.name}'" for layer in outputs) or "none found"
    dtypes = _output_dtypes(model, input_shape)
    low = [d for d in dtypes if d != "float32"]
    if low:
        log(f"precision {precision}: the model's output comes out in {low[0]}, not float32: "
            "its last layer could not be found (a subclassed model?). Give the output layer "
            "dtype='float32'; the loss is computed in float32 all the same.")
    else:
        log(f"precision {precision}: layers compute in {_compute_dtype(precision)} and keep "
            f"float32 weights; the output layer ({names}) computes in float32")


def ensure_loss_scaling(model: keras.Model, precision: str, log: Log) -> None:
    """Under mixed_float16 the optimizer must scale the loss; compiled models included."""
    import keras

    if precision != FLOAT16 or model.optimizer is None:
        return
    if not isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer):
        model.optimizer = keras.optimizers.LossScaleOptimizer(model.optimizer)
    log(f"precision {FLOAT16}: loss scaling on (LossScaleOptimizer around "
        f"{type(model.optimizer.inner_optimizer).__name__})")


@contextlib.contextmanager
def float32_policies(model: keras.Model) -> Iterator[int]:
    """Every mixed-policy layer computes in float32 inside the block; yields how many.

    For exports: the file then records float32 for every layer. The policies
    are put back afterwards.
    """
    changed = [(layer, _policy(layer)) for layer in _policy_layers(model)
               if _policy(layer) in MIXED]
    for layer, _ in changed:
        layer.dtype_policy = FLOAT32
    try:
        yield len(changed)
    finally:
        for layer, policy in changed:
            layer.dtype_policy = policy


def layer_policies(model: keras.Model) -> dict[str, str]:
    """Layer path -> dtype policy name, for logs and tests."""
    return {getattr(layer, "path", layer.name): _policy(layer)
            for layer in _policy_layers(model)}


def _policy_layers(model: Any) -> list[Any]:
    import keras

    layers = [model, *model._flatten_layers(include_self=False, recursive=True)]
    return [layer for layer in layers if not isinstance(layer, keras.layers.InputLayer)]


def _policy(layer: Any) -> str:
    return getattr(getattr(layer, "dtype_policy", None), "name", "")


def _compute_dtype(precision: str) -> str:
    return {BFLOAT16: "bfloat16", FLOAT16: "float16"}.get(precision, "float32")


def _float32_outputs(model: Any) -> list[Any]:
    """Set the layers that produce the model's outputs to float32; the layers changed."""
    try:
        outputs = list(model.outputs or [])
    except (AttributeError, ValueError):  # a subclassed model has no graph to follow
        return []
    found = []
    for tensor in outputs:
        layer = tensor._keras_history[0]
        while hasattr(layer, "outputs") and layer.outputs and len(layer.outputs) == 1:
            layer = layer.outputs[0]._keras_history[0]  # a nested model as the last layer
        if _policy(layer) in MIXED:
            layer.dtype_policy = FLOAT32
        found.append(layer)
    return found


def _output_dtypes(model: Any, input_shape: Sequence[int]) -> list[str]:
    """The dtypes a real call gives: the in-place policies are read at call time, not
    in the functional graph's symbolic tensors."""
    import keras
    import numpy as np

    try:
        dtype = str(getattr(model.inputs[0].dtype, "name", model.inputs[0].dtype))
    except (AttributeError, IndexError, ValueError, TypeError):
        dtype = "float32"
    try:
        outputs = model(np.zeros((1, *input_shape), dtype=dtype), training=False)
    except Exception:  # e.g. several inputs: the data check that follows says what is wrong
        return []
    return [keras.backend.standardize_dtype(t.dtype) for t in keras.tree.flatten(outputs)]
