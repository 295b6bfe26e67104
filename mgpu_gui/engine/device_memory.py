"""The most GPU memory a process's tensors have held, as each engine's allocator counts it.

Used by the batch finder's probe (one GPU, one process), and callable from a test on a
real GPU. Both figures are the allocator's high-water mark of live buffers since the
process started: the tensors, not the CUDA context around them, nor memory the
allocator reserved but never handed out.
- TensorFlow: `get_memory_info('GPU:0')['peak']`, with memory growth on (the probe's
  runner sets TF_FORCE_GPU_ALLOW_GROWTH).
- JAX: the device's `memory_stats()['peak_bytes_in_use']` from XLA's BFC allocator.
  XLA_PYTHON_CLIENT_PREALLOCATE=false (set for every JAX child, core/engines.py) makes
  it grow as needed instead of taking 75 % of the GPU at start; the peak counts live
  buffers either way. The platform allocator (XLA_PYTHON_CLIENT_ALLOCATOR=platform) is
  not used: JAX's documentation calls it very slow and meant for debugging, and training
  runs on the BFC allocator, so a probe on it measures what a run will meet
  (fragmentation included). JAX's CPU devices keep no statistics (None): the probe
  then measures the process's peak resident memory instead.
"""

from __future__ import annotations

from typing import Any

from mgpu_gui.core.engines import Engine

JAX_PEAK_KEY = "peak_bytes_in_use"


def peak_device_bytes(engine: Engine) -> int | None:
    """The peak on the process's first GPU (the probe sees one); None where the engine
    keeps no statistics for it. Call once the engine's devices are set up."""
    if engine is Engine.JAX:
        import jax

        return jax_peak_bytes(jax.devices()[0])
    import tensorflow as tf

    return int(tf.config.experimental.get_memory_info("GPU:0")["peak"])


def jax_peak_bytes(device: Any) -> int | None:
    """A JAX device's allocator peak; None when it keeps no statistics (CPU devices)."""
    stats = device.memory_stats()
    if not stats or JAX_PEAK_KEY not in stats:
        return None
    return int(stats[JAX_PEAK_KEY])
