"""Runs every test file alone, each in a pytest process of its own, to show that none
depends on another having run first (an event type registered by an import, a fixture's
leftovers):

    python tests/run_each_file.py [-j 2] [-m "not slow"] [--write-times] [FILE ...]

Prints each file's outcome and time, then `N passed, N failed` (files, not tests).
--write-times keeps the times in tests/module_seconds.json, the order in which the
suite's workers take the modules up (longest first: tests/conftest.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMES = ROOT / "tests" / "module_seconds.json"


def run_file(path: Path, marks: str | None) -> tuple[Path, int, float, list[str]]:
    started = time.monotonic()
    command = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
               str(path.relative_to(ROOT))] + (["-m", marks] if marks else [])
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    said = [line for line in lines if line.startswith(("FAILED", "ERROR"))] + lines[-1:]
    return path, done.returncode, time.monotonic() - started, said


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("-j", "--jobs", type=int, default=2, help="files at a time")
    parser.add_argument("-m", dest="marks", help="a marker expression, as pytest's -m")
    parser.add_argument("--write-times", action="store_true",
                        help=f"keep each file's time in {TIMES.relative_to(ROOT)}")
    args = parser.parse_args()
    files = [f.resolve() for f in args.files] or sorted((ROOT / "tests").rglob("test_*.py"))
    failed, times = [], {}
    with ThreadPoolExecutor(args.jobs) as pool:
        for path, code, seconds, said in pool.map(lambda f: run_file(f, args.marks), files):
            times[str(path.relative_to(ROOT))] = round(seconds, 1)
            ok = code in (0, 5)  # 5: every test of the file deselected by -m
            print(f"{'ok  ' if ok else 'FAIL'} {seconds:6.1f} s  {path.relative_to(ROOT)}: "
                  + "\n    ".join(said), flush=True)
            if not ok:
                failed.append(path)
    if args.write_times:
        TIMES.write_text(json.dumps(dict(sorted(times.items())), indent=1) + "\n")
    print(f"{len(files) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
