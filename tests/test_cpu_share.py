"""A run that gets little CPU because other processes take it says so (issue 30, finding 3:
a built-in's first step took 2.5 minutes at 15-19 % of a core, and the window said
nothing); GPU runs keep the window's priority. No TensorFlow, no real worker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mgpu_gui.core.config import DeviceKind, RunConfig
from mgpu_gui.core.devices import cpu_share
from mgpu_gui.core.devices.cpu_share import CpuShare, CpuShareSampler
from mgpu_gui.core.devices.plan import DevicePlan

TICKS = os.sysconf("SC_CLK_TCK")


def write_proc(proc: Path, pid: int, machine_busy_s: float, run_s: float) -> None:
    """A /proc with two cores: the machine's busy time split over user and system, the
    worker's over utime and stime (its command name holds a space and parentheses)."""
    half = round(machine_busy_s * TICKS / 2)
    (proc / str(pid)).mkdir(parents=True, exist_ok=True)
    (proc / "stat").write_text(f"cpu  {half} 0 {half} 999999 5 0 0 0 0 0\n"
                               "cpu0 1 0 1 1 0 0 0 0 0 0\ncpu1 1 0 1 1 0 0 0 0 0 0\n"
                               "intr 12345\n")
    ticks = round(run_s * TICKS)
    fields = ["S"] + ["0"] * 10 + [str(ticks // 2), str(ticks - ticks // 2)] + ["0"] * 30
    (proc / str(pid) / "stat").write_text(f"{pid} (python (worker)) {' '.join(fields)}\n")


def test_the_sampler_reads_the_machines_and_the_workers_share(tmp_path, monkeypatch):
    clock = iter([100.0, 110.0, 120.0])
    monkeypatch.setattr(cpu_share.time, "monotonic", lambda: next(clock))
    sampler = CpuShareSampler(42, proc=tmp_path)
    write_proc(tmp_path, 42, machine_busy_s=1000, run_s=50)
    assert sampler.sample() is None  # the first sample starts the interval
    # In 10 s: the machine busy for 19 core-seconds, 1.7 of them the worker's.
    write_proc(tmp_path, 42, machine_busy_s=1019, run_s=51.7)
    share = sampler.sample()
    assert (share.run, share.others, share.cores) == (pytest.approx(0.17),
                                                      pytest.approx(1.73), 2)
    assert share.contended
    assert share.text() == ("The CPU is busy with other processes (1.7 of 2 cores): this "
                            "run gets 17 % of a core, so it goes slower.")
    (tmp_path / "42" / "stat").unlink()  # the worker ended
    assert sampler.sample() is None


@pytest.mark.parametrize("run, others, contended", [
    (0.17, 1.73, True),  # the case
    (0.9, 1.0, False),  # the run gets most of a core: busy, not starved
    (0.1, 0.5, False),  # the run is idle (waiting on its files), the machine is not busy
])
def test_contended_only_when_others_take_the_cores_and_the_run_gets_little(
        run, others, contended):
    assert CpuShare(run, others, cores=2).contended is contended


def test_the_progress_area_says_it_while_it_lasts(qtbot, monkeypatch):
    from mgpu_gui.core.events import Diagnosed
    from mgpu_gui.gui.panels import progress

    shares = iter([None, CpuShare(0.17, 1.73, 2), CpuShare(0.95, 1.0, 2)])
    scripted = type("Scripted", (), {"sample": lambda self: next(shares)})
    monkeypatch.setattr(progress, "CpuShareSampler", lambda pid: scripted())
    panel = progress.ProgressPanel()
    qtbot.addWidget(panel)
    panel.handle_event(Diagnosed(kind="input", input_wait=0.6, utilization=None, t=1.0,
                                 text="Input-bound: the steps wait for their data."))
    panel.follow_cpu(1234)
    panel._sample_cpu()
    assert panel.diagnosis_label.verdict.startswith("The CPU is busy with other processes")
    panel._sample_cpu()  # the others are done: the diagnosis is back
    assert panel.diagnosis_label.verdict == "Input-bound: the steps wait for their data."
    panel.run_ended()
    assert not panel._cpu_timer.isActive()


@pytest.mark.parametrize("kind, nice", [(DeviceKind.CPU, 10), (DeviceKind.GPU, 0)])
def test_cpu_runs_yield_to_the_window_gpu_runs_keep_its_priority(qtbot, monkeypatch,
                                                                 tmp_path, kind, nice):
    from mgpu_gui.core.children import supervisor
    from mgpu_gui.core.runs.folder import RunDir
    from mgpu_gui.gui.jobs import run_controller

    monkeypatch.setattr(run_controller, "CPU_RUN_NICE", 10)  # the suite's own is 0
    made = []

    class Refused:
        def __init__(self, run, *, nice, **_):
            made.append(nice)
            raise OSError("no worker in this test")

    monkeypatch.setattr(supervisor, "WorkerProcess", Refused)
    controller = run_controller.RunController()
    plan = DevicePlan(kind=kind, replicas=1)
    run = supervisor.PreparedRun(RunConfig(), plan, RunDir(tmp_path))
    with qtbot.waitSignal(controller.finished):
        controller._launch(run)
    assert made == [nice]
