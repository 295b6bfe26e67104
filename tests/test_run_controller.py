"""The QThread supervisor: runs are prepared off the GUI thread; events arrive in order on
the GUI thread; stop and failures."""

from __future__ import annotations

import time

import pytest

from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.events import BatchEnd, EpochEnd, RunFinished, RunStarted, RunStatus
from mgpu_gui.core.eventtext import NOTHING_TO_RESUME, finished_line
from mgpu_gui.core.runs.folder import create_run_dir
from mgpu_gui.core.runs.lock import is_live
from mgpu_gui.core.runs.store import RunState as StoreState
from mgpu_gui.core.runs.store import RunStore
from mgpu_gui.gui.jobs.run_controller import RunController, RunState
from mgpu_gui.gui.jobs.run_start import StartKind

pytestmark = pytest.mark.slow


def demo(tmp_path, **changes) -> RunConfig:
    """No export: its check in a fresh process is seconds per run, and no test's point here."""
    return RunConfig(output_dir=str(tmp_path), batch_per_replica=32, epochs=2,
                     devices=DeviceSelection(kind=DeviceKind.CPU, replicas=2),
                     export_formats=()).replace(**changes)


def test_a_run_streams_events_and_finishes(qtbot, tmp_path):
    controller = RunController()
    events = []
    controller.event.connect(events.append)
    with qtbot.waitSignal(controller.finished, timeout=120_000) as done:
        controller.start(demo(tmp_path))
        assert controller.is_running() and controller.state is RunState.PREPARING
    assert done.args[0].status is RunStatus.COMPLETED
    assert not controller.is_running()
    kinds = [type(e) for e in events]
    assert kinds.index(RunStarted) < kinds.index(BatchEnd) and kinds[-1] is RunFinished
    epochs = [e.epoch for e in events if isinstance(e, EpochEnd)]
    assert epochs == [0, 1]
    batches = [(e.epoch, e.batch) for e in events if isinstance(e, BatchEnd)]
    assert batches == sorted(batches)


def test_stop_mid_run_then_start_again(qtbot, tmp_path):
    with RunStore() as store:
        controller = RunController(store=store)
        states = []
        controller.state_changed.connect(states.append)
        controller.event.connect(lambda e: isinstance(e, BatchEnd) and controller.stop())
        with qtbot.waitSignal(controller.finished, timeout=120_000) as done:
            with qtbot.waitSignal(controller.started) as started:
                controller.start(demo(tmp_path, epochs=50))
            run = started.args[0]
            assert store.get(run.run_id).status is StoreState.RUNNING
        assert done.args[0].status is RunStatus.STOPPED
        assert states == ["preparing", "running", "stopping", "idle"]
        # Recorded before `finished`: the store already says how it ended.
        record = store.get(run.run_id)
        assert record.status is StoreState.STOPPED and record.run_dir == run.run_dir.path
        assert not is_live(run.run_dir.path)


def test_stop_while_64_cpu_replicas_build_their_first_step_ends_within_5_s(qtbot, tmp_path):
    """The Stop button as Ctrl-C in the CLI: no epoch to keep, so the worker ends at once
    and the run ends stopped with nothing to resume (not as a crash)."""
    with RunStore() as store:
        controller = RunController(store=store)
        asked = []
        controller.event.connect(lambda e: isinstance(e, RunStarted) and (
            asked.append(time.monotonic()), controller.stop()))
        with qtbot.waitSignal(controller.finished, timeout=120_000) as done:
            controller.start(demo(tmp_path, batch_per_replica=1, epochs=1,
                                  devices=DeviceSelection(kind=DeviceKind.CPU, replicas=64)))
        assert time.monotonic() - asked[0] < 5
        outcome = done.args[0]
        assert outcome.status is RunStatus.STOPPED and "crash" not in outcome.message
        finished = outcome.events[-1]
        assert isinstance(finished, RunFinished) and finished_line(finished) == NOTHING_TO_RESUME
        (record,) = store.runs()
        assert (record.status, record.epochs_done) == (StoreState.STOPPED, 0)


def refusal(qtbot, controller: RunController, start):
    """The (request, error) `refused` says for what `start()` asks."""
    with qtbot.waitSignal(controller.refused, timeout=30_000) as refused:
        start()
    assert not controller.is_running()
    return refused.args


def test_resume_refuses_what_cannot_be_resumed_and_starts_nothing(qtbot, tmp_path):
    config = demo(tmp_path, epochs=2)
    run_dir = create_run_dir(config)
    run_dir.events_jsonl.write_text(
        RunFinished(status=RunStatus.COMPLETED, epochs_done=2).to_json() + "\n")
    with pytest.raises(UserError, match="history is off"):
        RunController().resume(7)
    with RunStore() as store:
        controller = RunController(store=store)
        _, error = refusal(qtbot, controller, lambda: controller.resume(run_dir.path))
        assert isinstance(error, UserError) and "nothing to resume" in str(error)
        with pytest.raises(UserError, match="no run 999"):
            controller.resume(999)
        assert not controller.is_running() and not is_live(run_dir.path)


def test_bad_input_is_refused_before_anything_starts(qtbot, tmp_path):
    controller = RunController()
    config = demo(tmp_path, model=str(tmp_path / "missing.keras"))
    request, error = refusal(qtbot, controller, lambda: controller.start(config))
    assert request.kind is StartKind.TRAIN and request.config == config
    assert isinstance(error, UserError) and "model file not found" in str(error)
    assert not controller.is_running()
    assert list(tmp_path.iterdir()) == []


def test_a_run_stopped_while_it_is_prepared_is_discarded(qtbot, tmp_path):
    with RunStore() as store:
        controller = RunController(store=store)
        with qtbot.waitSignal(controller.finished, timeout=30_000) as done:
            controller.start(demo(tmp_path))
            controller.stop()  # as closing the window does
            assert controller.state is RunState.STOPPING
        assert done.args[0].status is RunStatus.STOPPED
        assert not controller.is_running()
        assert store.runs() == [] and list(tmp_path.iterdir()) == []
