"""`mgpu-train inspect`: what a model file holds, read without TensorFlow or its code."""

from __future__ import annotations

import argparse
from pathlib import Path

from mgpu_gui.core.modelfiles.info import describe
from mgpu_gui.core.modelfiles.inspection import inspect_model_file


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="say what a model file holds (no TensorFlow, no code "
                       "from the file)")
    p.add_argument("file", type=Path, help="a .keras, .h5 or .py model file")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    info = inspect_model_file(args.file)
    print("\n".join(describe(info)))
    if info.format == "py":
        return 0
    if info.wrapper is not None:
        print(f"  {info.wrapper.describe()}")
        print(f"  recover the plain model with: mgpu-train unwrap {args.file} -o "
              f"{info.path.stem}_unwrapped.keras")
    else:
        print("  plain model (no multi-GPU wrapper)")
        if info.lambda_layers:
            print(f"  Lambda layers (run code on load): {', '.join(info.lambda_layers)}")
    return 0
