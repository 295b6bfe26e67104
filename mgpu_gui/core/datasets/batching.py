"""Batch arithmetic that is safe under a strategy, without TensorFlow.

The GUI (steps and dropped samples in the run setup) and the worker's tf.data
pipeline (`mgpu_gui.engine.pipeline`) share these numbers. Batching always
drops the partial last batch: under MirroredStrategy a partial batch can leave
a replica with 0 samples, which breaks Conv2D and BatchNorm (see
docs/architecture.md, "Partial last batch").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

MEMORY_LIMIT_BYTES = 1 << 30  # cache a split in RAM below this
SAMPLE_BATCH = 32  # inputs kept in numpy to check an exported model against the trained one


def steps(samples: int, global_batch: int) -> int:
    """Full batches per epoch (the partial last batch is dropped)."""
    return samples // global_batch


def dropped_per_epoch(samples: int, global_batch: int) -> int:
    """Samples left out of each epoch by drop_remainder (different ones each epoch if shuffled)."""
    return samples % global_batch


def fits_in_memory(
    samples: int, input_shape: Sequence[int], *, itemsize: int = 4,
    limit_bytes: int = MEMORY_LIMIT_BYTES
) -> bool:
    """Whether `samples` inputs of `input_shape` (float32, or uint8 pixels with `itemsize`
    1) fit the cache budget."""
    return samples * int(np.prod(input_shape, dtype=np.int64)) * itemsize < limit_bytes


def eval_batch(samples: int, batch_per_replica: int, replicas: int) -> int:
    """The largest global batch (a multiple of the replicas, at most the training one)
    that leaves fewer samples than replicas out of an evaluation.

    Every replica must get a full share, so evaluation drops its remainder too;
    with the training batch that can be a third of a small validation set.
    """
    for per_replica in range(min(batch_per_replica, samples // replicas), 0, -1):
        if samples % (per_replica * replicas) < replicas:
            return per_replica * replicas
    return replicas
