"""The QThread supervisor: events arrive in order on the GUI thread; stop and failures."""

from __future__ import annotations

import pytest

from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.events import BatchEnd, EpochEnd, RunFinished, RunStarted, RunStatus
from mgpu_gui.gui.run_controller import RunController

pytestmark = pytest.mark.slow


def demo(tmp_path, **changes) -> RunConfig:
    return RunConfig(output_dir=str(tmp_path), batch_per_replica=32, epochs=2,
                     devices=DeviceSelection(kind=DeviceKind.CPU, replicas=2)).replace(**changes)


def test_a_run_streams_events_and_finishes(qtbot, tmp_path):
    controller = RunController()
    events = []
    controller.event.connect(events.append)
    with qtbot.waitSignal(controller.finished, timeout=120_000) as done:
        controller.start(demo(tmp_path))
        assert controller.is_running()
    assert done.args[0].status is RunStatus.COMPLETED
    assert not controller.is_running()
    kinds = [type(e) for e in events]
    assert kinds.index(RunStarted) < kinds.index(BatchEnd) and kinds[-1] is RunFinished
    epochs = [e.epoch for e in events if isinstance(e, EpochEnd)]
    assert epochs == [0, 1]
    batches = [(e.epoch, e.batch) for e in events if isinstance(e, BatchEnd)]
    assert batches == sorted(batches)


def test_stop_mid_run_then_start_again(qtbot, tmp_path):
    controller = RunController()
    states = []
    controller.state_changed.connect(states.append)
    controller.event.connect(lambda e: isinstance(e, BatchEnd) and controller.stop())
    with qtbot.waitSignal(controller.finished, timeout=120_000) as done:
        controller.start(demo(tmp_path, epochs=50))
    assert done.args[0].status is RunStatus.STOPPED
    assert states == ["running", "stopping", "idle"]


def test_bad_input_is_refused_before_anything_starts(qtbot, tmp_path):
    controller = RunController()
    with pytest.raises(UserError, match="model file not found"):
        controller.start(demo(tmp_path, model=str(tmp_path / "missing.keras")))
    assert not controller.is_running()
    assert list(tmp_path.iterdir()) == []
