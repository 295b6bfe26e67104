"""Child-process entry that reloads an export with nothing from its writer and predicts.

    python -m mgpu_gui.processes.export_verifier --events-fd N  < request.json

Started by engine/export.py (`_run_verifier`) for every verified export, with no
GPU (`CUDA_VISIBLE_DEVICES=""`) and in a folder of its own. The request (one
JSON object on stdin) holds the export's `format` and `path`, the sample's
`.npy` (`x`), where to save the predictions (`y`, an `.npz`), `safe_mode` and
the `custom_objects` file (or null). It ends with one event on the pipe `N`:
`ExportReloaded` (the predictions are saved) or `ExportFailed` (why the export
cannot be loaded: the parent refuses to ship it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from mgpu_gui.core.events import ExportFailed, ExportReloaded
from mgpu_gui.engine.export import reload_and_predict


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mgpu_gui.processes.export_verifier")
    parser.add_argument("--events-fd", type=int, required=True)
    args = parser.parse_args(argv)
    request = json.loads(sys.stdin.read())
    with os.fdopen(args.events_fd, "w", buffering=1, encoding="utf-8") as pipe:
        try:
            outputs = reload_and_predict(request["format"], request["path"],
                                         np.load(request["x"], allow_pickle=False),
                                         request["safe_mode"], request["custom_objects"])
        except Exception as error:  # why loading failed: the parent's message needs no traceback
            pipe.write(ExportFailed(f"{type(error).__name__}: {error}".strip(),
                                    type(error).__name__, user_error=True).to_json() + "\n")
            return 1
        np.savez(request["y"], *outputs)
        pipe.write(ExportReloaded(request["y"]).to_json() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
