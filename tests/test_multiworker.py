"""Training across machines: two `mgpu-train worker` processes on 127.0.0.1.

Each worker is the real CLI (supervisor, worker process, TF_CONFIG, the
coordination service); CPU, a tiny model, one replica per worker.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.events import (
    ClusterFormed,
    EpochEnd,
    ModelExported,
    RunFinished,
    RunStarted,
    RunStatus,
    StageStarted,
    parse_event,
)
from mgpu_gui.core.runs.cluster import (
    ClusterError,
    ClusterSpec,
    check_port_free,
    differing_settings,
    settings_vector,
    shared_settings,
)
from mgpu_gui.core.runs.folder import RunDir
from tests.helpers.ports import free_ports

ROOT = Path(__file__).resolve().parents[1]


# -- no TensorFlow -------------------------------------------------------------------
def test_cluster_spec_is_parsed_and_refused_clearly():
    spec = ClusterSpec.parse(" 10.0.0.1:2222, 10.0.0.2:2223 ", 1)
    assert spec.workers == ("10.0.0.1:2222", "10.0.0.2:2223") and spec.port == 2223
    assert json.loads(spec.tf_config()) == {
        "cluster": {"worker": ["10.0.0.1:2222", "10.0.0.2:2223"]},
        "task": {"type": "worker", "index": 1}}
    assert ClusterSpec.from_json(spec.to_json()) == spec
    assert spec.describe(0) == "worker 0 (10.0.0.1:2222, the chief)"
    assert spec.named_in("unhealthy: /job:worker/replica:0/task:1, /job:worker/task:0") == [0, 1]
    for hosts, index, words in (("a:1,b", 0, "'b' has no port"), ("a:1,b:99999", 0, "valid"),
                                ("a:1", 0, "at least two"), ("a:1,a:1", 0, "more than once"),
                                ("a:1,b:2", 2, "--index 2 is not a worker")):
        with pytest.raises(ClusterError, match=words):
            ClusterSpec.parse(hosts, index)


def test_a_port_in_use_is_named():
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ClusterError, match=f"Port {port} is in use on this machine"):
            check_port_free(port)
    check_port_free(port)  # free again


def test_a_killed_non_chiefs_scratch_folder_is_removed_by_the_next_worker(tmp_path,
                                                                          monkeypatch):
    """Issue 29, item 14: a non-chief killed by SIGKILL left its `mgpu-worker-*` folder
    (14 MB) behind. The next non-chief removes such folders: no run lock in them held,
    and older than a minute (a worker starting now has not taken its lock yet)."""
    import time

    from mgpu_gui.cli.worker import SCRATCH_PREFIX, remove_stale_scratch
    from mgpu_gui.core.runs.lock import RunLock

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    folders = {}
    for name in ("dead", "live", "young"):
        run = tmp_path / f"{SCRATCH_PREFIX}{name}" / "20261127-120000-dense"
        run.mkdir(parents=True)
        RunLock.acquire(run).release()  # its run.lock, as a worker leaves it
        folders[name] = run.parent
    old = time.time() - 3600
    for name in ("dead", "live"):
        os.utime(folders[name], (old, old))
    held = RunLock.acquire(folders["live"] / "20261127-120000-dense")
    try:
        assert remove_stale_scratch() == [folders["dead"]]
    finally:
        held.release()
    assert not folders["dead"].exists() and folders["live"].exists()
    assert folders["young"].exists()


def test_settings_compare_by_content_not_by_machine(tmp_path):
    data = tmp_path / "a" / "d.npz"
    data.parent.mkdir()
    np.savez(data, x_train=np.zeros((4, 2), "float32"), y_train=np.zeros(4, "int64"))
    copy = tmp_path / "copy.npz"
    copy.write_bytes(data.read_bytes())
    here = RunConfig(data=str(data), output_dir="/here", run_name="x")
    there = RunConfig(data=str(copy), output_dir="/there")  # same content, another path
    assert shared_settings(here, 1) == shared_settings(there, 1)
    other = shared_settings(here.replace(learning_rate=0.5, epochs=3), 1)
    mine = shared_settings(here, 1)
    assert differing_settings(mine, settings_vector(mine, 48), settings_vector(other, 48)) == [
        "epochs", "learning_rate"]
    assert shared_settings(here, 2) != shared_settings(here, 1)


# -- two workers on loopback -----------------------------------------------------------
EPOCHS = 3
TRANSFER = {"--freeze-epochs": 1}  # the head alone for an epoch, then the whole model


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cluster")
    rng = np.random.default_rng(0)
    centers = rng.normal(0, 3, size=(3, 8))

    def blobs(n):
        y = rng.integers(0, 3, size=n)
        return (centers[y] + rng.normal(0, 1, size=(n, 8))).astype("float32"), y.astype("int64")

    (xt, yt), (xv, yv), (xs, ys) = blobs(250), blobs(64), blobs(40)
    np.savez(root / "blobs.npz", x_train=xt, y_train=yt, x_val=xv, y_val=yv, x_test=xs,
             y_test=ys)
    (root / "dense.py").write_text(textwrap.dedent("""
        import keras

        def build_model(input_shape, num_classes):
            # A nested "backbone": the transfer-learning stages can freeze it.
            backbone = keras.Sequential([keras.Input(input_shape),
                                         keras.layers.Dense(16, activation="relu")],
                                        name="backbone")
            inputs = keras.Input(input_shape)
            hidden = backbone(inputs, training=False)
            outputs = keras.layers.Dense(num_classes, activation="softmax")(hidden)
            return keras.Model(inputs, outputs, name="dense")
    """))
    return {"root": root, "data": root / "blobs.npz", "model": root / "dense.py"}


class Cli:
    """One `mgpu-train` process; its events from --json on stdout."""

    def __init__(self, *args: str, out: Path):
        # A store per process: on one machine, a run's claim on the CPU would keep the
        # other processes of the test from starting.
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2",
               "PYTHONPATH": str(ROOT), "MGPU_GUI_STORE": str(out.with_suffix(".sqlite"))}
        self.log = open(out, "w")  # noqa: SIM115 (closed in wait)
        self.proc = subprocess.Popen([sys.executable, "-m", "mgpu_gui.cli.main", *args, "--json"],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     cwd=ROOT, env=env)
        self.out = out
        self.events: list = []

    def read_until(self, predicate) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.append(parse_event(line))
            if predicate(self.events[-1]):
                return
        raise AssertionError(f"ended first:\n{self.out.read_text()[-3000:]}")

    def wait(self, timeout: float = 120) -> int:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.append(parse_event(line))
        code = self.proc.wait(timeout)
        self.proc.stdout.close()
        self.log.close()
        return code

    @property
    def stderr(self) -> str:
        return self.out.read_text()

    def of(self, cls) -> list:
        return [e for e in self.events if isinstance(e, cls)]


def train_args(files, out: Path, **flags) -> list[str]:
    """No export unless a test asks for one (its check starts TensorFlow again, twice)."""
    settings = {"--model": files["model"], "--data": files["data"], "--epochs": EPOCHS,
                "--batch-per-replica": 16, "--seed": 7, "--export": "none", "-o": out, **flags}
    return ["--cpu", *[str(x) for kv in settings.items() for x in kv]]


def workers(files, tmp_path, ports, *, flags=None, peer_timeout=30, tag="") -> list[Cli]:
    cluster = ",".join(f"127.0.0.1:{p}" for p in ports)
    return [Cli("worker", "--cluster", cluster, "--index", str(i), "--peer-timeout",
                str(peer_timeout), "--start-timeout", "60",
                *train_args(files, tmp_path / f"out{i}", **(flags or {})),
                out=tmp_path / f"worker{i}{tag}.log") for i in range(len(ports))]


@pytest.mark.slow
def test_two_workers_train_like_one_process_with_two_replicas(files, tmp_path):
    """Two workers of one replica each train exactly as one process with two replicas.

    The same losses per epoch prove that each worker trains on its half of the global batch
    one machine would train on (both read the same seeded order: the input's epoch e is
    a function of (seed, e) alone, `pipeline.EpochShuffle`), that the gradients are summed
    across the workers, and that the metrics are reduced over every replica. Three epochs
    through both transfer-learning stages (1 frozen + 2 fine-tuned): the second `fit`
    recompiles the model, so each worker's step functions are traced again for its
    trainable weights and metrics, and its new iterator starts at the stage's epoch; the
    epoch inside stage 2 checks an iterator counting on by itself. The CLI's fixed costs
    (starting TensorFlow, the cluster, the chief's export check in a fresh process) take nearly
    all the time; the 7 steps of an epoch take about 0.1 s.
    """
    import keras

    single = Cli("train", "--replicas", "2", *train_args(files, tmp_path / "single", **TRANSFER),
                 out=tmp_path / "single.log")
    chief, other = workers(files, tmp_path, free_ports(2), flags={**TRANSFER, "--export": "keras"})
    codes = [cli.wait() for cli in (chief, other, single)]
    assert codes == [0, 0, 0], chief.stderr[-3000:] + other.stderr[-3000:]

    losses = {name: [e.metrics["loss"] for e in cli.of(EpochEnd)]
              for name, cli in (("chief", chief), ("other", other), ("single", single))}
    assert len(losses["single"]) == EPOCHS
    # Measured on 2 cores, 15 repeats (11 with the three processes sharing one core): the
    # same losses to 6 decimals every time, the workers' and the one process's at most
    # 2.4e-7 apart (one float32 step). Batches in another order move them by 0.003-0.1.
    assert np.allclose(losses["chief"], losses["single"], rtol=0, atol=1e-5), losses
    assert np.allclose(losses["other"], losses["single"], rtol=0, atol=1e-5), losses
    val = [e.metrics["val_loss"] for e in chief.of(EpochEnd)]
    assert np.allclose(val, [e.metrics["val_loss"] for e in single.of(EpochEnd)], rtol=0,
                       atol=1e-5)
    stages = {name: [(e.stage, e.first_epoch, e.trainable_params) for e in cli.of(StageStarted)]
              for name, cli in (("chief", chief), ("other", other), ("single", single))}
    assert stages["chief"] == stages["other"] == stages["single"], stages
    (frozen, tuned) = stages["chief"]
    assert frozen[:2] == (1, 0) and tuned[:2] == (2, 1) and frozen[2] < tuned[2]

    (formed,) = chief.of(ClusterFormed)
    assert [w["index"] for w in formed.workers] == [0, 1] and formed.workers[0]["chief"]
    started = chief.of(RunStarted)[0]
    assert started.num_replicas == 2 and started.global_batch == 32
    assert [d.split("/device")[0] for d in started.devices] == [
        "/job:worker/replica:0/task:0", "/job:worker/replica:0/task:1"]

    # Only the chief writes: its run folder is complete; the other's scratch folder is gone.
    run_dir = RunDir(Path(started.run_dir))
    assert run_dir.backup_epoch() == EPOCHS and run_dir.best_checkpoint.is_file()
    assert (run_dir.cluster_json.is_file() and run_dir.history_csv.is_file())
    assert not (tmp_path / "out1").exists()
    assert not Path(other.of(RunStarted)[0].run_dir).exists()
    assert other.of(ModelExported) == []
    (exported,) = chief.of(ModelExported)
    assert exported.verified and exported.max_abs_diff == 0
    assert chief.of(RunFinished)[0].status is RunStatus.COMPLETED
    model = keras.saving.load_model(exported.path)  # no strategy in this process
    assert model.predict(np.zeros((2, 8), "float32"), verbose=0).shape == (2, 3)


@pytest.mark.slow
def test_a_killed_worker_stops_the_other_and_both_resume(files, tmp_path):
    ports = free_ports(2)
    # 31 steps per epoch; the resume lands in either transfer-learning stage
    flags = {"--epochs": 6, "--batch-per-replica": 4, "--freeze-epochs": 2}
    chief, other = workers(files, tmp_path, ports, flags=flags, peer_timeout=10)
    other.read_until(lambda e: isinstance(e, EpochEnd) and e.epoch == 1)
    scratch = other.of(RunStarted)[0].run_dir
    killed = worker_pid(scratch)
    os.kill(killed, signal.SIGKILL)
    died = time.monotonic()
    assert chief.wait(timeout=60) == 1
    bounded = time.monotonic() - died
    assert other.wait() == 1
    assert bounded < 30, bounded
    message = chief.stderr
    assert f"Lost worker 1 (127.0.0.1:{ports[1]})" in message, message[-3000:]
    assert "restart every worker with the same command" in message
    assert "run the same `mgpu-train worker` command on every machine again" in message
    assert "mgpu-train resume" not in message
    assert "The chief's run folder keeps the completed epochs." in other.stderr
    run_dir = RunDir(Path(chief.of(RunStarted)[0].run_dir))
    done = run_dir.backup_epoch()
    assert done >= 1

    chief, other = workers(files, tmp_path, ports, flags=flags, tag="-again")
    assert [chief.wait(), other.wait()] == [0, 0], chief.stderr[-3000:]
    assert "Resuming the cluster run" in chief.stderr
    assert chief.of(RunStarted)[0].run_dir == str(run_dir.path)
    assert chief.of(RunStarted)[0].initial_epoch == other.of(RunStarted)[0].initial_epoch == done
    assert [e.epoch for e in chief.of(EpochEnd)] == list(range(done, 6))
    for cli in (chief, other):
        assert [e.stage for e in cli.of(StageStarted)] == ([1, 2] if done < 2 else [2])
    recorded = [e.epoch for e in run_dir.events() if isinstance(e, EpochEnd)]
    assert sorted(set(recorded)) == list(range(6)) and recorded[-1] == 5
    assert chief.of(RunFinished)[0].status is RunStatus.COMPLETED


def worker_pid(run_folder: str) -> int:
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"mgpu_gui.processes.training_worker" in args and run_folder.encode() in args:
            return int(cmdline.parent.name)
    raise AssertionError(f"no worker process for {run_folder}")


@pytest.mark.slow
def test_different_settings_and_a_missing_worker_fail_clearly(files, tmp_path):
    ports = free_ports(3)
    chief, other = workers(files, tmp_path, ports[:2])
    other.proc.kill()  # replaced by one with another learning rate
    other.wait()
    cluster = f"127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}"
    other = Cli("worker", "--cluster", cluster, "--index", "1",
                *train_args(files, tmp_path / "out1", **{"--lr": 0.5}),
                out=tmp_path / "other-lr.log")
    alone = Cli("worker", "--cluster", f"127.0.0.1:{ports[2]},127.0.0.1:{free_ports(1)[0]}",
                "--index", "0", "--start-timeout", "3", *train_args(files, tmp_path / "alone"),
                out=tmp_path / "alone.log")
    # Refused before anything trained: exit 2, as `train --help` says (issue 29, item 14).
    assert [chief.wait(), other.wait(), alone.wait()] == [2, 2, 2]
    assert "The workers' settings differ: worker 1" in chief.stderr, chief.stderr[-2000:]
    assert "learning_rate" in chief.stderr and "learning_rate" in other.stderr
    assert "The cluster did not form within 3 s: worker 1 (127.0.0.1:" in alone.stderr, (
        alone.stderr[-2000:])
    assert not any((tmp_path / "out0").iterdir())  # a setup failure leaves no run folder


@pytest.mark.slow
def test_the_app_starts_the_chief_and_shows_the_cluster(qtbot, files, tmp_path):
    from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState
    from mgpu_gui.gui.jobs.telemetry_source import TelemetrySource
    from mgpu_gui.gui.main_window import MainWindow

    win = MainWindow(telemetry=TelemetrySource(inventory=GpuInventory(NvmlState.NO_DRIVER)))
    qtbot.addWidget(win)
    win.run_setup.set_config(RunConfig(model=str(files["model"]), data=str(files["data"]),
                                       epochs=2, batch_per_replica=16, seed=7,
                                       export_formats=(), output_dir=str(tmp_path / "runs")))
    qtbot.waitUntil(win.cluster_action.isEnabled, timeout=10_000)
    dialog = win.train_across_machines()
    assert not dialog.start_button.isEnabled()
    dialog.workers.setText("127.0.0.1:1")
    assert "needs at least two" in dialog.problem.text()
    ports = free_ports(2)
    cluster = f"127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}"
    dialog.workers.setText(cluster)
    dialog.start_timeout.setValue(90)
    (command,) = dialog.commands.toPlainText().splitlines()
    assert command.startswith(f"mgpu-train worker --cluster {cluster} --index 1 --config ")
    with qtbot.waitSignal(win.controller.finished, timeout=240_000) as finished:
        dialog.start_button.click()
        assert win.controller.is_running()
        config_file = tmp_path / "runs" / "cluster-config.json"
        other = Cli("worker", "--cluster", cluster, "--index", "1", "--config", str(config_file),
                    "--start-timeout", "90", "-o", str(tmp_path / "out1"),
                    out=tmp_path / "worker1.log")
    outcome = finished.args[0]
    assert other.wait() == 0, other.stderr[-3000:]
    assert outcome.status is RunStatus.COMPLETED, outcome.message
    assert win.log.indexOf(win.cluster_panel) >= 0
    table = win.cluster_panel.table
    assert table.rowCount() == 2
    assert [table.item(r, 0).text() for r in range(2)] == ["0 (chief)", "1"]
    assert table.item(1, 1).text() == f"127.0.0.1:{ports[1]}"
    assert "CPU" in table.item(1, 3).text() and table.item(0, 4).text() == "completed"
    assert len(win.curves.series("val_loss")[1]) == 2
    win.close()


@pytest.mark.slow
def test_a_stop_on_the_chief_stops_every_worker_at_the_same_step(files, tmp_path):
    flags = {"--epochs": 20, "--batch-per-replica": 4}
    chief, other = workers(files, tmp_path, free_ports(2), flags=flags)
    chief.read_until(lambda e: isinstance(e, EpochEnd) and e.epoch == 0)
    chief.proc.send_signal(signal.SIGINT)  # Ctrl-C: the chief's supervisor asks for a stop
    asked = time.monotonic()
    assert chief.wait(timeout=60) == 130, chief.stderr[-3000:]
    assert other.wait(timeout=60) == 0, other.stderr[-3000:]
    assert time.monotonic() - asked < 30
    for cli in (chief, other):
        (finished,) = cli.of(RunFinished)
        assert finished.status is RunStatus.STOPPED
    assert [e.epoch for e in chief.of(EpochEnd)] == [e.epoch for e in other.of(EpochEnd)]
    assert chief.of(RunFinished)[0].epochs_done < 20
    assert "run the same `mgpu-train worker` command on every machine again" in chief.stderr
