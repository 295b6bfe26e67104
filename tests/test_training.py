"""Real data-parallel training on 1, 2 and 4 logical CPU replicas.

One host process per replica count runs every job of that count (see
helpers/replica_host.py); models and data are tiny so the module stays fast.
"""

from __future__ import annotations

import csv
import math
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

from mgpu_gui.core.children.supervisor import prepare_run
from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState
from mgpu_gui.core.events import (
    CheckpointSaved,
    EpochEnd,
    ModelExported,
    RunFailed,
    RunFinished,
    RunStarted,
    RunStatus,
    SetupProgress,
    SetupStep,
)
from mgpu_gui.core.runs import checkpoints as ckpt
from mgpu_gui.core.runs.folder import RunDir
from tests.helpers.hosts import ReplicaHost

pytestmark = pytest.mark.slow

NO_GPU = GpuInventory(state=NvmlState.NO_DRIVER, gpus=(), driver_version=None,
                      cuda_driver_version=None, message="No NVIDIA driver (test).")
GLOBAL_BATCH = 32


@pytest.fixture(scope="session")
def hosts():
    made: dict[int, ReplicaHost] = {}

    def get(replicas: int) -> ReplicaHost:
        if replicas not in made:
            made[replicas] = ReplicaHost(replicas)
        return made[replicas]

    yield get
    for host in made.values():
        host.close()


@pytest.fixture(scope="session")
def files(tmp_path_factory) -> dict[str, Path]:
    """Three Gaussian blobs in 8-D, and builders with and without BatchNormalization."""
    root = tmp_path_factory.mktemp("training")
    rng = np.random.default_rng(0)
    centers = rng.normal(0, 3, size=(3, 8))

    def blobs(n):
        y = rng.integers(0, 3, size=n)
        return (centers[y] + rng.normal(0, 1, size=(n, 8))).astype("float32"), y.astype("int64")

    x_train, y_train = blobs(250)  # 250 = 7 x 32 + 26: a partial last batch
    x_val, y_val = blobs(64)
    np.savez(root / "blobs.npz", x_train=x_train, y_train=y_train, x_val=x_val, y_val=y_val)
    for name, extra in (("dense", ""), ("bn", "keras.layers.BatchNormalization(),")):
        (root / f"{name}.py").write_text(textwrap.dedent(f"""
            import keras

            def build_model(input_shape, num_classes):
                return keras.Sequential([
                    keras.Input(input_shape),
                    keras.layers.Dense(16, activation="relu"),
                    {extra}
                    keras.layers.Dense(num_classes, activation="softmax"),
                ], name="{name}")
        """))
    return {"root": root, "data": root / "blobs.npz", "dense": root / "dense.py",
            "bn": root / "bn.py"}


def start(files, replicas: int, model: Path | str, tmp_path: Path, **overrides) -> RunDir:
    config = RunConfig(
        model=str(model), data=str(files["data"]), epochs=4,
        batch_per_replica=GLOBAL_BATCH // replicas, output_dir=str(tmp_path),
        devices=DeviceSelection(kind=DeviceKind.CPU, replicas=replicas),
        batch_event_interval_s=0.0, seed=7, export_formats=(),
    ).replace(**overrides)
    return prepare_run(config, NO_GPU).run_dir


def only(events, cls):
    return [e for e in events if isinstance(e, cls)]


LOSSES: dict[int, list[float]] = {}


@pytest.mark.parametrize("replicas", [1, 2, 4])
def test_trains_on_replicas_with_a_partial_last_batch(hosts, files, tmp_path, replicas):
    run_dir = start(files, replicas, files["dense"], tmp_path, export_formats=("keras",))
    code, events = hosts(replicas).run(run_dir.path)
    assert code == 0, only(events, RunFailed)
    started = only(events, RunStarted)[0]
    assert started.num_replicas == replicas
    assert started.global_batch == GLOBAL_BATCH
    assert started.batch_per_replica == GLOBAL_BATCH // replicas
    assert (started.steps_per_epoch, started.dropped_per_epoch) == (7, 26)
    # What the worker does before its first batch, said as it begins (issue 30, finding 3).
    assert [e.step for e in only(events, SetupProgress)] == [s.value for s in SetupStep]
    losses = [e.metrics["loss"] for e in only(events, EpochEnd)]
    assert len(losses) == 4 and all(math.isfinite(v) for v in losses)
    assert losses[-1] < losses[0]
    assert only(events, RunFinished)[0].status is RunStatus.COMPLETED
    exported = only(events, ModelExported)[0]
    assert exported.verified and Path(exported.path).exists()
    assert_one_backup_file(run_dir, 4)
    LOSSES[replicas] = losses


def assert_one_backup_file(run_dir: RunDir, epochs: int) -> None:
    """One model file per epoch: the backup's, which last.keras links to; no temp files."""
    state = ckpt.read_backup(run_dir.backup)
    assert state == ckpt.BackupState(epochs, run_dir.backup / ckpt.backup_model_name(epochs))
    assert sorted(p.name for p in run_dir.backup.iterdir()) == [
        ckpt.backup_model_name(epochs), ckpt.METADATA_NAME]
    assert run_dir.last_checkpoint.samefile(state.model)
    assert run_dir.best_checkpoint.is_file()
    assert not ckpt.temp_files(run_dir.path)


def optimizer_steps(path: Path) -> int:
    """The optimizer's step count stored in a `.keras` file (its first variable)."""
    import zipfile

    import h5py

    with zipfile.ZipFile(path) as archive, archive.open("model.weights.h5") as raw, \
            h5py.File(raw, "r") as weights:
        return int(weights["optimizer/vars/0"][()])


def test_same_global_batch_and_seed_give_the_same_losses():
    if set(LOSSES) != {1, 2, 4}:
        pytest.skip("needs the three replica runs above")
    for replicas in (2, 4):
        assert np.allclose(LOSSES[replicas], LOSSES[1], atol=1e-3), (replicas, LOSSES)


@pytest.mark.parametrize("replicas", [2, 4])
def test_batchnorm_with_partial_last_batch_has_no_nan(hosts, files, tmp_path, replicas):
    """Two epochs (each with its partial last batch dropped) show it; the fourth replica
    count makes the BatchNormalization synchronised across replicas."""
    run_dir = start(files, replicas, files["bn"], tmp_path, sync_batchnorm=replicas == 4,
                    epochs=2)
    code, events = hosts(replicas).run(run_dir.path)
    assert code == 0, only(events, RunFailed)
    for epoch in only(events, EpochEnd):
        assert all(math.isfinite(v) for v in epoch.metrics.values()), epoch.metrics


def test_stop_mid_epoch_leaves_resumable_backup_and_no_partial_epoch(hosts, files, tmp_path):
    host = hosts(2)
    run_dir = start(files, 2, files["dense"], tmp_path, epochs=5, export_formats=("keras",))
    code, events = host.run(run_dir.path, stop_at=(1, 2))  # epoch 2, third batch
    assert code == 0, only(events, RunFailed)
    finished = only(events, RunFinished)[0]
    assert finished.status is RunStatus.STOPPED and finished.epochs_done == 1
    assert [e.epoch for e in only(events, EpochEnd)] == [0]
    assert {e.epoch for e in only(events, CheckpointSaved)} == {0}
    assert run_dir.backup_epoch() == 1
    assert_one_backup_file(run_dir, 1)
    assert optimizer_steps(run_dir.last_checkpoint) == 7  # the partial epoch is not saved
    with open(run_dir.history_csv) as f:
        assert [row["epoch"] for row in csv.DictReader(f)] == ["0"]
    assert not run_dir.export_path("keras").exists()

    code, events = host.run(run_dir.path)  # resume in the same folder
    assert code == 0, only(events, RunFailed)
    assert only(events, RunStarted)[0].initial_epoch == 1
    assert [e.epoch for e in only(events, EpochEnd)] == [1, 2, 3, 4]
    assert only(events, RunFinished)[0].epochs_done == 5
    recorded = [e.epoch for e in run_dir.events() if isinstance(e, EpochEnd)]
    assert recorded == [0, 1, 2, 3, 4]  # no epoch lost or counted twice
    with open(run_dir.history_csv) as f:
        assert [row["epoch"] for row in csv.DictReader(f)] == ["0", "1", "2", "3", "4"]
    assert_one_backup_file(run_dir, 5)
    # The optimizer's state came back too: 5 epochs x 7 steps, not 4 x 7 from a fresh one.
    assert optimizer_steps(run_dir.last_checkpoint) == 35


def test_a_stop_during_validation_ends_it_and_the_epoch_is_not_recorded():
    """Keras validates after a stop; ours ends the validation (64 CPU replicas took
    minutes over it) and never records the epoch its cut-short metrics would describe.
    An epoch a stop cut short in training is not validated at all."""
    import threading

    import keras

    from mgpu_gui.engine.callbacks import EpochTracker, EventCallback, ValidateCompleteEpochs

    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(32, 8)).astype("float32"), rng.integers(0, 3, size=32)
    xv, yv = rng.normal(size=(400, 8)).astype("float32"), rng.integers(0, 3, size=400)
    emitted: list = []

    class Sink:
        started = True

        def emit(self, event) -> None:
            emitted.append(event)

    def fit(stop_when: str) -> tuple[EpochTracker, list[int]]:
        stop, tested = threading.Event(), []

        class Stopper(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                if stop_when == "training" and batch == 2:
                    stop.set()

            def on_test_batch_begin(self, batch, logs=None):
                tested.append(batch)
                if stop_when == "validation":
                    stop.set()

        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3, activation="softmax")])
        model.compile("adam", "sparse_categorical_crossentropy")
        tracker = EpochTracker(4)
        events = EventCallback(Sink(), tracker, global_batch=8, epochs=3, monitor="val_loss",
                               batch_interval_s=0.0, stop_requested=stop.is_set)
        model.fit(x, y, batch_size=8, epochs=3, validation_data=(xv, yv), validation_batch_size=8,
                  validation_freq=ValidateCompleteEpochs(tracker), callbacks=[Stopper(), events],
                  verbose=0)
        return tracker, tested

    tracker, tested = fit("validation")
    assert tracker.steps_done(0) == 4 and not tracker.complete(0)
    assert 1 <= len(tested) < 50  # of 50 validation batches
    tracker, tested = fit("training")
    assert tracker.steps_done(0) == 3 and tested == []
    assert not [e for e in emitted if isinstance(e, EpochEnd)]


def test_crash_before_the_backup_commit_resumes_from_the_previous_epoch(tmp_path, monkeypatch):
    """A crash after an epoch's model file, before its metadata: the resume redoes it."""
    import keras

    from mgpu_gui.engine.callbacks import CommitBackup, EpochCheckpoints

    backup, last, best = (tmp_path / "backup", tmp_path / "checkpoints" / "last.keras",
                          tmp_path / "checkpoints" / "best.keras")
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(32, 8)).astype("float32"), rng.integers(0, 3, size=32)

    def model() -> keras.Model:
        made = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3, activation="softmax")])
        made.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy")
        return made

    def callbacks(*extra) -> list:
        saver = EpochCheckpoints(backup, last, best, monitor="loss", best_so_far=None)
        return [saver, *extra, CommitBackup(saver)]

    first = model()
    first.fit(x, y, batch_size=8, epochs=1, callbacks=callbacks(), verbose=0)  # 4 steps
    after_one = [w.copy() for w in first.get_weights()]

    def crash(path: Path, text: str) -> None:
        raise RuntimeError("simulated crash before the metadata write")

    monkeypatch.setattr(ckpt, "write_text_atomically", crash)
    with pytest.raises(RuntimeError, match="simulated crash"):
        first.fit(x, y, batch_size=8, epochs=2, initial_epoch=1, callbacks=callbacks(),
                  verbose=0)
    monkeypatch.undo()
    # A writer killed mid-write leaves its temporary files behind.
    (backup / ".epoch-0002.tmp-99999.keras").write_bytes(b"PK\x03\x04 torn")
    (backup / ".training_metadata.tmp-99999.json").write_text('{"epoch": 2')

    state = ckpt.read_backup(backup)
    assert state == ckpt.BackupState(1, backup / "epoch-0001.keras")
    assert RunDir(tmp_path).backup_epoch() == 1
    assert (backup / "epoch-0002.keras").is_file()  # complete, but not committed
    assert last.samefile(backup / "epoch-0002.keras")

    class Probe(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.steps = int(self.model.optimizer.iterations.numpy())
            self.weights = self.model.get_weights()

    probe = Probe()
    resumed = model()
    resumed.fit(x, y, batch_size=8, epochs=2, initial_epoch=RunDir(tmp_path).backup_epoch(),
                callbacks=callbacks(probe), verbose=0)
    assert probe.steps == 4  # the optimizer's state came back with the weights
    assert all(np.array_equal(a, b) for a, b in zip(probe.weights, after_one, strict=True))
    assert ckpt.read_backup(backup) == ckpt.BackupState(2, backup / "epoch-0002.keras")
    assert sorted(p.name for p in backup.iterdir()) == ["epoch-0002.keras", ckpt.METADATA_NAME]
    assert not ckpt.temp_files(tmp_path)
    assert optimizer_steps(last) == 8


@pytest.fixture(scope="session")
def saved_models(files) -> dict[str, Path]:
    """A compiled Keras 3 `.keras` file and a compiled Keras 2 (tf_keras) `.h5` file."""
    import keras
    import tf_keras

    root = files["root"]
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(3, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.save(root / "compiled.keras")
    legacy = tf_keras.Sequential([tf_keras.layers.Dense(16, activation="relu", input_shape=(8,)),
                                  tf_keras.layers.Dense(3, activation="softmax")])
    legacy.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    with warnings.catch_warnings():  # tf_keras calls HDF5 legacy: writing one is the point
        warnings.simplefilter("ignore", UserWarning)
        legacy.save(root / "legacy.h5")
    return {"keras": root / "compiled.keras", "h5": root / "legacy.h5"}


@pytest.mark.parametrize("kind", ["keras", "h5"])
def test_saved_models_train_on_every_replica(hosts, files, saved_models, tmp_path, kind):
    run_dir = start(files, 2, saved_models[kind], tmp_path, epochs=2)
    code, events = hosts(2).run(run_dir.path)
    assert code == 0, only(events, RunFailed)
    assert only(events, RunStarted)[0].num_replicas == 2
    assert any("mirrored" in e.message for e in events if hasattr(e, "message"))
    losses = [e.metrics["loss"] for e in only(events, EpochEnd)]
    assert len(losses) == 2 and losses[1] < losses[0]


@pytest.mark.parametrize("override", [False, True], ids=["file", "override"])
def test_a_compiled_files_optimizer_trains_unless_overridden(hosts, files, tmp_path, override):
    """The optimizer a run really used is named in its log line and recorded in its events."""
    import keras

    from mgpu_gui.core.eventtext import started_lines

    path = tmp_path / "rms.keras"
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3, activation="softmax")])
    model.compile(keras.optimizers.RMSprop(0.002), "sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    model.save(path)
    run_dir = start(files, 2, path, tmp_path, epochs=1, optimizer="sgd", learning_rate=0.05,
                    override_compile=override)
    code, events = hosts(2).run(run_dir.path)
    assert code == 0, only(events, RunFailed)
    (began,) = only(run_dir.events(), RunStarted)  # the run folder's record
    assert (began.optimizer, began.file_optimizer) == (("SGD" if override else "RMSprop"),
                                                       "RMSprop")
    assert began.learning_rate == pytest.approx(0.05 if override else 0.002)
    assert started_lines(began)[-1] == (
        "Optimizer: SGD, lr 0.05 (overriding the file's RMSprop)" if override
        else "Optimizer: RMSprop, lr 0.002 (from the model file)")
    assert only(events, EpochEnd)[0].learning_rate == pytest.approx(began.learning_rate)


def test_early_stopping_reduce_lr_and_tensorboard(hosts, files, tmp_path):
    from mgpu_gui.core.config import EarlyStoppingConfig, ReduceLROnPlateauConfig

    run_dir = start(  # a learning rate too small to improve anything: both callbacks fire
        files, 2, files["dense"], tmp_path, epochs=30, tensorboard=True, learning_rate=1e-9,
        early_stopping=EarlyStoppingConfig(enabled=True, patience=1, min_delta=0.5),
        reduce_lr=ReduceLROnPlateauConfig(enabled=True, factor=0.5, patience=0, min_lr=1e-12),
    )
    code, events = hosts(2).run(run_dir.path)
    assert code == 0, only(events, RunFailed)
    finished = only(events, RunFinished)[0]
    assert finished.status is RunStatus.EARLY_STOPPED and finished.epochs_done < 30
    rates = [e.learning_rate for e in only(events, EpochEnd)]
    assert rates[0] == pytest.approx(1e-9, rel=1e-6) and rates[-1] < rates[0], [
        (e.metrics, e.learning_rate) for e in only(events, EpochEnd)]
    assert any(run_dir.tensorboard.rglob("*tfevents*"))


def test_a_regression_model_trains_on_targets_above_one(hosts, tmp_path):
    """The zoo's regression MLP (one linear unit, MSE, targets 0-10) was refused before
    training: "the labels go up to 9 (10 classes), but the model's output has 1 unit(s)".
    Labels index the outputs only under a classification loss."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(96, 4)).astype(np.float32)
    y = (x @ np.array([2.0, -1.0, 0.5, 3.0]) + 5).clip(0, 10).round().astype(np.float32)
    np.savez(tmp_path / "values.npz", x_train=x, y_train=y)
    (tmp_path / "mlp.py").write_text(textwrap.dedent("""
        import keras

        def build_model(input_shape, num_classes):
            model = keras.Sequential([keras.Input(input_shape),
                                      keras.layers.Dense(8, activation="relu"),
                                      keras.layers.Dense(1)])
            model.compile("adam", "mean_squared_error", metrics=["mae"])
            return model
    """))
    run_dir = start({"data": tmp_path / "values.npz"}, 2, tmp_path / "mlp.py", tmp_path,
                    epochs=2, metrics=())
    code, events = hosts(2).run(run_dir.path)
    assert code == 0, only(events, RunFailed)
    losses = [e.metrics["loss"] for e in only(events, EpochEnd)]
    assert len(losses) == 2 and "val_mae" in only(events, EpochEnd)[-1].metrics


def test_nan_loss_fails_clearly_and_saves_no_nan_weights(hosts, files, tmp_path):
    run_dir = start(files, 2, files["dense"], tmp_path, optimizer="sgd", learning_rate=1e12)
    code, events = hosts(2).run(run_dir.path)
    assert code != 0
    failed = only(events, RunFailed)[0]
    assert "NaN or infinite" in failed.message and "learning rate" in failed.message
    if run_dir.last_checkpoint.exists():  # only epochs that ended finite are saved
        import keras

        model = keras.saving.load_model(run_dir.last_checkpoint, compile=False)
        assert all(np.isfinite(w).all() for w in model.get_weights())


def test_failures_outside_a_fault_test_are_explained(tmp_path):
    """Messages for failures the CLI tests cannot cause here: OOM while building the
    model, a full disk during the export, a folder turned read-only mid-training, and
    TensorFlow's own writes reporting a full disk as RESOURCE_EXHAUSTED."""
    import errno

    import tensorflow as tf

    from mgpu_gui.core.devices.plan import DevicePlan
    from mgpu_gui.core.errors import ExportError, OutputError
    from mgpu_gui.engine.callbacks import EpochTracker
    from mgpu_gui.engine.failures import (
        ExportDiskFullError,
        OutOfMemoryError,
        Stage,
        Where,
        explain_failure,
    )

    run_dir = RunDir(tmp_path)
    plan = DevicePlan(kind=DeviceKind.GPU, replicas=2, names=["GPU 0: Test", "GPU 1: Test"])
    where = Where(RunConfig(batch_per_replica=1), run_dir, plan, replicas=2)
    oom = tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor\nmore")
    explained = explain_failure(oom, where)
    assert isinstance(explained, OutOfMemoryError)
    assert str(explained) == (
        "Out of memory while building the model on the 2 GPUs in use (GPU 0: Test; GPU 1: "
        "Test), with a batch of 1 per replica (global batch 2 = 1 x 2 replicas). The batch "
        "per replica is already 1: use a smaller model, or devices with more memory. "
        "TensorFlow said: OOM when allocating tensor")

    where.stage, where.export_format, where.epochs_done = Stage.EXPORT, "h5", 3
    full = ExportError("Could not write the h5 export")
    full.__cause__ = OSError(errno.ENOSPC, "No space left on device")
    explained = explain_failure(full, where)
    assert isinstance(explained, ExportDiskFullError) and isinstance(explained, ExportError)
    assert "a write failed while writing the h5 export (No space left on device)" in str(
        explained)
    assert f"mgpu-train export {tmp_path} -o {tmp_path / 'model.h5'}" in str(explained)

    where.stage, where.steps, where.tracker = Stage.TRAINING, 5, EpochTracker(5)
    where.tracker.batch_begun(0, 1)
    unreadable = OSError(errno.EACCES, "Permission denied", "/elsewhere/data.npz")
    assert explain_failure(unreadable, where).__class__.__name__ == "ModelCodeError"
    read_only = OSError(errno.EROFS, "Read-only file system", str(tmp_path / "history.csv"))
    explained = explain_failure(read_only, where)
    assert type(explained) is OutputError
    assert str(explained).startswith(
        f"Cannot write to the run folder {tmp_path}: Read-only file system (a write failed in "
        f"epoch 1 at step 2 of 5). No epoch was completed")

    tensorboard = tf.errors.ResourceExhaustedError(
        None, None, "/runs/x/tensorboard/events.out; No space left on device")
    assert "is full" in str(explain_failure(tensorboard, where))
