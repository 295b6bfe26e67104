"""Compared runs as a small learning-rate sweep leaves them, for the Compare dialog's tests.

Three learning rates x two seeds (so three seed groups), with long names, and
environment records where one run trained under another TensorFlow.
"""

from __future__ import annotations

import math

import numpy as np

from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.runs.compare import ComparedRun, flatten
from mgpu_gui.core.runs.environment import WHOLE, FileRecord, RunEnvironment

LEARNING_RATES = (1e-4, 1e-3, 1e-2)
SEEDS = (1, 2)


def environment(tensorflow: str = "2.21.0") -> RunEnvironment:
    return RunEnvironment(
        tensorflow=tensorflow, keras="3.15.0", cuda="12.5.1", cudnn="9", driver="570.133.20",
        cuda_driver="12.8", python="3.11.9",
        files=(FileRecord("data", "/data/flowers_photographed_2025", 2_345_678_901, "ab" * 32,
                          WHOLE),))


def sweep_run(lr: float, seed: int, epochs: int = 12, *, tensorflow: str = "2.21.0"
              ) -> ComparedRun:
    """val_loss falls faster with a larger rate, then the largest overfits; seeds jitter."""
    rng = np.random.default_rng(seed)
    scale = {1e-4: 6.0, 1e-3: 2.5, 1e-2: 1.2}[lr]
    val_loss = tuple(0.25 + 1.8 * math.exp(-(e + 1) / scale) + (0.03 * e if lr == 1e-2 else 0)
                     + float(rng.normal(0, 0.04)) for e in range(epochs))
    val_accuracy = tuple(min(0.99, 1.0 - v / 2.2) for v in val_loss)
    config = RunConfig(learning_rate=lr, seed=seed, batch_per_replica=128,
                       run_name=f"resnet50_lr_sweep_lr{lr:g}_seed{seed}")
    return ComparedRun(f"resnet50_lr_sweep_lr{lr:g}_seed{seed}", tuple(range(epochs)),
                       {"val_loss": val_loss, "val_accuracy": val_accuracy},
                       settings=flatten(config), environment=environment(tensorflow))


def lr_sweep() -> list[ComparedRun]:
    return [sweep_run(lr, seed, tensorflow="2.20.0" if (lr, seed) == (1e-2, 2) else "2.21.0")
            for lr in LEARNING_RATES for seed in SEEDS]
