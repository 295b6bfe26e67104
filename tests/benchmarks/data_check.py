"""How long the data check takes, against baselines measured in the same run.

1. A 1 GiB `.npz` (float32 x_train of 262,144 samples of 32x32x1, one NaN near
   the end so the whole array is read): the check through its child (what a run
   start and the run setup pay: process start included), the same check
   in-process, and the baseline `np.load` of both arrays plus `np.isfinite` over
   x (what a check that loads the arrays would cost, at 1 GiB more memory).
   The file is read once before timing, so every figure is from the page cache.
2. With `--images`: the training pipeline's decode throughput (images/s through
   a parallel tf.data map, resized to 32x32) with TensorFlow's own decoder
   against the shared Pillow decoder (`core/datasets/images.py`) the pipeline
   now uses, for small (64 px) and larger (256 px) PNG/JPEG files.

    python tests/benchmarks/data_check.py [--gib 1.0] [--images] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from mgpu_gui.core.children.data_check import DataCheckJob
from mgpu_gui.core.datasets.content import check_content
from mgpu_gui.core.datasets.content_request import ContentRequest
from mgpu_gui.core.events import DataCheckFailed

SAMPLE_SHAPE = (32, 32, 1)


def make_npz(path: Path, gib: float) -> int:
    samples = int(gib * (1 << 30) / (4 * int(np.prod(SAMPLE_SHAPE))))
    x = np.lib.format.open_memmap(path.with_suffix(".x.npy"), mode="w+", dtype=np.float32,
                                  shape=(samples, *SAMPLE_SHAPE))
    rng = np.random.default_rng(0)
    for start in range(0, samples, 16384):
        stop = min(start + 16384, samples)
        x[start:stop] = rng.random((stop - start, *SAMPLE_SHAPE), dtype=np.float32)
    x[samples - 7, 3, 3, 0] = np.nan
    np.savez(path, x_train=x, y_train=np.arange(samples) % 10)
    del x
    path.with_suffix(".x.npy").unlink()
    return samples


def timed(call):
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def baseline(path: Path) -> bool:
    with np.load(path) as z:
        x, y = z["x_train"], z["y_train"]
    return bool(np.isfinite(x).all() and np.isfinite(y).all())


def in_process(request: ContentRequest) -> str:
    try:
        check_content(request)
    except Exception as error:  # the NaN planted in the file
        return str(error)
    return "no problem found"


def npz_part(folder: Path, gib: float) -> None:
    path = folder / "big.npz"
    samples = make_npz(path, gib) if not path.exists() else None
    size = path.stat().st_size
    baseline(path)  # warm the page cache
    request = ContentRequest((str(path),), classifier=True, why="benchmark")
    load_s, finite = timed(lambda: baseline(path))
    child_s, outcome = timed(lambda: DataCheckJob(request).run())
    inproc_s, message = timed(lambda: in_process(request))
    found = outcome.message if isinstance(outcome, DataCheckFailed) else "no problem found"
    print(f"npz: {size / (1 << 30):.2f} GiB{f', {samples:,} samples' if samples else ''}")
    print(f"  baseline np.load + np.isfinite     {load_s:6.2f} s  (all finite: {finite})")
    print(f"  data check, child (as a run start) {child_s:6.2f} s")
    print(f"  data check, in-process             {inproc_s:6.2f} s")
    print(f"  the check says: {found[:160]}")
    assert message == found


def images_part(folder: Path) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    from PIL import Image

    from mgpu_gui.core.datasets.images import decode_image

    def tf_decode(path):
        return tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)

    def shared_decode(path):
        image = tf.numpy_function(lambda p: decode_image(os.fsdecode(p)), [path], tf.uint8,
                                  stateful=False)
        image.set_shape((None, None, 3))
        return image

    for size, count in ((64, 4000), (256, 1000)):
        images = folder / f"img{size}"
        if not images.exists():
            images.mkdir()
            rng = np.random.default_rng(size)
            for i in range(count):
                pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(images / f"{i}.{'png' if i % 2 else 'jpg'}")
        paths = np.array(sorted(str(p) for p in images.iterdir()))
        rates: dict[str, list[float]] = {"tensorflow": [], "shared (Pillow)": []}
        for _ in range(3):
            for name, decode in (("tensorflow", tf_decode), ("shared (Pillow)", shared_decode)):
                ds = (tf.data.Dataset.from_tensor_slices(paths)
                      .map(lambda p, d=decode: tf.image.resize(d(p), (32, 32)),
                           num_parallel_calls=tf.data.AUTOTUNE).batch(64))
                seconds, _ = timed(lambda ds=ds: sum(int(b.shape[0]) for b in ds))
                rates[name].append(len(paths) / seconds)
        print(f"pipeline decode, {size} px, {len(paths)} files on {os.cpu_count()} cores "
              f"(best of 3):")
        for name, values in rates.items():
            print(f"  {name:16s} {max(values):8.0f} images/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--images", action="store_true")
    parser.add_argument("--keep", type=Path, help="folder for the test files (kept)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        npz_part(folder, args.gib)
        if args.images:
            images_part(folder)


if __name__ == "__main__":
    main()
