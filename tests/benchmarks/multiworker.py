"""Two workers on loopback vs one process with two replicas: samples/s.

In one run, alternating, with the same model, data, seed and global batch:
  A. `mgpu-train train --cpu --replicas 2`: one process, MirroredStrategy over
     2 logical CPU devices, Keras' `fit`.
  B. `mgpu-train worker` twice on 127.0.0.1, one CPU replica each:
     MultiWorkerMirroredStrategy, gRPC ring all-reduce, the custom train step.
Figures come from the chief's EpochEnd events (epoch start to its last step);
the first epoch (tracing) is left out; medians over epochs and repeats. On one
machine both share the same cores, so B shows the cost of the cluster engine
(a gRPC all-reduce and a host round trip per step), not a speed-up.

    python tests/benchmarks/multiworker.py [--epochs 5] [--repeats 2] [--batch 32]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from mgpu_gui.core.events import EpochEnd, parse_event  # noqa: E402
from tests.helpers.ports import free_ports  # noqa: E402


def cli(args: list[str], root: Path, name: str) -> subprocess.Popen:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2",
           "PYTHONPATH": str(ROOT), "MGPU_GUI_STORE": str(root / f"{name}.sqlite")}
    return subprocess.Popen([sys.executable, "-m", "mgpu_gui.cli.main", *args, "--json"],
                            stdout=subprocess.PIPE, stderr=open(root / f"{name}.log", "w"),  # noqa: SIM115
                            text=True, cwd=ROOT, env=env)


def rates(proc: subprocess.Popen) -> list[float]:
    assert proc.stdout is not None
    found = [parse_event(line) for line in proc.stdout]
    if proc.wait() != 0:
        raise SystemExit(f"a run failed (exit {proc.returncode}); see its log")
    return [e.samples_per_s for e in found if isinstance(e, EpochEnd)][1:]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32, help="per replica")
    args = parser.parse_args()
    common = ["--cpu", "--model", "demo", "--data", "demo", "--epochs", str(args.epochs),
              "--batch-per-replica", str(args.batch), "--seed", "1", "--export", "keras"]
    single: list[float] = []
    cluster: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for repeat in range(args.repeats):
            print(f"repeat {repeat + 1}: one process, 2 replicas ...", file=sys.stderr)
            single += rates(cli(["train", "--replicas", "2", *common, "-o", str(root / "a")],
                                root, f"single{repeat}"))
            print(f"repeat {repeat + 1}: two workers on loopback ...", file=sys.stderr)
            hosts = ",".join(f"127.0.0.1:{p}" for p in free_ports(2))
            procs = [cli(["worker", "--cluster", hosts, "--index", str(i), *common,
                          "-o", str(root / f"b{i}")], root, f"worker{i}-{repeat}")
                     for i in range(2)]
            cluster += rates(procs[0])
            rates(procs[1])
    a, b = statistics.median(single), statistics.median(cluster)
    global_batch = 2 * args.batch
    print(f"demo ConvNet, global batch {global_batch} ({args.batch} per replica x 2), "
          f"{args.epochs} epochs x {args.repeats} repeats, first epoch left out")
    print(f"A  1 process, 2 CPU replicas (MirroredStrategy, fit):     {a:8,.0f} samples/s")
    print(f"B  2 workers x 1 CPU replica, loopback (MultiWorker):    {b:8,.0f} samples/s")
    print(f"ratio B/A: {b / a:.2f}")


if __name__ == "__main__":
    main()
