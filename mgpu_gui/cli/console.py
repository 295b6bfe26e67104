"""Printing to a terminal: a status line redrawn in place, and a training run's progress.

On a terminal one line is redrawn in place while work goes on, and cleared
before each permanent line; elsewhere (logs, CI, pipes) only permanent lines
are written.
"""

from __future__ import annotations

import time
from typing import TextIO

from mgpu_gui.core.events import BatchEnd, Event, RunFailed, RunFinished, RunStarted
from mgpu_gui.core.eventtext import event_lines
from mgpu_gui.core.progress import Progress, format_duration, format_metrics, format_rate

CLEAR = "\r\x1b[2K"  # back to column 0, erase the line


class LiveLine:
    def __init__(self, out: TextIO, live: bool):
        self.out = out
        self.live = live

    def show(self, text: str) -> None:
        """Redraw the status line (nothing when not live)."""
        if self.live:
            self.out.write(CLEAR + text)
            self.out.flush()

    def line(self, text: str) -> None:
        """A permanent line, under which the status line continues."""
        if self.live:
            self.out.write(CLEAR)
        self.out.write(text + "\n")
        self.out.flush()

    def close(self) -> None:
        if self.live:
            self.out.write(CLEAR)
            self.out.flush()


class ConsoleReporter:
    """Human progress on a terminal: a live line while training, a line per epoch."""

    def __init__(self, out: TextIO, *, quiet: bool, debug: bool, summary: bool = False):
        self.quiet = quiet
        self.debug = debug
        self.summary = summary
        self.term = LiveLine(out, live=out.isatty())
        self.progress = Progress()
        self._last_draw = 0.0
        self._metrics: dict[str, float] = {}

    def handle(self, event: Event) -> None:
        self.progress.update(event)
        if self.quiet:
            return
        if isinstance(event, BatchEnd):
            self._metrics = event.metrics
            if self.term.live and (time.monotonic() - self._last_draw > 0.1
                                   or event.batch + 1 == event.steps):
                self._draw()
            return
        if isinstance(event, RunFinished | RunFailed):
            return  # the outcome is reported once, after the worker ended
        lines = event_lines(event, verbose=self.debug)
        if isinstance(event, RunStarted) and self.summary:
            lines.insert(1, event.summary.rstrip())
        for line in lines:
            self.term.line(line)

    def _draw(self) -> None:
        self._last_draw = time.monotonic()
        p = self.progress
        width = 24
        filled = int(width * p.epoch_fraction)
        bar = "#" * filled + "-" * (width - filled)
        text = (f"Epoch {p.epoch + 1}/{p.epochs} [{bar}] {p.step}/{p.steps}  "
                f"{format_metrics(self._metrics)}  {format_rate(p.samples_per_s)}  "
                f"ETA {format_duration(p.epoch_eta())} (total {format_duration(p.total_eta())})")
        self.term.show(text)
