"""`mgpu-train models`: the built-in architectures `--model` takes (no TensorFlow)."""

from __future__ import annotations

import argparse
import json

from mgpu_gui.core.modelfiles.builtins import ARCHITECTURES, cached_weights, keras_cache_dir


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "models", help="list the built-in architectures (--model NAME)",
        description="The architectures `--model NAME` builds for the data's image size and "
                    "class count: the backbone, global average pooling and a softmax head. "
                    "Each takes raw 0-255 pixels and normalises them inside the model. "
                    "ImageNet weights (--pretrained imagenet, the default where they exist) "
                    f"are downloaded by Keras to {keras_cache_dir()} on first use.")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    rows = [{"name": a.name, "family": a.family, "params_10_classes": a.params_10_classes,
             "imagenet": a.has_imagenet, "imagenet_cached": cached_weights(a) is not None,
             "default_size": a.default_size, "preprocessing": a.preprocessing}
            for a in ARCHITECTURES.values()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    header = ("name", "family", "params (10 classes)", "ImageNet weights", "default size")
    table = [header] + [(
        r["name"], r["family"], f"{r['params_10_classes'] / 1e6:.1f} M",
        ("cached" if r["imagenet_cached"] else "yes (downloads)") if r["imagenet"] else "no",
        f"{r['default_size']}x{r['default_size']}") for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
              .rstrip())
    print("\nInputs of at least 32x32 RGB pixels; the model normalises them itself "
          "(no --rescale).")
    return 0
