"""What does the rehearsal before epoch 1 (engine/rehearsal.py) cost a run?

In one run, on the demo (its data and model, 2 CPU replicas by default):
  A. a 10-epoch demo run through `mgpu-train train`, as users run it: its wall time
     from the command to its end, and from `RunStarted` to the end of epoch 1;
  C. the same run with `--export none`: no export checks beside its first epoch (and
     none at its end), the baseline of the first epoch's time;
  B. in a process of its own set up as the worker sets itself up (plan, strategy,
     `training.prepare`), the rehearsal's in-process part (loss and metrics on one
     batch, the heads, the exports written): what it adds before epoch 1. Then its
     background part: each export reloaded in a fresh process (beside epoch 1).
Each measured `--repeats` times; medians.

    python tests/benchmarks/rehearsal.py [--replicas 2] [--epochs 10] [--repeats 3]
        [--export keras]

Targets (issue 29): at most 3 s added before the demo's first epoch; B's
in-process seconds as a fraction of A's whole run printed as the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import json, sys, time
from pathlib import Path
from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.devices.plan import DevicePlan
from mgpu_gui.engine.strategy import apply_device_env, make_strategy
config = RunConfig.from_json(sys.argv[1])
plan = DevicePlan.from_json(sys.argv[2])
apply_device_env(plan)
strategy, _ = make_strategy(plan)
from mgpu_gui.engine.rehearsal import Rehearsal
from mgpu_gui.engine.training import prepare
setup = prepare(config, strategy, lambda *a: None)
rehearsal = Rehearsal(Path(sys.argv[3]))
started = time.monotonic()
rehearsal.run(config, setup.model, setup.data, setup.relabel, strategy.num_replicas_in_sync,
              evaluate=True, exports=True, log=lambda *a: None)
ran = time.monotonic()
rehearsal.wait()
waited = time.monotonic()
rehearsal.close()
print(json.dumps({"in_process": ran - started, "background": waited - ran}))
"""


def whole_run(out: Path, args, export: str) -> dict[str, float]:
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "mgpu_gui.cli.main", "train", "--model", "demo",
                    "--cpu", "--replicas", str(args.replicas), "--epochs", str(args.epochs),
                    "--export", export, "-o", str(out), "--quiet"],
                   check=True, stdout=subprocess.DEVNULL)
    wall = time.monotonic() - started
    run = max(out.iterdir(), key=lambda p: p.stat().st_mtime)
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    began = next(e["t"] for e in events if e["type"] == "run_started")
    first = next(e["t"] for e in events if e["type"] == "epoch_end")
    return {"wall": wall, "epoch_1": first - began}


def rehearsal_alone(folder: Path, args) -> dict[str, float]:
    from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
    from mgpu_gui.core.devices.nvml import query_inventory
    from mgpu_gui.core.devices.plan import plan_devices

    config = RunConfig(model="demo", export_formats=tuple(args.export.split(",")),
                       devices=DeviceSelection(kind=DeviceKind.CPU, replicas=args.replicas))
    plan = plan_devices(config.devices, query_inventory())
    folder.mkdir(exist_ok=True)
    done = subprocess.run([sys.executable, "-c", CHILD, config.to_json(), plan.to_json(),
                           str(folder)], check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--export", default="keras")
    args = parser.parse_args()
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    runs, bare, parts = [], [], []
    with tempfile.TemporaryDirectory(prefix="mgpu-bench-rehearsal-") as root:
        os.environ["MGPU_GUI_STORE"] = str(Path(root, "store.sqlite3"))
        for i in range(args.repeats):
            runs.append(whole_run(Path(root, "runs"), args, args.export))
            bare.append(whole_run(Path(root, "runs"), args, "none"))
            parts.append(rehearsal_alone(Path(root, f"alone{i}"), args))
    wall = statistics.median(r["wall"] for r in runs)
    epoch_1 = statistics.median(r["epoch_1"] for r in runs)
    bare_wall = statistics.median(r["wall"] for r in bare)
    bare_epoch_1 = statistics.median(r["epoch_1"] for r in bare)
    before = statistics.median(p["in_process"] for p in parts)
    beside = statistics.median(p["background"] for p in parts)
    print(f"demo, {args.epochs} epochs on {args.replicas} CPU replicas, export {args.export}, "
          f"{args.repeats} repeats (medians)")
    print(f"  A. whole run (mgpu-train train):           {wall:7.2f} s")
    print(f"     its first epoch (RunStarted to its end): {epoch_1:7.2f} s")
    print(f"  C. the same, --export none:                {bare_wall:7.2f} s")
    print(f"     its first epoch:                         {bare_epoch_1:7.2f} s")
    print(f"  B. rehearsal before epoch 1 (in process):  {before:7.2f} s  (target <= 3 s)")
    print(f"     export checks beside epoch 1:           {beside:7.2f} s")
    print(f"  ratio B (before epoch 1) / A:              {before / wall:7.3f}")
    print(f"  ratio first epoch A / C (checks beside):   {epoch_1 / bare_epoch_1:7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
