"""The engine's own epoch clock, shared by the benchmarks that time `model.fit`.

Epoch start to the time its last step's result arrived, taken on fit's async
batch-end threads (`async_safe`), so timing synchronises nothing. Import it
only in a process that already imports Keras.
"""

from __future__ import annotations

import time

import keras


class EpochTimer(keras.callbacks.Callback):
    async_safe = True

    def __init__(self):
        super().__init__()
        self.begin: list[float] = []
        self.train_end: list[float] = []
        self.end: list[float] = []
        self.last_step = 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self.begin.append(time.perf_counter())

    def on_train_batch_end(self, batch, logs=None):
        self.last_step = max(self.last_step, time.perf_counter())

    def on_epoch_end(self, epoch, logs=None):
        self.train_end.append(self.last_step)
        self.end.append(time.perf_counter())

    def throughputs(self, samples_per_epoch: int) -> list[float]:
        """Training samples/s of each epoch (validation left out)."""
        return [samples_per_epoch / (end - begin)
                for begin, end in zip(self.begin, self.train_end, strict=True)]
