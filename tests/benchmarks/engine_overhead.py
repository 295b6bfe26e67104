"""What does mgpu-train cost on top of a bare `model.fit`?

In one run, alternating, on the same model, data, strategy (2 CPU replicas by
default) and global batch:
  A. `mgpu-train` as users run it: worker process, events, the resume backup,
     best/last checkpoints, CSV log, NaN guard; figures read from events.jsonl.
  B. a plain `model.fit(..., verbose=0)` with no callbacks but an async-safe timer
     clocked like the engine's (so fit's batch dispatch stays asynchronous),
     in its own process built with the same core functions and tf.data pipeline.
  C. the same plain fit on the usual pipeline (a finite dataset, no
     steps_per_epoch), which makes Keras build a new iterator every epoch: the
     epoch-start stall the engine avoids (see `data.batch_for_training`).
Per epoch: training throughput (epoch start to the end of its last step) and
the whole epoch's wall time (with validation and, for A, checkpoint writes).
The first epoch (tracing) is left out; medians over epochs and repeats.

    python tests/benchmarks/engine_overhead.py [--replicas 2] [--epochs 6] [--repeats 2]

Target: throughput ratio A/B >= 0.97. A/C shows what the pipeline change gains.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np

MODEL = textwrap.dedent("""
    import keras

    def build_model(input_shape, num_classes):
        return keras.Sequential([
            keras.Input(input_shape),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.Conv2D(64, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(128, activation="relu"),
            keras.layers.Dense(num_classes, activation="softmax"),
        ], name="bench_convnet")
""")


def make_inputs(root: Path, samples: int) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, size=samples + 1000)
    x = rng.normal(0, 1, size=(len(y), 16, 16, 1)).astype("float32") + y[:, None, None, None] / 5
    data = root / "bench.npz"
    np.savez(data, x_train=x[:samples], y_train=y[:samples], x_val=x[samples:], y_val=y[samples:])
    model = root / "bench_model.py"
    model.write_text(MODEL)
    return data, model


def run_engine(data: Path, model: Path, out: Path, args) -> dict:
    cmd = [sys.executable, "-m", "mgpu_gui.cli.main", "train", "--model", str(model), "--data",
           str(data), "--cpu", "--replicas", str(args.replicas), "--batch-per-replica",
           str(args.batch), "--epochs", str(args.epochs), "-o", str(out), "--quiet"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    run = max(out.iterdir(), key=lambda p: p.stat().st_mtime)
    epochs = [e for e in map(json.loads, (run / "events.jsonl").read_text().splitlines())
              if e["type"] == "epoch_end"]
    walls = [b["t"] - a["t"] for a, b in zip(epochs, epochs[1:], strict=False)]
    return {"throughput": [e["samples_per_s"] for e in epochs[1:]], "wall": walls}


def run_baseline(data: Path, model: Path, args, pipeline: str) -> dict:
    cmd = [sys.executable, __file__, "--baseline-child", str(data), str(model),
           "--pipeline", pipeline,
           "--replicas", str(args.replicas), "--batch", str(args.batch),
           "--epochs", str(args.epochs)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    return json.loads(out.stdout.strip().splitlines()[-1])


def baseline_child(data: str, model_file: str, args) -> None:
    """Plain fit, built by the same core functions the worker uses."""
    from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
    from mgpu_gui.core.devices.plan import DevicePlan
    from mgpu_gui.engine.strategy import apply_device_env, make_strategy

    plan = DevicePlan(kind=DeviceKind.CPU, replicas=args.replicas, env={"CUDA_VISIBLE_DEVICES": ""})
    apply_device_env(plan)
    strategy, _ = make_strategy(plan)
    import keras

    from mgpu_gui.core.datasets import batching
    from mgpu_gui.engine import models
    from mgpu_gui.engine import pipeline as data_mod

    config = RunConfig(model=model_file, data=data, batch_per_replica=args.batch,
                       devices=DeviceSelection(kind=DeviceKind.CPU, replicas=args.replicas))
    keras.utils.set_random_seed(config.seed)
    prepared = data_mod.load_data(config)
    model = models.load_model(config, strategy, input_shape=prepared.input_shape,
                              num_classes=prepared.num_classes, log=lambda *a: None)
    global_batch = args.batch * args.replicas
    repeat = args.pipeline == "engine"
    train = data_mod.batch_for_training(prepared.train, prepared.train_samples, global_batch,
                                        shuffle=True, seed=config.seed,
                                        cache=data_mod.cache_for(prepared, "train", None),
                                        repeat=repeat, finish=prepared.finish)
    val = data_mod.batch_for_training(
        prepared.val, prepared.val_samples,
        batching.eval_batch(prepared.val_samples, args.batch, args.replicas),  # as the engine
        shuffle=False, seed=None, cache=data_mod.cache_for(prepared, "validation", None),
        finish=prepared.finish)
    steps = batching.steps(prepared.train_samples, global_batch)

    from epoch_timer import EpochTimer  # beside this script

    timer = EpochTimer()
    model.fit(train, validation_data=val, epochs=args.epochs, verbose=0, callbacks=[timer],
              steps_per_epoch=steps if repeat else None, shuffle=False)
    throughput = timer.throughputs(steps * global_batch)
    walls = [b - a for a, b in zip(timer.end, timer.end[1:], strict=False)]
    print(json.dumps({"throughput": throughput[1:], "wall": walls}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64, help="per replica")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--samples", type=int, default=8000)
    parser.add_argument("--baseline-child", nargs=2, metavar=("DATA", "MODEL"))
    parser.add_argument("--pipeline", choices=("engine", "per-epoch"), default="engine")
    args = parser.parse_args()
    if args.baseline_child:
        baseline_child(*args.baseline_child, args)
        return
    arms = {"mgpu-train": lambda: run_engine(data, model, Path(tmp) / "runs", args),
            "plain fit": lambda: run_baseline(data, model, args, "engine"),
            "plain fit, per-epoch iterator": lambda: run_baseline(data, model, args, "per-epoch")}
    results: dict[str, dict[str, list[float]]] = {n: {"throughput": [], "wall": []} for n in arms}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MGPU_GUI_STORE"] = str(Path(tmp) / "runs.sqlite3")  # not the user's history
        data, model = make_inputs(Path(tmp), args.samples)
        for repeat in range(args.repeats):
            for name, arm in arms.items():
                result = arm()
                for key in ("throughput", "wall"):
                    results[name][key] += result[key]
                print(f"repeat {repeat + 1} {name}: samples/s per epoch "
                      + " ".join(f"{v:.0f}" for v in result["throughput"])
                      + "; epoch wall s " + " ".join(f"{v:.2f}" for v in result["wall"]),
                      flush=True)
    med = {n: {k: statistics.median(v) for k, v in r.items()} for n, r in results.items()}
    print(f"\n{args.replicas} CPU replicas, global batch {args.batch * args.replicas}, "
          f"{args.samples} samples, {args.epochs} epochs x {args.repeats} repeats "
          f"(first epoch of each left out); medians:")
    for name in arms:
        print(f"  {name:30s} {med[name]['throughput']:7.0f} samples/s   "
              f"epoch wall {med[name]['wall']:.2f} s")
    engine, plain, naive = (med[n] for n in arms)
    print(f"throughput ratio mgpu-train / plain fit: "
          f"{engine['throughput'] / plain['throughput']:.3f} (target >= 0.97)")
    print(f"epoch wall-time ratio (validation, checkpoints, backup included): "
          f"{plain['wall'] / engine['wall']:.3f}")
    print(f"throughput ratio mgpu-train / plain fit with a per-epoch iterator: "
          f"{engine['throughput'] / naive['throughput']:.3f}")


if __name__ == "__main__":
    main()
