"""Real sweeps for the tests and the sweep benchmark: tiny files, fake GPUs, the queue
runner, and the checks of a grid sweep run across a runner restart."""

from __future__ import annotations

import json
import os
import signal
import textwrap
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from mgpu_gui.core.children.queue_runner import ensure_runner
from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.runs.queue import runner_log_path, runner_pid
from mgpu_gui.core.runs.store import RunStore
from mgpu_gui.core.sweeps.results import TrialStatus
from mgpu_gui.core.sweeps.space import parse_parameter
from mgpu_gui.core.sweeps.store import SweepView, load_sweep, start_sweep, sweep_tag
from mgpu_gui.core.sweeps.trials import SweepSpec
from tests.helpers.waiting import wait_for

GiB = 2**30


def fake_gpus(folder: Path, count: int) -> Path:
    """A MGPU_GUI_FAKE_GPUS file of `count` free GPUs."""
    path = folder / "gpus.json"
    path.write_text(json.dumps({"gpus": [
        {"index": i, "uuid": f"GPU-fake-{i}", "name": "Fake GPU", "memory_total": 8 * GiB}
        for i in range(count)]}))
    return path


def tiny_base(folder: Path) -> RunConfig:
    """A linear model on 400 samples of 8 features (seconds per trial, most of it
    TensorFlow's start), on GPUs (faked: CPU replicas)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 8)).astype("float32")
    np.savez(folder / "data.npz", x_train=x, y_train=(x[:, 0] > 0).astype("int64"))
    (folder / "linear.py").write_text(textwrap.dedent("""
        import keras

        def build_model(input_shape, num_classes):
            return keras.Sequential([keras.Input(input_shape),
                                     keras.layers.Dense(num_classes, activation="softmax")])
    """))
    return RunConfig(model=str(folder / "linear.py"), data=str(folder / "data.npz"),
                     batch_per_replica=16, epochs=1, seed=1, export_formats=(),
                     output_dir=str(folder / "runs"),
                     devices=DeviceSelection(kind=DeviceKind.GPU))


def stop_runner(store_path: Path) -> None:
    """Stop the store's queue runner, if one runs (its runs stop at their next batch)."""
    pid = runner_pid(store_path)
    if pid and pid > 0:
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: runner_pid(store_path) is None, 60, "the queue runner to exit")


def ended(store: RunStore, sweep_id: int, timeout: float) -> SweepView:
    wait_for(lambda: load_sweep(store, sweep_id).record.ended, timeout,
             f"every trial of sweep {sweep_id} to end")
    return load_sweep(store, sweep_id)


def run_grid(base: RunConfig, swept: Mapping[str, str], repeats: int) -> SweepView:
    """A grid sweep of 2 GPUs per trial, 2 at a time, on 4 (fake) GPUs whose runner is
    stopped once the first trial started and started again; checks that every trial
    completes, never more than 2 at a time (the store's times), each run tagged, and the
    table's best is the store's."""
    spec = SweepSpec(base, tuple(parse_parameter(n, t, base) for n, t in swept.items()),
                     repeats=repeats, gpus_per_trial=2, max_parallel=2)
    store = RunStore()
    sweep_id = start_sweep(store, spec, "grid")
    ensure_runner(store.path)
    first = load_sweep(store, sweep_id).jobs[0]
    wait_for(lambda: store.database.db.execute(
        "SELECT run_id FROM queue WHERE id = ?", (first.id,)).fetchone()[0], 120,
        "the first trial to start")
    stop_runner(store.path)  # the machine restarts, say: its trials stop, to go on later
    ensure_runner(store.path)
    view = ended(store, sweep_id, 600)
    assert [o.status for o in view.outcomes] == [TrialStatus.COMPLETED] * len(view.outcomes)
    runs = [store.get(job.run_id) for job in view.jobs.values()]
    assert all(sweep_tag(sweep_id) in run.tags for run in runs)
    times = sorted([(run.started, 1) for run in runs] + [(run.ended, -1) for run in runs])
    assert np.cumsum([step for _, step in times]).max() == 2, "not two trials at a time"
    best = min(runs, key=lambda run: run.best_value)
    assert abs(view.results.best.best.best - best.best_value) < 1e-6
    assert view.jobs[view.results.best.trial.index].run_id == best.id
    # The restarted runner names the stopped trial by the number `sweep show` gives it
    # (it said "trial 0" for trial 1: issue 29, item 14).
    log = runner_log_path(store.path).read_text()
    assert f"sweep {sweep_id}'s trial 1 waits to go on" in log, log[-2000:]
    assert "trial 0 " not in log
    return view
