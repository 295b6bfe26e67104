"""The Data view on large image folders: how soon the first figures show, and the longest
the GUI thread ever stalls while the view opens and loads. Prints figures.

Builds folders of FILES images each (10 classes, unbalanced, three image sizes; hard
links to three small PNGs, so 100,000 files take seconds and no space), then opens the
Data view through the main window's "Preview…" button (beside Data in the run setup)
REPEATS times per folder (offscreen Qt, or X11 with --xcb). For each open:

  first figures  click -> the class counts on screen (the bars filled): the child's
                 start, the folder's listing and the counts. Past the listing's budget
                 the first counts are estimates (said on screen); "exact counts" is when
                 the counted ones replaced them. Target <= 1 s.
  all figures    click -> the last stage shown (thumbnails, value range, sizes).
  GUI stall      the watchdog: a 1 ms precise QTimer on the GUI thread, and the longest
                 gap between its ticks (less the 1 ms) from just before the click to
                 0.3 s after the last figures: any stall, whatever caused it (an event
                 handler, several events back to back, a paint, another thread holding
                 the GIL). Target <= 16 ms.
  longest event  the longest single event, in wall time and in the GUI thread's own CPU
                 time (`time.thread_time`: what our code costs, without the time a busy
                 machine or another thread took away). Timed in a Python override of
                 QApplication.notify, which every nested event goes through too (a
                 dialog's construction sends hundreds): that made an open's events about
                 twice as slow, so these opens run in a process of their own ("events
                 timed", after the watchdog's "plain" one) and their watchdog figures
                 include that cost.

The first open of a session used to import (and, without cached bytecode, compile) the
view's modules inside the click; the run setup now imports them on a thread once it
shows. Whether that matters depends on bytecode caching, so `--bytecode both` (the
default) runs the measurement twice, each in a fresh process: "off" (no .pyc for the
project: every module compiled at import, as with PYTHONDONTWRITEBYTECODE and a fresh
checkout) and "on" (.pyc cached in a scratch PYTHONPYCACHEPREFIX, warmed first, as in a
pip install). The output says which, and whether the view's modules were already loaded
at the first click.

Baselines measured in the same run: training's own listing (`list_images`) and the
Data view's (`ClassFolders`) in this process, and the same 1 ms timer's longest gap over
an idle second (the machine's own noise: on a shared 2-core machine it alone can exceed
16 ms). The run setup's own data check of each folder (a child reading headers) is left
to finish before its first open. `--cold` drops the page cache before each open (Linux,
as root): the listing then reads the disk, as on a folder not touched for a while.

    python tests/benchmarks/data_view.py [--files 20000 100000] [--repeats 5]
        [--bytecode both|on|off] [--keep DIR] [--xcb] [--cold] [--no-events]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

CLASSES = 10
SIZES = ((16, 12), (24, 24), (32, 20))  # (width, height)
VIEW_MODULE = "mgpu_gui.gui.dialogs.data_view"
ROOT = Path(__file__).resolve().parents[2]


def make_folder(root: Path, files: int) -> dict[str, int]:
    """FILES PNGs over CLASSES class folders, class k holding about (k + 1) shares; each
    file a hard link to one of three small PNGs (valid for the few that get decoded)."""
    blobs = root.parent / f".{root.name}-blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    for width, height in SIZES:
        pixels = np.random.default_rng(width).integers(0, 256, (height, width, 3), np.uint8)
        Image.fromarray(pixels).save(blobs / f"{width}x{height}.png")
    sources = [str(blobs / f"{w}x{h}.png") for w, h in SIZES]
    shares = np.arange(1, CLASSES + 1)
    counts = np.floor(files * shares / shares.sum()).astype(int)
    counts[-1] += files - counts.sum()
    for k, count in enumerate(counts):
        folder = root / f"class_{k:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(int(count)):
            os.link(sources[i % len(sources)], folder / f"{i:06d}.png")
    return {f"class_{k:02d}": int(c) for k, c in enumerate(counts)}


class Ticks:
    """A 1 ms precise timer's tick times: the GUI thread's heartbeat (the watchdog)."""

    def __init__(self) -> None:
        from PySide6.QtCore import Qt, QTimer

        self.times: list[float] = []
        self.timer = QTimer()
        self.timer.setTimerType(Qt.TimerType.PreciseTimer)
        self.timer.setInterval(1)
        self.timer.timeout.connect(lambda: self.times.append(time.perf_counter()))

    def longest_gap_ms(self, since: float, until: float) -> tuple[float, float]:
        """(longest gap less the interval, when it began) among the ticks in [since, until],
        the last one before and the first one after."""
        before = [t for t in self.times if t < since][-1:]
        after = [t for t in self.times if t > until][:1]
        times = before + [t for t in self.times if since <= t <= until] + after
        if len(times) < 2:
            return float("nan"), since
        gaps = np.diff(times)
        worst = int(np.argmax(gaps))
        return max(0.0, float(gaps[worst]) * 1000 - 1.0), times[worst]


def timed_app():
    """A QApplication that times each top-level event it delivers: (start, wall, CPU).

    Its Python `notify` runs for every nested event too (a dialog's construction sends
    hundreds): a few microseconds each, which these figures include. (The event
    dispatcher's awake/aboutToBlock signals would cost less but do not bracket the
    event processing on every platform.)"""
    from PySide6.QtWidgets import QApplication

    class TimedApp(QApplication):
        def __init__(self, argv):
            super().__init__(argv)
            self.depth = 0
            self.events: list[tuple[float, float, float]] = []

        def notify(self, receiver, event):  # noqa: N802 (Qt's name)
            if self.depth:
                return super().notify(receiver, event)
            self.depth += 1
            start, cpu = time.perf_counter(), time.thread_time()
            try:
                return super().notify(receiver, event)
            finally:
                self.depth -= 1
                self.events.append((start, (time.perf_counter() - start) * 1000,
                                    (time.thread_time() - cpu) * 1000))

        def longest(self, since: float, until: float) -> tuple[float, float]:
            """(wall ms, CPU ms) of the events that ended in [since, until], worst of each."""
            inside = [e for e in self.events if since <= e[0] + e[1] / 1000 <= until]
            return (max((e[1] for e in inside), default=0.0),
                    max((e[2] for e in inside), default=0.0))

    return TimedApp(sys.argv[:1])


def run_loop(seconds: float, until=None) -> None:
    """Run the event loop for `seconds`, or until `until()` (checked every 5 ms)."""
    from PySide6.QtCore import QEventLoop, QTimer

    loop, check = QEventLoop(), QTimer()
    deadline = time.perf_counter() + seconds
    check.timeout.connect(lambda: loop.quit() if time.perf_counter() > deadline or (
        until is not None and until()) else None)
    check.start(5)
    loop.exec()
    check.stop()


def drop_page_cache() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def open_once(app, panel, ticks: Ticks, cold: bool, timed: bool) -> dict:
    """Click Preview, follow the view to its last figures; times in seconds, gaps in ms
    (the longest event's only when `app` is `timed_app()`)."""
    from PySide6.QtCore import QTimer

    marks: dict[str, float] = {}
    firsts: list = []

    def shown(figures) -> None:
        if dialog_view().bars.counts:
            now = time.perf_counter()
            marks.setdefault("counts", now)
            firsts.append(figures.overview)
            if not figures.overview.estimated:
                marks.setdefault("exact", now)

    def dialog_view():
        return panel.data_view.view

    def click() -> None:
        marks["click"] = time.perf_counter()
        panel.data_preview.click()
        marks["opened"] = time.perf_counter()
        panel.data_view.loader.updated.connect(shown)
        panel.data_view.loader.finished.connect(
            lambda: marks.setdefault("end", time.perf_counter()))

    if cold:
        drop_page_cache()
    QTimer.singleShot(100, click)
    run_loop(120.0, lambda: "end" in marks)
    run_loop(0.3)
    view = dialog_view()
    result = {"shown": (view.bars.counts, view.sizes_label.text(), view.range_label.text()),
              "estimated": firsts[0].estimated if firsts else 0}
    panel.data_view.close()
    run_loop(0.05)
    until = marks["end"] + 0.3
    stall, at = ticks.longest_gap_ms(marks["click"], until)
    wall, cpu = app.longest(marks["click"], until) if timed else (0.0, 0.0)
    return result | {"first": marks["counts"] - marks["click"],
                     "exact": marks["exact"] - marks["click"],
                     "all": marks["end"] - marks["click"], "stall": stall,
                     "stall_at": (at - marks["click"]) * 1000, "wall": wall, "cpu": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, nargs="+", default=[20_000, 100_000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--bytecode", choices=("both", "on", "off"), default="both")
    parser.add_argument("--keep", type=Path, help="folder for the images (kept, reused)")
    parser.add_argument("--xcb", action="store_true", help="a real X11 window (DISPLAY)")
    parser.add_argument("--cold", action="store_true",
                        help="drop the page cache before each open (Linux, root)")
    parser.add_argument("--no-events", action="store_true",
                        help="the watchdog's plain opens only, no opens with each event timed")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--timed", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.xcb:
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    with tempfile.TemporaryDirectory() as scratch:
        base = args.keep or Path(scratch)
        roots = [base / f"images{files}" for files in args.files]
        if args.measure:
            measure(roots, args)
            return
        for root, files in zip(roots, args.files, strict=True):
            started = time.perf_counter()
            if not root.exists():
                make_folder(root, files)
            print(f"folder: {files:,} PNGs in {CLASSES} classes ({root}), made in "
                  f"{time.perf_counter() - started:.1f} s", flush=True)
        modes = ("off", "on") if args.bytecode == "both" else (args.bytecode,)
        for mode in modes:
            for timed in (False, True)[:1 if args.no_events else 2]:
                measure_in_child(mode, timed, Path(scratch), base, args)


def measure_in_child(mode: str, timed: bool, scratch: Path, base: Path,
                     args: argparse.Namespace) -> None:
    """This benchmark's measurement in a fresh process, bytecode caching `mode`, each
    event `timed` or not."""
    env = dict(os.environ)
    if mode == "off":  # ours compiled as imported, unless a checkout has .pyc (said below)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPYCACHEPREFIX", None)
    else:  # every .pyc in a scratch cache, written by a first import of what the view runs
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(scratch / "pycache")
        subprocess.run([sys.executable, "-c", f"import mgpu_gui.gui.main_window, {VIEW_MODULE}, "
                        "mgpu_gui.processes.data_overview"], env=env, cwd=ROOT, check=True)
    command = [sys.executable, __file__, "--measure", "--keep", str(base), "--repeats",
               str(args.repeats), "--files", *map(str, args.files)]
    command += ["--xcb"] * args.xcb + ["--cold"] * args.cold + ["--timed"] * timed
    how = "events timed (each event through Python's notify)" if timed else "plain"
    print(f"\n== bytecode {mode}, {how} ==", flush=True)
    subprocess.run(command, env=env, cwd=ROOT, check=True)


def measure(roots: list[Path], args: argparse.Namespace) -> None:
    from PySide6.QtWidgets import QApplication

    from mgpu_gui.core.datasets.folder_listing import ClassFolders
    from mgpu_gui.core.datasets.inspection import list_images
    from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState
    from mgpu_gui.gui.jobs.telemetry_source import TelemetrySource
    from mgpu_gui.gui.main_window import MainWindow

    app = timed_app() if args.timed else QApplication(sys.argv[:1])
    view_spec = importlib.util.find_spec(VIEW_MODULE)
    cached = Path(importlib.util.cache_from_source(view_spec.origin)).exists()
    print(f"bytecode: {'.pyc cached' if cached else 'no .pyc: compiled at import'} for the "
          f"view's modules (writing .pyc {'off' if sys.dont_write_bytecode else 'on'}, "
          f"cache prefix {sys.pycache_prefix or 'none'})")
    # The whole window, as a user has it (its modules loaded); no GPU polling.
    no_gpu = GpuInventory(state=NvmlState.NO_DRIVER, message="No NVIDIA driver (benchmark).")
    window = MainWindow(telemetry=TelemetrySource(inventory=no_gpu))
    window.show()
    panel = window.run_setup
    ticks = Ticks()
    ticks.timer.start()
    print(f"platform: {app.platformName()}, {os.cpu_count()} cores; {args.repeats} opens per "
          "folder" + (", page cache dropped before each" if args.cold else ""))
    for number, root in enumerate(roots):
        listing_s = min(_timed(lambda r=root: list_images(r)) for _ in range(3))
        ours_s = min(_timed(lambda r=root: ClassFolders(r).listing()) for _ in range(3))
        panel.set_data_path(str(root))
        run_loop(0.5)  # the panel's checks start: the data check's child reads the folder
        run_loop(300.0, lambda: not panel._content.is_running())
        idle_from = time.perf_counter()
        run_loop(1.0)
        idle_ms, _ = ticks.longest_gap_ms(idle_from, time.perf_counter())
        ahead = "loaded ahead" if VIEW_MODULE in sys.modules else "NOT loaded before the click"
        opens = [open_once(app, panel, ticks, args.cold, args.timed) for _ in range(args.repeats)]
        report(root, opens, listing_s, ours_s, idle_ms,
               f"the session's first (the view's modules {ahead})" if number == 0 else "",
               args.timed)
    ticks.timer.stop()
    window.close()
    run_loop(0.05)  # the closed dialogs are deleted (deleteLater)


def report(root: Path, opens: list[dict], listing_s: float, ours_s: float, idle_ms: float,
           first_note: str, timed: bool) -> None:
    counts, sizes, values = opens[-1]["shown"]
    print(f"\n{root.name}: {sum(counts):,} files; shown: counts {counts[0]:,}..{counts[-1]:,}; "
          f"value range {values}")
    print("  sizes " + sizes.replace("\n", "; "))
    print(f"  baseline: list_images (training's listing) {listing_s:6.3f} s, the view's "
          f"listing {ours_s:6.3f} s (best of 3, warm cache)")
    print(f"  baseline: idle second, 1 ms timer's longest gap {idle_ms:.1f} ms")
    print(f"  {'':34s}{'open 1':>10s}{'median':>10s}{'worst':>10s}")
    rows = (("first", "first figures (counts shown)", "s"),
            ("exact", "exact counts shown", "s"), ("all", "all figures", "s"),
            ("stall", "GUI stall, whole open (watchdog)", "ms"))
    if timed:
        rows += (("wall", "longest event, wall", "ms"), ("cpu", "longest event, CPU", "ms"))
    for key, label, unit in rows:
        fmt = "{:8.3f} s" if unit == "s" else "{:7.1f} ms"
        values_ = [o[key] for o in opens]
        print(f"  {label:34s}{fmt.format(values_[0])}{fmt.format(statistics.median(values_))}"
              f"{fmt.format(max(values_))}")
    if first_note:
        print(f"  open 1 is {first_note}")
    estimated = sum(1 for o in opens if o["estimated"])
    print(f"  first counts estimated (the listing past its budget) in {estimated} of "
          f"{len(opens)} opens")
    worst = max(opens, key=lambda o: o["stall"])
    first = max(o["first"] for o in opens)
    print(f"  first figures: worst {first:.3f} s (target <= 1 s: "
          f"{'met' if first <= 1.0 else 'MISSED'})")
    events = f"; longest event CPU {max(o['cpu'] for o in opens):.1f} ms" if timed else ""
    print(f"  GUI thread: longest stall {worst['stall']:.1f} ms, {worst['stall_at']:.0f} ms "
          f"after its click (idle {idle_ms:.1f} ms){events} (target <= 16 ms: "
          f"{'met' if worst['stall'] <= 16.0 else 'MISSED'})")


def _timed(call) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
