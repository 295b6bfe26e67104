"""The progress panel: bars, ETAs from core.progress, and the multi-GPU status line."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mgpu_gui.core.events import (
    BatchEnd,
    EpochEnd,
    Phase,
    RunFailed,
    RunFinished,
    RunStarted,
    RunStatus,
    SetupProgress,
    SetupStep,
)
from mgpu_gui.gui.panels.progress import BAR_MAX, ProgressPanel, device_text

T0 = 1_700_000_000.0


def started(*, kind: str = "gpu", replicas: int = 2, names: list[str] | None = None,
            epochs: int = 4, steps: int = 10, initial_epoch: int = 0, dropped: int = 5,
            per_replica: int = 128) -> RunStarted:
    if names is None:
        names = ([f"GPU {i}: NVIDIA H100 80GB HBM3 (GPU-{i})" for i in range(replicas)]
                 if kind == "gpu" else [f"CPU replica {i}" for i in range(replicas)])
    devices = [f"/job:localhost/replica:0/task:0/device:{kind.upper()}:{i}"
               for i in range(replicas)]
    return RunStarted(
        run_dir="/tmp/run", device_kind=kind, devices=devices, device_names=names,
        num_replicas=replicas, batch_per_replica=per_replica,
        global_batch=per_replica * replicas, train_samples=10_000, val_samples=1000,
        test_samples=0, steps_per_epoch=steps, dropped_per_epoch=dropped, epochs=epochs,
        initial_epoch=initial_epoch, model_name="m", params=1, cross_device_ops="nccl",
        tf_version="2.21", keras_version="3.15", t=T0)


def batch(epoch: int, index: int, t: float, rate: float = 2100.0) -> BatchEnd:
    return BatchEnd(epoch=epoch, batch=index, steps=10, metrics={"loss": 1.0},
                    samples_per_s=rate, t=t)


def epoch_end(epoch: int, t: float) -> EpochEnd:
    return EpochEnd(epoch=epoch, epochs=4, metrics={"loss": 1.0}, samples_per_s=2000.0,
                    duration_s=10.0, t=t)


@pytest.fixture
def panel(qtbot):
    widget = ProgressPanel()
    qtbot.addWidget(widget)
    return widget


def test_fractions_and_etas_follow_the_events(panel):
    panel.handle_event(started())
    assert panel.epoch_label.text() == "Epoch 1/4" and panel.epoch_bar.value() == 0
    panel.handle_event(batch(0, 4, T0 + 5))  # 5 of 10 steps in 5 s
    assert panel.epoch_bar.value() == BAR_MAX // 2
    assert panel.total_bar.value() == round(0.125 * BAR_MAX)
    assert panel.epoch_eta_label.text() == "ETA 5 s"
    assert panel.total_eta_label.text() == "ETA 35 s"  # 3 more epochs of 10 s + 5 s
    assert "50%" in panel.epoch_bar.format() and "5/10 steps" in panel.epoch_bar.format()
    panel.handle_event(batch(0, 9, T0 + 10))
    panel.handle_event(epoch_end(0, T0 + 12))  # an epoch with validation took 12 s
    assert panel.epoch_label.text() == "Epoch 2/4" and panel.epoch_bar.value() == 0
    assert panel.total_bar.value() == BAR_MAX // 4
    panel.handle_event(batch(1, 2, T0 + 15))
    assert panel.epoch_label.text() == "Epoch 2/4"


def test_eta_of_a_later_epoch_counts_from_that_epoch(panel):
    panel.handle_event(started())
    panel.handle_event(batch(0, 9, T0 + 10))
    panel.handle_event(epoch_end(0, T0 + 12))
    panel.handle_event(batch(1, 2, T0 + 15))  # 3 steps in the 3 s since epoch 1 began
    assert panel.epoch_eta_label.text() == "ETA 7 s"
    assert panel.total_eta_label.text() == "ETA 31 s"  # 7 s left here + 2 epochs of 12 s


def test_reaches_100_percent_when_done(panel):
    panel.handle_event(started(epochs=4))
    panel.handle_event(batch(0, 9, T0 + 10))
    panel.handle_event(epoch_end(0, T0 + 11))
    panel.handle_event(RunFinished(status=RunStatus.COMPLETED, epochs_done=4, t=T0 + 50))
    assert panel.epoch_bar.value() == panel.total_bar.value() == BAR_MAX
    assert panel.total_bar.format() == "100%"
    assert panel.epoch_label.text() == "Epoch 4/4"
    assert panel.total_eta_label.text() == "done"


def test_after_the_last_epoch_no_eta_is_promised(panel):
    """Issue 30, finding 6: "Total 100 % · ETA 1 m 28 s" while the test set and the
    exports ran."""
    panel.handle_event(started(epochs=2))
    for epoch in range(2):
        panel.handle_event(batch(epoch, 9, T0 + 10 * epoch + 9))
        panel.handle_event(epoch_end(epoch, T0 + 10 * epoch + 10))
    assert panel.total_bar.value() == BAR_MAX
    assert panel.total_eta_label.text() == "finishing…"
    assert panel.epoch_eta_label.text() == "done"


def test_early_stop_is_complete_too(panel):
    panel.handle_event(started(epochs=20))
    panel.handle_event(epoch_end(0, T0 + 11))
    panel.handle_event(RunFinished(status=RunStatus.EARLY_STOPPED, epochs_done=7))
    assert panel.total_bar.value() == BAR_MAX
    assert panel.epoch_label.text() == "Epoch 7/20"
    assert "early" in panel.total_eta_label.text()


def test_stop_and_failure_keep_the_bars(panel):
    """Issue 30, finding 6: after a stop the epoch it cut short read "100 % · 11/11 steps",
    though the log said it was discarded."""
    panel.handle_event(started())
    panel.handle_event(batch(0, 4, T0 + 5))
    panel.handle_event(RunFinished(status=RunStatus.STOPPED, epochs_done=0))
    assert panel.epoch_bar.value() == BAR_MAX // 2 and panel.total_eta_label.text() == "stopped"
    assert panel.epoch_bar.format().endswith("5/10 steps, discarded")
    assert panel.total_bar.value() == 0 and "0 of 4 epochs kept" in panel.total_bar.format()
    assert "a resume trains from epoch 1" in panel.status_label.text()
    panel.handle_event(RunFailed(message="x", phase=Phase.TRAINING, error_type="E"))
    assert panel.total_eta_label.text() == "failed"


def test_status_line_says_what_the_multi_gpu_choice_means(panel):
    panel.handle_event(started(replicas=2, per_replica=128, dropped=5))
    assert panel.status_label.text() == ("GPUs 0,1 · 2 replicas · global batch 256 (128 × 2) "
                                         "· 5 samples dropped per epoch")
    panel.handle_event(batch(0, 0, T0 + 1, rate=2100.0))
    assert "2.1k samples/s" in panel.status_label.text()
    panel.handle_event(started(kind="cpu", replicas=2, dropped=0))
    assert panel.status_label.text().startswith("2 CPU replicas · global batch 256 (128 × 2)")
    assert panel.status_label.text().endswith("no samples dropped")
    panel.handle_event(replace(started(kind="cpu", replicas=4, dropped=0), mesh="2x2"))
    assert panel.status_label.text().startswith("4 CPU replicas · 2×2 mesh · global batch")
    assert panel.epoch_bar.accessibleName() == "Epoch progress"
    assert panel.total_bar.accessibleName() == "Total progress"


def test_device_text_uses_the_names_people_know():
    assert device_text(started(names=["GPU 3: NVIDIA A100 (GPU-x)"], replicas=1)) == "GPU 3"
    assert device_text(started(names=["GPU 0 MIG 1: 1g.10gb (MIG-x)"], replicas=1)) == \
        "GPU 0 MIG 1"
    assert device_text(started(names=[], replicas=2)) == "GPUs 0,1"  # from TF's device names
    assert device_text(started(kind="cpu", replicas=1)) == "1 CPU replica"


def test_resume_counts_the_epochs_already_done(panel):
    panel.handle_event(started(epochs=10, initial_epoch=6))
    assert panel.epoch_label.text() == "Epoch 7/10"
    assert panel.total_bar.value() == round(0.6 * BAR_MAX)


def test_reset(panel):
    panel.handle_event(started())
    panel.handle_event(batch(0, 4, T0 + 5))
    panel.reset()
    assert panel.epoch_bar.value() == 0 and panel.status_label.text() == "No run"


def test_from_train_to_the_first_batch_the_status_names_the_step_and_its_time(panel,
                                                                             monkeypatch):
    """Issue 30, finding 3: "Epoch 1/2 0 % · 0/5 steps ETA --" for 2.5 minutes while the
    first step was built, with "No run" in the status line."""
    clock = [100.0]
    monkeypatch.setattr("mgpu_gui.gui.panels.progress.time.monotonic", lambda: clock[0])
    panel.starting()
    assert panel.status_label.text() == "Starting the engine… 0 s"
    clock[0] += 7
    panel._tick()  # what the one-second timer does
    assert panel.status_label.text() == "Starting the engine… 7 s"
    for step in (SetupStep.DATA, SetupStep.MODEL, SetupStep.REHEARSAL):
        panel.handle_event(SetupProgress(step=step.value))
    clock[0] += 3
    panel._tick()
    assert panel.status_label.text() == "Rehearsing the run before epoch 1… 3 s"
    panel.handle_event(started())
    panel.handle_event(SetupProgress(step=SetupStep.FIRST_STEP.value))
    clock[0] += 150
    panel._tick()
    assert panel.status_label.text() == "Compiling the first step… 2 m 30 s"
    assert panel._ticker.isActive()
    panel.handle_event(batch(0, 0, T0 + 1))  # the first batch: the device line again
    assert not panel._ticker.isActive()
    assert panel.status_label.text().startswith("GPUs 0,1 · 2 replicas")
    panel.starting("Resuming r (3 of 10 epochs done) at epoch 4")
    assert panel.status_label.text() == ("Resuming r (3 of 10 epochs done) at epoch 4: "
                                         "Starting the engine… 0 s")
    panel.run_ended()  # killed before a word
    assert not panel._ticker.isActive()


def test_the_cpu_notice_ends_with_the_last_epoch(panel, monkeypatch):
    """After the last epoch the run's export checks (forked by the warm starter, not the
    worker's children) counted as other processes, and a finishing run "got 0 %"."""
    from mgpu_gui.core.devices.cpu_share import CpuShare
    from mgpu_gui.gui.panels import progress

    scripted = type("Scripted", (), {"sample": lambda self: CpuShare(0.0, 1.9, 2)})
    monkeypatch.setattr(progress, "CpuShareSampler", lambda pid: scripted())
    panel.handle_event(started(epochs=4))
    panel.follow_cpu(1234)
    for epoch in range(4):
        panel._sample_cpu()
        assert panel.diagnosis_label.verdict.startswith("The CPU is busy with other processes")
        panel.handle_event(epoch_end(epoch, T0 + 10 * (epoch + 1)))
    assert panel.diagnosis_label.verdict == "" and not panel._cpu_timer.isActive()
    panel._sample_cpu()  # a tick already queued says nothing
    assert panel.diagnosis_label.verdict == ""
