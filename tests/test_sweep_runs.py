"""Sweeps that train: real tiny runs (a linear model on an 8-feature npz, CPU replicas
standing in for faked GPUs) started by the real queue runner, as the app and
`mgpu-train sweep` leave them to it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mgpu_gui.cli import main as cli
from mgpu_gui.core.children.queue_runner import ensure_runner
from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.devices.nvml import FAKE_GPUS_VAR
from mgpu_gui.core.runs.store import RunState, RunStore
from mgpu_gui.core.sweeps.results import TrialStatus
from mgpu_gui.core.sweeps.space import parse_parameter
from mgpu_gui.core.sweeps.store import cancel_sweep, load_sweep, start_sweep, sweep_estimate
from mgpu_gui.core.sweeps.trials import SweepSpec
from mgpu_gui.testing.faults import ENV_VAR, ONLY_VAR
from tests.helpers.sweeps import ended, fake_gpus, run_grid, stop_runner, tiny_base
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def four_gpus(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(FAKE_GPUS_VAR, str(fake_gpus(tmp_path, 4)))


@pytest.fixture
def runner():
    """The store's queue runner, stopped at the end (its runs stop at their next batch)."""
    store_path = Path(os.environ["MGPU_GUI_STORE"])
    yield store_path
    stop_runner(store_path)


@pytest.fixture
def base(tmp_path) -> RunConfig:
    return tiny_base(tmp_path)


def values(name: str, text: str, base: RunConfig):
    return parse_parameter(name, text, base)


def test_a_grid_with_repeats_runs_two_at_a_time_and_survives_a_runner_restart(
        four_gpus, base, runner):
    """The issue's 2 x 2 grid x 2 repeats is tests/benchmarks/sweep_grid.py (8 trials take
    40 s here); the suite runs 2 x 2 repeats through the same checks."""
    run_grid(base, {"learning_rate": "1e-2,5e-2"}, repeats=2)


def test_median_stopping_stops_the_worse_trial_and_an_oom_fails_only_its_trial(
        four_gpus, base, runner, monkeypatch):
    monkeypatch.setenv(ENV_VAR, "oom@1:2")
    monkeypatch.setenv(ONLY_VAR, "-t5")  # trial 5 runs out of memory in its first epoch
    # Trial 4 barely moves from where every trial starts (one seed): clearly worse.
    spec = SweepSpec(base.replace(epochs=5), (
        values("learning_rate", "5e-2,3e-2,2e-2,1e-7,4e-2", base),), gpus_per_trial=1,
        max_parallel=3, median_stop=True)
    store = RunStore()
    sweep_id = start_sweep(store, spec, "m")
    ensure_runner(store.path)
    view = ended(store, sweep_id, 300)
    statuses = [o.status for o in view.outcomes]
    assert statuses == [TrialStatus.COMPLETED] * 3 + [TrialStatus.MEDIAN_STOPPED,
                                                      TrialStatus.FAILED]
    stopped = view.outcomes[3]
    assert "stopped early (median rule): best val_loss" in stopped.message
    assert "by epoch 3 " in stopped.message  # the rule's first epoch (grace 2)
    run_id = view.jobs[3].run_id
    # The Runs tab says why too (written once its worker has ended).
    wait_for(lambda: store.get(run_id).message == stopped.message, 30, "the run's message")
    run = store.get(run_id)
    assert run.status is RunState.STOPPED and run.epochs_done in (3, 4)
    assert "OOM when allocating" in view.outcomes[4].message


def test_cancel_drops_the_waiting_trials_and_stops_the_running_one(four_gpus, base, runner):
    spec = SweepSpec(base.replace(epochs=200), (values("learning_rate", "1e-2,2e-2,3e-2",
                                                       base),), gpus_per_trial=1)
    store = RunStore()
    sweep_id = start_sweep(store, spec, "c")
    ensure_runner(store.path)

    def trained_an_epoch() -> bool:
        run_id = load_sweep(store, sweep_id).jobs[0].run_id
        return run_id is not None and store.get(run_id).epochs_done >= 1

    wait_for(trained_an_epoch, 120, "the first trial to train an epoch")
    cancelled = cancel_sweep(store, sweep_id)
    assert (cancelled.stopping, cancelled.dropped) == ((0,), (1, 2))
    view = ended(store, sweep_id, 60)
    assert [o.status for o in view.outcomes] == [TrialStatus.STOPPED, TrialStatus.DROPPED,
                                                 TrialStatus.DROPPED]
    run = store.get(view.jobs[0].run_id)
    assert run.status is RunState.STOPPED and run.status.resumable and run.epochs_done < 200


def test_cli_sweep_start_wait_completes_two_runs_and_prints_the_best(base, capsys, runner):
    # The demo's ConvNet took 44 s for this; a linear model on 400 samples trains the same
    # path in a fraction of it.
    code = cli.main(["sweep", "start", "--lr", "1e-3,3e-3", "--epochs", "2", "--wait",
                     "--model", base.model, "--data", base.data, "-o", base.output_dir,
                     "--export", "none"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.startswith("2 trials x 2 epochs = 4 epochs; no earlier run of linear.py on "
                          "data.npz")
    assert "Sweep 1 (linear): 2 trials queued" in out
    assert "sweep 1: 2 completed" in out
    view = load_sweep(RunStore(), 1)
    best = view.results.best
    assert f"Best: trial {best.trial.number} ({best.trial.label}): val_loss" in out
    store = RunStore()
    runs = store.runs()
    assert [run.status for run in runs] == [RunState.COMPLETED] * 2
    # Timed by these runs, the same sweep is estimated within 30 % of what it took (issue
    # 30, finding 8: 5 s estimated for 28 s, each trial's start and finish left out).
    took = max(run.ended for run in runs) - view.record.created
    found = sweep_estimate(store, view.spec)
    assert found.seconds is not None and abs(found.seconds - took) <= 0.3 * took, (
        found.text, took)
