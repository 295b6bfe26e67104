"""Runs every test file alone, each in a pytest process of its own, to show that none
depends on another having run first (an event type registered by an import, a fixture's
leftovers):

    python tests/run_each_file.py [-j 2] [-m "not slow"] [--write-times] [FILE ...]

Prints each file's outcome, wall time and CPU time (its processes' and every child's they
waited for: what the suite's workers share), then `N passed, N failed` (files, not tests).
--write-times keeps the times in tests/module_seconds.json, the order in which the
suite's workers take the modules up (longest first: tests/conftest.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMES = ROOT / "tests" / "module_seconds.json"


def run_file(path: Path, marks: str | None) -> tuple[Path, int, float, float, list[str]]:
    started = time.monotonic()
    command = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
               str(path.relative_to(ROOT))] + (["-m", marks] if marks else [])
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True) as pytest:
        output = pytest.stdout.read()
        # wait4's usage covers the process and the children it waited for, TensorFlow's
        # workers and export checks included.
        _, status, usage = os.wait4(pytest.pid, 0)
        pytest.returncode = os.waitstatus_to_exitcode(status)
    lines = output.strip().splitlines()
    said = [line for line in lines if line.startswith(("FAILED", "ERROR"))] + lines[-1:]
    return (path, pytest.returncode, time.monotonic() - started,
            usage.ru_utime + usage.ru_stime, said)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("-j", "--jobs", type=int, default=2, help="files at a time")
    parser.add_argument("-m", dest="marks", help="a marker expression, as pytest's -m")
    parser.add_argument("--write-times", action="store_true",
                        help=f"keep each file's time in {TIMES.relative_to(ROOT)}")
    args = parser.parse_args()
    files = [f.resolve() for f in args.files] or sorted((ROOT / "tests").rglob("test_*.py"))
    failed, times, cpu_total = [], {}, 0.0
    with ThreadPoolExecutor(args.jobs) as pool:
        for path, code, seconds, cpu, said in pool.map(lambda f: run_file(f, args.marks),
                                                       files):
            times[str(path.relative_to(ROOT))] = round(seconds, 1)
            cpu_total += cpu
            ok = code in (0, 5)  # 5: every test of the file deselected by -m
            print(f"{'ok  ' if ok else 'FAIL'} {seconds:6.1f} s {cpu:6.1f} CPU-s  "
                  f"{path.relative_to(ROOT)}: " + "\n    ".join(said), flush=True)
            if not ok:
                failed.append(path)
    if args.write_times:
        TIMES.write_text(json.dumps(dict(sorted(times.items())), indent=1) + "\n")
    print(f"{len(files) - len(failed)} passed, {len(failed)} failed; {cpu_total:.0f} CPU-s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
