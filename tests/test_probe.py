"""The TensorFlow probe: builds a run's model in a child process, typed events out."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from mgpu_gui.core.children.model_probe import PROBE_ENV, ModelProbeJob, ProbeOutcome, probe_command
from mgpu_gui.core.children.runner import ChildExit, ChildProcesses
from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.events import ModelProbed, ModelProbeFailed, parse_event

BUILDER = """
import keras

print("chatty user code: this line must not break the probe")

def create_model(input_shape, num_classes):  # the classic notebooks' name
    return keras.Sequential([keras.Input(input_shape), keras.layers.Flatten(),
                             keras.layers.Dense(num_classes, activation="softmax")])
"""


def run_probe(request: dict[str, Any]) -> tuple[ChildExit[ProbeOutcome], list[str]]:
    """The probe child run on `request` (a RunConfig's dict): how it ended, what it printed."""
    printed: list[str] = []

    def outcome(message: dict[str, Any]) -> ProbeOutcome | None:
        event = parse_event(json.dumps(message))
        return event if isinstance(event, ModelProbed | ModelProbeFailed) else None

    ended = ChildProcesses().run(probe_command, request, PROBE_ENV, outcome, printed.append)
    assert ended is not None
    return ended, printed


def test_probe_command_runs_the_module_with_this_python():
    assert probe_command(7) == [sys.executable, "-m", "mgpu_gui.processes.model_probe",
                                "--events-fd", "7"]


def test_probe_events_round_trip():
    done = ModelProbed("summary", 650, [8, 8, None], 10, ["built"])
    failed = ModelProbeFailed("no", "ModelError", "Traceback", [])
    assert parse_event(done.to_json()) == done
    assert parse_event(failed.to_json()) == failed


def test_unreadable_config_is_reported_in_the_result():
    ended, printed = run_probe({"no_such_setting": 1})
    assert ended.code == 1
    assert isinstance(ended.result, ModelProbeFailed)
    assert "no_such_setting" in ended.result.message
    assert "tensorflow" not in "\n".join(printed).lower()  # failed before importing it


def test_a_probe_that_dies_says_so(monkeypatch):
    monkeypatch.setattr("mgpu_gui.core.children.model_probe.probe_command",
                        lambda fd: [sys.executable, "-c", "print('bye'); raise SystemExit(3)"])
    result = ModelProbeJob(RunConfig()).run()
    assert isinstance(result, ModelProbeFailed) and result.error_type == "ChildDied"
    assert "exited with code 3" in result.message and "bye" in result.message


@pytest.mark.slow
def test_probe_builds_a_py_model(tmp_path: Path):
    builder = tmp_path / "tiny.py"
    builder.write_text(BUILDER)
    ended, printed = run_probe(RunConfig(model=str(builder)).to_dict())
    result = ended.result
    assert ended.code == 0, printed[-20:]
    assert isinstance(result, ModelProbed), result
    assert result.params == 8 * 8 * 10 + 10
    assert result.input_shape == [8, 8, 1]
    assert result.output_units == 10
    assert "Total params" in result.summary
    assert result.builder == "create_model"
    assert any("built 'sequential" in line and "create_model(" in line for line in result.log)
    assert any("chatty user code" in line for line in printed)


@pytest.mark.slow
def test_probe_reports_a_failing_builder(tmp_path: Path):
    builder = tmp_path / "broken.py"
    builder.write_text("def build_model(input_shape, num_classes):\n"
                       "    raise RuntimeError('forgot the layers')\n")
    ended, _ = run_probe(RunConfig(model=str(builder)).to_dict())
    result = ended.result
    assert ended.code == 1
    assert isinstance(result, ModelProbeFailed)
    assert result.error_type == "ModelError"
    assert result.message == ("broken.py: build_model() failed at line 2: "
                              "RuntimeError: forgot the layers")
    assert "Traceback" in result.traceback
