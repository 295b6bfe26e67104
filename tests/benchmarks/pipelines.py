"""What feeds the JAX engine fastest: tf.data, the Python pipeline's PyDataset, or grain?

In one run, in one child process (KERAS_BACKEND=jax, 2 CPU devices by default),
the same model and strategy (`training.prepare`, as a run builds them) train
the demo (or, with --images N, a synthetic folder of N 96x96 PNG images, decoded
and resized to 8x8 every epoch: no cache, a cheap model) fed by:
  - tf.data: the app's pipeline (engine/pipeline.py), one iterator for the run;
  - PyDataset: the Python pipeline (engine/py_pipeline.py) with 0 workers (batches
    made on the training thread), 2 and 4 worker threads, and 2 worker processes;
  - grain: a `grain.MapDataset` over the same arrays, reshuffled and batched with
    drop_remainder, read ahead by grain's threads (`to_iter_dataset`), for the demo.
Per variant: training samples/s of each epoch (validation left out); the first
two epochs of each fit are left out (tracing and warm-up), then the median over
`--rounds` alternating rounds, printed with the ratio against tf.data. grain is
not a dependency: where it is missing the line says so (`pip install --target
DIR grain`, then PYTHONPATH=DIR).

    python tests/benchmarks/pipelines.py [--replicas 2] [--epochs 6] [--images 0]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

SKIPPED_EPOCHS = 2
NOT_INSTALLED = "grain: not installed (pip install grain)"


def image_folder(root: Path, files: int, side: int = 96) -> str:
    from PIL import Image

    rng = np.random.default_rng(0)
    for index in range(files):
        folder = root / f"class{index % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{index}.png")
    return str(root)


def child(args: argparse.Namespace) -> None:
    """Every variant in this process, one after the other, on the same model."""
    from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
    from mgpu_gui.core.devices.plan import DevicePlan
    from mgpu_gui.core.engines import Engine, InputPipeline
    from mgpu_gui.engine.strategy import apply_device_env, make_strategy

    plan = DevicePlan(kind=DeviceKind.CPU, replicas=args.replicas,
                      env={"CUDA_VISIBLE_DEVICES": ""})
    apply_device_env(plan, engine=Engine.JAX)
    strategy, _ = make_strategy(plan, Engine.JAX)
    import keras
    from epoch_timer import EpochTimer  # beside this script

    from mgpu_gui.core.datasets import batching
    from mgpu_gui.engine import training

    data = args.data or "demo"
    config = RunConfig(model="demo", data=data, batch_per_replica=args.batch, engine="jax",
                       image_size=(8, 8), cache="off",
                       devices=DeviceSelection(kind=DeviceKind.CPU, replicas=args.replicas))
    keras.utils.set_random_seed(config.seed)

    def timed(model: keras.Model, train, callbacks=(), samples: int = 0) -> list[float]:
        timer = EpochTimer()
        steps = batching.steps(samples, config.batch_per_replica * args.replicas)
        model.fit(train, epochs=args.epochs, steps_per_epoch=steps, verbose=0, shuffle=False,
                  callbacks=[*callbacks, timer])
        rates = timer.throughputs(steps * config.batch_per_replica * args.replicas)
        return rates[SKIPPED_EPOCHS:]

    tf_setup = training.prepare(config.replace(input_pipeline=InputPipeline.TF_DATA.value),
                                strategy, lambda *a, **k: None)
    model, samples = tf_setup.model, tf_setup.data.train_samples
    py_setup = training.prepare(config.replace(input_pipeline=InputPipeline.PYTHON.value),
                                strategy, lambda *a, **k: None)
    train = py_setup.train

    def python(workers: int, processes: bool):
        def run() -> float:
            train.workers, train.use_multiprocessing = workers, processes
            return timed(model, train, py_setup.callbacks, samples)
        return run

    variants = {"tf.data": lambda: timed(model, tf_setup.train, samples=samples),
                "PyDataset, no workers": python(0, False),
                "PyDataset, 2 worker threads": python(2, False),
                "PyDataset, 4 worker threads": python(4, False),
                "PyDataset, 2 worker processes": python(2, True)}
    if data == "demo":
        variants["grain"] = grain_variant(timed, model, py_setup, config, args)
    rates: dict[str, list[float]] = {name: [] for name in variants}
    for round_ in range(args.rounds):  # alternating: a busy machine slows every variant
        for name in (list(variants) if round_ % 2 == 0 else list(variants)[::-1]):
            run = variants[name]
            if run is not None:
                rates[name].extend(run())
    figures = {name: statistics.median(r) if r else NOT_INSTALLED for name, r in rates.items()}
    print(json.dumps(figures))


def grain_variant(timed, model, setup, config, args):
    """grain's run over the demo's arrays; None where grain is not installed."""
    try:
        import grain
    except ImportError:
        return None
    arrays = setup.train.data
    batch = config.batch_per_replica * args.replicas
    # A new permutation each epoch (repeat, then a global shuffle), batched with
    # drop_remainder; batches may straddle epoch ends (not the app's rule; fine for speed).
    dataset = (grain.MapDataset.range(len(arrays.y)).repeat().shuffle(seed=config.seed)
               .map(lambda i: (arrays.x[i], arrays.y[i])).batch(batch, drop_remainder=True)
               .to_iter_dataset())
    return lambda: timed(model, dataset, samples=len(arrays.y))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32, help="per replica")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2, help="each variant this many times")
    parser.add_argument("--images", type=int, default=0,
                        help="train on a synthetic folder of this many PNGs instead of the demo")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    with tempfile.TemporaryDirectory(prefix="mgpu-pipelines-") as work:
        command = [sys.executable, __file__, "--child", "--replicas", str(args.replicas),
                   "--batch", str(args.batch), "--epochs", str(args.epochs),
                   "--rounds", str(args.rounds)]
        if args.images:
            command += ["--data", image_folder(Path(work), args.images)]
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
               "PYTHONPATH": os.pathsep.join(
                   p for p in (str(Path(__file__).parent), os.environ.get("PYTHONPATH")) if p)}
        out = subprocess.run(command, check=True, capture_output=True, text=True, env=env)
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    what = (f"{args.images} PNG images (96x96 decoded, resized to 8x8)" if args.images
            else "the demo")
    print(f"JAX engine on {args.replicas} CPU devices, {what}, global batch "
          f"{args.batch * args.replicas}: training samples/s (median of epochs "
          f"{SKIPPED_EPOCHS + 1}-{args.epochs} of {args.rounds} alternating rounds)")
    base = figures["tf.data"]
    for name, value in figures.items():
        if isinstance(value, str):
            print(f"  {value}")
        else:
            print(f"  {name:<32} {value:8.0f}   x{value / base:.2f} of tf.data")


if __name__ == "__main__":
    main()
