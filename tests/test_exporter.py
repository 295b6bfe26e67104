"""The GUI's export talks to the export child in typed events, and survives a child that
cannot start: a message, and Export is enabled again (no restart needed)."""

from __future__ import annotations

import sys

import pytest

from mgpu_gui.core.children.launch import command_log
from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState
from mgpu_gui.core.runs.folder import create_run_dir
from mgpu_gui.core.tools import export_job
from mgpu_gui.gui.jobs.exporter import ModelExporter
from mgpu_gui.gui.jobs.telemetry_source import TelemetrySource
from mgpu_gui.gui.main_window import MainWindow

NO_GPU = GpuInventory(state=NvmlState.NO_DRIVER, message="No NVIDIA driver found (test).")


@pytest.fixture
def no_export_child(monkeypatch, tmp_path):
    """The export child's program does not exist: starting it fails."""
    missing = str(tmp_path / "no-such-program")
    monkeypatch.setattr(export_job, "export_command", lambda events_fd: [missing])
    return missing


def test_a_child_that_cannot_start_is_reported_and_frees_the_exporter(
        qtbot, no_export_child, tmp_path):
    exporter = ModelExporter()
    with qtbot.waitSignal(exporter.finished, timeout=10_000) as done:
        exporter.export(tmp_path / "model.keras", tmp_path / "out.keras", "keras")
    ok, message = done.args
    assert not ok and "could not start" in message and no_export_child in message
    assert not exporter.is_running()


def test_a_child_that_dies_is_reported_with_its_log(qtbot, monkeypatch, tmp_path):
    monkeypatch.setattr(export_job, "export_command", lambda events_fd: [
        sys.executable, "-c", "import sys; print('Aborted', flush=True); sys.exit(134)"])
    exporter = ModelExporter()
    with qtbot.waitSignal(exporter.finished, timeout=10_000) as done:
        exporter.export(tmp_path / "model.keras", tmp_path / "out.keras", "keras")
    ok, message = done.args
    assert not ok and "exited with code 134 before it finished. Last output: Aborted" in message
    assert f"full output (TensorFlow's included) is in {command_log('export')}." in message


def test_export_is_enabled_again_after_a_child_that_cannot_start(
        qtbot, no_export_child, tmp_path):
    window = MainWindow(telemetry=TelemetrySource(inventory=NO_GPU))
    qtbot.addWidget(window)
    run_dir = create_run_dir(RunConfig(output_dir=str(tmp_path / "runs"), run_name="done"))
    run_dir.last_checkpoint.parent.mkdir(parents=True, exist_ok=True)
    run_dir.last_checkpoint.write_bytes(b"a model")
    window.last_run = run_dir
    window._update_actions()
    assert window.export_action.isEnabled()

    with qtbot.waitSignal(window.exporter.finished, timeout=10_000):
        window.export_to(tmp_path / "out.keras", "keras")
    assert "Export failed" in window.banner.message.text()
    assert "could not start" in window.banner.message.text()
    assert window.export_action.isEnabled()
