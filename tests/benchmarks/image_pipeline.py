"""Images/s of the app's image-folder pipeline against Keras' own, on the same files.

5,000 generated JPEG files of varied sizes (some grayscale, some CMYK), in 10
class folders. Both pipelines resize to the same size, batch the same, output
float32 and reshuffle every epoch, augmentation off:

- Keras: `image_dataset_from_directory(..., image_size=S, batch_size=None,
  shuffle=False).cache().shuffle(N).batch(B).prefetch(AUTOTUNE)` (its cache holds
  float32 images);
- the app: `pipeline.load_data` then `batch_for_training` as a run builds them
  (its cache holds uint8 images) for a built-in architecture, whose pipeline
  hands over 0-255 pixels as Keras' does (rescale 1: the model normalises).
  `--rescale` adds the app with a user's model file instead (pixels times 1/255,
  one more pass over each batch that Keras' pipeline does not make).

Each is timed over its first epoch (decoding, resizing, filling the cache) and
over `--epochs` more (the steady state, from the cache), in `--rounds` rounds of
fresh pipelines in alternating order; the best round of each counts. Also printed: the bytes
each cache holds. Targets: first epoch >= 1.0x, steady state >= 0.9x, the app's
cache <= 0.3x Keras'. The steady-state ratio is printed last.

    python tests/benchmarks/image_pipeline.py [--files 5000] [--size 128] [--batch 64]
        [--epochs 3] [--rounds 2] [--rescale]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def make_files(root: Path, files: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for i in range(files):
        folder = root / f"class_{i % 10}"
        folder.mkdir(parents=True, exist_ok=True)
        w, h = (int(v) for v in rng.integers(96, 400, 2))
        pixels = rng.integers(0, 256, (h // 8, w // 8, 3), dtype=np.uint8)
        image = Image.fromarray(pixels).resize((w, h), Image.Resampling.BILINEAR)
        if i % 17 == 0:
            image = image.convert("L")
        elif i % 29 == 0:
            image = image.convert("CMYK")
        image.save(folder / f"{i:05d}.jpg", quality=90)


def timed(ds, epochs: int) -> tuple[float, float, int]:
    """(first-epoch images/s, steady images/s over `epochs` more, images per epoch)."""
    def one_epoch() -> tuple[int, float]:
        started, seen = time.perf_counter(), 0
        for x, _ in ds:
            seen += int(x.shape[0])
        return seen, time.perf_counter() - started

    seen, first = one_epoch()
    steady = [one_epoch()[1] for _ in range(epochs)]
    return seen / first, seen * epochs / sum(steady), seen


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rescale", action="store_true",
                        help="also time the app's pipeline for a model file (rescale 1/255)")
    args = parser.parse_args()

    import keras
    import tensorflow as tf

    from mgpu_gui.core.config import RunConfig
    from mgpu_gui.engine import pipeline

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "images"
        started = time.perf_counter()
        make_files(root, args.files)
        print(f"{args.files} JPEG files made in {time.perf_counter() - started:.1f} s")
        size = (args.size, args.size)

        def keras_pipeline():
            ds = keras.utils.image_dataset_from_directory(
                root, image_size=size, batch_size=None, shuffle=False, verbose=False)
            return (ds.cache().shuffle(args.files).batch(args.batch, drop_remainder=True)
                    .prefetch(tf.data.AUTOTUNE))

        # A built-in's pipeline (rescale 1) gives what Keras' gives: 0-255 float32 pixels.
        builtin = RunConfig(model="mobilenet_v3_small", data=str(root), image_size=size,
                            validation_split=0.0, batch_per_replica=args.batch)
        configs = {"app": builtin}
        if args.rescale:
            configs["app, rescaled"] = builtin.replace(model="demo")
        prepared = pipeline.load_data(builtin)

        def app_pipeline(config: RunConfig):
            made = pipeline.load_data(config)
            return pipeline.batch_for_training(
                made.train, made.train_samples, args.batch, shuffle=True, seed=0,
                cache=pipeline.cache_for(made, "train", None), finish=made.finish)

        # Fresh pipelines (empty caches) each round, in alternating order: a shared
        # machine's load falls on all alike; the best round of each counts.
        names = ["keras", *configs]
        figures: dict[str, list[tuple[float, float, int]]] = {name: [] for name in names}
        for round_ in range(args.rounds):
            for name in names if round_ % 2 == 0 else reversed(names):
                made = keras_pipeline() if name == "keras" else app_pipeline(configs[name])
                figures[name].append(timed(made, args.epochs))
        best = {name: (max(f for f, _, _ in runs), max(s for _, s, _ in runs))
                for name, runs in figures.items()}
        seen, seen_ours = figures["keras"][0][2], figures["app"][0][2]
        k_bytes = args.files * args.size * args.size * 3 * 4
        a_bytes = prepared.train_samples * int(np.prod(prepared.input_shape)) * \
            prepared.cached_itemsize

    print(f"images per epoch: keras {seen}, app {seen_ours}")
    (k_first, k_steady), (a_first, a_steady) = best["keras"], best["app"]
    print(f"first epoch:  keras {k_first:8.1f} images/s, app {a_first:8.1f}   "
          f"ratio {a_first / k_first:.2f} (target >= 1.0)")
    print(f"cache bytes:  keras {k_bytes / 2**20:8.1f} MiB, app {a_bytes / 2**20:8.1f} MiB   "
          f"ratio {a_bytes / k_bytes:.2f} (target <= 0.3)")
    if "app, rescaled" in best:
        r_first, r_steady = best["app, rescaled"]
        print(f"a model file's pipeline (times 1/255): first epoch {r_first:8.1f} images/s "
              f"(ratio {r_first / k_first:.2f}), steady {r_steady:8.1f} "
              f"(ratio {r_steady / k_steady:.2f})")
    print(f"steady state: keras {k_steady:8.1f} images/s, app {a_steady:8.1f}   "
          f"ratio {a_steady / k_steady:.2f} (target >= 0.9)")

if __name__ == "__main__":
    main()
