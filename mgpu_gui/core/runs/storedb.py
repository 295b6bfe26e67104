"""The run store's SQLite file: where it lives, its schema, and safe access to it.

Several app instances (and a GUI thread next to a recording thread) share one
file: every write is a short `BEGIN IMMEDIATE` transaction, retried while
another writer holds the lock. WAL mode lets readers go on during writes; it
needs memory shared on one machine, so a store on a network filesystem uses a
rollback journal instead, and the user is told.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from mgpu_gui.core.errors import UserError

STORE_ENV = "MGPU_GUI_STORE"
STORE_NAME = "runs.sqlite3"
BUSY_TIMEOUT_MS = 5_000
BUSY_RETRIES = 20
NETWORK_FILESYSTEMS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "fuse.sshfs", "9p", "afs",
                       "ceph", "glusterfs", "lustre", "gpfs")

# Each entry upgrades the schema by one version; never edit a released entry.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        run_dir TEXT NOT NULL UNIQUE,
        name TEXT NOT NULL,
        model TEXT NOT NULL,
        data TEXT NOT NULL,
        config TEXT NOT NULL,
        status TEXT NOT NULL,
        message TEXT NOT NULL DEFAULT '',
        device_kind TEXT NOT NULL DEFAULT '',
        devices TEXT NOT NULL DEFAULT '[]',
        replicas INTEGER,
        global_batch INTEGER,
        epochs INTEGER NOT NULL,
        epochs_done INTEGER NOT NULL DEFAULT 0,
        created REAL NOT NULL,
        started REAL,
        ended REAL,
        best_metric TEXT,
        best_value REAL,
        best_epoch INTEGER,
        test_metrics TEXT,
        attempts INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE epochs (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        epoch INTEGER NOT NULL,
        t REAL NOT NULL,
        metrics TEXT NOT NULL,
        samples_per_s REAL,
        duration_s REAL,
        learning_rate REAL,
        best INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (run_id, epoch)
    ) WITHOUT ROWID;
    CREATE TABLE batches (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        epoch INTEGER NOT NULL,
        batch INTEGER NOT NULL,
        steps INTEGER NOT NULL,
        t REAL NOT NULL,
        metrics TEXT NOT NULL,
        samples_per_s REAL,
        learning_rate REAL,
        PRIMARY KEY (run_id, epoch, batch)
    ) WITHOUT ROWID;
    """,
    # v2: the devices each run claims while it is live, and the job queue.
    """
    ALTER TABLE runs ADD COLUMN claims TEXT NOT NULL DEFAULT '[]';
    CREATE TABLE queue (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        config TEXT NOT NULL,
        state TEXT NOT NULL,
        allow_busy INTEGER NOT NULL DEFAULT 0,
        created REAL NOT NULL,
        started REAL,
        run_id INTEGER REFERENCES runs(id) ON DELETE SET NULL,
        message TEXT NOT NULL DEFAULT '',
        cancel_requested INTEGER NOT NULL DEFAULT 0
    );
    """,
    # v3: whether resuming can get past how the run failed (not past bad data).
    """
    ALTER TABLE runs ADD COLUMN resume_helps INTEGER NOT NULL DEFAULT 1;
    """,
    # v4: each run's latest evaluation per split (an EvaluationResult as JSON).
    """
    CREATE TABLE evaluations (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        split TEXT NOT NULL,
        result TEXT NOT NULL,
        created REAL NOT NULL,
        PRIMARY KEY (run_id, split)
    ) WITHOUT ROWID;
    """,
    # v5: the user's note on each run, and its tags (many per run).
    """
    ALTER TABLE runs ADD COLUMN note TEXT NOT NULL DEFAULT '';
    CREATE TABLE tags (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        tag TEXT NOT NULL,
        PRIMARY KEY (run_id, tag)
    ) WITHOUT ROWID;
    """,
    # v6: each run's device telemetry, one row a second per device (telemetry_store.py).
    # Sized for long runs: whole units in small integers, time in ms, keyed so that rows
    # append in key order (full pages), and the devices' names once per run, not per row.
    """
    CREATE TABLE telemetry_devices (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        device INTEGER NOT NULL,
        uuid TEXT NOT NULL DEFAULT '',
        name TEXT NOT NULL DEFAULT '',
        memory_total INTEGER,
        PRIMARY KEY (run_id, device)
    ) WITHOUT ROWID;
    CREATE TABLE telemetry (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        t INTEGER NOT NULL,
        device INTEGER NOT NULL,
        utilization INTEGER,
        memory INTEGER,
        power INTEGER,
        temperature INTEGER,
        PRIMARY KEY (run_id, t, device)
    ) WITHOUT ROWID;
    """,
    # v7: sweeps (core/sweeps/store.py). A trial is a queued job tagged with its sweep: its
    # index and swept values (JSON) on the job; `stop_reason` says why the queue runner
    # stopped a job's run (the median rule), where the run's own status says only "stopped".
    """
    CREATE TABLE sweeps (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        spec TEXT NOT NULL,
        created REAL NOT NULL,
        cancelled INTEGER NOT NULL DEFAULT 0
    );
    ALTER TABLE queue ADD COLUMN sweep_id INTEGER REFERENCES sweeps(id) ON DELETE CASCADE;
    ALTER TABLE queue ADD COLUMN trial_index INTEGER;
    ALTER TABLE queue ADD COLUMN trial TEXT;
    ALTER TABLE queue ADD COLUMN stop_reason TEXT NOT NULL DEFAULT '';
    CREATE INDEX queue_by_sweep ON queue (sweep_id, trial_index);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


class StoreError(UserError):
    """The run store cannot be opened or is from a newer version of the app."""


class ReadOnlyStoreError(StoreError):
    """The run store cannot be written (it, or its folder, is read-only): it can still be
    read (`StoreDatabase(read_only=True)`)."""


def _read_only(path: Path, error: sqlite3.DatabaseError) -> bool:
    """SQLite's refusal to write; or, for a store in WAL mode whose folder cannot be
    written (a read-only mount), its refusal to open without the `-shm` file it cannot make."""
    said = str(error)
    return "readonly" in said or "read-only" in said or (
        "unable to open" in said and path.exists() and not os.access(path.parent, os.W_OK))


def unusable_store_message(path: Path, error: sqlite3.DatabaseError) -> str:
    """What to tell a user whose store SQLite refuses: which file, why, what to do."""
    if _read_only(path, error):
        return (f"The run store {path} cannot be written ({error}): it or its folder is "
                f"read-only. Copy it to a writable folder and point {STORE_ENV} (or --store) "
                "at the copy.")
    return (f"The run store {path} is damaged ({error}); nothing was changed in it. "
            f"`mgpu-train doctor --repair-store --store {path}` keeps it aside and salvages "
            f"what rows it can into a new store; or point {STORE_ENV} (or --store) at "
            "another store.")



def default_store_path() -> Path:
    """$MGPU_GUI_STORE, else the user's data folder."""
    if os.environ.get(STORE_ENV):
        return Path(os.environ[STORE_ENV]).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("mgpu-gui", appauthor=False)) / STORE_NAME


def filesystem_type(path: Path, mounts: str | None = None) -> str:
    """The type of the filesystem holding `path`, from /proc/mounts ('' if unknown)."""
    if mounts is None:
        try:
            mounts = Path("/proc/mounts").read_text()
        except OSError:
            return ""
    target = os.path.realpath(path)
    best, kind = "", ""
    for line in mounts.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, parts[2]
    return kind


def retry(action: Callable[[], object]) -> object:
    """Run a short transaction, retrying while another process holds the write lock."""
    for attempt in range(BUSY_RETRIES):
        try:
            return action()
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) and "busy" not in str(error):
                raise
            if attempt == BUSY_RETRIES - 1:
                raise StoreError(
                    "The run store stayed locked by another mgpu-gui process for too long; "
                    "try again, or point MGPU_GUI_STORE at a store of this session's own."
                ) from error
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


def _connect(target: Path | str) -> sqlite3.Connection:
    """`target`: a path, or a `file:` URI."""
    return sqlite3.connect(target, uri=isinstance(target, str), timeout=BUSY_TIMEOUT_MS / 1000,
                           isolation_level=None, check_same_thread=False)


class StoreDatabase:
    """One connection to the store file, migrated to the current schema."""

    def __init__(self, path: Path | None = None, *, read_only: bool = False):
        """`read_only`: the store as it is, for listing where it cannot be written (a
        read-only mount): no journal change, no migration, no write."""
        self.path = (path or default_store_path()).absolute()
        self.note = ""  # said to the user when the journal mode had to change
        self.read_only = read_only
        try:
            if read_only:
                self.db = self._open_read_only()
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.db = _connect(self.path)
        except (OSError, sqlite3.Error) as error:
            raise StoreError(f"Cannot open the run store {self.path}: {error}. Point "
                             f"{STORE_ENV} (or --store) at a writable file.") from error
        self.db.row_factory = sqlite3.Row
        try:
            self.db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self.db.execute("PRAGMA foreign_keys = ON")
            if read_only:
                self.journal_mode = "read-only"
                self._check_current(self._version())
            else:
                self.journal_mode = self._choose_journal_mode()
                self._migrate()
        except sqlite3.DatabaseError as error:  # not a database, damaged, or read-only
            self.db.close()
            kind = ReadOnlyStoreError if _read_only(self.path, error) else StoreError
            raise kind(unusable_store_message(self.path, error)) from error
        except StoreError:
            self.db.close()
            raise

    def _open_read_only(self) -> sqlite3.Connection:
        """The store as it is. One in WAL mode whose `-shm` file is not there and cannot be
        made (a read-only mount) opens only as immutable: nothing here can change it."""
        for query in ("mode=ro", "mode=ro&immutable=1"):
            db = _connect(f"{self.path.as_uri()}?{query}")
            try:
                db.execute("PRAGMA schema_version").fetchone()
                return db
            except sqlite3.OperationalError as error:
                db.close()
                if "unable to open" not in str(error) or "immutable" in query:
                    raise
        raise AssertionError("unreachable")

    def _check_current(self, version: int) -> None:
        """A read-only store is read as it is: one of an earlier schema would need writing."""
        self._check_version(version)
        if version != SCHEMA_VERSION:
            raise StoreError(
                f"The run store {self.path} is read-only and from an earlier mgpu-gui (schema "
                f"{version}, this one reads {SCHEMA_VERSION}); open it once where it can be "
                f"written, or copy it to a writable folder and point {STORE_ENV} at the copy.")

    def close(self) -> None:
        self.db.close()

    def _choose_journal_mode(self) -> str:
        fs = filesystem_type(self.path.parent)
        if fs in NETWORK_FILESYSTEMS:
            self.note = (f"The run store {self.path} is on a network filesystem ({fs}); SQLite's "
                         f"WAL mode needs memory shared on one machine, so the store uses a "
                         f"rollback journal there. Do not use it from two machines at once; "
                         f"set {STORE_ENV} to a local path to avoid this.")
            wanted = "delete"
        else:
            wanted = "wal"
        mode = retry(lambda: self.db.execute(f"PRAGMA journal_mode = {wanted}").fetchone()[0])
        if wanted == "wal" and mode != "wal":
            self.note = (f"The run store {self.path} could not use WAL mode on this filesystem "
                         f"({fs or 'unknown'}); it uses '{mode}' journaling.")
        self.db.execute("PRAGMA synchronous = NORMAL")
        return str(mode)

    def _migrate(self) -> None:
        # A store of the current schema (every open but the first) is only read here: no
        # write lock, so opening never waits behind another connection's writes (a reader
        # thread opening its connection while a run is recorded, another app instance).
        version = self._version()
        self._check_version(version)
        if version == SCHEMA_VERSION:
            return

        def migrate() -> None:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                version = self.db.execute("PRAGMA user_version").fetchone()[0]  # again, locked
                self._check_version(version)
                for number in range(version, SCHEMA_VERSION):
                    for statement in MIGRATIONS[number].split(";"):
                        if statement.strip():
                            self.db.execute(statement)
                self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise

        retry(migrate)

    def _version(self) -> int:
        return int(retry(lambda: self.db.execute("PRAGMA user_version").fetchone()[0]))

    def _check_version(self, version: int) -> None:
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"The run store {self.path} was written by a newer mgpu-gui (schema "
                f"{version}, this one knows {SCHEMA_VERSION}). Update mgpu-gui, or set "
                f"{STORE_ENV} to use another store.")

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One short write transaction (callers wrap it in `_retry`)."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")
