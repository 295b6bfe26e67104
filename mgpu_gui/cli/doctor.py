"""`mgpu-train doctor`: check the setup as NVML, and TensorFlow and JAX (in a child), see it."""

from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import sys
from pathlib import Path

from mgpu_gui.cli.common import add_store_argument, child_output
from mgpu_gui.core.children.launch import command_log
from mgpu_gui.core.devices import nvml
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.runs.store_repair import repair_store
from mgpu_gui.core.runs.storedb import StoreDatabase, StoreError, default_store_path
from mgpu_gui.core.tools.doctor import Facts, NvmlFacts, diagnose, exit_code
from mgpu_gui.core.tools.doctor_report import findings_to_plain, report


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor", help="check the setup: driver and CUDA as TensorFlow sees them, the GPUs "
        "TensorFlow sees vs NVML, NCCL, JAX's version and devices; says what to fix (exit 1 "
        "on an error)")
    p.add_argument("--json", action="store_true", help="print the facts and findings as JSON")
    p.add_argument("--repair-store", action="store_true",
                   help="salvage a damaged run store into a new one (the damaged file is "
                        "kept beside it); run folders are untouched")
    add_store_argument(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.repair_store:
        return _repair(args.store or default_store_path())
    from mgpu_gui.core.tools.tf_facts import LOG_NAME, ask_tensorflow  # TF runs in a child

    if not args.json:
        print("Asking NVIDIA's driver, TensorFlow and JAX (they start in a child process, "
              "a few seconds)…", file=sys.stderr)
    tf = ask_tensorflow(on_output=child_output(args))
    facts = Facts(NvmlFacts.from_inventory(nvml.query_inventory()), tf)
    findings = diagnose(facts)
    if args.json:
        print(json.dumps({"facts": facts.to_dict(), "findings": findings_to_plain(findings),
                          "ok": exit_code(findings) == 0}, indent=2))
    else:
        print(report(facts, findings, verbose=args.debug))
    if tf.error and tf.installed and not args.debug:  # nothing worth reading when absent
        print(f"TensorFlow's full output is in {command_log(LOG_NAME)}", file=sys.stderr)
    return exit_code(findings)


def _repair(path: Path) -> int:
    if not path.is_file():
        raise UserError(f"There is no run store at {path} to repair.")
    with contextlib.suppress(sqlite3.DatabaseError, StoreError):
        database = StoreDatabase(path)
        try:
            healthy = database.db.execute("PRAGMA quick_check").fetchone()[0] == "ok"
        finally:
            database.close()
        if healthy:
            print(f"The run store {path} opens and passes SQLite's check: nothing to repair.")
            return 0
    print(f"Repaired the run store {path}. {repair_store(path).describe()}")
    return 0

