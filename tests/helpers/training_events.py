"""Events of a plausible training run, for the curves' tests."""

from __future__ import annotations

import math

import numpy as np

from mgpu_gui.core.events import BatchEnd, EpochEnd, Event, RunFinished, RunStarted, RunStatus

T0 = 1_700_000_000.0


def run_started(*, epochs: int = 10, steps: int = 100, initial_epoch: int = 0,
                t: float = T0, replicas: int = 2) -> RunStarted:
    return RunStarted(
        run_dir="/tmp/run", device_kind="gpu",
        devices=[f"/job:localhost/replica:0/task:0/device:GPU:{i}" for i in range(replicas)],
        device_names=[f"GPU {i}: NVIDIA H100 80GB HBM3 (GPU-{i})" for i in range(replicas)],
        num_replicas=replicas, batch_per_replica=128, global_batch=128 * replicas,
        train_samples=steps * 128 * replicas + 37, val_samples=5000, test_samples=0,
        steps_per_epoch=steps, dropped_per_epoch=37, epochs=epochs, initial_epoch=initial_epoch,
        model_name="convnet", params=1_234_567, cross_device_ops="nccl", tf_version="2.21",
        keras_version="3.15", t=t)


def synthetic_run(*, epochs: int = 10, steps: int = 100, every: int = 4, best_at: int = 6,
                  initial_epoch: int = 0, t0: float = T0, finish: bool = True,
                  extra_metric: bool = False, seed: int = 0) -> list[Event]:
    """A plausible run: loss falls, validation bottoms out at `best_at` then overfits."""
    rng = np.random.default_rng(seed)
    events: list[Event] = [run_started(epochs=epochs, steps=steps, initial_epoch=initial_epoch,
                                       t=t0)]
    t, best, best_epoch = t0 + 3.0, math.inf, None
    for epoch in range(initial_epoch, epochs):
        lr = 1e-3 if epoch < 5 else 1e-4
        for batch in range(every - 1, steps, every):
            progress = epoch + (batch + 1) / steps
            loss = 2.3 * math.exp(-progress / 1.6) + 0.05 + rng.normal(0, 0.06)
            metrics = {"loss": loss, "accuracy": min(1.0, 1 - loss / 2.5 + rng.normal(0, 0.01))}
            if extra_metric:
                metrics["auc"] = 1 - loss / 5
            t += every * 0.06
            events.append(BatchEnd(epoch=epoch, batch=batch, steps=steps, metrics=metrics,
                                   samples_per_s=4200 + rng.normal(0, 150), learning_rate=lr,
                                   t=t))
        t += 2.0  # validation
        val_loss = 0.25 + 1.8 * math.exp(-(epoch + 1) / 1.4) + 0.02 * max(0, epoch - best_at)
        metrics = {"loss": 2.3 * math.exp(-(epoch + 0.5) / 1.6) + 0.05,
                   "accuracy": 0.9 + 0.009 * epoch, "val_loss": val_loss,
                   "val_accuracy": 0.88 + 0.008 * min(epoch, best_at), "learning_rate": lr}
        if extra_metric:
            metrics |= {"auc": 0.95, "val_auc": 0.93}
        is_best = val_loss < best
        if is_best:
            best, best_epoch = val_loss, epoch
        events.append(EpochEnd(epoch=epoch, epochs=epochs, metrics=metrics,
                               samples_per_s=4100.0, duration_s=8.0, learning_rate=lr,
                               best=is_best, t=t))
    if finish:
        events.append(RunFinished(status=RunStatus.COMPLETED, epochs_done=epochs,
                                  best_epoch=best_epoch, best_metric="val_loss",
                                  best_value=best, t=t + 1))
    return events
