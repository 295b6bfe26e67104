"""What does timing the input wait (engine/input_wait.py) cost, and what does it read?

One process, the demo model and data on 2 CPU replicas (the engine's own `prepare`);
`fit` for a few epochs with and without `TimeInputWait`, on the run's pipeline and on
one cached batch repeated (a pipeline with nothing to do: the wait's floor). Per
configuration the median step time (epoch wall time / steps, the first epoch, which
traces, left out) and the input wait measured.

    python tests/benchmarks/diagnosis.py [--replicas 2] [--epochs 4] [--repeats 2]

Target: overhead below 3 % of the step time; the wait on the cached batch well below
the input-bound threshold (core/runs/diagnosis.py).
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32, help="per replica")
    args = parser.parse_args()

    from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
    from mgpu_gui.core.devices.plan import DevicePlan
    from mgpu_gui.engine.strategy import apply_device_env, make_strategy

    plan = DevicePlan(kind=DeviceKind.CPU, replicas=args.replicas, gpus=(),
                      env={"CUDA_VISIBLE_DEVICES": ""}, names=[], note="")
    apply_device_env(plan)
    strategy, _ = make_strategy(plan)
    import keras

    from mgpu_gui.core.datasets import batching
    from mgpu_gui.core.runs.diagnosis import INPUT_BOUND_SHARE
    from mgpu_gui.engine.input_wait import InputWaitMeter, TimeInputWait
    from mgpu_gui.engine.training import prepare

    config = RunConfig(batch_per_replica=args.batch, seed=7,
                       devices=DeviceSelection(kind=DeviceKind.CPU, replicas=args.replicas))
    setup = prepare(config, strategy, lambda *a, **k: None)
    steps = batching.steps(setup.data.train_samples, setup.global_batch)
    datasets = {"pipeline": setup.train, "one cached batch": setup.train.take(1).cache().repeat()}

    class EpochClock(keras.callbacks.Callback):
        async_safe = True

        def __init__(self) -> None:
            super().__init__()
            self.step_ms: list[float] = []

        def on_epoch_begin(self, epoch, logs=None):
            self._start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            if epoch:  # the first traces the step
                self.step_ms.append((time.perf_counter() - self._start) / steps * 1000)

    step_ms: dict[tuple[str, bool], list[float]] = {}
    shares: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        for name, dataset in datasets.items():
            for timed in (False, True):
                clock, meter = EpochClock(), InputWaitMeter()
                setup.model.fit(dataset, epochs=args.epochs, steps_per_epoch=steps,
                                callbacks=[*([TimeInputWait(meter)] if timed else []), clock],
                                shuffle=False, verbose=0)
                setup.model.train_function = None  # each fit traces anew, as a run does
                step_ms.setdefault((name, timed), []).extend(clock.step_ms)
                if timed:
                    shares.setdefault(name, []).append(meter.take_epoch() or 0.0)
    print(f"demo, {args.replicas} CPU replicas, global batch {setup.global_batch}, "
          f"{steps} steps per epoch")
    for name in datasets:
        plain = statistics.median(step_ms[(name, False)])
        timed = statistics.median(step_ms[(name, True)])
        print(f"{name:>17}: {plain:.2f} ms per step plain, {timed:.2f} ms timed "
              f"({(timed / plain - 1) * 100:+.1f} %); input wait read "
              f"{statistics.median(shares[name]):.1%} (input-bound from "
              f"{INPUT_BOUND_SHARE:.0%})")


if __name__ == "__main__":
    main()
