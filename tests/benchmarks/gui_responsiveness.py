"""Does the window stay responsive while it trains?

Starts the real app in a fresh process (offscreen unless DISPLAY is set),
trains the demo briefly through the window on CPU replicas, and prints:
  - process start to first painted window;
  - GUI-thread event-loop lateness during the run, from a 60 Hz precise timer
    (how late each tick fired): p50, p99, max;
  - batch event leaving the worker (its timestamp) to the first paint of the
    loss plot after the point was drawn: p50, p99, max.
Targets: lateness p99 <= 16 ms and max <= 50 ms; first window <= 1.0 s;
event-to-pixel <= 100 ms.

    python tests/benchmarks/gui_responsiveness.py [--epochs 6] [--replicas 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

DRIVER = r"""
import json, os, sys, time
T0 = float(os.environ["BENCH_T0"])
from PySide6.QtCore import QElapsedTimer, QEvent, QObject, Qt, QTimer
from PySide6.QtWidgets import QApplication
from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.events import BatchEnd
from mgpu_gui.gui.main_window import MainWindow

app = QApplication([])
app.setOrganizationName("mgpu-gui-bench")
window = MainWindow()
result = {"first_paint_s": None, "lateness_ms": [], "event_to_pixel_ms": []}


class FirstPaint(QObject):
    def eventFilter(self, obj, event):
        if event.type() == QEvent.Type.Paint and result["first_paint_s"] is None:
            result["first_paint_s"] = time.time() - T0
        return False


first_paint = FirstPaint()
window.installEventFilter(first_paint)
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


# Event-loop lateness: a 60 Hz precise timer, measured only while training runs.
clock = QElapsedTimer()
ticker = QTimer()
ticker.setTimerType(Qt.TimerType.PreciseTimer)
ticker.setInterval(16)
last = [None]


def tick():
    now = clock.nsecsElapsed() / 1e6
    if last[0] is not None and window.controller.is_running():
        result["lateness_ms"].append(max(0.0, now - last[0] - 16.0))
    last[0] = now


ticker.timeout.connect(tick)


def start():
    window.run_setup.set_config(RunConfig(
        epochs=EPOCHS, batch_per_replica=16, output_dir=OUT,
        devices=DeviceSelection(kind=DeviceKind.CPU, replicas=REPLICAS)))
    window.run_setup.check_now()
    window.start_training()
    clock.start()
    ticker.start()


def finished(outcome):
    ticker.stop()
    result["status"] = outcome.status.value
    print("RESULT " + json.dumps(result), flush=True)
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--replicas", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        driver = DRIVER.replace("EPOCHS", str(args.epochs)).replace(
            "REPLICAS", str(args.replicas)).replace("OUT", repr(tmp))
        env = {**os.environ, "XDG_CONFIG_HOME": os.path.join(tmp, "config"),
               "MGPU_GUI_STORE": os.path.join(tmp, "runs.sqlite3")}
        env.setdefault("QT_QPA_PLATFORM", "offscreen" if "DISPLAY" not in env else "xcb")
        env["BENCH_T0"] = repr(time.time())
        done = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True,
                              env=env, timeout=600)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        sys.exit(f"the app did not report:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    result = json.loads(line[len("RESULT "):])
    late, pixel = result["lateness_ms"], result["event_to_pixel_ms"]
    print(f"run status: {result['status']}; {args.replicas} CPU replicas, {args.epochs} epochs; "
          f"platform {env['QT_QPA_PLATFORM']}")
    print(f"process start -> first painted window: {result['first_paint_s']:.3f} s "
          f"(target <= 1.0 s)")
    print(f"event-loop lateness over {len(late)} ticks at 60 Hz: p50 {percentile(late, 50):.1f} "
          f"ms, p99 {percentile(late, 99):.1f} ms, max {max(late, default=float('nan')):.1f} ms "
          f"(targets p99 <= 16, max <= 50)")
    refresh = result.get("refresh_ms", [])
    print(f"curves refresh (setData) on the GUI thread: p50 {percentile(refresh, 50):.1f} ms, "
          f"max {max(refresh, default=float('nan')):.1f} ms over {len(refresh)} refreshes")
    print(f"batch event -> pixel over {len(pixel)} events: p50 {percentile(pixel, 50):.0f} ms, "
          f"p99 {percentile(pixel, 99):.0f} ms, max {max(pixel, default=float('nan')):.0f} ms "
          f"(target <= 100)")


if __name__ == "__main__":
    main()
