"""Fuzz the file inspector child with seeded damaged model and data files.

2,000 files (tests/helpers/fuzzed_files.py: valid ones, bit flips, truncations,
swapped chunks, zip bombs, zip members that lie about their size) go through
one `FileInspector`, each once (no cache hits). Printed:
  - the count per outcome: valid / message (a ModelError or DataError from the
    parsers; "unexpected" ones are exceptions the inspection code does not
    describe yet) / watchdog kill / crash, and per mutation;
  - p50 / p99 / max time per file (a restart after a kill or crash included);
  - the child's peak memory (VmHWM, VmPeak) against its address-space cap;
  - the baseline: the valid files inspected in-process in this run, against the
    same files through the child, and a cached answer.

    python tests/benchmarks/inspector_fuzz.py [--count 2000] [--seed 1]
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # for tests.helpers

from mgpu_gui.core.children.inspector import FileInspector  # noqa: E402
from mgpu_gui.core.datasets.inspection import inspect_data  # noqa: E402
from mgpu_gui.core.errors import DataError, ModelError  # noqa: E402
from mgpu_gui.core.inspect_request import InspectKind  # noqa: E402
from mgpu_gui.core.modelfiles.inspection import inspect_model_file  # noqa: E402
from tests.helpers.fuzzed_files import (  # noqa: E402
    SUFFIXES,
    FuzzCase,
    Mutation,
    fuzz_cases,
    valid_files,
)


def memory(pid: int | None, field: str) -> int:
    """VmHWM, VmPeak... of a live process in bytes (0 when none)."""
    if pid is None:
        return 0
    try:
        with open(f"/proc/{pid}/status") as status:
            return next((int(line.split()[1]) << 10 for line in status
                         if line.startswith(field + ":")), 0)
    except FileNotFoundError:
        return 0


def ask(inspector: FileInspector, case: FuzzCase) -> None:
    if case.kind is InspectKind.MODEL:
        inspector.inspect_model(case.path)
    else:
        inspector.inspect_data(case.path)


def in_process(case: FuzzCase) -> None:
    if case.kind is InspectKind.MODEL:
        inspect_model_file(case.path)
    else:
        inspect_data(case.path)


def percentile(times: list[float], fraction: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def fuzz(cases: list[FuzzCase]) -> None:
    outcomes: collections.Counter[str] = collections.Counter()
    by_mutation: dict[str, collections.Counter[str]] = collections.defaultdict(
        collections.Counter)
    unexpected_types: collections.Counter[str] = collections.Counter()
    times: list[float] = []
    peak = {"VmHWM": 0, "VmPeak": 0}
    limit = 0
    with FileInspector() as inspector:
        for case in cases:
            before = (inspector.watchdog_kills, inspector.crashes, inspector.unexpected_errors)
            start = time.perf_counter()
            try:
                ask(inspector, case)
                outcome = "valid"
            except (ModelError, DataError) as error:
                kills, crashes, unexpected = (now - then for now, then in zip(
                    (inspector.watchdog_kills, inspector.crashes,
                     inspector.unexpected_errors), before, strict=True))
                outcome = ("watchdog kill" if kills else "crash" if crashes
                           else "message (unexpected)" if unexpected else "message")
                if unexpected:  # "could not read F: unexpected KeyError: ..."
                    unexpected_types[str(error).split("unexpected ", 1)[1].split(":")[0]] += 1
            times.append(time.perf_counter() - start)
            outcomes[outcome] += 1
            by_mutation[f"{case.mutation.value} {case.path.suffix}"][outcome] += 1
            for field in peak:
                peak[field] = max(peak[field], memory(inspector.pid, field))
            limit = inspector.memory_limit or limit
        starts = inspector.starts
    print(f"\n{len(cases)} files, {starts} children started")
    for outcome in ("valid", "message", "message (unexpected)", "watchdog kill", "crash"):
        share = 100 * outcomes[outcome] / len(cases)
        print(f"  {outcome:22s} {outcomes[outcome]:5d}  ({share:.1f} %)")
    print("per mutation and file type:")
    for mutation, counts in sorted(by_mutation.items()):
        print(f"  {mutation:18s} " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print("unexpected exception types: " + ", ".join(
        f"{name} {count}" for name, count in unexpected_types.most_common()))
    on_their_own = outcomes["valid"] + outcomes["message"] + outcomes["message (unexpected)"]
    print(f"answered by the child itself: {100 * on_their_own / len(cases):.2f} %")
    print(f"time per file: p50 {percentile(times, 0.5) * 1e3:.2f} ms, "
          f"p99 {percentile(times, 0.99) * 1e3:.0f} ms, max {max(times) * 1e3:.0f} ms")
    print(f"child peak memory: VmHWM {peak['VmHWM'] >> 20} MiB, VmPeak {peak['VmPeak'] >> 20} "
          f"MiB, cap (RLIMIT_AS) {limit >> 20} MiB")


def baseline(folder: Path, seed: int, count: int) -> None:
    """Valid files in-process and through a warm child, each file read once, then cached."""
    cases = []
    for index in range(count):
        suffix = SUFFIXES[index % len(SUFFIXES)]
        variants = valid_files(suffix, seed)
        path = folder / f"valid{index:04d}{suffix}"
        path.write_bytes(variants[index // len(SUFFIXES) % len(variants)])
        cases.append(FuzzCase(path, InspectKind.DATA if suffix == ".npz" else InspectKind.MODEL,
                              Mutation.NONE))
    local, child, cached = [], [], []
    with FileInspector() as inspector:
        start = time.perf_counter()
        ask(inspector, cases[0])
        cold_s = time.perf_counter() - start
        for case in cases[1:]:
            for run, times in ((in_process, local), (lambda c: ask(inspector, c), child),
                               (lambda c: ask(inspector, c), cached)):
                start = time.perf_counter()
                run(case)
                times.append(time.perf_counter() - start)
    ratio = statistics.median(child) / statistics.median(local)
    print(f"baseline, {len(local)} valid files: in-process p50 "
          f"{statistics.median(local) * 1e3:.2f} ms, through the child "
          f"{statistics.median(child) * 1e3:.2f} ms (ratio {ratio:.2f}), cached "
          f"{statistics.median(cached) * 1e6:.0f} us; a cold child's first answer "
          f"{cold_s * 1e3:.0f} ms")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        cases = fuzz_cases(Path(tmp), args.count, args.seed)
        print(f"generated {len(cases)} files in {time.perf_counter() - start:.1f} s")
        fuzz(cases)
        for case in cases:
            case.path.unlink()
        baseline(Path(tmp), args.seed, 300)
    return 0


if __name__ == "__main__":
    sys.exit(main())
