"""Steady-state samples/s of `mgpu-train evaluate` against a plain `model.predict`.

Both on the same model, the same samples (a test split of `--samples`, 60,000 by
default) and the same devices (`--replicas` GPUs, or CPU replicas without GPUs),
in one run: the evaluator child as the CLI starts it (its rate from its progress
events, between 20 % and 95 % of the samples), and a baseline child that builds
the same MirroredStrategy, loads the same file and calls `model.predict` at the
same global batch (its rate from its batch ends over the same stretch). Target:
a ratio of at least 0.9.

    python tests/benchmarks/evaluate.py [--samples 60000] [--replicas 2] [--cpu]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np

from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.devices.nvml import query_inventory
from mgpu_gui.core.devices.plan import plan_devices
from mgpu_gui.core.events import EvaluationDone
from mgpu_gui.core.tools.evaluate_job import EvaluateJob, EvaluateRequest

SHAPE = (28, 28, 1)
FROM, TO = 0.20, 0.95  # the steady stretch of the samples

BASELINE = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    from mgpu_gui.core.devices.plan import DevicePlan
    from mgpu_gui.engine.strategy import apply_device_env, make_strategy
    plan = DevicePlan.from_json(open(sys.argv[1]).read())
    apply_device_env(plan)
    strategy, _ = make_strategy(plan)
    import keras
    with strategy.scope():
        model = keras.saving.load_model(sys.argv[2])
    x = np.load(sys.argv[3])["x_test"]
    batch = int(sys.argv[4])
    ends = []
    class Timer(keras.callbacks.Callback):
        def on_predict_batch_end(self, step, logs=None):
            ends.append(((step + 1) * batch, time.monotonic()))
    model.predict(x, batch_size=batch, verbose=0, callbacks=[Timer()])
    print(json.dumps(ends))
""")


def steady_rate(points: list[tuple[int, float]], total: int) -> float:
    """Samples/s between the first point past FROM and the last before TO of `total`."""
    inside = [(done, t) for done, t in points if FROM * total <= done <= TO * total]
    (d0, t0), (d1, t1) = inside[0], inside[-1]
    return (d1 - d0) / (t1 - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=60_000)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--batch-per-replica", type=int, default=64)
    args = parser.parse_args()
    devices = DeviceSelection(kind=DeviceKind.CPU if args.cpu else DeviceKind.AUTO,
                              replicas=args.replicas)
    plan = plan_devices(devices, query_inventory())
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rng = np.random.default_rng(0)
        data = root / "data.npz"
        np.savez(data, x_train=rng.random((256, *SHAPE), dtype=np.float32),
                 y_train=np.arange(256) % 10,
                 x_test=rng.random((args.samples, *SHAPE), dtype=np.float32),
                 y_test=np.arange(args.samples) % 10)
        model = root / "model.keras"
        subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
            import keras
            m = keras.Sequential([keras.Input({SHAPE}),
                keras.layers.Conv2D(32, 3, activation="relu"), keras.layers.MaxPooling2D(),
                keras.layers.Conv2D(64, 3, activation="relu"), keras.layers.Flatten(),
                keras.layers.Dense(10, activation="softmax")])
            m.compile("adam", "sparse_categorical_crossentropy")
            m.save({str(model)!r})
        """)], check=True, capture_output=True)
        config = RunConfig(data=str(data), batch_per_replica=args.batch_per_replica,
                           devices=devices)
        points: list[tuple[int, float]] = []
        job = EvaluateJob(EvaluateRequest(model, config, plan),
                          on_progress=lambda e: points.append((e.done, e.t)))
        done = job.run()
        if not isinstance(done, EvaluationDone):
            sys.exit(f"evaluate failed: {done.message}")
        evaluate_rate = steady_rate(points[:-1], args.samples)  # the last is the remainder's
        plan_file = root / "plan.json"
        plan_file.write_text(plan.to_json())
        global_batch = args.batch_per_replica * plan.replicas
        out = subprocess.run([sys.executable, "-c", BASELINE, str(plan_file), str(model),
                              str(data), str(global_batch)],
                             check=True, capture_output=True, text=True,
                             env={**os.environ, **plan.env,
                                  "TF_CPP_MIN_LOG_LEVEL": "2"})
        baseline_rate = steady_rate([tuple(p) for p in json.loads(out.stdout)], args.samples)
    print(f"{args.samples:,} samples of {SHAPE}, {plan.replicas} {plan.kind.value} replica(s), "
          f"global batch {global_batch}")
    print(f"  plain model.predict      {baseline_rate:10,.0f} samples/s (steady)")
    print(f"  mgpu-train evaluate      {evaluate_rate:10,.0f} samples/s (steady)")
    print(f"  ratio                    {evaluate_rate / baseline_rate:10.2f}  (target >= 0.9)")
    print(f"  evaluate in all          {done.result['seconds']:10.1f} s "
          f"(samples evaluated: {done.result['samples']:,})")


if __name__ == "__main__":
    main()
