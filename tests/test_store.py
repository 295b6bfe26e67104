"""The run store: schema and migrations, recording, replay from events.jsonl,
reconciling runs whose supervisor died, the live-run lock, the NFS fallback,
and two processes writing at once. No TensorFlow: events are made by hand.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.events import (
    BatchEnd,
    EpochEnd,
    Event,
    Phase,
    RunFailed,
    RunFinished,
    RunStarted,
    RunStatus,
)
from mgpu_gui.core.runs import checkpoints as ckpt
from mgpu_gui.core.runs import storedb
from mgpu_gui.core.runs.folder import RunDir, create_run_dir
from mgpu_gui.core.runs.lock import RunBusyError, RunLock, is_live
from mgpu_gui.core.runs.store import RunState, RunStore
from mgpu_gui.core.runs.storedb import StoreError, filesystem_type

STEPS = 4


def started(initial_epoch: int = 0, epochs: int = 3) -> RunStarted:
    return RunStarted(
        run_dir="x", device_kind="cpu", devices=["/cpu:0", "/cpu:1"],
        device_names=["CPU replica 0", "CPU replica 1"], num_replicas=2, batch_per_replica=4,
        global_batch=8, train_samples=32, val_samples=8, test_samples=0, steps_per_epoch=STEPS,
        dropped_per_epoch=0, epochs=epochs, initial_epoch=initial_epoch, model_name="m",
        params=10, cross_device_ops="ReductionToOneDevice", tf_version="2.21",
        keras_version="3.15")


def epoch_events(epoch: int, loss: float, *, batches: int = STEPS) -> list[Event]:
    events: list[Event] = [
        BatchEnd(epoch=epoch, batch=b, steps=STEPS, metrics={"loss": loss + 0.1 * (STEPS - b)},
                 samples_per_s=100.0, learning_rate=1e-3) for b in range(batches)]
    if batches == STEPS:
        events.append(EpochEnd(epoch=epoch, epochs=3, metrics={"loss": loss, "val_loss": loss},
                               samples_per_s=100.0, duration_s=0.3, learning_rate=1e-3,
                               best=True))
    return events


def make_run(store: RunStore, tmp_path: Path, name: str = "demo") -> tuple[int, RunDir]:
    run_dir = create_run_dir(RunConfig(output_dir=str(tmp_path / "runs"), run_name=name,
                                       epochs=3))
    return store.add_run(run_dir), run_dir


def write_events(run_dir: RunDir, events: list[Event], torn_tail: str = "") -> None:
    with open(run_dir.events_jsonl, "a", encoding="utf-8") as log:
        for event in events:
            log.write(event.to_json() + "\n")
        log.write(torn_tail)


@pytest.fixture
def store(tmp_path):
    with RunStore(tmp_path / "store" / "runs.sqlite3") as opened:
        yield opened


def test_new_store_has_the_current_schema_and_wal(store):
    version = store._db.execute("PRAGMA user_version").fetchone()[0]
    assert version == storedb.SCHEMA_VERSION
    assert store.journal_mode == "wal" and store.note == ""
    assert store.runs() == []


def test_default_path_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(storedb.STORE_ENV, str(tmp_path / "elsewhere.db"))
    assert storedb.default_store_path() == tmp_path / "elsewhere.db"
    monkeypatch.delenv(storedb.STORE_ENV)
    assert storedb.default_store_path().name == storedb.STORE_NAME


def test_store_from_a_newer_app_is_refused(tmp_path):
    path = tmp_path / "runs.sqlite3"
    RunStore(path).close()
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {storedb.SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match="newer mgpu-gui"):
        RunStore(path)


def test_unopenable_store_says_what_to_do(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(StoreError, match="MGPU_GUI_STORE"):
        RunStore(blocker / "runs.sqlite3")


def _damaged(path: Path, how: str) -> None:
    """A store with runs in it, then damaged as users' stores are (issue 29, finding 9)."""
    store = RunStore(path)
    store.close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[:150])
    elif how == "garbage header":
        path.write_bytes(b"\x07" * 100 + data[100:])
    else:
        path.write_text("runs I want to keep, as notes\n" * 200)


@pytest.mark.parametrize("how", ["truncated", "garbage header", "a text file"])
@pytest.mark.parametrize("command", [["runs"], ["queue", "list"], ["sweep", "list"]])
def test_a_damaged_store_is_named_with_what_to_do_and_left_as_it_was(
        tmp_path, capsys, how, command):
    """(`train` warns with the same words and trains without recording the run.)"""
    from mgpu_gui.cli import main as cli

    path = tmp_path / "runs.sqlite3"
    _damaged(path, how)
    before = path.read_bytes()
    code = cli.main(["--store", str(path), *command])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"The run store {path} is damaged" in err, err
    assert f"mgpu-train doctor --repair-store --store {path}" in err, err
    assert "This is a bug" not in err and "unexpected" not in err
    assert path.read_bytes() == before


@pytest.mark.parametrize("how", ["a broken page", "garbage header", "a text file"])
def test_repair_store_keeps_the_damaged_file_and_salvages_its_rows(tmp_path, capsys, how):
    """Issue 29, finding 9: `mgpu-train doctor --repair-store` moves the damaged store
    aside untouched and makes a new one with what SQLite can read of it (its `.recover`,
    or a dump where the sqlite3 program is missing); the app opens the result."""
    from mgpu_gui.cli import main as cli

    path = tmp_path / "runs.sqlite3"
    with RunStore(path) as store:
        for name in ("alpha", "beta", "gamma"):
            store.add_run(create_run_dir(RunConfig(output_dir=str(tmp_path / "out"),
                                                   run_name=name)), RunConfig(run_name=name))
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = db.execute("PRAGMA page_count").fetchone()[0]
    data = bytearray(path.read_bytes())
    if how == "a broken page":  # the last page, an index's, overwritten
        size = len(data) // pages
        data[-size:] = b"\xff" * size
        path.write_bytes(bytes(data))
    elif how == "garbage header":
        path.write_bytes(b"\x07" * 100 + bytes(data[100:]))
    else:
        path.write_text("runs I want to keep, as notes\n" * 200)
    before = path.read_bytes()
    assert cli.main(["doctor", "--repair-store", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"Repaired the run store {path}. The damaged store is kept as " in out, out
    (kept,) = tmp_path.glob("runs.sqlite3.damaged-????????-??????")
    assert kept.read_bytes() == before
    with RunStore(path) as store:
        names = sorted(record.name for record in store.runs())
    if how == "a broken page" and shutil.which("sqlite3"):  # rows on intact pages are back
        assert names and set(names) <= {f"{p.name}" for p in (tmp_path / "out").iterdir()}
        assert f"{len(names)} runs" in out
        assert "SQLite's .recover" in out or "SQLite's .dump" in out
    elif how == "a broken page":  # Python's dump stops at the broken page
        assert "a dump of its readable rows" in out
    else:  # SQLite reads nothing without the header: the folders bring the runs back
        assert names == [] and "no rows" in out
        assert "give the folder to `mgpu-train runs note FOLDER ''`" in out
    assert cli.main(["doctor", "--repair-store", "--store", str(path)]) == 0
    assert "nothing to repair" in capsys.readouterr().out


def test_network_filesystem_falls_back_from_wal(monkeypatch, tmp_path):
    monkeypatch.setattr(storedb, "filesystem_type", lambda path: "nfs4")
    with RunStore(tmp_path / "runs.sqlite3") as nfs:
        assert nfs.journal_mode == "delete"
        assert "network filesystem (nfs4)" in nfs.note


def test_filesystem_type_takes_the_longest_mount_point(tmp_path):
    mounts = ("/dev/sda1 / ext4 rw 0 0\n"
              f"server:/home {tmp_path} nfs4 rw 0 0\n"
              "tmpfs /tmp2 tmpfs rw 0 0\n")
    assert filesystem_type(tmp_path / "a" / "b", mounts) == "nfs4"
    assert filesystem_type(Path("/usr"), mounts) == "ext4"


def test_recorder_records_a_run_and_its_series(store, tmp_path):
    run_id, _ = make_run(store, tmp_path)
    recorder = store.recorder(run_id)
    events = [started(), *epoch_events(0, 1.0), *epoch_events(1, 0.5),
              RunFinished(status=RunStatus.COMPLETED, epochs_done=2, best_epoch=1,
                          best_metric="val_loss", best_value=0.5)]
    for event in events:
        recorder.handle(event)
    recorder.finish(RunStatus.COMPLETED, "")
    record = store.get(run_id)
    assert record.status is RunState.COMPLETED
    assert record.epochs_done == 2 and record.replicas == 2 and record.global_batch == 8
    assert record.devices == ["CPU replica 0", "CPU replica 1"]
    assert (record.best_metric, record.best_value, record.best_epoch) == ("val_loss", 0.5, 1)
    assert record.attempts == 0 and record.started is not None and record.ended is not None
    series = store.series_events(run_id)
    assert [type(e).__name__ for e in series] == [type(e).__name__ for e in events[1:-1]]
    assert [e.epoch for e in series if isinstance(e, EpochEnd)] == [0, 1]


def test_a_resume_replaces_the_unfinished_epoch(store, tmp_path):
    """The attempt that died in epoch 2 leaves batches of it; the resume redoes epoch 2."""
    run_id, _ = make_run(store, tmp_path)
    recorder = store.recorder(run_id)
    for event in [started(), *epoch_events(0, 1.0), *epoch_events(1, 0.9, batches=2)]:
        recorder.handle(event)
    recorder.finish(RunStatus.FAILED, "killed")
    assert store.get(run_id).status is RunState.FAILED
    store.begin_attempt(run_id)
    recorder = store.recorder(run_id)
    for event in [started(initial_epoch=1), *epoch_events(1, 0.5), *epoch_events(2, 0.4),
                  RunFinished(status=RunStatus.COMPLETED, epochs_done=3)]:
        recorder.handle(event)
    recorder.finish(RunStatus.COMPLETED, "")
    record = store.get(run_id)
    assert record.status is RunState.COMPLETED and record.epochs_done == 3
    assert record.attempts == 1
    assert store.epoch_numbers(run_id) == [0, 1, 2]
    epoch1 = [e for e in store.series_events(run_id) if isinstance(e, BatchEnd) and e.epoch == 1]
    assert len(epoch1) == STEPS and epoch1[0].metrics["loss"] == pytest.approx(0.5 + 0.4)


def test_a_worker_that_died_silently_is_recorded_as_failed(store, tmp_path):
    run_id, _ = make_run(store, tmp_path)
    recorder = store.recorder(run_id)
    for event in [started(), *epoch_events(0, 1.0)]:
        recorder.handle(event)
    recorder.finish(RunStatus.FAILED, "The training process was killed by signal 9")
    record = store.get(run_id)
    assert record.status is RunState.FAILED and "signal 9" in record.message
    assert record.status.resumable


def test_replay_rebuilds_a_run_from_events_jsonl(store, tmp_path):
    run_id, run_dir = make_run(store, tmp_path)
    events = [started(), *epoch_events(0, 1.0), *epoch_events(1, 0.5, batches=3)]
    write_events(run_dir, events, torn_tail='{"type": "batch_end", "epo')
    record = store.replay(run_id)
    assert record.status is RunState.RUNNING and record.epochs_done == 1
    assert store.epoch_numbers(run_id) == [0]
    assert len(store.series_events(run_id)) == len(events) - 1  # RunStarted is not a series
    assert store.replay(run_id) == store.get(run_id)  # idempotent


def test_reconcile_marks_orphans_interrupted_and_leaves_live_runs(store, tmp_path):
    orphan, orphan_dir = make_run(store, tmp_path, "orphan")
    live, live_dir = make_run(store, tmp_path, "live")
    finished, finished_dir = make_run(store, tmp_path, "finished")
    gone, gone_dir = make_run(store, tmp_path, "gone")
    early, early_dir = make_run(store, tmp_path, "early")
    # The worker stopped by itself when its supervisor died: its last event says stopped.
    write_events(orphan_dir, [started(), *epoch_events(0, 1.0),
                              RunFinished(status=RunStatus.STOPPED, epochs_done=1)])
    for run_dir in (orphan_dir, live_dir):  # each completed an epoch
        run_dir.backup.mkdir()
        ckpt.commit_backup(run_dir.backup, 1)
    write_events(early_dir, [started()])  # killed in its first epoch: no backup
    write_events(finished_dir, [started(), *epoch_events(0, 1.0),
                                RunFinished(status=RunStatus.COMPLETED, epochs_done=3)])
    lock = RunLock.acquire(live_dir.path)
    shutil.rmtree(gone_dir.path)
    try:
        interrupted = store.reconcile()
    finally:
        lock.release()
    assert [r.id for r in interrupted] == [orphan]
    record = store.get(orphan)
    assert record.status is RunState.INTERRUPTED and record.epochs_done == 1
    assert "Interrupted after 1 of 3 epochs" in record.message
    assert "Resume to continue at epoch 2" in record.message
    assert store.get(live).status is RunState.RUNNING
    assert store.get(finished).status is RunState.COMPLETED
    assert store.get(gone).status is RunState.INTERRUPTED
    assert "is gone" in store.get(gone).message
    # Interrupted too, but with nothing to resume: it says so, and is not offered.
    assert store.get(early).status is RunState.INTERRUPTED
    assert "no backup to resume from" in store.get(early).message
    assert "Resume" not in store.get(early).message
    # Once its worker is gone, the live run is an orphan too; then nothing is left to do.
    assert [r.id for r in store.reconcile()] == [live]
    assert store.reconcile() == []


def test_a_failure_reported_by_the_worker_survives_reconcile(store, tmp_path):
    run_id, run_dir = make_run(store, tmp_path)
    write_events(run_dir, [started(), RunFailed(message="Out of memory", phase=Phase.TRAINING,
                                                error_type="ResourceExhaustedError")])
    assert store.reconcile() == []
    assert store.get(run_id).status is RunState.FAILED
    assert store.get(run_id).message == "Out of memory"


def test_resolve_by_id_name_and_folder(store, tmp_path):
    run_id, run_dir = make_run(store, tmp_path, "alpha")
    assert store.resolve(str(run_id)).id == run_id
    assert store.resolve(run_dir.path.name).id == run_id
    assert store.resolve("alpha").id == run_id  # the name given, without the date
    assert store.resolve(str(run_dir.path)).id == run_id
    make_run(store, tmp_path, "alpha")
    with pytest.raises(UserError, match="Several runs are named 'alpha'"):
        store.resolve("alpha")
    with pytest.raises(UserError, match="No run 'beta'"):
        store.resolve("beta")
    with pytest.raises(UserError, match="no run 999"):
        store.resolve("999")


def test_resolve_imports_a_folder_the_store_never_saw(store, tmp_path):
    run_dir = create_run_dir(RunConfig(output_dir=str(tmp_path / "other"), run_name="foreign"))
    write_events(run_dir, [started(), *epoch_events(0, 1.0)])
    record = store.resolve(str(run_dir.path))
    assert record.run_dir == run_dir.path and record.epochs_done == 1


def test_delete_removes_the_series(store, tmp_path):
    run_id, _ = make_run(store, tmp_path)
    recorder = store.recorder(run_id)
    for event in [started(), *epoch_events(0, 1.0)]:
        recorder.handle(event)
    recorder.close()
    store.delete(run_id)
    assert store.runs() == []
    counts = [store._db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
              for table in ("epochs", "batches")]
    assert counts == [0, 0]


def test_run_lock_is_exclusive_and_dies_with_its_holder(tmp_path):
    lock = RunLock.acquire(tmp_path)
    with pytest.raises(RunBusyError, match="still running"):
        RunLock.acquire(tmp_path)
    assert is_live(tmp_path)
    lock.release()
    assert not is_live(tmp_path)
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from pathlib import Path
            from mgpu_gui.core.runs.lock import RunLock
            lock = RunLock.acquire(Path({str(tmp_path)!r}))
            print("held", flush=True)
            time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert is_live(tmp_path)
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    assert not is_live(tmp_path)


WRITER = """
import sys, time
from pathlib import Path
from mgpu_gui.core.runs.store import RunStore
from mgpu_gui.core.runs.folder import RunDir
from tests.test_store import started, epoch_events, STEPS
from mgpu_gui.core.events import RunFinished, RunStatus

store = RunStore(Path(sys.argv[1]))
run_id = store.add_run(RunDir(Path(sys.argv[2])))
recorder = store.recorder(run_id)
recorder.handle(started(epochs=int(sys.argv[3])))
for epoch in range(int(sys.argv[3])):
    for event in epoch_events(epoch, 1.0 / (epoch + 1)):
        recorder.handle(event)
    store.runs()  # a reader in between, as the GUI's table would be
recorder.handle(RunFinished(status=RunStatus.COMPLETED, epochs_done=int(sys.argv[3])))
recorder.finish(RunStatus.COMPLETED, "")
"""


def test_two_app_instances_write_the_same_store(tmp_path):
    """Two supervisors record runs at the same time: both finish, nothing is lost."""
    path = tmp_path / "shared.sqlite3"
    RunStore(path).close()
    epochs = 1500
    folders = [create_run_dir(RunConfig(output_dir=str(tmp_path / "runs"), run_name=f"r{i}",
                                        epochs=epochs)) for i in range(2)]
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(f.path),
                                 str(epochs)], cwd=Path(__file__).parent.parent,
                                stderr=subprocess.PIPE, text=True) for f in folders]
    for writer in writers:
        _, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err
    with RunStore(path) as shared:
        records = shared.runs()
        assert len(records) == 2
        for record in records:
            assert record.status is RunState.COMPLETED and record.epochs_done == epochs
            assert shared.epoch_count(record.id) == epochs
            batches = [e for e in shared.series_events(record.id) if isinstance(e, BatchEnd)]
            assert len(batches) == epochs * STEPS
        integrity = shared._db.execute("PRAGMA integrity_check").fetchone()[0]
        assert integrity == "ok"
    assert json.loads(folders[0].config_json.read_text())["epochs"] == epochs


def test_a_read_only_store_is_still_listed_as_it_is(tmp_path, capsys, monkeypatch):
    """Issue 29: an intact store on a read-only mount said "unexpected OperationalError".
    `runs` lists it read-only; what would write says why it cannot. (Root writes past file
    modes, so the mount's refusal is SQLite's own error, raised at the first write of the
    writable open.)"""
    from mgpu_gui.cli import main as cli

    path = tmp_path / "runs.sqlite3"
    with RunStore(path) as store:
        run_id, _ = make_run(store, tmp_path, "alpha")

    def refused(self):
        raise sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setattr(storedb.StoreDatabase, "_choose_journal_mode", refused)
    before = path.read_bytes()
    assert cli.main(["--store", str(path), "runs"]) == 0
    out, err = capsys.readouterr()
    assert "alpha" in out and f"the run store {path} is read-only: listed as it is" in err
    assert cli.main(["--store", str(path), "runs", "note", str(run_id), "x"]) == 2
    assert f"The run store {path} cannot be written" in capsys.readouterr().err
    assert path.read_bytes() == before
    with RunStore(path, read_only=True) as store, pytest.raises(sqlite3.OperationalError,
                                                                match="readonly"):
        store.set_note(run_id, "x")


def test_a_wal_store_on_a_read_only_mount_is_listed(tmp_path):
    """Issue 29: a store in WAL mode, closed cleanly (no -shm file left), on a read-only
    mount: SQLite cannot make the -shm file it opens with, so even a read-only open said
    "unable to open database file". It is listed as it is, and a note cannot be added."""
    mount = ["unshare", "--user", "--map-root-user", "--mount"]
    if shutil.which("unshare") is None or subprocess.run(
            [*mount, "true"], capture_output=True).returncode:
        pytest.skip("unshare is not allowed here")
    folder = tmp_path / "store"
    folder.mkdir()
    path = folder / "runs.sqlite3"
    with RunStore(path) as store:
        assert store.database.journal_mode == "wal"
        make_run(store, tmp_path, "alpha")
    assert sorted(p.name for p in folder.iterdir()) == ["runs.sqlite3"]
    cli = ("import sys; from mgpu_gui.cli.main import main; "
           "sys.exit(main(sys.argv[1:]))")
    script = ('mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" && shift && '
              '"$@" runs && ! "$@" runs note 1 x')
    done = subprocess.run([*mount, "sh", "-c", script, "sh", str(folder), sys.executable, "-c",
                           cli, "--store", str(path)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "alpha" in done.stdout and "is read-only: listed as it is" in done.stderr
    assert f"The run store {path} cannot be written" in done.stderr
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["runs.sqlite3"]
