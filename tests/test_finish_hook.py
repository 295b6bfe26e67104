"""The on-finish command: split as a shell would (never run by one), told about the run in
its environment, bounded in time, its failure only logged; a --config file's command is
not run unless the user gives it. The real run's hook is in test_cli's acceptance run."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import pytest

from mgpu_gui.cli import main as cli
from mgpu_gui.cli.common import config_from_args
from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.events import RunStatus
from mgpu_gui.core.runs.finish_hook import FinishedRun, parse_command, run_finish_command

FINISHED = FinishedRun(7, "digits", RunStatus.FAILED, Path("/runs/digits"),
                       "val_loss 0.07 (epoch 3)")


def python(code: str) -> tuple[str, ...]:
    return (sys.executable, "-c", code)


def test_the_command_is_told_the_run_and_says_how_it_went(tmp_path):
    told = tmp_path / "env.json"
    said = run_finish_command(python(
        "import json, os; json.dump({k: v for k, v in os.environ.items() "
        f"if k.startswith('MGPU_RUN_')}}, open({str(told)!r}, 'w')); print('sent')"), FINISHED)
    assert json.loads(told.read_text()) == {
        "MGPU_RUN_ID": "7", "MGPU_RUN_NAME": "digits", "MGPU_RUN_STATUS": "failed",
        "MGPU_RUN_FOLDER": "/runs/digits", "MGPU_RUN_BEST": "val_loss 0.07 (epoch 3)"}
    assert said.startswith(f"On-finish command {shlex.join(python('x'))[:-1]}")
    assert said.endswith("; it said: sent")


def test_a_failing_slow_or_missing_command_is_one_line(tmp_path):
    assert "failed (exit 4)" in run_finish_command(python("raise SystemExit(4)"), FINISHED)
    assert "was stopped after 0.5 s" in run_finish_command(
        python("import time; time.sleep(30)"), FINISHED, timeout_s=0.5)
    assert "could not start" in run_finish_command((str(tmp_path / "nothing"),), FINISHED)


def test_a_timeout_stops_the_children_the_command_started_too(tmp_path):
    """A script that starts a mailer and waits: at the timeout the mailer went on running,
    and the hook waited on for the output it held open (issue 29, item 14)."""
    pid_file = tmp_path / "child.pid"
    script = ("import subprocess, sys, time; "
              "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
              f"open({str(pid_file)!r}, 'w').write(str(child.pid)); time.sleep(60)")
    started = time.monotonic()
    said = run_finish_command(python(script), FINISHED, timeout_s=1.0)
    assert "was stopped after 1 s" in said and time.monotonic() - started < 10
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.05)
    assert not _alive(child), "the command's own child outlived its timeout"


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for its parent (init reaps it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_words_are_split_as_a_shell_splits_them_and_a_bad_one_is_refused(tmp_path):
    assert parse_command("notify-send 'run done' --urgency=low") == (
        "notify-send", "run done", "--urgency=low")
    with pytest.raises(ValueError, match="cannot split"):
        parse_command("mail 'unclosed")
    assert RunConfig(on_finish=(str(tmp_path / "missing"),)).problems() == [(
        "on_finish", f"the on-finish command {str(tmp_path / 'missing')!r} is not an "
                     "executable file nor on the PATH")]


def test_a_config_files_command_needs_the_users_own_flag(tmp_path, capsys):
    shared = tmp_path / "shared.json"
    shared.write_text(RunConfig(on_finish=("rm", "-rf", "~")).to_json())
    parser = cli.build_parser()
    config = config_from_args(parser.parse_args(["train", "--config", str(shared)]))
    assert config.on_finish == ()
    assert "names an on-finish command (rm -rf '~'); it is not run unless given with " \
           "--on-finish" in capsys.readouterr().err
    mine = config_from_args(parser.parse_args(["train", "--config", str(shared),
                                               "--on-finish", "echo done"]))
    assert mine.on_finish == ("echo", "done")
    assert RunConfig.from_json(mine.to_json()) == mine  # kept with the run, as given
