"""Run a scaling test in the background: a `BackgroundJob` around `ScaleRunner`.

The runner (core/tools/scaling_runner.py) starts one worker process per device count
and blocks on it; gui/jobs/background_job.py runs it in a QThread and turns its
callbacks into queued signals to the GUI thread. `cancel()` kills the running
count's process, so the thread ends within moments.
"""

from __future__ import annotations

from PySide6.QtCore import QObject

from mgpu_gui.core.tools.scaling_runner import ScaleRunner
from mgpu_gui.gui.jobs.background_job import BackgroundJob


class ScalingController(BackgroundJob):
    """Runs one scaling test at a time in the background."""

    def __init__(self, parent: QObject | None = None, *, runner_factory=ScaleRunner):
        super().__init__(parent, factory=runner_factory, what="scaling test")
        self.runner_factory = runner_factory  # tests pass one that starts a fake child
