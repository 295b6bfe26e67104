"""Can the supervisor keep up with a worker that floods it with batch events?

A child process writes 200,000 batch events (plus epoch events) as fast as it
can into a real pipe. The supervisor side is the app's own: `WorkerProcess`
reads and parses the pipe, its recorder writes the run store (SQLite, WAL),
and the curves panel's plot buffers take every event (offscreen Qt, redrawn
on its timer as in the app). Printed:
  - ingest rate in events/s (target >= 20,000), and the same pipe read and
    parsed with nothing else as the baseline, with the ratio;
  - the supervisor's resident memory before and after (target: growth <= 50 MB);
  - that the store holds every event.

    python tests/benchmarks/store_soak.py [--events 200000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

EMITTER = r"""
import json, os, sys, time
fd, total, steps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
out = os.fdopen(fd, "w", buffering=1 << 16)
started = {"type": "run_started", "t": time.time(), "run_dir": "soak", "device_kind": "cpu",
           "devices": ["/cpu:0", "/cpu:1"], "device_names": ["CPU 0", "CPU 1"],
           "num_replicas": 2, "batch_per_replica": 32, "global_batch": 64,
           "train_samples": 64 * steps, "val_samples": 0, "test_samples": 0,
           "steps_per_epoch": steps, "dropped_per_epoch": 0, "epochs": total // steps + 1,
           "initial_epoch": 0, "model_name": "soak", "params": 1, "cross_device_ops": "x",
           "tf_version": "-", "keras_version": "-"}
out.write(json.dumps(started) + "\n")
epochs = total // steps + 1
for i in range(total):
    epoch, batch = divmod(i, steps)
    loss = 1.0 / (1 + 0.001 * i)
    out.write('{"type": "batch_end", "t": %r, "epoch": %d, "batch": %d, "steps": %d, '
              '"metrics": {"loss": %r, "accuracy": %r}, "samples_per_s": 5000.0, '
              '"learning_rate": 0.001}\n' % (time.time(), epoch, batch, steps, loss, 1 - loss))
    if batch == steps - 1:
        out.write(json.dumps({"type": "epoch_end", "t": time.time(), "epoch": epoch,
                              "epochs": epochs, "metrics": {"loss": loss, "val_loss": loss},
                              "samples_per_s": 5000.0, "duration_s": 1.0,
                              "learning_rate": 0.001, "best": True}) + "\n")
out.write(json.dumps({"type": "run_finished", "t": time.time(), "status": "completed",
                      "epochs_done": total // steps, "message": ""}) + "\n")
out.close()
"""


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def soak(total: int, steps: int, root: Path, *, full: bool) -> tuple[float, int, object]:
    """Events/s through WorkerProcess; with `full`, into the store and the plot buffers."""
    from PySide6.QtWidgets import QApplication

    from mgpu_gui.core.children import supervisor
    from mgpu_gui.core.config import RunConfig
    from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState
    from mgpu_gui.core.runs.store import RunStore
    from mgpu_gui.gui.panels.curves import CurvesPanel

    def emitter_command(run_dir, events_fd, control_fd, lock_fd=None, nice=0):
        return [sys.executable, "-c", EMITTER, str(events_fd), str(total), str(steps)]

    supervisor.worker_command = emitter_command  # the same pipe, a much faster "worker"
    app = QApplication.instance() or QApplication([])
    store = RunStore(root / "runs.sqlite3") if full else None
    run = supervisor.prepare_run(RunConfig(output_dir=str(root / ("full" if full else "base")),
                                           epochs=total // steps + 1),
                                 GpuInventory(NvmlState.NO_DRIVER), store)
    worker = supervisor.WorkerProcess(run, store=store)
    panel = CurvesPanel() if full else None
    if panel is not None:
        panel.start_updates()
    count = 0
    start = time.perf_counter()
    worker.start()
    for event in worker.events():
        count += 1
        if panel is not None:
            panel.handle_event(event)
            if count % 2000 == 0:
                app.processEvents()  # let the redraw timer fire, as the app's loop would
    elapsed = time.perf_counter() - start
    worker.outcome()
    if panel is not None:
        panel.shutdown()
    return count / elapsed, count, (store, run.run_id, panel)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--steps", type=int, default=1000, help="batch events per epoch")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        from PySide6.QtWidgets import QApplication

        QApplication.instance() or QApplication([])
        base_rate, _, _ = soak(args.events, args.steps, root, full=False)
        before = rss_mb()
        rate, count, (store, run_id, panel) = soak(args.events, args.steps, root, full=True)
        after = rss_mb()
        stored = sum(1 for _ in store.series_events(run_id))
        record = store.get(run_id)
        store.close()
    expected = args.events + args.events // args.steps
    print(f"events through the pipe: {count:,} ({args.events:,} batch events)")
    print(f"baseline (pipe read + parse only): {base_rate:,.0f} events/s")
    print(f"supervisor + store + plot buffers:  {rate:,.0f} events/s "
          f"(target >= 20,000; ratio to baseline {rate / base_rate:.2f})")
    print(f"supervisor memory: {before:.0f} MB before, {after:.0f} MB after "
          f"(growth {after - before:+.0f} MB, target <= 50 MB)")
    print(f"store: {stored:,} of {expected:,} batch and epoch events, run status "
          f"{record.status.value}, {record.epochs_done} epochs")
    ok = rate >= 20_000 and after - before <= 50 and stored == expected
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
