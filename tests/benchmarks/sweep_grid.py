"""The sweeps issue's full grid: 2 learning rates x 2 batch sizes x 2 repeats (8 trials)
on 4 faked GPUs (CPU replicas), 2 GPUs per trial, 2 at a time, the queue runner stopped
and started again once the first trial started. The suite runs 2 x 2 repeats through the
same checks (tests/test_sweep_runs.py); this one took 40 s on 2 busy cores. Printed:
each trial's settings, status, best val_loss and run times, and the total.

    python tests/benchmarks/sweep_grid.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mgpu_gui.core.devices.nvml import FAKE_GPUS_VAR  # noqa: E402
from mgpu_gui.core.runs.storedb import STORE_ENV  # noqa: E402
from tests.helpers.sweeps import fake_gpus, run_grid, stop_runner, tiny_base  # noqa: E402


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        os.environ[FAKE_GPUS_VAR] = str(fake_gpus(root, 4))
        os.environ[STORE_ENV] = str(root / "runs.sqlite3")
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        began = time.monotonic()
        try:
            view = run_grid(tiny_base(root), {"learning_rate": "1e-2,5e-2",
                                              "batch_per_replica": "8,16"}, repeats=2)
        finally:
            stop_runner(root / "runs.sqlite3")
        for row in view.results.rows:
            best = "-" if row.best is None else f"{row.best.best:.4f}"
            print(f"{'*' if row.is_best else ' '} trial {row.trial.number}: {row.trial.label:<45}"
                  f" {row.status.text:<10} val_loss {best}")
        print(f"8 trials, 2 at a time, across a runner restart: {time.monotonic() - began:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
