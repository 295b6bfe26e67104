"""A terminal's status line, shared by the CLI's progress printers.

On a terminal one line is redrawn in place while work goes on, and cleared
before each permanent line; elsewhere (logs, CI, pipes) only permanent lines
are written.
"""

from __future__ import annotations

from typing import TextIO

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
