"""TensorFlow's start-up noise stays out of the terminal (issue 15, item 10).

Commands that start TensorFlow outside a run (`export`, `unwrap`, `doctor`) run it
in a child whose output goes to a log file, named only when the command fails;
`--debug`, anywhere on the command line, shows it. The first tests replace the
child by `python -c` (instant); the last ones start the real children, as a user
would, in a subprocess that captures everything the command prints.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mgpu_gui.cli import common
from mgpu_gui.cli import main as cli
from mgpu_gui.core.children.launch import command_log
from mgpu_gui.core.children.warm_start import OFF_ENV
from mgpu_gui.core.eventtext import is_noise

NOISE = "E0000 00:00:1 123 cuda_executor.cc:1] failed call to cuInit: UNKNOWN ERROR (303)"
DIES = (f"import sys; print({NOISE!r}, file=sys.stderr, flush=True); "
        "print('Aborted', flush=True); sys.exit(134)")


def noisy(text: str) -> list[str]:
    return [line for line in text.splitlines() if is_noise(line) or "E0000" in line]


def test_a_failed_export_names_its_log_and_debug_shows_the_noise(monkeypatch, capsys,
                                                                 tmp_path):
    monkeypatch.setattr("mgpu_gui.core.tools.export_job.export_command",
                        lambda fd: [sys.executable, "-c", DIES, str(fd)])
    source = tmp_path / "m.keras"
    source.write_bytes(b"x")
    args = ["export", str(source), "-o", str(tmp_path / "out.h5")]
    assert cli.main(args) == common.EXIT_FAILED
    out, err = capsys.readouterr()
    log = command_log("export")
    assert "The export process exited with code 134 before it finished." in err
    assert f"full output (TensorFlow's included) is in {log}" in err
    assert noisy(out + err) == []
    assert NOISE in log.read_text() and "Aborted" in log.read_text()
    assert cli.main([*args, "--debug"]) == common.EXIT_FAILED  # a global flag, given last
    err = capsys.readouterr().err
    assert NOISE in err and str(log) not in err


def test_a_failed_tensorflow_check_names_its_log(monkeypatch, capsys):
    monkeypatch.setattr("mgpu_gui.core.tools.tf_facts.tf_facts_command",
                        lambda fd: [sys.executable, "-c", DIES, str(fd)])
    cli.main(["doctor"])
    out, err = capsys.readouterr()
    log = command_log("tensorflow-check")
    assert "the TensorFlow check exited with code 134" in out
    assert f"TensorFlow's full output is in {log}" in err
    assert noisy(out + err) == [] and NOISE in log.read_text()
    cli.main(["--debug", "doctor"])
    assert NOISE in capsys.readouterr().err


# -- the real children ------------------------------------------------------------------
def mgpu_train(*args: object) -> tuple[int, str]:
    """Run `mgpu-train` in a subprocess: its exit code and everything it printed."""
    done = subprocess.run([sys.executable, "-m", "mgpu_gui.cli.main", *map(str, args)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120, cwd=Path(__file__).parent.parent)
    return done.returncode, done.stdout


@pytest.mark.slow
def test_unwrap_prints_no_startup_noise_and_names_its_log_on_failure(tmp_path, monkeypatch):
    """A child started fresh says what TensorFlow says at start-up into its log, not the
    terminal (one forked from a warm starter has nothing to say: started fresh here)."""
    monkeypatch.setenv(OFF_ENV, "0")
    builder = tmp_path / "m.py"
    builder.write_text("def build_model(input_shape, num_classes):\n    pass\n")
    code, printed = mgpu_train("unwrap", builder, "-o", tmp_path / "out.keras")
    assert code == common.EXIT_USAGE, printed
    assert "m.py is a .py file: there is nothing to unwrap." in printed
    assert noisy(printed) == [], printed
    log = command_log("unwrap")
    assert f"is in {log}" in printed
    assert noisy(log.read_text()), "TensorFlow's start-up went to the log"


@pytest.mark.slow
def test_doctor_prints_no_startup_noise_unless_debug():
    _, printed = mgpu_train("doctor")
    assert "TensorFlow (asked in a child process)" in printed, printed
    assert noisy(printed) == [], printed
    _, printed = mgpu_train("doctor", "--debug")
    assert noisy(printed), printed
