"""The job queue and device claims: scheduling, the store, the CLI, and the whole path.

GPUs are faked where none exists (a `MGPU_GUI_FAKE_GPUS` file the queue runner
and its workers read too); the runs themselves train for real on CPU replicas.
"""

from __future__ import annotations

import json
import os
import signal
import textwrap
from pathlib import Path

import numpy as np
import pytest

from mgpu_gui.cli import main as cli
from mgpu_gui.core.children.supervisor import prepare_run
from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.devices.nvml import (
    FAKE_GPUS_VAR,
    GpuInfo,
    GpuInventory,
    NvmlState,
    query_inventory,
)
from mgpu_gui.core.devices.telemetry import ProcessInfo
from mgpu_gui.core.errors import DeviceError, UserError
from mgpu_gui.core.runs import claims
from mgpu_gui.core.runs.claims import DevicesBusyError
from mgpu_gui.core.runs.folder import RunDir
from mgpu_gui.core.runs.queue import JobQueue, JobState, QueuedJob, runner_pid, schedule
from mgpu_gui.core.runs.store import RunState, RunStore
from mgpu_gui.core.sweeps.results import TrialStatus
from mgpu_gui.core.sweeps.store import trial_status
from tests.helpers.waiting import wait_for

GiB = 2**30


def gpu(index: int) -> GpuInfo:
    return GpuInfo(index=index, name="Fake GPU", uuid=f"GPU-fake-{index}", pci_bus_id=None,
                   memory_total=8 * GiB, compute_capability=(9, 0))


FOUR = GpuInventory(NvmlState.OK, tuple(gpu(i) for i in range(4)), "fake", "12.4")
NO_GPU = GpuInventory(NvmlState.NO_DRIVER)


def job(job_id: int, *, gpus: tuple[str, ...] = (), replicas: int | None = None,
        kind: DeviceKind = DeviceKind.GPU, allow_busy: bool = False) -> QueuedJob:
    config = RunConfig(devices=DeviceSelection(kind=kind, gpus=gpus, replicas=replicas))
    return QueuedJob(id=job_id, name=f"j{job_id}", config=config, state=JobState.QUEUED,
                     allow_busy=allow_busy, created=0.0, started=None, run_id=None, message="",
                     cancel_requested=False)


def started(decisions) -> dict[int, list[int]]:
    return {d.job.id: [g.index for g in d.plan.gpus] for d in decisions if d.plan is not None}


# -- scheduling (pure) ---------------------------------------------------------------------------


def test_disjoint_jobs_start_together_and_a_third_waits_for_its_gpu():
    decisions = schedule([job(1, gpus=("0", "1")), job(2, gpus=("2", "3")), job(3, gpus=("0",))],
                         FOUR, held={}, busy={})
    assert started(decisions) == {1: [0, 1], 2: [2, 3]}
    waiting = decisions[2]
    assert waiting.plan is None and "GPU 0 is in use by job 1 (j1), starting" in (
        waiting.waiting_for)


def test_a_waiting_job_keeps_later_jobs_off_its_gpus():
    held = {"GPU-fake-0": "run 'a' (id 7)"}
    decisions = schedule([job(1, gpus=("0", "1")), job(2, gpus=("1",)), job(3, gpus=("2",))],
                         FOUR, held, busy={})
    assert started(decisions) == {3: [2]}
    assert decisions[0].waiting_for == "GPU 0 is in use by run 'a' (id 7)"
    assert "GPU 1 is in use by job 1 (j1), ahead in the queue" in decisions[1].waiting_for


def test_a_job_asking_for_a_count_takes_free_gpus_wherever_they_are():
    held = {"GPU-fake-0": "run 'a' (id 7)", "GPU-fake-2": "run 'b' (id 8)"}
    decisions = schedule([job(1, replicas=2), job(2, replicas=1)], FOUR, held, busy={})
    assert started(decisions) == {1: [1, 3]}
    assert decisions[1].waiting_for.startswith("1 GPU needed, 0 free: GPU 0 is in use by "
                                               "run 'a' (id 7)")


def test_a_gpu_busy_outside_the_app_is_only_taken_when_confirmed():
    busy = {"GPU-fake-1": (ProcessInfo(4242, 3 * GiB),)}
    decisions = schedule([job(1, gpus=("1",)), job(2, replicas=4), job(3, replicas=3)],
                         FOUR, {}, busy)
    assert "GPU 1 runs pid 4242, 3.0 GiB (not a run of this app)" in decisions[0].waiting_for
    assert decisions[1].waiting_for.startswith("4 GPUs needed, 3 free")
    assert started(decisions) == {3: [0, 2, 3]}  # around the busy GPU
    confirmed = schedule([job(4, gpus=("1",), allow_busy=True)], FOUR, {}, busy)
    assert started(confirmed) == {4: [1]}


def test_cpu_jobs_take_the_cpu_one_at_a_time_and_impossible_jobs_fail():
    decisions = schedule([job(1, kind=DeviceKind.CPU, replicas=2),
                          job(2, kind=DeviceKind.CPU, replicas=2), job(3, gpus=("9",))],
                         FOUR, {}, {})
    assert decisions[0].plan is not None and decisions[0].plan.kind is DeviceKind.CPU
    assert "the CPU is in use by job 1 (j1), starting" in decisions[1].waiting_for
    assert "There is no GPU with index '9'" in decisions[2].error


# -- claims in the store -------------------------------------------------------------------------


def test_a_live_run_holds_its_gpus_until_its_lock_is_released(tmp_path):
    store = RunStore()
    out = str(tmp_path / "runs")
    first = prepare_run(RunConfig(output_dir=out, devices=DeviceSelection(gpus=("0", "1"))),
                        FOUR, store)
    assert set(claims.live_claims(store.database)) == {"GPU-fake-0", "GPU-fake-1"}
    with pytest.raises(DevicesBusyError) as refused:
        prepare_run(RunConfig(output_dir=out, devices=DeviceSelection(gpus=("1", "2"))),
                    FOUR, store)
    message = str(refused.value)
    assert f"GPU 1 is in use by run '{first.run_dir.path.name}' (id {first.run_id})" in message
    assert "add the run to the queue" in message and "mgpu-train queue add" in message
    assert len(store.runs()) == 1  # the refused run left no row and no folder
    # Any two GPUs: the free ones are taken.
    other = prepare_run(RunConfig(output_dir=out, devices=DeviceSelection(
        kind=DeviceKind.GPU, replicas=2)), FOUR, store)
    assert [g.index for g in other.plan.gpus] == [2, 3]
    first.release()  # the worker died: the claim goes with its lock
    other.release()
    assert claims.live_claims(store.database) == {}
    again = prepare_run(RunConfig(output_dir=out, devices=DeviceSelection(gpus=("1",))),
                        FOUR, store)
    again.release()


# -- the queue in the store ----------------------------------------------------------------------


@pytest.fixture
def fake_four(tmp_path, monkeypatch) -> Path:
    """Four fake GPUs for this process and every process it starts; GPU 3 runs pid 4242."""
    path = tmp_path / "gpus.json"
    gpus = [{"index": i, "uuid": f"GPU-fake-{i}", "name": "Fake GPU", "memory_total": 8 * GiB}
            for i in range(4)]
    gpus[3]["processes"] = [{"pid": 4242, "used_memory": GiB}]
    path.write_text(json.dumps({"gpus": gpus}))
    monkeypatch.setenv(FAKE_GPUS_VAR, str(path))
    return path


@pytest.fixture
def stop_runner():
    """Whatever queue runner a test started is stopped (its runs stop at their next batch)."""
    yield
    store_path = Path(os.environ["MGPU_GUI_STORE"])
    pid = runner_pid(store_path)
    if pid and pid > 0:
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: runner_pid(store_path) is None, 60, "the queue runner to exit")


def test_adding_asks_before_a_gpu_busy_outside_and_refuses_impossible_devices(fake_four,
                                                                               tmp_path):
    queue = JobQueue(RunStore())
    inventory = query_inventory()
    config = RunConfig(output_dir=str(tmp_path), devices=DeviceSelection(gpus=("3",)))
    with pytest.raises(DevicesBusyError) as busy:
        queue.add(config, inventory)
    assert busy.value.outside_only and "GPU 3 runs" in str(busy.value)
    assert "--allow-busy" in str(busy.value)
    assert queue.add(config, inventory, allow_busy=True).allow_busy
    with pytest.raises(DeviceError, match="There is no GPU with index '7'"):
        queue.add(config.replace(devices=DeviceSelection(gpus=("7",))), inventory)
    with pytest.raises(UserError, match="epochs"):
        queue.add(config.replace(epochs=0), inventory)
    assert [j.id for j in queue.jobs()] == [1]


def test_cli_queue_add_list_cancel(fake_four, tmp_path, capsys, stop_runner):
    store = RunStore()
    holder = prepare_run(RunConfig(output_dir=str(tmp_path / "runs"),
                                   devices=DeviceSelection(gpus=("0",))), FOUR, store)
    try:
        code = cli.main(["queue", "add", "--gpus", "0", "--epochs", "1", "--name", "later",
                         "-o", str(tmp_path / "runs")])
        assert code == 0
        assert "Queued job 1 (later): demo on demo, GPU 0, 1 epoch" in capsys.readouterr().out
        queue = JobQueue(store)
        wait_for(lambda: queue.get(1).message, 30, "the runner to say what job 1 waits for")
        assert cli.main(["queue", "list"]) == 0
        listing = capsys.readouterr().out
        assert "job 1" in listing and (f"waiting: GPU 0 is in use by run "
                                       f"'{holder.run_dir.path.name}'") in listing
        assert "Queue runner: pid" in listing
        assert cli.main(["queue", "add", "--gpus", "3", "--name", "x"]) == cli.EXIT_USAGE
        err = capsys.readouterr().err
        assert "GPU 3 runs" in err and "--allow-busy" in err
        assert cli.main(["queue", "cancel", "1"]) == 0
        assert "Job 1 (later): cancelled." in capsys.readouterr().out
        assert cli.main(["queue", "cancel", "1"]) == cli.EXIT_USAGE
        assert "is cancelled; there is nothing to cancel" in capsys.readouterr().err
        assert cli.main(["queue", "list", "--json", "--all"]) == 0
        (listed,) = json.loads(capsys.readouterr().out)
        assert listed["state"] == "cancelled"
        # `train` on a held GPU says who holds it and offers the queue.
        assert cli.main(["train", "--gpus", "0", "-o", str(tmp_path / "runs")]) == cli.EXIT_USAGE
        assert "GPU 0 is in use by run" in capsys.readouterr().err
    finally:
        holder.release()


# -- the whole path: app, store, runner, real runs -----------------------------------------------


@pytest.mark.parametrize("command", [["queue", "add"], ["sweep", "start", "--lr", "1e-3,1e-2"]])
def test_queue_add_and_sweep_start_refuse_what_train_refuses(command, tmp_path, capsys):
    """Issue 29, finding 11: `queue add` and `sweep start` queued data `train` refuses
    (NaN values here); the job failed later, seen only in the runner's log or `sweep
    show`. Now the same check as `train`'s refuses it at once: exit 2, the file and the
    sample named, nothing queued."""
    x = np.ones((64, 4), dtype="float32")
    x[5, 2] = np.nan
    data = tmp_path / "nan.npz"
    np.savez(data, x_train=x, y_train=np.arange(64) % 2)
    code = cli.main([*command, "--data", str(data), "--cpu", "--epochs", "1",
                     "-o", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE, err
    assert "nan.npz" in err and "NaN" in err and "sample 5" in err, err
    store = RunStore()
    assert JobQueue(store).jobs(finished=True) == [] and store.runs() == []
    assert not (tmp_path / "runs").exists()


def test_sweep_start_refuses_a_metric_its_runs_never_report(tmp_path, capsys):
    """Issue 29, finding 11: `--metric bogus --median-stop` was queued and the sweep never
    named a best trial (nor stopped one). The demo's runs report the loss and accuracy,
    and their `val_` forms: any other name is refused before queuing, naming those."""
    code = cli.main(["sweep", "start", "--lr", "1e-3,1e-2", "--metric", "bogus",
                     "--median-stop", "--cpu", "-o", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE, err
    assert ("the trials' epochs report accuracy, loss, val_accuracy, val_loss, not bogus"
            in err), err
    assert JobQueue(RunStore()).jobs(finished=True) == []


@pytest.fixture
def tiny_data(tmp_path) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1200, 16)).astype("float32")
    y = (x[:, 0] > 0).astype("int64")
    np.savez(tmp_path / "data.npz", x_train=x, y_train=y)
    (tmp_path / "mlp.py").write_text(textwrap.dedent("""
        import keras

        def build_model(input_shape, num_classes):
            return keras.Sequential([keras.Input(input_shape),
                                     keras.layers.Dense(64, activation="relu"),
                                     keras.layers.Dense(num_classes, activation="softmax")])
    """))
    return tmp_path / "mlp.py", tmp_path / "data.npz"


@pytest.mark.slow
def test_two_queued_runs_on_disjoint_gpus_run_at_once_a_third_waits_across_an_app_restart(
        qtbot, fake_four, tiny_data, tmp_path, stop_runner, monkeypatch):
    from mgpu_gui.gui.jobs.telemetry_source import TelemetrySource
    from mgpu_gui.gui.main_window import MainWindow
    from mgpu_gui.testing import faults
    from mgpu_gui.testing.fake_pynvml import FakeGpu, fake_nvml

    def window() -> MainWindow:
        nvml = fake_nvml([FakeGpu(uuid=f"GPU-fake-{i}", bus=f"00000000:0{i}:00.0".encode())
                          for i in range(4)])
        win = MainWindow(telemetry=TelemetrySource(nvml=nvml))
        qtbot.addWidget(win)
        qtbot.waitUntil(lambda: win.gpu_panel.inventory is not None, timeout=10_000)
        return win

    model, data = tiny_data
    # Run a waits 20 ms for each batch (a sleep, no CPU), so that it still holds GPU 0 when
    # the window has restarted, however fast the machine runs the rest.
    monkeypatch.setenv(faults.ENV_VAR, "slow_input=20@1:1")
    monkeypatch.setenv(faults.ONLY_VAR, "-a")
    # No export: its check in a fresh process is seconds per run, and not this test's point.
    base = RunConfig(model=str(model), data=str(data), batch_per_replica=8, epochs=2,
                     output_dir=str(tmp_path / "runs"), batch_event_interval_s=0.0,
                     export_formats=())
    first = window()
    inventory = first.gpu_panel.inventory
    for name, gpus, epochs in (("a", ("0", "1"), 4), ("b", ("GPU-fake-2",), 2), ("c", ("0",), 1)):
        first.queue_panel.add(base.replace(run_name=name, epochs=epochs,
                                           devices=DeviceSelection(gpus=gpus)), inventory)
    store = RunStore()  # the test's own look at the store the windows share
    queue = JobQueue(store)

    def runs() -> dict[str, object]:
        return {r.run_dir.name.rsplit("-", 1)[-1]: r for r in store.runs()}

    # a and b run at the same time; c waits for GPU 0, which a holds.
    wait_for(lambda: {"a", "b"} <= set(runs()) and all(
        runs()[n].started is not None for n in "ab"), 120, "runs a and b to start training")
    assert "c" not in runs()
    job_c = queue.get(3)
    assert job_c.state is JobState.QUEUED and "GPU 0 is in use by run" in job_c.message
    first.close()  # the app restarts; the queue runner and its runs go on
    assert runner_pid(store.path) is not None

    second = window()
    # b (2 epochs) may have ended by now, which takes it off the list; a and c are there.
    qtbot.waitUntil(lambda: {"a", "c"} <= {job.name for job in second.queue_panel.jobs},
                    timeout=10_000)
    states = {job.name: second.queue_panel.table.item(row, 4).text()
              for row, job in enumerate(second.queue_panel.jobs)}
    assert states["a"].endswith("running") and states["c"].startswith("waiting: GPU 0")
    qtbot.waitUntil(lambda: second.gpu_panel._rows[0].use.holder != "", timeout=10_000)
    assert second.gpu_panel._rows[0].use.waiting == (3,)
    assert "in use by run" in second.gpu_panel._rows[0].processes.text()

    wait_for(lambda: len(runs()) == 3 and all(r.status is RunState.COMPLETED
                                              for r in runs().values()), 300,
             "the three runs to complete")
    a, b, c = (runs()[n] for n in "abc")
    assert a.started < b.ended and b.started < a.ended, "a and b did not overlap"
    assert c.started > a.ended, "c started before a gave GPU 0 back"
    assert [r.epochs_done for r in (a, b, c)] == [4, 2, 1]
    assert json.loads(store.database.db.execute(
        "SELECT claims FROM runs WHERE id = ?", (c.id,)).fetchone()[0]) == ["GPU-fake-0"]
    second.queue_panel.refresh()
    assert [j.state for j in queue.jobs(finished=True)] == [JobState.STARTED] * 3
    assert queue.jobs() == []  # their runs ended: the Runs tab has them now
    second.close()


def test_train_on_a_held_gpu_offers_the_queue_and_a_busy_gpu_needs_confirmation(
        qtbot, fake_four, tmp_path, monkeypatch, stop_runner):
    from mgpu_gui.gui import main_window
    from mgpu_gui.gui.jobs.telemetry_source import TelemetrySource
    from mgpu_gui.gui.main_window import MainWindow

    asked: list[str] = []
    monkeypatch.setattr(main_window, "offer_queue",
                        lambda parent, error: asked.append(error.reason) or True)
    monkeypatch.setattr(main_window, "confirm_busy_gpus",
                        lambda parent, error: asked.append(error.reason) or False)
    win = MainWindow(telemetry=TelemetrySource(inventory=query_inventory()))
    qtbot.addWidget(win)
    win.run_setup.set_config(RunConfig(epochs=1, output_dir=str(tmp_path / "runs"),
                                       export_formats=()))
    qtbot.waitUntil(lambda: win.gpu_panel.inventory is not None, timeout=10_000)
    holder = prepare_run(RunConfig(output_dir=str(tmp_path / "runs"),
                                   devices=DeviceSelection(gpus=("0",))), FOUR, win.store)
    try:
        win.queue_panel.refresh()
        assert win.gpu_panel._rows[0].use.holder == (
            f"run '{holder.run_dir.path.name}' (id {holder.run_id})")
        win.gpu_panel.set_checked([0])
        qtbot.waitUntil(win.train_action.isEnabled, timeout=10_000)
        assert "GPU 0 is in use by another run (shown above)" in win.gpu_panel.warning.text()
        win.train_action.trigger()  # prepared off the GUI thread: the answer comes back
        qtbot.waitUntil(lambda: len(asked) == 1, timeout=10_000)
        assert asked[-1].startswith("GPU 0 is in use by run")
        assert not win.controller.is_running()
        (job,) = win.queue_panel.jobs  # queued instead, as the user chose
        assert job.config.devices.gpus == ("GPU-fake-0",) and job.waiting
        win.gpu_panel.set_checked([3])  # pid 4242 runs there; the user says no
        win.train_action.trigger()
        qtbot.waitUntil(lambda: len(asked) == 2, timeout=10_000)
        assert "GPU 3 runs pid 4242" in asked[-1] and not win.controller.is_running()
        assert len(win.queue_panel.jobs) == 1
    finally:
        holder.release()
        win.close()


@pytest.mark.slow
def test_cancelling_a_started_job_stops_its_run_resumably(fake_four, tiny_data, tmp_path,
                                                          capsys, stop_runner):
    model, data = tiny_data
    assert cli.main(["queue", "add", "--gpus", "1", "--model", str(model), "--data", str(data),
                     "--epochs", "50", "--batch", "8", "--export", "none",
                     "-o", str(tmp_path / "runs")]) == 0
    store = RunStore()
    queue = JobQueue(store)
    wait_for(lambda: queue.get(1).run_id is not None and store.get(
        queue.get(1).run_id).epochs_done >= 1, 120, "the job's run to finish an epoch")
    capsys.readouterr()
    assert cli.main(["queue", "cancel", "1"]) == 0
    run_id = queue.get(1).run_id
    assert f"stopping its run {run_id} at the next batch" in capsys.readouterr().out
    wait_for(lambda: store.get(run_id).status is RunState.STOPPED, 60, "the run to stop")
    assert 1 <= store.get(run_id).epochs_done < 50
    assert queue.describe(queue.get(1)) == f"run {run_id} stopped"


@pytest.mark.slow
def test_a_job_whose_builder_raises_fails_with_the_builders_error(fake_four, tiny_data,
                                                                   tmp_path, capsys,
                                                                   stop_runner):
    """Issue 29, finding 11: a `.py` builder that raises passes `queue add` (only building
    the model shows it, as in `train`), then is refused in its worker's setup, which
    leaves no run folder and no run. The job once showed "dropped" (its run deleted);
    it is `failed`, with the builder's error, and its sweep trial would be too."""
    _, data = tiny_data
    raises = tmp_path / "raises.py"
    raises.write_text("def build_model(input_shape, num_classes):\n"
                      "    raise RuntimeError('boom in user code')\n")
    assert cli.main(["queue", "add", "--gpus", "1", "--model", str(raises), "--data",
                     str(data), "--epochs", "1", "--export", "none",
                     "-o", str(tmp_path / "runs")]) == 0
    queue = JobQueue(RunStore())
    wait_for(lambda: queue.get(1).state is JobState.FAILED, 120, "the job to fail")
    job = queue.get(1)
    assert "build_model() failed at line 2" in job.message, job.message
    assert "boom in user code" in job.message
    assert trial_status(job.state, job.run_id, None, "") is TrialStatus.FAILED
    assert RunStore().runs() == [] and not any((tmp_path / "runs").iterdir())  # no run folder
    capsys.readouterr()
    assert cli.main(["queue", "list", "--all"]) == 0
    listed = capsys.readouterr().out
    assert "failed" in listed and "boom in user code" in listed, listed


def test_the_curves_of_a_run_another_process_supervises_follow_it_live(qtbot, tmp_path):
    """A queued job's run reports to the queue runner; the window follows it in the store."""
    from mgpu_gui.core.events import BatchEnd, EpochEnd, RunFinished, RunStarted, RunStatus
    from mgpu_gui.gui.jobs.telemetry_source import TelemetrySource
    from mgpu_gui.gui.main_window import MainWindow

    win = MainWindow(telemetry=TelemetrySource(inventory=NO_GPU))
    qtbot.addWidget(win)
    run = prepare_run(RunConfig(output_dir=str(tmp_path / "runs"), epochs=3), NO_GPU, win.store)
    recorder = RunStore().recorder(run.run_id)  # as the other process's supervisor records
    clock = iter(range(1, 1000))

    def batches(epoch: int) -> list:
        return [BatchEnd(epoch=epoch, batch=b, steps=4, metrics={"loss": 1.0 / (epoch + b + 1)},
                         samples_per_s=100.0, t=float(next(clock))) for b in range(4)]

    def record(events: list) -> None:
        for event in events:
            recorder.handle(event)
        recorder.flush()

    try:
        record([RunStarted(run_dir=str(run.run_dir.path), device_kind="cpu", devices=[],
                           device_names=[], num_replicas=2, batch_per_replica=32,
                           global_batch=64, train_samples=256, val_samples=0, test_samples=0,
                           steps_per_epoch=4, dropped_per_epoch=0, epochs=3, initial_epoch=0,
                           model_name="m", params=1, cross_device_ops="", tf_version="",
                           keras_version="", summary="", t=0.5), *batches(0)])
        win.show_run_curves(run.run_id)
        assert win.follower.following
        assert len(win.curves.series("loss")[1]) == 4
        record([EpochEnd(epoch=0, epochs=3, metrics={"loss": 0.5}, samples_per_s=100.0,
                         duration_s=1.0, t=float(next(clock))), *batches(1)])
        qtbot.waitUntil(lambda: len(win.curves.series("loss")[1]) == 8, timeout=5_000)
        assert "1 of 3 epochs" in win.progress.status_label.text()
        record([RunFinished(status=RunStatus.STOPPED, epochs_done=1, message="",
                            t=float(next(clock)))])
        qtbot.waitUntil(lambda: not win.follower.following, timeout=5_000)
    finally:
        recorder.close()
        run.release()
        win.close()


def test_a_job_an_earlier_runner_died_starting_fails_instead_of_training_twice(tmp_path):
    queue = JobQueue(RunStore())
    job = queue.add(RunConfig(output_dir=str(tmp_path)), NO_GPU)
    other = queue.add(RunConfig(output_dir=str(tmp_path)), NO_GPU)
    queue.mark_starting(job.id)  # ... and the runner was killed here
    assert [j.id for j in queue.fail_unfinished_starts()] == [job.id]
    stuck = queue.get(job.id)
    assert stuck.state is JobState.FAILED and "may be in the Runs tab" in stuck.message
    assert queue.get(other.id).state is JobState.QUEUED


def test_queue_list_shows_a_run_whose_worker_died_with_its_runner_as_interrupted(
        tmp_path, capsys):
    """Issue 29, item 14: after a SIGKILL of the runner and its worker, `queue list` said
    the dead run was "running" and its devices stayed held. The list reconciles first:
    a running run whose lock nobody holds is interrupted, and holds nothing."""
    store = RunStore()
    queue = JobQueue(store)
    job = queue.add(RunConfig(output_dir=str(tmp_path)), NO_GPU)
    run = prepare_run(RunConfig(output_dir=str(tmp_path)), NO_GPU, store)
    queue.mark_started(job.id, run.run_id)
    run.release()  # the worker and its runner are gone: the lock with them
    assert store.get(run.run_id).status is RunState.RUNNING
    assert cli.main(["queue", "list", "--all"]) == 0
    assert f"run {run.run_id} interrupted" in capsys.readouterr().out
    assert claims.in_use(store.database, ())[0] == {}


@pytest.mark.slow
@pytest.mark.jax
def test_a_queued_jax_job_claims_its_gpus_and_trains_on_the_jax_engine(fake_four, tiny_data,
                                                                        tmp_path, stop_runner):
    pytest.importorskip("jax", reason="the JAX engine's tests need jax")
    model, data = tiny_data
    np.savez(data, **{k: v[:160] for k, v in np.load(data).items()})  # 9 steps of 16
    no_export = tmp_path / "no_export.json"  # the export's check in a fresh process: seconds
    no_export.write_text(json.dumps(RunConfig(export_formats=()).to_dict()))
    assert cli.main(["queue", "add", "--config", str(no_export), "--engine", "jax",
                     "--gpus", "1,2", "--model", str(model),
                     "--data", str(data), "--epochs", "1", "--batch", "8",
                     "-o", str(tmp_path / "runs")]) == 0
    store = RunStore()
    queue = JobQueue(store)
    assert queue.get(1).config.engine == "jax"
    wait_for(lambda: queue.get(1).run_id is not None and store.get(
        queue.get(1).run_id).status is not RunState.RUNNING, 120, "the job's run to end")
    run = store.get(queue.get(1).run_id)
    assert run.status is RunState.COMPLETED and run.epochs_done == 1, run.message
    assert json.loads(store.database.db.execute(
        "SELECT claims FROM runs WHERE id = ?", (run.id,)).fetchone()[0]) == [
        "GPU-fake-1", "GPU-fake-2"]
    run_dir = RunDir(run.run_dir)
    assert run_dir.read_config().engine == "jax"
    started = next(json.loads(line) for line in run_dir.events_jsonl.read_text().splitlines()
                   if json.loads(line)["type"] == "run_started")
    assert started["devices"] == ["cpu:0", "cpu:1"]
    assert started["cross_device_ops"].startswith("DataParallel over cpu:0, cpu:1 (JAX ")
