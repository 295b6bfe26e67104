"""The batch finder on a real GPU allocator (the JAX engine, one GPU), through
`mgpu-train find-batch`, while the GPU panel's poller watches the GPU's memory: each
probe is a fresh JAX process that must not take 75 % of the GPU at start (JAX's
preallocation; the app sets XLA_PYTHON_CLIENT_PREALLOCATE=false, the test does not)."""

from __future__ import annotations

import json

import pytest

from mgpu_gui.core.devices.nvml import GpuInfo, default_session, format_bytes
from mgpu_gui.core.devices.telemetry import GpuSnapshot, TelemetryPoller, take_snapshots
from mgpu_gui.core.tools.batch_search import BatchReport

pytestmark = pytest.mark.gpu

MIB = 2**20
PREALLOCATED = 0.75  # of the GPU: what JAX takes at start unless told not to


def test_batch_finder_on_a_real_allocator(gpu: GpuInfo, mgpu_train, figure):
    [idle] = take_snapshots(default_session(), [gpu])
    seen: list[GpuSnapshot] = []
    poller = TelemetryPoller(default_session(), seen.extend, gpus=[gpu], interval_s=0.25)
    poller.start()
    try:
        done = mgpu_train("find-batch", "--engine", "jax", "--gpus", gpu.uuid or str(gpu.index),
                          "--start-batch", "32", "--json", "--allow-busy")
    finally:
        poller.stop()
    assert done.returncode == 0, done.stderr[-3000:]
    report = BatchReport.from_dict(json.loads(done.stdout))
    fits = [p for p in report.probes if p.fits]
    highest = max(s.memory_used or 0 for s in seen) - (idle.memory_used or 0)
    figure(f"find-batch on {report.device_name}: largest fit {report.largest_fit}, "
           f"recommended {report.recommended} ({report.ended.value}); probes "
           + ", ".join(f"{p.batch}: {p.status.value}, peak {format_bytes(p.peak_bytes)}, "
                       f"{p.seconds or 0:.1f} s" for p in report.probes)
           + f"; GPU memory used rose by at most {highest / MIB:.0f} MiB over "
             f"{len(seen)} snapshots")
    assert report.device_kind == "gpu" and gpu.name in report.device_name
    assert report.largest_fit and report.recommended and fits
    assert gpu.memory_total is not None
    for probe in fits:
        assert probe.peak_bytes is not None and 0 < probe.peak_bytes < gpu.memory_total, probe
    # The poller saw the probes (a CUDA context alone is hundreds of MiB) and no preallocation.
    assert 64 * MIB < highest < PREALLOCATED / 2 * gpu.memory_total
