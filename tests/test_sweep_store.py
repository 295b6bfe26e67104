"""Sweeps in the store, without training: queueing a sweep's trials, what each trial's job
and run say of it, the cap on trials at once, the median rule as the runner applies it,
cancel, extend, the estimate and the CLI's refusals. Runs are stored by hand, as a
supervisor records them (tests/test_sweep_runs.py trains real ones)."""

from __future__ import annotations

import json

import pytest

from mgpu_gui.cli import main as cli
from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.devices.nvml import GpuInfo, GpuInventory, NvmlState
from mgpu_gui.core.errors import ConfigError
from mgpu_gui.core.events import EpochEnd, RunFinished, RunStarted, RunStatus
from mgpu_gui.core.runs.folder import RunDir
from mgpu_gui.core.runs.queue import JobQueue, JobState, QueuedJob
from mgpu_gui.core.runs.store import RunState, RunStore
from mgpu_gui.core.sweeps.median import MEDIAN_STOPPED
from mgpu_gui.core.sweeps.results import TrialStatus
from mgpu_gui.core.sweeps.runner import SweepJudge, admitted, requeue_unfinished
from mgpu_gui.core.sweeps.space import parse_parameter
from mgpu_gui.core.sweeps.store import (
    cancel_sweep,
    extend_sweep,
    list_sweeps,
    load_sweep,
    start_sweep,
    sweep_estimate,
)
from mgpu_gui.core.sweeps.trials import SweepSpec

GiB = 2**30
FOUR = GpuInventory(NvmlState.OK, tuple(
    GpuInfo(index=i, name="Fake GPU", uuid=f"GPU-fake-{i}", pci_bus_id=None,
            memory_total=8 * GiB, compute_capability=(9, 0)) for i in range(4)), "fake", "12.4")


@pytest.fixture
def base(tmp_path) -> RunConfig:
    return RunConfig(epochs=4, seed=1, output_dir=str(tmp_path / "runs"),
                     devices=DeviceSelection(kind=DeviceKind.GPU))


def spec(base: RunConfig, lrs: str = "1e-3,3e-3", **options) -> SweepSpec:
    return SweepSpec(base, (parse_parameter("learning_rate", lrs, base),), **options)


def trained(store: RunStore, job: QueuedJob, val_losses: list[float],
            status: RunStatus | None = RunStatus.COMPLETED) -> int:
    """The job's run as its supervisor records it: started, epochs, and (unless None) ended."""
    folder = RunDir(store.path.parent / f"run-{job.id}")
    run_id = store.add_run(folder, job.config)
    JobQueue(store).mark_started(job.id, run_id)
    recorder = store.recorder(run_id)
    recorder.handle(RunStarted(
        run_dir=str(folder.path), device_kind="gpu", devices=[], device_names=[],
        num_replicas=1, batch_per_replica=8, global_batch=8, train_samples=64, val_samples=8,
        test_samples=0, steps_per_epoch=8, dropped_per_epoch=0, epochs=job.config.epochs,
        initial_epoch=0, model_name="m", params=1, cross_device_ops="", tf_version="",
        keras_version="", summary="", t=1.0))
    for epoch, value in enumerate(val_losses):
        recorder.handle(EpochEnd(epoch=epoch, epochs=job.config.epochs,
                                 metrics={"loss": value, "val_loss": value},
                                 samples_per_s=100.0, duration_s=2.0, t=2.0 + epoch))
    if status is not None:
        recorder.handle(RunFinished(status=status, epochs_done=len(val_losses), message="",
                                    t=10.0))
    recorder.close()
    return run_id


def jobs(store: RunStore, sweep_id: int) -> list[QueuedJob]:
    return [job for job in JobQueue(store).jobs(finished=True) if job.sweep_id == sweep_id]


def test_a_sweep_is_one_queued_job_per_trial_and_its_view_follows_their_runs(store, base):
    sweep_id = start_sweep(store, spec(base, repeats=2, max_parallel=2), "lr", inventory=FOUR)
    queued = jobs(store, sweep_id)
    assert [(j.trial_index, j.name, j.config.learning_rate, j.config.seed) for j in queued] == [
        (0, "lr-t1", 0.001, 1), (1, "lr-t2", 0.003, 1), (2, "lr-t3", 0.001, 2),
        (3, "lr-t4", 0.003, 2)]
    assert all(j.state is JobState.QUEUED for j in queued)
    trained(store, queued[0], [0.9, 0.5, 0.6, 0.55])
    trained(store, queued[1], [0.8, 0.4, 0.3, 0.35])
    trained(store, queued[2], [0.9, 0.7], RunStatus.FAILED)  # out of memory, say
    view = load_sweep(store, sweep_id)
    assert [o.status for o in view.outcomes] == [
        TrialStatus.COMPLETED, TrialStatus.COMPLETED, TrialStatus.FAILED, TrialStatus.WAITING]
    best = view.results.best
    assert (best.trial.index, best.best.best, best.best.best_epoch) == (1, 0.3, 2)
    assert [row.is_best for row in view.results.rows] == [False, True, False, False]
    # One point per finished trial, at its values; the repeats grouped by setting.
    (scatter,) = view.scatter()
    assert (scatter.xs, scatter.ys) == ((0.001, 0.003), (0.5, 0.3))
    assert len(view.parallel().lines) == 2
    assert [g.trials for g in view.results.groups] == [(0, 2), (1, 3)]
    assert view.to_dict()["best_trial"] == 1 and view.to_dict()["trials"][1]["best_epoch"] == 3
    (record,) = list_sweeps(store)
    assert record.state_text == "1 waiting, 2 completed, 1 failed" and not record.ended


def test_a_refused_sweep_writes_nothing(store, base):
    with pytest.raises(ConfigError) as refused:
        start_sweep(store, SweepSpec(base, ()), "none", inventory=FOUR)
    assert refused.value.problems[0][0] == "parameters"
    # A trial that no value makes alone: 5 frozen epochs in a 3-epoch trial.
    frozen = base.replace(freeze_epochs=5, epochs=6)
    with pytest.raises(ConfigError, match="trial epochs=3"):
        start_sweep(store, SweepSpec(frozen, (parse_parameter("epochs", "3,8", frozen),)),
                    "frozen", inventory=FOUR)
    with pytest.raises(ConfigError, match="compiled optimizer"):
        start_sweep(store, spec(base), "compiled", inventory=FOUR, compiled_model=True)
    assert list_sweeps(store) == [] and JobQueue(store).jobs(finished=True) == []


def test_at_most_max_parallel_trials_of_a_sweep_start_and_none_of_a_cancelled_one(store, base):
    other = JobQueue(store).add(base, FOUR)
    capped = start_sweep(store, spec(base, "1e-3,2e-3,3e-3", max_parallel=2), "a",
                         inventory=FOUR)
    ready, held = admitted(store, JobQueue(store).waiting())
    first, second, third = jobs(store, capped)
    assert [j.id for j in ready] == [other.id, first.id, second.id]
    assert held == {third.id: f"sweep {capped} runs 2 trials at once"}
    trained(store, first, [0.5], status=None)  # still running
    ready, held = admitted(store, JobQueue(store).waiting())
    assert [j.id for j in ready] == [other.id, second.id] and third.id in held
    cancel_sweep(store, capped)
    assert admitted(store, JobQueue(store).waiting())[0] == [other]


def median_sweep(store: RunStore, base: RunConfig, trials: int) -> list[QueuedJob]:
    lrs = ",".join(f"{i + 1}e-3" for i in range(trials))
    return jobs(store, start_sweep(store, spec(base, lrs, median_stop=True), "m",
                                   inventory=FOUR))


def test_the_median_rule_stops_a_worse_trial_at_its_epoch_and_says_why(store, base):
    good, fine, okay, worse = median_sweep(store, base, 4)
    for job, curve in ((good, [1.0, 0.6, 0.4, 0.3]), (fine, [1.0, 0.7, 0.5, 0.4]),
                       (okay, [1.0, 0.65, 0.45, 0.35])):
        trained(store, job, curve)
    run_id = trained(store, worse, [1.0, 0.9], status=None)
    judge = SweepJudge(store.path, worse)
    assert judge.after_epoch() is None  # epochs 1 and 2: the grace
    trained_more = RunStore(store.path).recorder(run_id)
    trained_more.handle(EpochEnd(epoch=2, epochs=4, metrics={"val_loss": 0.8},
                                 samples_per_s=1.0, duration_s=1.0, t=9.0))
    trained_more.close()
    verdict = judge.after_epoch()
    assert (verdict.epoch, verdict.best, verdict.median, verdict.others) == (2, 0.8, 0.45, 3)
    assert JobQueue(store).get(worse.id).cancel_requested  # the runner stops it now
    stopped = RunStore(store.path).recorder(run_id)
    stopped.handle(RunFinished(status=RunStatus.STOPPED, epochs_done=3, message="", t=11.0))
    stopped.close()
    judge.close()
    assert store.get(run_id).message.startswith(MEDIAN_STOPPED)
    outcome = load_sweep(store, worse.sweep_id).outcomes[3]
    assert outcome.status is TrialStatus.MEDIAN_STOPPED and outcome.status.text == (
        "stopped early (median rule)")
    assert "best val_loss 0.8 by epoch 3 was worse than the median 0.45" in outcome.message


def test_with_two_trials_the_median_rule_stops_nothing(store, base):
    first, second = median_sweep(store, base, 2)
    trained(store, first, [0.5, 0.3, 0.2, 0.1])
    trained(store, second, [2.0, 1.9, 1.8], status=None)
    judge = SweepJudge(store.path, second)
    assert judge.after_epoch() is None
    judge.close()
    assert not JobQueue(store).get(second.id).cancel_requested


def test_cancel_drops_waiting_trials_and_stops_running_ones(store, base):
    sweep_id = start_sweep(store, spec(base, "1e-3,2e-3,3e-3"), "c", inventory=FOUR)
    done, running, waiting = jobs(store, sweep_id)
    trained(store, done, [0.5])
    trained(store, running, [0.5], status=None)
    cancelled = cancel_sweep(store, sweep_id)
    assert (cancelled.dropped, cancelled.stopping) == ((2,), (1,))
    assert JobQueue(store).get(running.id).cancel_requested
    assert JobQueue(store).get(waiting.id).state is JobState.CANCELLED
    (record,) = list_sweeps(store)
    assert record.cancelled and record.counts[TrialStatus.DROPPED] == 1
    # A user's stop is not a runner's exit: the next runner does not resume it.
    RunStore(store.path).set_status(JobQueue(store).get(running.id).run_id, RunState.STOPPED)
    assert requeue_unfinished(store) == []


def test_trials_a_runners_exit_stopped_wait_again_to_go_on(store, base):
    sweep_id = start_sweep(store, spec(base), "r", inventory=FOUR)
    first, second = jobs(store, sweep_id)
    kept = trained(store, first, [0.5, 0.4], RunStatus.STOPPED)
    trained(store, second, [], status=None)
    store.set_status(JobQueue(store).get(second.id).run_id, RunState.INTERRUPTED)
    requeued = {job.id: job for job in requeue_unfinished(store)}
    assert requeued[first.id].run_id == kept and requeued[first.id].waiting  # resumes
    assert requeued[second.id].run_id is None  # no epoch to keep: starts afresh


def test_a_plain_job_a_runners_death_interrupted_waits_again_a_stopped_one_does_not(store,
                                                                                    base):
    """Issue 29, item 14: after a SIGKILL of the queue runner and its worker, a restarted
    runner went on with sweep trials but dropped plain jobs. An interrupted plain job now
    waits to resume from its last epoch; one the user stopped stays stopped."""
    queue = JobQueue(store)
    killed = queue.add(base, FOUR)
    stopped = queue.add(base.replace(run_name="stopped"), FOUR)
    kept = trained(store, killed, [0.5, 0.4], status=None)
    store.set_status(kept, RunState.INTERRUPTED)
    trained(store, stopped, [0.5], RunStatus.STOPPED)
    (requeued,) = requeue_unfinished(store)
    assert requeued.id == killed.id and requeued.run_id == kept and requeued.waiting
    assert queue.get(stopped.id).state is JobState.STARTED


def test_extending_queues_only_the_new_trials_and_the_estimate_times_by_past_runs(store, base):
    sweep_id = start_sweep(store, spec(base), "e", inventory=FOUR)
    trained(store, jobs(store, sweep_id)[0], [0.5, 0.4, 0.3, 0.2])  # 2 s per epoch
    more = parse_parameter("learning_rate", "3e-3,1e-2", base)
    assert extend_sweep(store, sweep_id, [more], repeats=2, inventory=FOUR) == [2, 3, 4, 5]
    view = load_sweep(store, sweep_id)
    assert view.spec.parameters[0].values == (0.001, 0.003, 0.01) and view.spec.repeats == 2
    assert [(t.trial.values["learning_rate"], t.trial.repeat) for t in view.outcomes[2:]] == [
        (0.01, 0), (0.001, 1), (0.003, 1), (0.01, 1)]
    with pytest.raises(Exception, match="already has every trial"):
        extend_sweep(store, sweep_id, [more], inventory=FOUR)
    estimate = sweep_estimate(store, view.spec.extended(samples=0))
    assert (estimate.trials, estimate.epochs, estimate.seconds) == (6, 24, 6 * 4 * 2.0)
    assert "6 trials x 4 epochs = 24 epochs; about" in estimate.text


def test_cli_sweep_refuses_a_bad_value_naming_its_flag_and_writes_nothing(capsys):
    assert cli.main(["sweep", "start", "--lr", "1e-3,x", "--epochs", "2"]) == cli.EXIT_USAGE
    assert capsys.readouterr().err == "error: invalid settings:\n  --lr: 'x' is not a number\n"
    assert cli.main(["sweep", "start", "--lr", "1e-3,3e-3", "--max-parallel", "0"]) == 2
    assert "--max-parallel: must be at least 1, got 0" in capsys.readouterr().err
    assert cli.main(["sweep", "start", "--vary", "early_stopping.patience=3,x"]) == 2
    assert "--es-patience: 'x' is not a whole number" in capsys.readouterr().err
    assert cli.main(["sweep", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
