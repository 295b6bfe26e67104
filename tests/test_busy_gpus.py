"""Which GPUs other work uses (core.devices.busy), and how the panel's note says so."""

from __future__ import annotations

import pytest

from mgpu_gui.core.devices.busy import (
    BUSY_MEMORY_FRACTION,
    BUSY_UTILIZATION,
    BusyGpu,
    busy_gpu,
    busy_gpus,
    indices_text,
    left_out_text,
)
from mgpu_gui.core.devices.telemetry import GpuSnapshot, ProcessInfo

GiB = 2**30


def snap(index: int = 0, utilization: int | None = 0, used: int | None = GiB,
         processes: tuple[ProcessInfo, ...] | None = (), lost: bool = False) -> GpuSnapshot:
    return GpuSnapshot(index=index, uuid=f"GPU-{index}", name="H100", timestamp=0.0,
                       utilization_gpu=utilization, memory_used=used, memory_total=80 * GiB,
                       processes=processes, lost=lost)


@pytest.mark.parametrize(("reading", "busy"), [
    (snap(), False),  # idle: the driver's reserve only
    (snap(utilization=BUSY_UTILIZATION - 1), False),
    (snap(utilization=BUSY_UTILIZATION), True),
    (snap(processes=(ProcessInfo(51, None),)), True),  # a process of others, memory unknown
    # Another container's work: no process listed, its memory in use.
    (snap(used=int(BUSY_MEMORY_FRACTION * 80 * GiB)), True),
    (snap(utilization=None, used=None, processes=None), False),  # NVML says nothing
    (snap(utilization=100, lost=True), False),  # lost: nothing known
])
def test_busy_means_work_of_others(reading, busy):
    assert (busy_gpu(reading, own_pids=set()) is not None) is busy


def test_this_apps_run_is_not_other_work():
    """Its processes, their memory and the utilization beside them are the run's own."""
    ours = snap(utilization=100, used=61 * GiB, processes=(ProcessInfo(42, 60 * GiB),))
    assert busy_gpu(ours, own_pids={42}) is None
    shared = snap(utilization=100, used=61 * GiB,
                  processes=(ProcessInfo(42, 60 * GiB), ProcessInfo(51, GiB)))
    assert busy_gpu(shared, own_pids={42}) == BusyGpu(0, None, GiB, (51,))


def test_busy_gpus_keep_their_order_and_the_note_names_them():
    readings = [snap(i, utilization=u, used=used)
                for i, (u, used) in enumerate([(0, GiB), (90, 30 * GiB), (0, GiB),
                                               (100, 40 * GiB), (95, 35 * GiB), (98, 30 * GiB)])]
    busy = busy_gpus(readings, own_pids=())
    assert [b.index for b in busy] == [1, 3, 4, 5]
    assert left_out_text(busy) == ("GPUs 1 and 3-5 left out: busy with other processes "
                                   "(90-100 % utilization, 30.0-40.0 GiB in use)")
    assert left_out_text([BusyGpu(2, None, None, (7,))]) == (
        "GPU 2 left out: busy with other processes")


@pytest.mark.parametrize(("indices", "text"), [
    ([3], "3"), ([0, 1], "0 and 1"), ([4, 5, 6, 7], "4-7"), ([0, 2, 4, 5, 6], "0, 2 and 4-6"),
    ([7, 0, 1, 2], "0-2 and 7"),
])
def test_indices_as_people_write_them(indices, text):
    assert indices_text(indices) == text
