"""How much does a run's telemetry grow the run store? (target: <= 5 MB an hour on 8 GPUs)

One hour of 1 s samples of 8 busy GPUs (utilization, memory, power and temperature
varying as in training) written as the recorder writes them, `FLUSH_S` of samples a
transaction, into a fresh store (WAL, checkpointed at the end). Printed: the store's
size before and after, the growth per hour and per row, the time spent writing, and
the time one read of the whole run takes (what the window does on reopening it).

    python tests/benchmarks/telemetry_store.py [--gpus 8] [--hours 1]
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

from mgpu_gui.core.children.telemetry_recorder import FLUSH_S, INTERVAL_S
from mgpu_gui.core.runs.store import RunStore
from mgpu_gui.core.runs.telemetry_store import (
    TelemetryDevice,
    TelemetrySample,
    read_telemetry,
    record_devices,
    record_samples,
)

TARGET_MB_PER_HOUR = 5.0


def store_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--hours", type=float, default=1.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "runs.sqlite3"
        store = RunStore(path)
        db = store.database.db
        db.execute("INSERT INTO runs (name, run_dir, model, data, config, status, epochs, "
                   "created) VALUES ('bench', '/runs/bench', 'm', 'd', '{}', 'running', 1, 0)")
        run_id = db.execute("SELECT id FROM runs").fetchone()[0]
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        before = store_size(path)
        record_devices(store.database, run_id, [
            TelemetryDevice(i, f"GPU-{i:08d}-aaaa-bbbb-cccc-dddddddddddd",
                            "NVIDIA H100 80GB HBM3", 81559) for i in range(args.gpus)])
        seconds = round(args.hours * 3600 / INTERVAL_S)
        per_flush = round(FLUSH_S / INTERVAL_S)
        start, wrote = 1_767_000_000.0, 0.0
        batch: list[TelemetrySample] = []
        for second in range(seconds):
            t = start + second * INTERVAL_S + 0.0137 * (second % 7)  # a poller's jitter
            for gpu in range(args.gpus):
                wave = math.sin(second / 30 + gpu)
                batch.append(TelemetrySample(gpu, t, 90 + round(9 * wave),
                                             61_000 + round(800 * wave) + gpu,
                                             300 + round(60 * wave), 70 + round(4 * wave)))
            if len(batch) >= per_flush * args.gpus:
                began = time.perf_counter()
                record_samples(store.database, run_id, batch)
                wrote += time.perf_counter() - began
                batch.clear()
        record_samples(store.database, run_id, batch)
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        after = store_size(path)
        began = time.perf_counter()
        rows = len(read_telemetry(store.database, run_id))
        read_s = time.perf_counter() - began
        store.close()
    growth = after - before
    per_hour = growth / 2**20 / args.hours
    print(f"{rows} rows ({args.gpus} GPUs, {args.hours:g} h at {INTERVAL_S:g} s, "
          f"{seconds // per_flush} transactions)")
    print(f"store: {before / 1024:.0f} KiB -> {after / 1024:.0f} KiB; growth "
          f"{growth / 2**20:.2f} MiB, {per_hour:.2f} MiB/hour "
          f"(target <= {TARGET_MB_PER_HOUR:g}), {growth / rows:.1f} bytes/row")
    print(f"writing: {wrote:.2f} s in all; reading the whole run: {read_s * 1000:.0f} ms")
    print("OK" if per_hour <= TARGET_MB_PER_HOUR else "OVER TARGET")


if __name__ == "__main__":
    main()
