"""GPU telemetry (core): snapshots through a fake NVML, history, poller; the Qt source."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from mgpu_gui.core.devices.nvml import NvmlSession, NvmlState, query_inventory
from mgpu_gui.core.devices.telemetry import (
    GpuSnapshot,
    ProcessInfo,
    TelemetryHistory,
    TelemetryPoller,
    take_snapshots,
)
from mgpu_gui.testing.fake_pynvml import H100, UUID0, UUID1, GiB, fake_nvml

MEASUREMENTS = ("utilization_gpu", "memory_used", "memory_total", "memory_busy",
                "temperature_c", "power_w", "power_limit_w", "fan_percent",
                "performance_state", "processes")




def snapshots(session):
    return take_snapshots(session, query_inventory(session).gpus)


def test_two_gpus_are_read_in_one_pass_with_one_timestamp(session):
    first, second = snapshots(session)
    assert first == GpuSnapshot(
        index=0, uuid=UUID0, name=H100, timestamp=first.timestamp, utilization_gpu=97,
        memory_used=61 * GiB, memory_total=80 * GiB, memory_busy=41, temperature_c=71,
        power_w=312.0, power_limit_w=700.0, fan_percent=55, performance_state="P0",
        processes=(ProcessInfo(4242, 60 * GiB),), lost=False)
    assert second.timestamp == first.timestamp
    assert (second.uuid, second.performance_state, second.processes) == (
        UUID1, "P2", (ProcessInfo(5151, 11 * GiB),))
    assert first.memory_fraction == pytest.approx(61 / 80)


def test_gpu_lost_mid_session_gives_a_lost_snapshot(nvml, session):
    gpus = query_inventory(session).gpus
    assert not any(s.lost for s in take_snapshots(session, gpus))
    nvml.gpus[1].lost = True  # every call on it, its handle included, says GpuIsLost
    ok, lost = take_snapshots(session, gpus)
    assert not ok.lost and ok.utilization_gpu == 97
    assert lost.lost and (lost.index, lost.uuid, lost.name) == (1, UUID1, H100)
    assert all(getattr(lost, name) is None for name in MEASUREMENTS)


def test_gpu_lost_on_a_later_call_of_the_pass_is_lost(nvml, session):
    gpus = query_inventory(session).gpus
    nvml.gpus[0].errors["nvmlDeviceGetTemperature"] = "NVMLError_GpuIsLost"
    snap = take_snapshots(session, gpus)[0]
    assert snap.lost and snap.utilization_gpu is None


def test_unsupported_and_missing_fields_are_none(nvml, session):
    gpus = query_inventory(session).gpus
    nvml.gpus[0].errors.update({"nvmlDeviceGetFanSpeed": "NVMLError_NotSupported",
                                "nvmlDeviceGetPowerUsage": "NVMLError_NoPermission",
                                "nvmlDeviceGetEnforcedPowerLimit": "NVMLError_NotSupported"})
    nvml.gpus[0].pstate = 32  # NVML_PSTATE_UNKNOWN
    del nvml.nvmlDeviceGetUtilizationRates  # an old pynvml without it
    snap = take_snapshots(session, gpus)[0]
    assert not snap.lost
    assert (snap.fan_percent, snap.power_w, snap.performance_state) == (None, None, None)
    assert (snap.utilization_gpu, snap.memory_busy) == (None, None)
    assert snap.power_limit_w == 700.0  # from the power-management limit instead
    assert snap.temperature_c == 71


def test_process_query_falls_back_to_older_versions(nvml, session):
    gpus = query_inventory(session).gpus
    # pynvml newer than the driver: the unversioned call raises its mismatch error
    def mismatch(handle):
        raise nvml.NVMLLibraryMismatchError("use a versioned function")
    nvml.nvmlDeviceGetComputeRunningProcesses = mismatch
    del nvml.nvmlDeviceGetComputeRunningProcesses_v3
    assert take_snapshots(session, gpus)[1].processes == (ProcessInfo(5151, 11 * GiB),)
    nvml.gpus[1].errors["nvmlDeviceGetComputeRunningProcesses_v2"] = "NVMLError_NotSupported"
    assert take_snapshots(session, gpus)[1].processes is None  # unknown, not "none"
    nvml.gpus[0].processes = [(77, None)]  # memory NVML cannot say (Windows WDDM)
    assert take_snapshots(session, gpus)[0].processes == (ProcessInfo(77, None),)


def test_nvml_that_cannot_start_gives_lost_snapshots(session):
    gpus = query_inventory(session).gpus
    broken = NvmlSession(fake_nvml(init_error="NVMLError_DriverNotLoaded"))
    assert [s.lost for s in take_snapshots(broken, gpus)] == [True, True]


# -- history ---------------------------------------------------------------------


def snap(index: int, t: float, util: int | None, used: int | None = 40 * GiB) -> GpuSnapshot:
    return GpuSnapshot(index, None, None, t, utilization_gpu=util, memory_used=used,
                       memory_total=80 * GiB)


def test_history_keeps_the_last_two_minutes_in_preallocated_rings():
    history = TelemetryHistory(window_s=120.0, interval_s=1.0)
    for t in range(500):
        history.add([snap(0, 1000.0 + t, t % 100), snap(1, 1000.0 + t, 5)])
    times, util, memory = history.series(0)
    assert times[0] == 1000.0 + 499 - 120 and times[-1] == 1000.0 + 499
    assert times.size == 121 and np.all(np.diff(times) == 1.0)
    assert util[-1] == 499 % 100 and np.all(memory == 0.5)
    ring = history._rings[0]
    assert ring.data.shape[1] == history.capacity  # never grew
    assert history.indices() == [0, 1]


def test_history_stores_unknown_values_as_gaps_and_handles_few_samples():
    history = TelemetryHistory()
    assert [a.size for a in history.series(3)] == [0, 0, 0]
    history.add([snap(0, 1.0, None, None), snap(0, 2.0, 50)])
    times, util, memory = history.series(0)
    assert times.tolist() == [1.0, 2.0]
    assert np.isnan(util[0]) and np.isnan(memory[0]) and util[1] == 50


def test_history_rejects_nonsense_sizes():
    with pytest.raises(ValueError):
        TelemetryHistory(window_s=0)


# -- poller ----------------------------------------------------------------------


def test_poller_lists_gpus_polls_and_stops_cleanly(nvml, session):
    got: list[list[GpuSnapshot]] = []
    inventories = []
    three = threading.Event()

    def receive(snapshots):
        got.append(snapshots)
        if len(got) >= 3:
            three.set()

    poller = TelemetryPoller(session, receive, interval_s=0.01, on_inventory=inventories.append)
    poller.start()
    assert three.wait(5)
    assert poller.stop() is True
    assert not poller.running
    assert not [t for t in threading.enumerate() if t.name == "mgpu-telemetry"]
    assert inventories[0].state is NvmlState.OK
    assert [s.index for s in got[0]] == [0, 1]


def test_poller_stop_wakes_a_long_interval_at_once(session):
    first = threading.Event()
    poller = TelemetryPoller(session, lambda s: first.set(),
                             gpus=query_inventory(session).gpus, interval_s=3600)
    poller.start()
    assert first.wait(5)
    assert poller.stop(timeout=5) is True


def test_poller_survives_a_failing_callback(session, caplog):
    calls = threading.Event()
    seen = []

    def flaky(snapshots):
        seen.append(1)
        if len(seen) == 1:
            raise RuntimeError("receiver bug")
        calls.set()

    poller = TelemetryPoller(session, flaky, gpus=query_inventory(session).gpus,
                             interval_s=0.01)
    poller.start()
    assert calls.wait(5)
    poller.stop()
    assert "receiver bug" in caplog.text


def test_poller_without_driver_reports_the_inventory_and_ends():
    inventories = []
    poller = TelemetryPoller(NvmlSession(fake_nvml(init_error="NVMLError_LibraryNotFound")),
                             lambda s: pytest.fail("no GPU to poll"), interval_s=0.01,
                             on_inventory=inventories.append)
    poller.start()
    assert poller.stop(timeout=5)
    assert inventories[0].state is NvmlState.NO_DRIVER


def test_poller_rejects_a_zero_interval(session):
    with pytest.raises(ValueError):
        TelemetryPoller(session, print, interval_s=0)


# -- the Qt source -----------------------------------------------------------------


def test_source_lists_gpus_off_the_gui_thread_and_delivers_on_it(qtbot, nvml):
    from PySide6.QtCore import QThread

    from mgpu_gui.gui.jobs.telemetry_source import TelemetrySource

    source = TelemetrySource(nvml, interval_s=0.01)
    threads = []
    source.snapshots.connect(lambda s: threads.append(QThread.currentThread()))
    with qtbot.waitSignal(source.inventory_changed, timeout=5000) as listed:
        source.start()
    assert listed.args[0].state is NvmlState.OK and source.inventory is listed.args[0]
    with qtbot.waitSignal(source.snapshots, timeout=5000) as polled:
        pass
    assert [s.uuid for s in polled.args[0]] == [UUID0, UUID1]
    assert source.is_running()
    source.stop()
    assert not source.is_running()
    assert not [t for t in threading.enumerate() if t.name == "mgpu-telemetry"]
    assert nvml.shutdowns == 1  # a module given to it gets a session it closes
    assert set(threads) == {QThread.currentThread()}
    assert source.latest == polled.args[0]


def test_source_with_a_known_inventory_and_no_driver_never_starts_a_thread(qtbot):
    from mgpu_gui.gui.jobs.telemetry_source import TelemetrySource

    inventory = query_inventory(fake_nvml(init_error="NVMLError_LibraryNotFound"))
    source = TelemetrySource(fake_nvml(), inventory=inventory)
    with qtbot.waitSignal(source.inventory_changed, timeout=1000):
        source.start()
    assert not source.is_running()
    source.stop()
