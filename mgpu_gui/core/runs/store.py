"""The run store: every run's summary and metric series, in one SQLite file.

The supervisor (GUI or CLI) writes it from the events it receives. The run
folder's `events.jsonl` stays the durable record: whatever a supervisor missed
(it was killed) is replayed from there on the next start, so the store can
always be rebuilt. Several app instances may share the store: transactions are
short and a busy database is retried.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.events import (
    BatchEnd,
    EpochEnd,
    Evaluated,
    Event,
    RunFailed,
    RunFinished,
    RunStarted,
    RunStatus,
)
from mgpu_gui.core.runs.folder import RunDir
from mgpu_gui.core.runs.lock import is_live
from mgpu_gui.core.runs.storedb import StoreDatabase, retry
from mgpu_gui.core.runs.tags import check_tags

if TYPE_CHECKING:  # an evaluation (NumPy) loads when one is read
    from mgpu_gui.core.evaluation.result import EvaluationResult, Split

FLUSH_ROWS = 2_000
FLUSH_INTERVAL_S = 0.5
# Every run read comes with its tags, as a JSON array (any text a tag holds survives).
_RUNS = ("SELECT runs.*, (SELECT json_group_array(tag) FROM tags WHERE tags.run_id = runs.id) "
         "AS tag_list FROM runs")


class RunState(StrEnum):
    """A run's state in the store: how it ended, or that it still runs."""

    RUNNING = "running"
    COMPLETED = "completed"
    EARLY_STOPPED = "early_stopped"
    STOPPED = "stopped"
    FAILED = "failed"
    INTERRUPTED = "interrupted"  # its supervisor went away before it ended

    @property
    def resumable(self) -> bool:
        return self in (RunState.STOPPED, RunState.FAILED, RunState.INTERRUPTED)


@dataclass(frozen=True)
class RunRecord:
    id: int
    run_dir: Path
    name: str
    model: str
    data: str
    status: RunState
    message: str
    device_kind: str
    devices: list[str]
    replicas: int | None
    global_batch: int | None
    epochs: int
    epochs_done: int
    created: float
    started: float | None
    ended: float | None
    best_metric: str | None
    best_value: float | None
    best_epoch: int | None
    test_metrics: dict[str, float] | None
    attempts: int
    resume_helps: bool = True  # False: it failed for a reason a resume meets again
    note: str = ""  # the user's, free text
    tags: tuple[str, ...] = ()  # the user's, one word each, sorted

    @property
    def folder_exists(self) -> bool:
        return self.run_dir.is_dir()


class RunStore:
    """One connection to the store; open one per thread that uses it."""

    def __init__(self, path: Path | None = None, *, read_only: bool = False):
        self._database = self.database = StoreDatabase(path, read_only=read_only)
        self._db = self._database.db
        self.path = self._database.path
        self.read_only = read_only
        self.note = self._database.note
        self.journal_mode = self._database.journal_mode

    def close(self) -> None:
        self._database.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- runs ---------------------------------------------------------------------------------

    def add_run(self, run_dir: RunDir, config: RunConfig | None = None) -> int:
        """Register a run folder (idempotent); returns its id."""
        config = config or run_dir.read_config()
        existing = self.find_dir(run_dir.path)
        if existing is not None:
            return existing.id

        def insert() -> int:
            with self._database.write() as db:
                cursor = db.execute(
                    "INSERT OR IGNORE INTO runs (run_dir, name, model, data, config, status, "
                    "epochs, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (str(run_dir.path), run_dir.path.name, config.model, config.data,
                     config.to_json(), RunState.RUNNING.value, config.epochs, time.time()))
                if cursor.rowcount:
                    return int(cursor.lastrowid)
                return int(db.execute("SELECT id FROM runs WHERE run_dir = ?",
                                      (str(run_dir.path),)).fetchone()[0])

        return int(retry(insert))

    def runs(self) -> list[RunRecord]:
        rows = self._db.execute(f"{_RUNS} ORDER BY created DESC, id DESC").fetchall()
        return [_record(row) for row in rows]

    def config_texts(self) -> dict[int, str]:
        """Every run's settings as registered (JSON), by run id: one query for the table."""
        return {row["id"]: row["config"]
                for row in self._db.execute("SELECT id, config FROM runs")}

    def get(self, run_id: int) -> RunRecord:
        row = self._db.execute(f"{_RUNS} WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise self._no_run(run_id)
        return _record(row)

    def _no_run(self, run_id: int) -> UserError:
        return UserError(f"There is no run {run_id} in the run store {self.path}; "
                         f"`mgpu-train runs` lists the runs and their ids.")

    def config(self, run_id: int) -> RunConfig:
        """The settings the run was registered with (its folder may be gone); ConfigError
        when they name a setting this version does not know."""
        row = self._db.execute("SELECT config FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise self._no_run(run_id)
        return RunConfig.from_json(row["config"])

    def find_dir(self, folder: Path) -> RunRecord | None:
        row = self._db.execute(f"{_RUNS} WHERE run_dir = ?",
                               (str(folder.absolute()),)).fetchone()
        return _record(row) if row is not None else None

    def resolve(self, ref: str) -> RunRecord:
        """A run by id, folder name, or folder path (a folder not yet stored is added)."""
        if ref.isdigit():
            return self.get(int(ref))
        path = Path(ref).expanduser()
        if path.is_dir() and (path / "config.json").exists():
            record = self.find_dir(path.absolute())
            if record is None:
                record = self.get(self.add_run(RunDir(path.absolute())))
                self.replay(record.id)
                record = self.get(record.id)
            return record
        # Folders are named "<date>-<time>-<name>": the name the user gave is enough.
        rows = self._db.execute(
            f"{_RUNS} WHERE name = ? OR json_extract(config, '$.run_name') = ? "
            "ORDER BY id", (ref, ref)).fetchall()
        matches = [_record(row) for row in rows]
        if len(matches) == 1:
            return matches[0]
        if matches:
            ids = ", ".join(str(r.id) for r in matches)
            raise UserError(f"Several runs are named {ref!r} (ids {ids}); give the id.")
        raise UserError(f"No run {ref!r}: give a run id or name from `mgpu-train runs`, "
                        f"or a run folder.")

    def set_status(self, run_id: int, status: RunState, message: str = "") -> None:
        def update() -> None:
            with self._database.write() as db:
                db.execute("UPDATE runs SET status = ?, message = ?, ended = ? WHERE id = ?",
                           (status.value, message,
                            None if status is RunState.RUNNING else time.time(), run_id))

        retry(update)

    def begin_attempt(self, run_id: int) -> None:
        """A (re)start of the run's worker."""
        def update() -> None:
            with self._database.write() as db:
                db.execute("UPDATE runs SET status = ?, message = '', ended = NULL, "
                           "resume_helps = 1, attempts = attempts + 1 WHERE id = ?",
                           (RunState.RUNNING.value, run_id))

        retry(update)

    # -- notes and tags: the user's, each change one short transaction on one run ---------

    def set_note(self, run_id: int, note: str) -> RunRecord:
        """The run's note; '' clears it."""
        return self._annotate(run_id, [("UPDATE runs SET note = ? WHERE id = ?",
                                        (note.strip(), run_id))])

    def tag(self, run_id: int, tags: list[str], *, untag: bool = False) -> RunRecord:
        """Add tags to the run (untag: take them off; tags it lacks are no error)."""
        sql = ("DELETE FROM tags WHERE run_id = ? AND tag = ?" if untag else
               "INSERT OR IGNORE INTO tags (run_id, tag) VALUES (?, ?)")
        return self._annotate(run_id, [(sql, (run_id, tag)) for tag in check_tags(tags)])

    def set_tags(self, run_id: int, tags: list[str]) -> RunRecord:
        """The run's tags are these, no others."""
        return self._annotate(run_id, [("DELETE FROM tags WHERE run_id = ?", (run_id,))] + [
            ("INSERT INTO tags (run_id, tag) VALUES (?, ?)", (run_id, tag))
            for tag in check_tags(tags)])

    def _annotate(self, run_id: int, statements: list[tuple[str, tuple]]) -> RunRecord:
        def write() -> None:
            with self._database.write() as db:
                if db.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
                    raise self._no_run(run_id)  # deleted meanwhile, or a mistyped id
                for sql, params in statements:
                    db.execute(sql, params)

        retry(write)
        return self.get(run_id)

    def save_evaluation(self, run_id: int, result: EvaluationResult) -> None:
        """Keep a run's evaluation; it replaces the earlier one of the same split."""
        def write() -> None:
            with self._database.write() as db:
                db.execute("INSERT OR REPLACE INTO evaluations (run_id, split, result, created) "
                           "VALUES (?, ?, ?, ?)", (run_id, result.split.value,
                                                   json.dumps(result.to_dict()), time.time()))

        retry(write)

    def evaluation(self, run_id: int, split: Split | None = None) -> EvaluationResult | None:
        """A run's evaluation of `split`, else its latest of any split; None: never evaluated."""
        where, params = ("AND split = ?", (run_id, split.value)) if split else ("", (run_id,))
        row = self._db.execute(f"SELECT result FROM evaluations WHERE run_id = ? {where} "
                               "ORDER BY created DESC LIMIT 1", params).fetchone()
        if row is None:
            return None
        from mgpu_gui.core.evaluation.result import EvaluationResult

        return EvaluationResult.from_dict(json.loads(row["result"]))

    def delete(self, run_id: int) -> None:
        def remove() -> None:
            with self._database.write() as db:
                db.execute("DELETE FROM runs WHERE id = ?", (run_id,))

        retry(remove)

    def prune(self) -> list[RunRecord]:
        """Forget the runs whose folders are gone (deleted by hand); returns them."""
        gone = [r for r in self.runs() if not r.folder_exists]
        for record in gone:
            self.delete(record.id)
        return gone

    # -- series -------------------------------------------------------------------------------

    def series_events(self, run_id: int, *, batches: bool = True,
                      after: float | None = None) -> list[Event]:
        """A stored run's curves as the events that drew them, in order, for the plots.

        `after`: only rows of events later than this time, to follow a live run (its
        recorder commits rows in time order, so none older can appear later)."""
        since = "" if after is None else " AND t > ?"
        params = (run_id,) if after is None else (run_id, after)
        batch_rows = self._db.execute(
            f"SELECT * FROM batches WHERE run_id = ?{since} ORDER BY epoch, batch",
            params).fetchall() if batches else []
        epochs = self._db.execute(
            f"SELECT * FROM epochs WHERE run_id = ?{since} ORDER BY epoch", params).fetchall()
        events: list[tuple[int, int, Event]] = []
        for row in batch_rows:
            events.append((row["epoch"], row["batch"], BatchEnd(
                epoch=row["epoch"], batch=row["batch"], steps=row["steps"],
                metrics=json.loads(row["metrics"]), samples_per_s=row["samples_per_s"] or 0.0,
                learning_rate=row["learning_rate"], t=row["t"])))
        total = self.get(run_id).epochs
        for row in epochs:
            events.append((row["epoch"], 1 << 40, EpochEnd(
                epoch=row["epoch"], epochs=total, metrics=json.loads(row["metrics"]),
                samples_per_s=row["samples_per_s"] or 0.0, duration_s=row["duration_s"] or 0.0,
                learning_rate=row["learning_rate"], best=bool(row["best"]), t=row["t"])))
        events.sort(key=lambda item: (item[0], item[1]))
        return [event for _, _, event in events]

    def epoch_count(self, run_id: int) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM epochs WHERE run_id = ?",
                                    (run_id,)).fetchone()[0])

    def epoch_numbers(self, run_id: int) -> list[int]:
        return [row[0] for row in self._db.execute(
            "SELECT epoch FROM epochs WHERE run_id = ? ORDER BY epoch", (run_id,))]

    def recorder(self, run_id: int) -> RunRecorder:
        """A writer for one run's live events, on a connection of its own."""
        return RunRecorder(RunStore(self.path), run_id)

    # -- recovery -----------------------------------------------------------------------------

    def replay(self, run_id: int) -> RunRecord:
        """Rebuild a run's record and series from its events.jsonl, the durable log."""
        record = self.get(run_id)
        run_dir = RunDir(record.run_dir)

        def clear() -> None:
            with self._database.write() as db:
                db.execute("DELETE FROM epochs WHERE run_id = ?", (run_id,))
                db.execute("DELETE FROM batches WHERE run_id = ?", (run_id,))

        retry(clear)
        recorder = RunRecorder(self, run_id, owns_store=False)
        for event in run_dir.events():
            recorder.handle(event)
        recorder.flush()
        return self.get(run_id)

    def reconcile(self) -> list[RunRecord]:
        """Find runs marked running whose worker is gone; replay and mark them.

        Returns the runs that were interrupted and can be resumed, for the app to offer.
        """
        interrupted = []
        for record in self.runs():
            if record.status is not RunState.RUNNING or is_live(record.run_dir):
                continue
            if not record.folder_exists:
                self.set_status(record.id, RunState.INTERRUPTED,
                                f"The run folder {record.run_dir} is gone.")
                continue
            replayed = self.replay(record.id)
            if replayed.status is RunState.RUNNING or replayed.status is RunState.STOPPED:
                # No end recorded by its supervisor: the app or terminal went away, and the
                # worker ended without it (killed, or stopped because its supervisor was gone).
                point = RunDir(record.run_dir).resume_point()
                done = point.epochs_done
                self.set_status(record.id, RunState.INTERRUPTED, (
                    f"Interrupted after {done} of {replayed.epochs} epochs: the app that "
                    f"supervised it closed before the run ended. " + (
                        f"Resume to continue at epoch {done + 1}." if point.resumable
                        else point.kept())))
                if point.resumable:
                    interrupted.append(self.get(record.id))
        return interrupted


class RunRecorder:
    """Turns one run's events into store rows: batch rows buffered, the rest at once.

    Batch rows are written in a transaction every `FLUSH_ROWS` rows or
    `FLUSH_INTERVAL_S` seconds, so a busy run costs few commits and a killed
    supervisor loses at most that much (replay restores it from events.jsonl).
    """

    def __init__(self, store: RunStore, run_id: int, *, owns_store: bool = True):
        self.store = store
        self.run_id = run_id
        self._owns_store = owns_store
        self._batches: list[tuple] = []
        self._last_flush = time.monotonic()
        self.final: RunState | None = None

    def handle(self, event: Event) -> None:
        if isinstance(event, BatchEnd):
            self._batches.append((
                self.run_id, event.epoch, event.batch, event.steps, event.t,
                json.dumps(event.metrics), event.samples_per_s, event.learning_rate))
            if (len(self._batches) >= FLUSH_ROWS
                    or time.monotonic() - self._last_flush >= FLUSH_INTERVAL_S):
                self.flush()
            return
        statement = self._statements(event)
        if statement:
            self.flush(statement)

    def flush(self, statements: list[tuple[str, tuple]] | None = None) -> None:
        rows, self._batches = self._batches, []
        self._last_flush = time.monotonic()
        if not rows and not statements:
            return

        def write() -> None:
            with self.store._database.write() as db:
                if rows:
                    db.executemany(
                        "INSERT OR REPLACE INTO batches (run_id, epoch, batch, steps, t, "
                        "metrics, samples_per_s, learning_rate) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        rows)
                for sql, params in statements or ():
                    db.execute(sql, params)

        retry(write)

    def close(self) -> None:
        self.flush()
        if self._owns_store:
            self.store.close()

    def _statements(self, event: Event) -> list[tuple[str, tuple]]:
        rid = self.run_id
        if isinstance(event, RunStarted):
            # A resume redoes the epochs from `initial_epoch`: drop what the earlier
            # attempt recorded of them, so no epoch counts twice.
            return [
                ("DELETE FROM epochs WHERE run_id = ? AND epoch >= ?", (rid, event.initial_epoch)),
                ("DELETE FROM batches WHERE run_id = ? AND epoch >= ?",
                 (rid, event.initial_epoch)),
                ("UPDATE runs SET status = ?, device_kind = ?, devices = ?, replicas = ?, "
                 "global_batch = ?, epochs = ?, epochs_done = ?, started = COALESCE(started, ?), "
                 "ended = NULL, message = '' WHERE id = ?",
                 (RunState.RUNNING.value, event.device_kind, json.dumps(event.device_names),
                  event.num_replicas, event.global_batch, event.epochs, event.initial_epoch,
                  event.t, rid)),
            ]
        if isinstance(event, EpochEnd):
            statements = [
                ("INSERT OR REPLACE INTO epochs (run_id, epoch, t, metrics, samples_per_s, "
                 "duration_s, learning_rate, best) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                 (rid, event.epoch, event.t, json.dumps(event.metrics), event.samples_per_s,
                  event.duration_s, event.learning_rate, int(event.best))),
                ("UPDATE runs SET epochs_done = ? WHERE id = ?", (event.epoch + 1, rid)),
            ]
            if event.best:
                monitor = "val_loss" if "val_loss" in event.metrics else "loss"
                statements.append((
                    "UPDATE runs SET best_metric = ?, best_value = ?, best_epoch = ? "
                    "WHERE id = ?", (monitor, event.metrics.get(monitor), event.epoch, rid)))
            return statements
        if isinstance(event, Evaluated):
            return [("UPDATE runs SET test_metrics = ? WHERE id = ?",
                     (json.dumps(event.metrics), rid))]
        if isinstance(event, RunFinished):
            self.final = RunState(event.status.value)
            statements = [("UPDATE runs SET status = ?, message = ?, epochs_done = ?, ended = ? "
                           "WHERE id = ?",
                           (event.status.value, event.message, event.epochs_done, event.t, rid))]
            if event.best_epoch is not None:
                statements.append((
                    "UPDATE runs SET best_metric = ?, best_value = ?, best_epoch = ? "
                    "WHERE id = ?", (event.best_metric, event.best_value, event.best_epoch, rid)))
            return statements
        if isinstance(event, RunFailed):
            self.final = RunState.FAILED
            return [("UPDATE runs SET status = ?, message = ?, ended = ?, resume_helps = ? "
                     "WHERE id = ?",
                     (RunState.FAILED.value, event.message, event.t, int(event.resumable), rid))]
        return []

    def discard(self) -> None:
        """The run left nothing behind (refused during setup): its row goes too."""
        self._batches = []
        self.store.delete(self.run_id)
        self.close()

    def finish(self, status: RunStatus, message: str) -> None:
        """The supervisor's verdict once the worker ended (it may have died silently)."""
        self.flush()
        if self.final is None or status is RunStatus.FAILED:
            self.store.set_status(self.run_id, RunState(status.value), message)
        self.close()


def _record(row: sqlite3.Row) -> RunRecord:
    return RunRecord(
        id=row["id"], run_dir=Path(row["run_dir"]), name=row["name"], model=row["model"],
        data=row["data"], status=RunState(row["status"]), message=row["message"],
        device_kind=row["device_kind"], devices=json.loads(row["devices"]),
        replicas=row["replicas"], global_batch=row["global_batch"], epochs=row["epochs"],
        epochs_done=row["epochs_done"], created=row["created"], started=row["started"],
        ended=row["ended"], best_metric=row["best_metric"], best_value=row["best_value"],
        best_epoch=row["best_epoch"],
        test_metrics=json.loads(row["test_metrics"]) if row["test_metrics"] else None,
        attempts=row["attempts"], resume_helps=bool(row["resume_helps"]), note=row["note"],
        tags=tuple(sorted(json.loads(row["tag_list"]))),
    )
