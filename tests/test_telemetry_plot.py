"""The device telemetry under the curves: on the throughput's wall-time axis, for a
past run reopened and live while its supervisor (here: the test) records it."""

from __future__ import annotations

import numpy as np
import pytest

from mgpu_gui.core.children.supervisor import prepare_run
from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState
from mgpu_gui.core.events import BatchEnd, RunFinished, RunStatus
from mgpu_gui.core.runs.store import RunStore
from mgpu_gui.core.runs.telemetry_store import (
    CPU_DEVICE,
    RunTelemetry,
    TelemetryDevice,
    TelemetrySample,
    record_devices,
    record_samples,
)
from mgpu_gui.gui.jobs import telemetry_reader
from mgpu_gui.gui.panels.curves import CurvesPanel

T0 = 1_700_000_000.0
NO_GPU = GpuInventory(NvmlState.NO_DRIVER)


def batch(i: int) -> BatchEnd:
    return BatchEnd(epoch=0, batch=i, steps=100, metrics={"loss": 1.0 / (i + 1)},
                    samples_per_s=500.0, t=T0 + 15 * i)


def gpu_rows(*ts: float) -> np.ndarray:
    """Samples of one GPU at `ts`: 90 % busy, 4096 MiB used, power and temperature unknown."""
    return np.array([[t, 90, 4096, np.nan, np.nan] for t in ts])


@pytest.fixture
def curves(qtbot):
    widget = CurvesPanel()
    qtbot.addWidget(widget)
    widget.resize(1000, 700)
    yield widget
    widget.shutdown()


def test_telemetry_lines_up_with_the_throughput_and_grows(curves):
    curves.load_events([batch(i) for i in range(9)])  # wall time 0 .. 2 minutes
    devices = {3: TelemetryDevice(3, "GPU-3", "Fake", memory_total=8192)}
    curves.show_telemetry(RunTelemetry(devices, {3: gpu_rows(T0 - 30, T0 + 60)}), True)
    plot = curves.telemetry_plot
    x, busy, memory = plot.series(3)
    assert x.tolist() == [-0.5, 1.0]  # minutes from the throughput's origin
    assert busy.tolist() == [90, 90] and memory.tolist() == [50.0, 50.0]
    assert plot.widget.getPlotItem().titleLabel.item.toPlainText().startswith("GPU 3 ")
    assert "GPU 3 Fake: 90 % busy, 4096 of 8192 MiB" in plot.widget.toolTip()
    curves.show_telemetry(RunTelemetry(devices, {3: gpu_rows(T0 + 120)}), False)
    assert plot.series(3)[0].tolist() == [-0.5, 1.0, 2.0]
    # The throughput plot sets the x range; the telemetry follows it.
    rate = curves._rate_plot.getPlotItem().getViewBox().viewRange()[0]
    assert plot.widget.getPlotItem().getViewBox().viewRange()[0] == pytest.approx(rate)
    curves.reset()  # a new run: nothing of the old one stays
    assert plot.series(3)[0].size == 0


def test_a_reopened_run_shows_its_telemetry_and_a_live_one_follows(qtbot, tmp_path,
                                                                   monkeypatch):
    from mgpu_gui.gui.jobs.telemetry_source import TelemetrySource
    from mgpu_gui.gui.main_window import MainWindow

    monkeypatch.setattr(telemetry_reader, "POLL_S", 0.05)
    win = MainWindow(telemetry=TelemetrySource(inventory=NO_GPU))
    qtbot.addWidget(win)
    run = prepare_run(RunConfig(output_dir=str(tmp_path / "runs")), NO_GPU, win.store)
    store = RunStore()  # as the run's supervisor, another process, records it
    recorder = store.recorder(run.run_id)
    try:
        for i in range(5):
            recorder.handle(batch(i))
        recorder.flush()
        record_devices(store.database, run.run_id, [TelemetryDevice(CPU_DEVICE,
                                                                    memory_total=16384)])
        record_samples(store.database, run.run_id, [
            TelemetrySample(CPU_DEVICE, T0 + s, 180, 2048) for s in (0, 30)])
        win.show_run_curves(run.run_id)
        plot = win.curves.telemetry_plot
        qtbot.waitUntil(lambda: plot.series(CPU_DEVICE)[0].tolist() == [0.0, 0.5],
                        timeout=5_000)
        assert plot.series(CPU_DEVICE)[2].tolist() == [12.5, 12.5]  # 2 of 16 GiB
        assert plot.widget.getPlotItem().titleLabel.item.toPlainText().startswith("CPU ")
        # Still running: what its supervisor writes next shows up.
        record_samples(store.database, run.run_id, [TelemetrySample(CPU_DEVICE, T0 + 60, 95,
                                                                    2048)])
        qtbot.waitUntil(lambda: plot.series(CPU_DEVICE)[0].size == 3, timeout=5_000)
        recorder.handle(RunFinished(status=RunStatus.COMPLETED, epochs_done=1, message=""))
    finally:
        recorder.close()
        run.release()
        store.close()
        win.close()
