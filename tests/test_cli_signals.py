"""Ctrl-C and SIGTERM belong to a command only while it runs: afterwards whoever called
`cli.main` (a shell, pytest, a program embedding the CLI) can be interrupted again. The
suite once ran on for 13 minutes after its TERM: every in-process command had left its
handler installed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from mgpu_gui.cli import devices
from mgpu_gui.cli import main as cli
from mgpu_gui.core.children.runner import cancel_on_interrupt

ROOT = Path(__file__).resolve().parents[1]


def _takes_interrupts(args) -> int:
    cancel_on_interrupt(lambda: None, "test")
    return 0


def test_a_command_gives_the_callers_handlers_back(monkeypatch):
    monkeypatch.setattr(devices, "run", _takes_interrupts)
    before = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]
    assert cli.main(["devices"]) == 0
    assert [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)] == before


def test_pytest_stops_on_term_after_an_in_process_command(tmp_path):
    """A real pytest run: a test runs a command in-process, the next one waits; TERM
    ends the run at once instead of being taken by the finished command's handler."""
    ready = tmp_path / "ready"
    (tmp_path / "test_embedded.py").write_text(textwrap.dedent(f"""
        import time
        from pathlib import Path
        from mgpu_gui.cli import devices
        from mgpu_gui.cli import main as cli
        from tests.test_cli_signals import _takes_interrupts

        def test_command(monkeypatch):
            monkeypatch.setattr(devices, "run", _takes_interrupts)
            assert cli.main(["devices"]) == 0

        def test_wait():
            Path({str(ready)!r}).touch()
            time.sleep(120)
    """))
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly",
                            "-p", "no:cacheprovider", str(tmp_path / "test_embedded.py")],
                           cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), "the embedded run never reached its waiting test"
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=10) != 0
    finally:
        run.kill()
        run.wait()
