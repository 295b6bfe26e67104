"""The main window set up for tiny real runs on 2 CPU replicas, for the tests that train in
it (tests/test_main_window.py, tests/test_main_window_runs.py: two modules, so that two of
the suite's workers share the window's runs)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mgpu_gui.core.config import RunConfig
from mgpu_gui.gui.main_window import MainWindow

RUN_TIMEOUT_MS = 180_000


@contextmanager
def tiny_runs(win: MainWindow, tmp_path: Path) -> Iterator[MainWindow]:
    """`win` (tests/conftest.py's `window`) training 2 epochs of the demo into `tmp_path`;
    a run still live at the end is stopped. No export at the runs' end (nor its
    rehearsal): a TensorFlow start each, and the window's Export (from the last
    checkpoint) is what test_main_window checks."""
    win.run_setup.set_config(RunConfig(epochs=2, batch_per_replica=32, export_formats=(),
                                       output_dir=str(tmp_path / "runs")))
    yield win
    if win.controller.is_running():
        win.controller.stop()
        win.controller.wait(RUN_TIMEOUT_MS)


def train(qtbot, win: MainWindow):
    with qtbot.waitSignal(win.controller.finished, timeout=RUN_TIMEOUT_MS) as done:
        win.train_action.trigger()
    return done.args[0]
