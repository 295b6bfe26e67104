"""The TensorFlow probe: builds a run's model in a child process, results in a file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.tools.model_probe import probe_command

BUILDER = """
import keras

print("chatty user code: this line must not break the probe")

def build_model(input_shape, num_classes):
    return keras.Sequential([keras.Input(input_shape), keras.layers.Flatten(),
                             keras.layers.Dense(num_classes, activation="softmax")])
"""


def run_probe(tmp_path: Path, config: RunConfig) -> tuple[subprocess.CompletedProcess, dict]:
    config_path, result_path = tmp_path / "config.json", tmp_path / "result.json"
    config_path.write_text(config.to_json())
    done = subprocess.run(probe_command(config_path, result_path), capture_output=True,
                          text=True, timeout=180)
    return done, json.loads(result_path.read_text())


def test_probe_command_runs_the_module_with_this_python(tmp_path):
    argv = probe_command(tmp_path / "c.json", tmp_path / "r.json")
    assert argv == [sys.executable, "-m", "mgpu_gui.processes.model_probe",
                    str(tmp_path / "c.json"), str(tmp_path / "r.json")]


def test_unreadable_config_is_reported_in_the_result(tmp_path):
    (tmp_path / "c.json").write_text('{"no_such_setting": 1}')
    done = subprocess.run(probe_command(tmp_path / "c.json", tmp_path / "r.json"),
                          capture_output=True, text=True, timeout=60)
    result = json.loads((tmp_path / "r.json").read_text())
    assert done.returncode == 1
    assert result["ok"] is False and "no_such_setting" in result["message"]
    assert "tensorflow" not in done.stderr.lower()  # failed before importing TensorFlow


@pytest.mark.slow
def test_probe_builds_a_py_model(tmp_path):
    builder = tmp_path / "tiny.py"
    builder.write_text(BUILDER)
    done, result = run_probe(tmp_path, RunConfig(model=str(builder)))
    assert done.returncode == 0, done.stderr[-2000:]
    assert result["ok"] is True, result
    assert result["params"] == 8 * 8 * 10 + 10
    assert result["input_shape"] == [8, 8, 1]
    assert result["output_units"] == 10
    assert "Total params" in result["summary"]
    assert any("built 'sequential" in line for line in result["log"])
    assert "chatty user code" in done.stderr and done.stdout == ""


@pytest.mark.slow
def test_probe_reports_a_failing_builder(tmp_path):
    builder = tmp_path / "broken.py"
    builder.write_text("def build_model(input_shape, num_classes):\n"
                       "    raise RuntimeError('forgot the layers')\n")
    done, result = run_probe(tmp_path, RunConfig(model=str(builder)))
    assert done.returncode == 1
    assert result["ok"] is False
    assert result["error_type"] == "ModelError"
    assert result["message"] == ("broken.py: build_model() failed at line 2: "
                                 "RuntimeError: forgot the layers")
    assert "Traceback" in result["traceback"]
