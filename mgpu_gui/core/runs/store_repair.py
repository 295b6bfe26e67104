"""Salvage a damaged run store into a fresh one, keeping the damaged file untouched.

SQLite does the reading: its command-line shell's `.recover` (which reads every page it
can, past a broken b-tree or a garbled header) where the `sqlite3` program is installed,
else Python's `iterdump()`, which stops at the first unreadable page. The recovered SQL is
loaded into a scratch database; a fresh store of the current schema takes every row of
its tables that fits, column by column (an older store's too), so the repaired store is
always one this app opens. Nothing here parses the file itself.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mgpu_gui.core.runs.storedb import StoreDatabase

RECOVER_TIMEOUT_S = 300.0
_TRANSACTION_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "END")


@dataclass(frozen=True)
class Repair:
    kept: Path  # the damaged file, moved aside as it was
    how: str  # what read it, in words
    rows: dict[str, int]  # table -> rows salvaged into the new store

    def describe(self) -> str:
        saved = ", ".join(f"{count} {table}" for table, count in self.rows.items() if count)
        return (f"The damaged store is kept as {self.kept}. Salvaged with {self.how}: "
                f"{saved or 'no rows'}. A run missing from `mgpu-train runs` still has its "
                "folder: give the folder to `mgpu-train runs note FOLDER ''` (or resume, "
                "evaluate, or open it in the app) to list it again.")


def repair_store(path: Path) -> Repair:
    """Move the store at `path` aside, and make a new store there with what can be read
    of it. Run folders are untouched: `mgpu-train runs` lists what was salvaged."""
    path = path.absolute()
    kept = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
    for suffix in ("", "-wal", "-shm"):  # a WAL store's last writes live beside it
        source = Path(f"{path}{suffix}")
        if source.exists():
            os.replace(source, Path(f"{kept}{suffix}"))
    statements, how = _recovered_sql(kept)
    scratch = path.with_name(f".{path.name}.recovered")
    scratch.unlink(missing_ok=True)
    try:
        with contextlib.closing(sqlite3.connect(scratch)) as db:
            for statement in statements:
                if statement.lstrip().upper().startswith(_TRANSACTION_CONTROL):
                    continue  # a dump that met errors ends in ROLLBACK: keep what it read
                with contextlib.suppress(sqlite3.Error):  # a statement of a broken page
                    db.execute(statement)
            db.commit()
        fresh = StoreDatabase(path)
        try:
            rows = _copy_rows(fresh.db, scratch)
        finally:
            fresh.close()
    finally:
        scratch.unlink(missing_ok=True)
    return Repair(kept, how, rows)


def _recovered_sql(damaged: Path) -> tuple[list[str], str]:
    shell = shutil.which("sqlite3")
    if shell is not None:
        # .recover reads past more damage, but some builds fail on healthy stores (Debian's
        # 3.40.1: "SQL logic error"); .dump goes on past a corrupt page.
        for command in (".recover", ".dump"):
            done = subprocess.run([shell, "-readonly", str(damaged), command],
                                  capture_output=True, text=True, errors="replace",
                                  timeout=RECOVER_TIMEOUT_S)
            if done.returncode == 0:
                return list(_statements(done.stdout.splitlines())), f"SQLite's {command}"
    read: list[str] = []
    uri = f"{damaged.as_uri()}?mode=ro"
    with contextlib.suppress(sqlite3.Error), contextlib.closing(
            sqlite3.connect(uri, uri=True)) as db:
        for statement in db.iterdump():  # stops at the first page it cannot read
            read.append(statement)
    return read, "a dump of its readable rows (Python's sqlite3; install the sqlite3 program " \
                 "for SQLite's fuller .recover)"


def _statements(lines: list[str]) -> Iterator[str]:
    """Whole SQL statements from the shell's output, one at a time."""
    pending = ""
    for line in lines:
        pending += line + "\n"
        if sqlite3.complete_statement(pending):
            yield pending
            pending = ""


def _copy_rows(fresh: sqlite3.Connection, scratch: Path) -> dict[str, int]:
    """Each table of the current schema filled from the recovered one's columns of the
    same names; rows that break a constraint are left out."""
    fresh.execute("ATTACH DATABASE ? AS recovered", (str(scratch),))
    try:
        tables = [row[0] for row in fresh.execute(
            "SELECT name FROM main.sqlite_master WHERE type = 'table' "
            "AND name NOT LIKE 'sqlite_%'")]
        found = {row[0] for row in fresh.execute(
            "SELECT name FROM recovered.sqlite_master WHERE type = 'table'")}
        rows: dict[str, int] = {}
        fresh.execute("PRAGMA foreign_keys = OFF")  # parents and children come in any order
        for table in tables:
            if table not in found:
                continue
            ours = [row[1] for row in fresh.execute(f"PRAGMA main.table_info({table})")]
            theirs = {row[1] for row in fresh.execute(f"PRAGMA recovered.table_info({table})")}
            columns = ", ".join(c for c in ours if c in theirs)
            if not columns:
                continue
            before = fresh.total_changes
            fresh.execute(f"INSERT OR IGNORE INTO main.{table} ({columns}) "
                          f"SELECT {columns} FROM recovered.{table}")
            rows[table] = fresh.total_changes - before
        fresh.execute("PRAGMA foreign_keys = ON")
        return rows
    finally:
        fresh.execute("DETACH DATABASE recovered")
