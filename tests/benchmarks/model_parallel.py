"""Training on a data x model mesh (issue 31): one model on 1 device and on 4 CPU devices
of JAX as meshes 4x1, 2x2 and 1x4, each a `mgpu-train train --engine jax` run.

The model has an Embedding, a Conv1D and Dense layers (token ids of length 16 from a
vocabulary of 512, 8 classes; synthetic data whose class is the vocabulary range half
of a sample's tokens come from). Every run has the same seed, global batch and epochs.
`--layout` rules split the Embedding (over the vocabulary), the Conv1D (over output
channels) and the hidden Dense (over output features); the head stays whole.
  1. Correctness: per-epoch training loss of each run, the largest difference against
     the 1-device run (also in units in the last place of the loss), against a
     tolerance of float32 rounding (see EPSILON); and whether a mesh run again gives
     the same losses (determinism, the floor of that comparison).
  2. Shards: each split variable's per-device shard as the worker's log reports it (read
     from the arrays), as a fraction of the whole (must be 1/model axis); the bytes each
     device holds against the memory plan's figure (both from the log, rounded there to
     0.1 of a KiB/MiB).
  3. Speed: samples/s from the epoch events, epochs after the first (its compile) left
     out, median; each mesh run --repeats times, interleaved, and the median of those
     as a ratio to 4x1. On a machine with fewer cores than devices the 4 host devices
     share them: the ratios say what the collectives cost there, not a GPU's speed.

    python tests/benchmarks/model_parallel.py [--epochs 3] [--samples 4096] [--batch 64]
        [--repeats 3]
"""

from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # for tests.zoo

from mgpu_gui.core.events import EpochEnd, LogMessage, RunStarted  # noqa: E402
from tests.zoo.commands import Outcome, run_cli, zoo_env  # noqa: E402

DEVICES = 4
MESHES = ("4x1", "2x2", "1x4")
VOCAB, LENGTH, CLASSES = 512, 16, 8
MODEL = textwrap.dedent(f"""
    import keras
    from keras import layers

    def build_model(input_shape, num_classes):
        x = inputs = keras.Input(input_shape, dtype="int32")
        x = layers.Embedding({VOCAB}, 64, name="tokens")(x)
        x = layers.Conv1D(64, 3, activation="relu", name="conv")(x)
        x = layers.GlobalAveragePooling1D()(x)
        x = layers.Dense(256, activation="relu", name="hidden")(x)
        outputs = layers.Dense(num_classes, activation="softmax", name="head")(x)
        return keras.Model(inputs, outputs, name="bench_tokens")
""")
# Every variable of the three kinds, split over the model axis (the automatic layout
# would leave them whole: all are under its 1 MiB threshold).
RULES = (".*tokens/embeddings=(model,None); .*conv/kernel=(None,None,model); "
         ".*conv/bias=(model,); .*hidden/kernel=(None,model); .*hidden/bias=(model,)")
SPLIT_HEAD = "variables are split over the mesh"
SHARD_LINE = re.compile(r"^  (\S+) (\S+) \S+: (.*)$", re.MULTILINE)
HELD = re.compile(r"Each device holds ([\d.]+ \w+) of the model's variables "
                  r"\(the plan: ([\d.]+ \w+);")
UNITS = {"bytes": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}
# The tolerance: float32's machine epsilon (one rounding of a sum) x steps x the largest
# loss. Summing a batch's gradients in another order (per device, then across devices;
# a split contraction's partial sums) changes each step's update by about an epsilon of
# its size; the steps carry such changes into the weights, at worst adding up.
EPSILON = float(np.finfo(np.float32).eps)


@dataclass(frozen=True)
class Run:
    """One training run: its per-epoch losses and rates, and the split report it logged."""

    name: str
    losses: list[float]
    rates: list[float]
    cross_device_ops: str
    steps: int  # over all epochs
    report: str  # "" where the worker logged none (no model axis)


def write_inputs(root: Path, samples: int) -> tuple[Path, Path]:
    """The model file, and data whose class is the vocabulary range that half of each
    sample's tokens come from (the rest uniform): learnable by the Embedding and Conv."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, CLASSES, size=samples)
    width = VOCAB // CLASSES
    x = rng.integers(0, VOCAB, size=(samples, LENGTH))
    ours = rng.random((samples, LENGTH)) < 0.5
    x = np.where(ours, y[:, None] * width + rng.integers(0, width, size=x.shape), x)
    np.savez(root / "tokens.npz", x_train=x.astype("int32"), y_train=y.astype("int64"))
    (root / "tokens.py").write_text(MODEL)
    return root / "tokens.py", root / "tokens.npz"


def train(name: str, root: Path, files: tuple[Path, Path], args: argparse.Namespace,
          replicas: int, mesh: str | None) -> Run:
    """`mgpu-train train --engine jax` on `replicas` CPU devices, one global batch; its
    run folder, store and output under `root`."""
    root.mkdir(exist_ok=True)
    command = ["train", "--engine", "jax", "--cpu", "--replicas", str(replicas),
               "--model", str(files[0]), "--data", str(files[1]),
               "--batch-per-replica", str(args.batch // replicas), "--epochs",
               str(args.epochs), "--seed", "7", "--input-pipeline", "python",
               "--export", "none", "-o", str(root / "runs"), "--name", name, "--json"]
    if mesh is not None:
        command += ["--mesh", mesh, "--layout", RULES]
    outcome = run_cli(command, root / name, zoo_env(root / "store.sqlite"))
    epochs = outcome.of(EpochEnd)
    if outcome.rc != 0 or len(epochs) != args.epochs:
        raise SystemExit(f"{name} failed (exit {outcome.rc}): {outcome.message()}\n"
                         f"{outcome.stderr[-3000:]}")
    (started,) = outcome.of(RunStarted)
    return Run(name, [e.metrics["loss"] for e in epochs], [e.samples_per_s for e in epochs],
               started.cross_device_ops, started.steps_per_epoch * args.epochs,
               split_report(outcome))


def split_report(outcome: Outcome) -> str:
    reports = [e.message for e in outcome.of(LogMessage) if SPLIT_HEAD in e.message]
    return reports[0] if reports else ""


def parse_size(text: str) -> float:
    number, unit = text.split()
    return float(number) * UNITS[unit]


def dims(text: str) -> tuple[int, ...]:
    return tuple(int(size) for size in text.split("x"))


def print_losses(repeats: list[list[Run]], reference: Run) -> None:
    runs = repeats[0]
    print(f"\n1. Correctness: training loss per epoch (same seed, global batch and batch "
          f"order; {reference.steps} steps in all)")
    print(f"{'run':<14}" + "".join(f"{f'epoch {i + 1}':>13}" for i in
                                   range(len(reference.losses)))
          + f"{'max |diff|':>12}{'in ulps':>9}")
    # One unit in the last place of each reference loss: what one rounding can change.
    ulps = [float(np.spacing(np.float32(loss))) for loss in reference.losses]
    worst = 0.0
    for run in [reference, *runs]:
        diffs = [abs(a - b) for a, b in zip(run.losses, reference.losses, strict=True)]
        in_ulps = [d / u for d, u in zip(diffs, ulps, strict=True)]
        worst = max(worst, *diffs)
        print(f"{run.name:<14}" + "".join(f"{loss:>13.7f}" for loss in run.losses)
              + f"{max(diffs):>12.2e}{max(in_ulps):>9.1f}")
    tolerance = EPSILON * reference.steps * max(reference.losses)
    verdict = "within" if worst <= tolerance else "OUTSIDE"
    print(f"largest difference against 1 device: {worst:.2e}, {verdict} the tolerance "
          f"{tolerance:.1e} (float32 epsilon x steps x largest loss)")
    if len(repeats) > 1:
        again = max(abs(a - b) for later in repeats[1:] for run, rerun in zip(
            runs, later, strict=True) for a, b in zip(run.losses, rerun.losses, strict=True))
        print(f"the same mesh run again ({len(repeats)} runs each): losses differ by at most "
              f"{again:.2e}")


def print_shards(runs: list[Run]) -> None:
    print("\n2. Shards: each device's shard of every split variable, read from the arrays")
    print(f"{'mesh':<6}{'variable':<24}{'whole':>10}{'shard':>10}{'fraction':>10}"
          f"{'1/model':>9}  devices")
    for run in runs:
        model = int(run.name.split("x")[1])
        if model == 1:  # 4x1 lists the rules' variables as split, over an axis of 1
            continue
        for path, whole, shards in SHARD_LINE.findall(run.report):
            for shard, count in re.findall(r"(\S+) on (\d+) devices", shards):
                fraction = math.prod(dims(shard)) / math.prod(dims(whole))
                print(f"{run.name:<6}{path:<24}{whole:>10}{shard:>10}{fraction:>10.4f}"
                      f"{1 / model:>9.4f}  {count}")
    print("\nBytes of the model's variables each device holds (optimizer state and gradients "
          "come on top, laid out alike), from the log: measured, and the plan's figure")
    print(f"{'mesh':<6}{'held per device':>18}{'the plan':>12}"
          f"{'held/plan':>11}{'held / 4x1':>12}")
    data_parallel = None
    for run in runs:
        held, plan = (parse_size(s) for s in HELD.search(run.report).groups())
        data_parallel = data_parallel or held
        print(f"{run.name:<6}{held / 1024:>14.1f} KiB{plan / 1024:>8.1f} KiB"
              f"{held / plan:>11.3f}{held / data_parallel:>12.3f}")


def print_speed(repeats: list[list[Run]], epochs: int) -> None:
    print(f"\n3. Speed: samples/s of each run, median of its epochs 2-{epochs} (epoch 1 "
          f"compiles); the median of the runs, as a ratio to 4x1")
    print(f"{'mesh':<6}{'epoch 1':>9}" + "".join(f"{f'run {i + 1}':>9}" for i in
                                            range(len(repeats)))
          + f"{'median':>9}{'/ 4x1':>8}")
    base = None
    for runs in zip(*repeats, strict=True):
        rates = [statistics.median(run.rates[1:]) for run in runs]
        rate = statistics.median(rates)
        base = base or rate
        print(f"{runs[0].name:<6}{statistics.median(r.rates[0] for r in runs):>9.0f}"
              + "".join(f"{r:>9.0f}" for r in rates) + f"{rate:>9.0f}{rate / base:>8.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=64, help="global batch")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of each mesh (interleaved), for the speed's noise")
    args = parser.parse_args()
    if args.epochs < 2 or args.batch % DEVICES or args.repeats < 1:
        parser.error(f"--epochs at least 2, --batch a multiple of {DEVICES}, --repeats >= 1")
    with tempfile.TemporaryDirectory(prefix="mgpu-bench-mesh-") as work:
        root = Path(work)
        files = write_inputs(root, args.samples)
        print(f"{args.samples} samples (a tenth held out), global batch {args.batch}, "
              f"{args.epochs} epochs, JAX {version('jax')} on CPU ({os.cpu_count()} cores, "
              f"{DEVICES} host devices for the meshes); Embedding {VOCAB}x64 -> Conv1D 64 -> "
              f"Dense 256 -> Dense {CLASSES}")
        reference = train("1 device", root / "reference", files, args, 1, None)
        repeats = [[train(mesh, root / f"repeat{i}", files, args, DEVICES, mesh)
                    for mesh in MESHES] for i in range(args.repeats)]
    for run in [reference, *repeats[0]]:
        print(f"  {run.name}: {run.cross_device_ops}")
    print_losses(repeats, reference)
    print_shards(repeats[0])
    print_speed(repeats, args.epochs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
