"""Does the window open fast and stay responsive? Prints figures; each section runs the
real app in fresh processes (offscreen unless DISPLAY is set; under xvfb-run, X11).

  startup   process start -> first painted window (its final layout: GPUs listed,
            Train enabled): the median of 5 warm starts, and a first start with the
            package's __pycache__ removed; a bare PySide6 QMainWindow started the same
            way is the baseline. Targets (issue 30): warm <= 0.6 s and <= 5x the bare
            window, first start <= 1.2 s. Bytecode is cached as a user's Python caches it
            (PYTHONDONTWRITEBYTECODE, which some shells set, is dropped: with it every
            start compiled every module, 0.3-0.6 s more and erratic).
  click     a Train click with a fake 4-GPU NVML whose every call sleeps 200 ms: the
            click handler's own time, then the longest GUI-thread event (timed in
            QApplication.notify) and the worst lateness of a 60 Hz timer from the
            click until 1 s after the run started. Target <= 16 ms.
  batch     20 batch-size changes in the run setup with an image-folder dataset of
            20,000 tiny PNGs: each change's handler time and the longest GUI-thread
            event in the 400 ms after it (the debounced check). Target <= 16 ms each.
  training  trains the demo briefly through the window on CPU replicas: event-loop
            lateness (p99 <= 16 ms, max <= 50 ms), curves refresh time, batch event
            -> pixel (<= 100 ms).

    python tests/benchmarks/gui_responsiveness.py [startup click batch training]
        [--starts 5] [--epochs 6] [--replicas 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SECTIONS = ("startup", "click", "batch", "training")
NVML_DELAY_S = 0.2
IMAGE_FILES = 20_000
IMAGE_CLASSES = 10
BATCH_CHANGES = 20

# Shared by the drivers: a QApplication that times every top-level event it delivers, and
# a tiny script runner (steps yield how long to let the event loop run before the next).
PRELUDE = r"""
import json, os, sys, time
T0 = float(os.environ["BENCH_T0"])
from PySide6.QtCore import QElapsedTimer, QEvent, QObject, Qt, QTimer
from PySide6.QtWidgets import QApplication


class TimedApp(QApplication):
    def __init__(self, argv):
        super().__init__(argv)
        self.depth = 0
        self.events = []  # (start, ms, event type name) of top-level events while recording
        self.recording = False

    def notify(self, receiver, event):
        if self.depth or not self.recording:
            self.depth += 1
            try:
                return super().notify(receiver, event)
            finally:
                self.depth -= 1
        kind = event.type().name
        self.depth += 1
        start = time.perf_counter()
        try:
            return super().notify(receiver, event)
        finally:
            self.depth -= 1
            self.events.append((start, (time.perf_counter() - start) * 1000, kind))

    def longest(self, since, until=float("inf")):
        inside = [e for e in self.events if since <= e[0] <= until]
        return max(inside, key=lambda e: e[1], default=(0.0, 0.0, "none"))


class Ticker:
    # A 60 Hz precise timer: how late each tick fires is how long the GUI thread was busy.
    def __init__(self):
        self.clock = QElapsedTimer()
        self.timer = QTimer()
        self.timer.setTimerType(Qt.TimerType.PreciseTimer)
        self.timer.setInterval(16)
        self.timer.timeout.connect(self.tick)
        self.late = []  # (perf_counter, ms late)
        self.last = None

    def start(self):
        self.clock.start()
        self.last = None
        self.timer.start()

    def tick(self):
        now = self.clock.nsecsElapsed() / 1e6
        if self.last is not None:
            self.late.append((time.perf_counter(), max(0.0, now - self.last - 16.0)))
        self.last = now

    def worst(self, since, until=float("inf")):
        return max((ms for t, ms in self.late if since <= t <= until), default=0.0)


def run_script(steps):
    def step():
        try:
            delay = next(steps)
        except StopIteration:
            return
        QTimer.singleShot(int(delay * 1000), step)
    QTimer.singleShot(0, step)


def wait_for(condition, timeout_s, what):
    end = time.perf_counter() + timeout_s
    while not condition():
        if time.perf_counter() > end:
            raise SystemExit(f"timed out waiting for {what}")
        yield 0.02


def report(result):
    print("RESULT " + json.dumps(result), flush=True)
"""

# The first paint of the window in its final layout: Train enabled and the GPUs listed.
STARTUP = PRELUDE + r"""
from mgpu_gui.gui.main_window import MainWindow

app = QApplication([])
app.setOrganizationName("mgpu-gui-bench")
window = MainWindow()


class FirstPaint(QObject):
    def eventFilter(self, obj, event):
        if (event.type() == QEvent.Type.Paint and obj.isWidgetType()
                and obj.window() is window and window.train_action.isEnabled()
                and window.gpu_panel.inventory is not None):
            report({"first_paint_s": time.time() - T0,
                    "modules": sorted(m for m in ("pyqtgraph", "mgpu_gui.gui.dialogs.about",
                                                  "mgpu_gui.core.runs.preflight")
                                      if m in sys.modules)})
            os._exit(0)
        return False


first_paint = FirstPaint()
app.installEventFilter(first_paint)
window.show()
app.exec()
"""

BASELINE = PRELUDE + r"""
from PySide6.QtWidgets import QMainWindow

app = QApplication([])
window = QMainWindow()


class FirstPaint(QObject):
    def eventFilter(self, obj, event):
        if event.type() == QEvent.Type.Paint:
            report({"first_paint_s": time.time() - T0})
            os._exit(0)
        return False


first_paint = FirstPaint()
window.installEventFilter(first_paint)
window.resize(1280, 820)
window.show()
app.exec()
"""

# Every pynvml function of a 4-GPU fake sleeps NVML_DELAY_S, as a real driver can when a
# GPU wakes up: the fake machine MGPU_GUI_FAKE_GPUS names (mgpu_gui/testing/fake_pynvml.py),
# slowed in the app's process; its training worker sees the same GPUs, unslowed.
SLOW_NVML = r"""
import functools
from mgpu_gui.testing import fake_pynvml

load_fake = fake_pynvml.from_file


def slow(function):
    @functools.wraps(function)
    def call(*args, **kwargs):
        time.sleep(NVML_DELAY_S)
        return function(*args, **kwargs)
    return call


def slow_machine(path):
    nvml = load_fake(path)
    for name in dir(nvml):
        if name.startswith("nvml") and callable(getattr(nvml, name)):
            setattr(nvml, name, slow(getattr(nvml, name)))
    return nvml


fake_pynvml.from_file = slow_machine
"""

CLICK = PRELUDE + SLOW_NVML + r"""
import signal
from mgpu_gui.core.config import RunConfig
from mgpu_gui.gui.main_window import MainWindow

app = TimedApp([])
app.setOrganizationName("mgpu-gui-bench")
window = MainWindow()
window.show()
ticker = Ticker()
result = {}


def steps():
    yield from wait_for(lambda: window.gpu_panel.inventory is not None, 120, "the GPUs")
    result["gpus"] = len(window.gpu_panel.inventory.gpus)
    window.run_setup.set_config(RunConfig(epochs=1, batch_per_replica=16, output_dir=OUT))
    window.run_setup.check_now()
    yield from wait_for(window.train_action.isEnabled, 60, "Train to be enabled")
    started = []
    window.controller.started.connect(lambda run: started.append(time.perf_counter()))
    window.controller.refused.connect(lambda request, error: started.append(time.perf_counter())
                                      or result.setdefault("refused", str(error)))
    ticker.start()
    yield 0.2
    app.recording = True
    clicked = time.perf_counter()
    window.train_action.trigger()
    result["handler_ms"] = (time.perf_counter() - clicked) * 1000
    result["preparing_shown"] = window.train_action.text()
    yield from wait_for(lambda: started, 120, "the run to start")
    yield 1.0
    until = started[0] + 1.0
    result["prepare_s"] = started[0] - clicked
    result["longest_first_second"] = app.longest(clicked, clicked + 1.0)[1:]
    result["longest_preparing"] = app.longest(clicked, started[0] - 0.001)[1:]
    result["longest_starting"] = app.longest(started[0] - 0.001, until)[1:]
    result["late_preparing_ms"] = ticker.worst(clicked, started[0])
    result["late_starting_ms"] = ticker.worst(started[0], until)
    app.recording = False
    if window.controller.worker_pid:
        os.kill(window.controller.worker_pid, signal.SIGKILL)
    yield from wait_for(lambda: not window.controller.is_running(), 60, "the run to end")
    report(result)
    window.close()
    app.quit()


run_script(steps())
app.exec()
"""

BATCH = PRELUDE + r"""
from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState
from mgpu_gui.gui.jobs.telemetry_source import TelemetrySource
from mgpu_gui.gui.main_window import MainWindow

app = TimedApp([])
app.setOrganizationName("mgpu-gui-bench")
window = MainWindow(telemetry=TelemetrySource(inventory=GpuInventory(NvmlState.NO_DRIVER)))
window.show()
result = {"changes": []}


def steps():
    yield from wait_for(window.train_action.isEnabled, 60, "Train to be enabled (demo data)")
    app.recording = True
    since = time.perf_counter()
    window.run_setup.set_config(RunConfig(data=DATA, image_size=(8, 8), batch_per_replica=16,
                                          epochs=1, output_dir=OUT))
    result["set_data_ms"] = (time.perf_counter() - since) * 1000
    yield from wait_for(window.train_action.isEnabled, 120, "the image folder to be checked")
    yield 0.4
    result["first_check"] = app.longest(since)[1:]
    for n in range(BATCH_CHANGES):
        since = time.perf_counter()
        window.run_setup.batch_spin.setValue(17 + n)
        handler = (time.perf_counter() - since) * 1000
        yield 0.4
        result["changes"].append([handler, *app.longest(since)[1:]])
    report(result)
    window.close()
    app.quit()


run_script(steps())
app.exec()
"""

TRAINING = PRELUDE + r"""
from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.events import BatchEnd
from mgpu_gui.gui.main_window import MainWindow

app = QApplication([])
app.setOrganizationName("mgpu-gui-bench")
window = MainWindow()
result = {"lateness_ms": [], "event_to_pixel_ms": []}
window.show()

# Event to pixel: a batch event is "drawn" at the first paint of the loss plot
# after the curves' refresh that took it in.
pending, refreshed = [], []
curves = window.curves
original_handle, original_refresh = curves.handle_event, curves._refresh_next


def handle(event):
    original_handle(event)
    if isinstance(event, BatchEnd):
        pending.append(event.t)


def refresh():
    started = time.perf_counter()
    original_refresh()
    if "loss" in curves._plots and not hooked:  # plots appear with their first data
        curves._plots["loss"].widget.viewport().installEventFilter(plot_paint)
        hooked.append(True)
    result.setdefault("refresh_ms", []).append((time.perf_counter() - started) * 1000)
    refreshed.extend(pending)
    pending.clear()


hooked = []
curves.handle_event = handle
curves._timer.timeout.disconnect()
curves._timer.timeout.connect(refresh)


class PlotPaint(QObject):
    def eventFilter(self, obj, event):
        if event.type() == QEvent.Type.Paint and refreshed:
            now = time.time()
            result["event_to_pixel_ms"] += [(now - t) * 1000 for t in refreshed]
            refreshed.clear()
        return False


plot_paint = PlotPaint()
ticker = Ticker()


def start():
    window.run_setup.set_config(RunConfig(
        epochs=EPOCHS, batch_per_replica=16, output_dir=OUT,
        devices=DeviceSelection(kind=DeviceKind.CPU, replicas=REPLICAS)))
    window.run_setup.check_now()
    window.start_training()
    ticker.start()


def finished(outcome):
    ticker.timer.stop()
    result["status"] = outcome.status.value
    result["lateness_ms"] = [ms for t, ms in ticker.late]
    report(result)
    window.close()


window.controller.finished.connect(finished)
QTimer.singleShot(300, start)
app.exec()
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def run_driver(driver: str, tmp: str, *, timeout: float = 600, fake_gpus: str | None = None,
               **names: object) -> dict:
    """One fresh app process; its RESULT line. `names` are replaced in the driver's text;
    `fake_gpus`: a fake machine's JSON file (MGPU_GUI_FAKE_GPUS)."""
    for name, value in names.items():
        driver = driver.replace(name, repr(value))
    env = {**os.environ, "XDG_CONFIG_HOME": os.path.join(tmp, "config"),
           "MGPU_GUI_STORE": os.path.join(tmp, "runs.sqlite3")}
    env.pop("MGPU_GUI_FAKE_GPUS", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if fake_gpus is not None:
        env["MGPU_GUI_FAKE_GPUS"] = fake_gpus
    env.setdefault("QT_QPA_PLATFORM", "offscreen" if "DISPLAY" not in env else "xcb")
    env["BENCH_T0"] = repr(time.time())
    done = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=tmp)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        sys.exit(f"the app did not report:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return json.loads(line[len("RESULT "):])


def startup(starts: int, tmp: str) -> None:
    for cache in (REPO / "mgpu_gui").rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)
    first = run_driver(STARTUP, tmp)["first_paint_s"]
    run_driver(BASELINE, tmp)  # warms the OS file cache for Qt as the app's first start did
    app, bare, loaded = [], [], []
    for _ in range(starts):  # interleaved: both see the same machine load
        result = run_driver(STARTUP, tmp)
        app.append(result["first_paint_s"])
        loaded = result["modules"]
        bare.append(run_driver(BASELINE, tmp)["first_paint_s"])
    app_median, bare_median = statistics.median(app), statistics.median(bare)
    print(f"start-up, process start -> first painted window (GPUs listed, Train enabled), "
          f"median of {starts} warm starts: {app_median:.3f} s (target <= 0.6 s); "
          f"runs {', '.join(f'{s:.3f}' for s in app)}")
    print(f"  bare PySide6 QMainWindow, same way: {bare_median:.3f} s; app / bare = "
          f"{app_median / bare_median:.2f} (target <= 5)")
    print(f"  first start (mgpu_gui __pycache__ removed): {first:.3f} s (target <= 1.2 s)")
    print(f"  loaded at first paint: {', '.join(loaded) or 'no pyqtgraph, dialogs, preflight'}")


def click(tmp: str) -> None:
    gpus = Path(tmp) / "gpus.json"
    gpus.write_text(json.dumps({"gpus": [
        {"index": i, "uuid": f"GPU-bench-{i}", "name": "Fake GPU", "memory_total": 8 << 30}
        for i in range(4)]}))
    r = run_driver(CLICK, tmp, fake_gpus=str(gpus), OUT=os.path.join(tmp, "runs"),
                   NVML_DELAY_S=NVML_DELAY_S)
    print(f"Train click, fake NVML with {r['gpus']} GPUs and {NVML_DELAY_S * 1000:.0f} ms per "
          f"call: handler {r['handler_ms']:.1f} ms (Train shows {r['preparing_shown']!r}); "
          f"prepared in {r['prepare_s']:.1f} s off the GUI thread"
          + (f" (refused: {r['refused']})" if "refused" in r else ""))
    print(f"  longest GUI-thread event in the first second: {r['longest_first_second'][0]:.1f} "
          f"ms ({r['longest_first_second'][1]}); while preparing: "
          f"{r['longest_preparing'][0]:.1f} ms ({r['longest_preparing'][1]}), 60 Hz timer at "
          f"most {r['late_preparing_ms']:.1f} ms late (target <= 16 ms)")
    print(f"  starting the worker and the second after: longest event "
          f"{r['longest_starting'][0]:.1f} ms ({r['longest_starting'][1]}), 60 Hz timer at most "
          f"{r['late_starting_ms']:.1f} ms late")


def tiny_png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    raw = b"".join(b"\x00" + b"\x80" * 8 for _ in range(8))  # 8x8 grey, filter 0 per row
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 8, 8, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def batch(tmp: str) -> None:
    data = Path(tmp) / "images"
    png = tiny_png()
    for k in range(IMAGE_CLASSES):
        folder = data / f"class{k}"
        folder.mkdir(parents=True)
        for i in range(IMAGE_FILES // IMAGE_CLASSES):
            (folder / f"{i:05d}.png").write_bytes(png)
    r = run_driver(BATCH, tmp, DATA=str(data), OUT=os.path.join(tmp, "runs"),
                   BATCH_CHANGES=BATCH_CHANGES)
    changes = r["changes"]
    worst = [max(handler, longest) for handler, longest, _ in changes]
    kinds = sorted({kind for _, longest, kind in changes if longest > 16})
    print(f"{len(changes)} batch-size changes, image folder of {IMAGE_FILES} files: per change "
          f"max(handler, longest event after it) p50 {percentile(worst, 50):.1f} ms, max "
          f"{max(worst):.1f} ms (target <= 16 ms each); handlers max "
          f"{max(c[0] for c in changes):.1f} ms" + (f"; slow events: {kinds}" if kinds else ""))
    print(f"  each: {', '.join(f'{w:.0f}' for w in worst)} ms; first check of the folder: "
          f"longest event {r['first_check'][0]:.0f} ms ({r['first_check'][1]})")


def training(epochs: int, replicas: int, tmp: str) -> None:
    result = run_driver(TRAINING, tmp, EPOCHS=epochs, REPLICAS=replicas, OUT=tmp)
    late, pixel = result["lateness_ms"], result["event_to_pixel_ms"]
    print(f"training: run status {result['status']}; {replicas} CPU replicas, {epochs} epochs")
    print(f"  event-loop lateness over {len(late)} ticks at 60 Hz: p50 "
          f"{percentile(late, 50):.1f} ms, p99 {percentile(late, 99):.1f} ms, max "
          f"{max(late, default=float('nan')):.1f} ms (targets p99 <= 16, max <= 50)")
    refresh = result.get("refresh_ms", [])
    print(f"  curves refresh (setData) on the GUI thread: p50 {percentile(refresh, 50):.1f} ms, "
          f"max {max(refresh, default=float('nan')):.1f} ms over {len(refresh)} refreshes")
    print(f"  batch event -> pixel over {len(pixel)} events: p50 {percentile(pixel, 50):.0f} ms, "
          f"p99 {percentile(pixel, 99):.0f} ms, max {max(pixel, default=float('nan')):.0f} ms "
          f"(target <= 100)")


def section(name: str) -> str:
    """A section name, checked here rather than by `choices`: Python 3.11's argparse checks
    a `nargs="*"` positional's default list against `choices` as one value, and refuses it."""
    if name not in SECTIONS:
        raise argparse.ArgumentTypeError(
            f"invalid section {name!r} (choose from {', '.join(SECTIONS)})")
    return name


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("sections", nargs="*", type=section, default=list(SECTIONS),
                        metavar="{" + ",".join(SECTIONS) + "}")
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--replicas", type=int, default=2)
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    platform = os.environ.get("QT_QPA_PLATFORM") or ("xcb" if "DISPLAY" in os.environ
                                                     else "offscreen")
    print(f"platform {platform}; {os.cpu_count()} CPUs")
    for section in args.sections:
        with tempfile.TemporaryDirectory() as tmp:
            if section == "startup":
                startup(args.starts, tmp)
            elif section == "click":
                click(tmp)
            elif section == "batch":
                batch(tmp)
            else:
                training(args.epochs, args.replicas, tmp)


if __name__ == "__main__":
    main()
