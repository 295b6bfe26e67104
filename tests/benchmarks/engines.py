"""Training throughput of the TensorFlow and the JAX engine, as users run them.

In one run: `mgpu-train train --engine E` on 2 CPU replicas (by default) for each
engine, on the demo (digits, the demo ConvNet) and on a larger ConvNet (32x32x3
synthetic images, 4 convolutions with BatchNorm). Samples/s per epoch are read
from the run's events (epoch start to its last step, validation left out); the
first two epochs are left out (tracing; JAX also recompiles once after the first
epoch's state sync), then the median. Printed per model, with JAX/TF.

    python tests/benchmarks/engines.py [--replicas 2] [--epochs 6]
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

LARGER = textwrap.dedent("""
    import keras
    from keras import layers

    def build_model(input_shape, num_classes):
        x = inputs = keras.Input(input_shape)
        for filters in (32, 32, 64, 64):
            x = layers.Conv2D(filters, 3, padding="same", use_bias=False)(x)
            x = layers.BatchNormalization()(x)
            x = layers.ReLU()(x)
            if filters == 32 or x.shape[1] > 8:
                x = layers.MaxPooling2D()(x)
        x = layers.GlobalAveragePooling2D()(x)
        outputs = layers.Dense(num_classes, activation="softmax")(x)
        return keras.Model(inputs, outputs, name="bench_larger_convnet")
""")
SKIPPED_EPOCHS = 2


def larger_inputs(root: Path, samples: int = 4096) -> tuple[str, str]:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, size=samples)
    x = rng.normal(0, 1, size=(samples, 32, 32, 3)).astype("float32") + y[:, None, None, None] / 5
    np.savez(root / "larger.npz", x_train=x, y_train=y)
    (root / "larger.py").write_text(LARGER)
    return str(root / "larger.py"), str(root / "larger.npz")


def samples_per_s(engine: str, model: str, data: str, replicas: int, epochs: int,
                  out: Path) -> float:
    command = [sys.executable, "-m", "mgpu_gui.cli.main", "train", "--engine", engine,
               "--cpu", "--replicas", str(replicas), "--epochs", str(epochs), "--model", model,
               "--data", data, "--json", "-o", str(out)]
    proc = subprocess.run(command, capture_output=True, text=True, env=os.environ.copy())
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    rates = [e["samples_per_s"] for e in events if e["type"] == "epoch_end"]
    if proc.returncode != 0 or len(rates) != epochs:
        raise SystemExit(f"{engine} on {model} failed:\n{proc.stderr[-3000:]}")
    return statistics.median(rates[SKIPPED_EPOCHS:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=6)
    args = parser.parse_args()
    if args.epochs <= SKIPPED_EPOCHS:
        parser.error(f"--epochs must be more than {SKIPPED_EPOCHS}")
    with tempfile.TemporaryDirectory(prefix="mgpu-engines-") as work:
        root = Path(work)
        larger = larger_inputs(root)
        print(f"{args.replicas} CPU replicas, median samples/s of epochs "
              f"{SKIPPED_EPOCHS + 1}-{args.epochs}")
        print(f"{'model':<26}{'tensorflow':>12}{'jax':>12}{'jax/tf':>9}")
        for name, (model, data) in (("demo (digits ConvNet)", ("demo", "demo")),
                                    ("larger ConvNet 32x32x3", larger)):
            tf_rate, jax_rate = (samples_per_s(e, model, data, args.replicas, args.epochs, root)
                                 for e in ("tensorflow", "jax"))
            print(f"{name:<26}{tf_rate:>12.0f}{jax_rate:>12.0f}{jax_rate / tf_rate:>9.2f}")


if __name__ == "__main__":
    main()
