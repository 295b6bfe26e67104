"""Keeps one GPU busy with JAX matrix products until its stdin closes.

    python tests/gpu/load_child.py   (CUDA_VISIBLE_DEVICES: the GPU to load)

Started by test_gpu_panel.py. Holds HOLD_BYTES in one buffer (the rise NVML must
see), then prints one JSON line once the first product has run: its PID, the device as
JAX names it, and what JAX's allocator says. The products are queued a few at a time,
so the GPU is never idle between them.
"""

from __future__ import annotations

import json
import os
import sys
import threading

import jax
import jax.numpy as jnp

HOLD_BYTES = 2**30
SIDE = 8192  # an 8192^3 bf16 product: about 1.1 TFLOP, a millisecond or two on a big GPU
QUEUED = 20


def main() -> int:
    device = jax.devices()[0]
    ended = threading.Event()

    def wait_for_eof() -> None:
        sys.stdin.read()
        ended.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    held = jnp.ones(HOLD_BYTES // 4, jnp.float32)
    matrix = jax.random.normal(jax.random.key(0), (SIDE, SIDE), jnp.bfloat16)
    product = jax.jit(lambda m: m @ m)
    product(matrix).block_until_ready()
    stats = device.memory_stats() or {}
    print(json.dumps({"pid": os.getpid(), "platform": device.platform,
                      "kind": device.device_kind, "bytes_in_use": stats.get("bytes_in_use"),
                      "bytes_limit": stats.get("bytes_limit")}), flush=True)
    while not ended.is_set():
        for _ in range(QUEUED):
            out = product(matrix)
        out.block_until_ready()
    held.block_until_ready()
    return 0


if __name__ == "__main__":
    sys.exit(main())
