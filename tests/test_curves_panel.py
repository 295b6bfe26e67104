"""The curves panel: buffers, coalesced redraws, best epoch, smoothing, axes, timer."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
import pytest

from mgpu_gui.core.events import (
    BatchEnd,
    EpochEnd,
    Event,
    LogMessage,
    Phase,
    RunFailed,
    RunFinished,
    RunStarted,
    RunStatus,
)
from mgpu_gui.gui.panels.curves import CurvesPanel, SeriesBuffer, ema

T0 = 1_700_000_000.0


def run_started(*, epochs: int = 10, steps: int = 100, initial_epoch: int = 0,
                t: float = T0, replicas: int = 2) -> RunStarted:
    return RunStarted(
        run_dir="/tmp/run", device_kind="gpu",
        devices=[f"/job:localhost/replica:0/task:0/device:GPU:{i}" for i in range(replicas)],
        device_names=[f"GPU {i}: NVIDIA H100 80GB HBM3 (GPU-{i})" for i in range(replicas)],
        num_replicas=replicas, batch_per_replica=128, global_batch=128 * replicas,
        train_samples=steps * 128 * replicas + 37, val_samples=5000, test_samples=0,
        steps_per_epoch=steps, dropped_per_epoch=37, epochs=epochs, initial_epoch=initial_epoch,
        model_name="convnet", params=1_234_567, cross_device_ops="nccl", tf_version="2.21",
        keras_version="3.15", t=t)


def synthetic_run(*, epochs: int = 10, steps: int = 100, every: int = 4, best_at: int = 6,
                  initial_epoch: int = 0, t0: float = T0, finish: bool = True,
                  extra_metric: bool = False, seed: int = 0) -> list[Event]:
    """A plausible run: loss falls, validation bottoms out at `best_at` then overfits."""
    rng = np.random.default_rng(seed)
    events: list[Event] = [run_started(epochs=epochs, steps=steps, initial_epoch=initial_epoch,
                                       t=t0)]
    t, best, best_epoch = t0 + 3.0, math.inf, None
    for epoch in range(initial_epoch, epochs):
        lr = 1e-3 if epoch < 5 else 1e-4
        for batch in range(every - 1, steps, every):
            progress = epoch + (batch + 1) / steps
            loss = 2.3 * math.exp(-progress / 1.6) + 0.05 + rng.normal(0, 0.06)
            metrics = {"loss": loss, "accuracy": min(1.0, 1 - loss / 2.5 + rng.normal(0, 0.01))}
            if extra_metric:
                metrics["auc"] = 1 - loss / 5
            t += every * 0.06
            events.append(BatchEnd(epoch=epoch, batch=batch, steps=steps, metrics=metrics,
                                   samples_per_s=4200 + rng.normal(0, 150), learning_rate=lr,
                                   t=t))
        t += 2.0  # validation
        val_loss = 0.25 + 1.8 * math.exp(-(epoch + 1) / 1.4) + 0.02 * max(0, epoch - best_at)
        metrics = {"loss": 2.3 * math.exp(-(epoch + 0.5) / 1.6) + 0.05,
                   "accuracy": 0.9 + 0.009 * epoch, "val_loss": val_loss,
                   "val_accuracy": 0.88 + 0.008 * min(epoch, best_at), "learning_rate": lr}
        if extra_metric:
            metrics |= {"auc": 0.95, "val_auc": 0.93}
        is_best = val_loss < best
        if is_best:
            best, best_epoch = val_loss, epoch
        events.append(EpochEnd(epoch=epoch, epochs=epochs, metrics=metrics,
                               samples_per_s=4100.0, duration_s=8.0, learning_rate=lr,
                               best=is_best, t=t))
    if finish:
        events.append(RunFinished(status=RunStatus.COMPLETED, epochs_done=epochs,
                                  best_epoch=best_epoch, best_metric="val_loss",
                                  best_value=best, t=t + 1))
    return events


@pytest.fixture
def panel(qtbot):
    widget = CurvesPanel()
    qtbot.addWidget(widget)
    widget.resize(1000, 700)
    yield widget
    widget.shutdown()


def count_set_data(monkeypatch) -> dict[int, int]:
    calls: dict[int, int] = {}
    original = pg.PlotDataItem.setData

    def counting(self, *args, **kwargs):
        calls[id(self)] = calls.get(id(self), 0) + 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(pg.PlotDataItem, "setData", counting)
    return calls


def test_series_buffer_grows_by_doubling_and_keeps_rows():
    buffer = SeriesBuffer(capacity=4)
    for i in range(9):
        buffer.append(i, 10 * i, 100 * i, -i)
    assert len(buffer) == 9 and buffer.capacity == 16
    assert buffer.column(0).tolist() == list(range(9))
    assert buffer.column(3)[-1] == -8
    buffer.truncate(3)
    assert buffer.column(1).tolist() == [0, 10, 20]


def test_ema_is_debiased_and_skips_nan():
    values = np.array([1.0, 1.0, math.nan, 1.0])
    smoothed, _, count = ema(values, 0.9)
    assert np.allclose(smoothed[[0, 1, 3]], 1.0) and math.isnan(smoothed[2]) and count == 3
    assert np.array_equal(ema(np.array([3.0, 5.0]), 0.0)[0], [3.0, 5.0])


def test_curves_fill_from_a_run(panel):
    for event in synthetic_run(epochs=10, steps=100, every=4, extra_metric=True):
        panel.handle_event(event)
    assert panel.families() == ["loss", "accuracy", "auc"]  # loss first, then accuracy
    assert len(panel.series("loss")[0]) == 10 * 25
    assert len(panel.series("loss:smoothed")[1]) == 10 * 25
    assert len(panel.series("loss:epoch")[0]) == 10
    assert len(panel.series("val_accuracy")[0]) == 10
    assert len(panel.series("val_auc")[0]) == 10
    assert len(panel.series("samples_per_s")[0]) == 250
    assert "learning_rate" not in panel.families()  # the LR is no metric family
    x, lr = panel.series("learning_rate")
    assert len(x) == 250 + 10 and lr[0] == 1e-3 and lr[-1] == 1e-4
    x, y = panel.series("val_loss")
    assert x.tolist() == [float(e) for e in range(1, 11)]  # epoch e ends at x = e + 1


def test_best_epoch_marked_and_survives_downsampling(panel, qtbot):
    panel.show()
    qtbot.waitExposed(panel)
    for event in synthetic_run(epochs=10, steps=4000, every=4, best_at=6):  # 10,000 batches
        panel.handle_event(event)
    assert len(panel.series("loss")[0]) == 10_000
    assert panel.best_epoch() == 6
    loss = panel._plots["loss"]
    raw = loss.curves["loss"]
    assert raw.opts["autoDownsample"] and raw.opts["downsampleMethod"] == "peak"
    assert raw.opts["clipToView"]
    assert len(raw.getOriginalDataset()[0]) == 10_000
    qtbot.waitUntil(lambda: len(raw.getData()[0]) < 10_000)  # thinned once laid out
    panel.grab()
    marker_x, marker_y = loss.best_marker.getData()
    val_x, val_y = panel.series("val_loss")
    assert marker_x.tolist() == [7.0] and marker_y.tolist() == [val_y[6]]
    assert loss.best_marker.isVisible() and loss.best_marker in loss.widget.getPlotItem().items
    assert loss.best_line.isVisible() and loss.best_line.value() == 7.0
    assert "best: epoch 7" in loss.best_line.label.toPlainText()
    assert "val_loss" in loss.best_line.label.toPlainText()
    accuracy = panel._plots["accuracy"]
    assert accuracy.best_marker.getData()[0].tolist() == [7.0]


def test_best_epoch_follows_the_latest_best_flag(panel):
    for event in synthetic_run(epochs=4, steps=8, best_at=10, finish=False):
        panel.handle_event(event)
    assert panel.best_epoch() == 3  # val_loss still falling: the last epoch is best
    panel.handle_event(RunFailed(message="boom", phase=Phase.TRAINING, error_type="X"))
    assert panel.best_epoch() == 3


def test_log_y_leaves_out_non_positive_values(panel):
    events = synthetic_run(epochs=2, steps=8, every=1, finish=False)
    events.insert(3, BatchEnd(epoch=0, batch=2, steps=8, metrics={"loss": 0.0},
                              samples_per_s=1.0, t=T0 + 3.5))
    events.insert(4, BatchEnd(epoch=0, batch=2, steps=8, metrics={"loss": -1.0},
                              samples_per_s=1.0, t=T0 + 3.6))
    for event in events:
        panel.handle_event(event)
    panel.stop_updates()
    raw = panel._plots["loss"].curves["loss"]
    n = len(panel.series("loss")[1])
    assert len(raw.getOriginalDataset()[1]) == n
    panel.set_log_y(True)
    assert panel._plots["loss"].widget.getPlotItem().ctrl.logYCheck.isChecked()
    assert len(raw.getOriginalDataset()[1]) == n - 2
    assert np.isfinite(raw.getData()[1]).all()  # log10 of what is kept
    assert len(panel.series("loss")[1]) == n  # the data itself is untouched
    panel.set_log_y(False)
    assert len(raw.getOriginalDataset()[1]) == n


def test_smoothing_changes_the_smoothed_series_and_keeps_raw(panel):
    for event in synthetic_run(epochs=3, steps=40, every=1):
        panel.handle_event(event)
    raw_before = panel.series("loss")[1].copy()
    panel.set_smoothing(0.0)
    assert np.allclose(panel.series("loss:smoothed")[1], raw_before)
    panel.set_smoothing(0.95)
    smooth = panel.series("loss:smoothed")[1]
    assert np.array_equal(panel.series("loss")[1], raw_before)
    assert np.std(np.diff(smooth)) < np.std(np.diff(raw_before)) / 3
    raw_curve = panel._plots["loss"].curves["loss"]
    smooth_curve = panel._plots["loss"].curves["loss:smoothed"]
    assert np.array_equal(raw_curve.getOriginalDataset()[1], raw_before)
    assert np.allclose(smooth_curve.getOriginalDataset()[1], smooth)
    # Later points continue the new smoothing incrementally.
    panel.handle_event(BatchEnd(epoch=3, batch=0, steps=40, metrics={"loss": 0.1},
                                samples_per_s=1.0, t=T0 + 999))
    values = panel.series("loss")[1]
    assert np.allclose(panel.series("loss:smoothed")[1], ema(values, 0.95)[0])
    panel.stop_updates()


def test_x_axis_modes(panel):
    for event in synthetic_run(epochs=2, steps=10, every=5):
        panel.handle_event(event)
    assert panel.series("loss")[0].tolist() == [0.5, 1.0, 1.5, 2.0]
    panel.set_x_axis("step")
    assert panel.series("loss")[0].tolist() == [5, 10, 15, 20]
    assert panel.series("val_loss")[0].tolist() == [10, 20]
    assert panel._plots["loss"].best_line.value() == 20
    panel.set_x_axis("time")
    x = panel.series("loss")[0]
    assert x[0] == pytest.approx((3.0 + 5 * 0.06) / 60) and np.all(np.diff(x) > 0)
    assert np.array_equal(panel._plots["loss"].curves["loss"].getOriginalDataset()[0], x)


def test_redraws_are_coalesced_per_timer_tick(panel, qtbot, monkeypatch):
    panel.handle_event(run_started(steps=1000))
    assert panel._timer.isActive()
    panel.handle_event(BatchEnd(epoch=0, batch=0, steps=1000, metrics={"loss": 1.0},
                                samples_per_s=100.0, t=T0))  # creates the loss plot
    calls = count_set_data(monkeypatch)
    for batch in range(1, 501):
        panel.handle_event(BatchEnd(epoch=0, batch=batch, steps=1000,
                                    metrics={"loss": 1.0 / (batch + 1)},
                                    samples_per_s=100.0, learning_rate=0.01,
                                    t=T0 + batch))
    assert not calls  # nothing drawn per event
    curves = panel._plots["loss"].curves
    loss_ids = {id(curve) for curve in curves.values()}
    # One plot per tick, so one window repaint never paints every plot at once.
    panel._timer.stop()
    panel._refresh_next()
    assert calls and set(calls) <= loss_ids
    panel._refresh_next()
    assert set(calls) - loss_ids == {id(panel._lr_curve)}
    panel._refresh_next()
    assert calls[id(curves["loss"])] == 1 and calls[id(curves["loss:smoothed"])] == 1
    assert calls[id(panel._lr_curve)] == 1 and calls[id(panel._rate_curve)] == 1
    assert all(count == 1 for count in calls.values())
    panel.start_updates()
    calls.clear()
    qtbot.wait(300)  # more ticks, nothing new: nothing redrawn
    assert not calls
    panel.handle_event(RunFinished(status=RunStatus.STOPPED, epochs_done=0))


def test_timer_runs_from_start_to_finish(panel):
    events = synthetic_run(epochs=2, steps=8)
    panel.handle_event(events[0])
    assert panel._timer.isActive()
    for event in events[1:-1]:
        panel.handle_event(event)
    panel.handle_event(LogMessage(message="hello"))
    assert panel._timer.isActive()
    panel.handle_event(events[-1])
    assert not panel._timer.isActive()
    curve = panel._plots["loss"].curves["loss"]
    assert len(curve.getOriginalDataset()[0]) == 4  # flushed at the end


def test_timer_stops_on_failure_and_shutdown(panel):
    panel.handle_event(run_started())
    panel.handle_event(RunFailed(message="out of memory", phase=Phase.TRAINING,
                                 error_type="ResourceExhaustedError"))
    assert not panel._timer.isActive()
    panel.handle_event(run_started())
    assert panel._timer.isActive()
    panel.shutdown()
    assert not panel._timer.isActive()
    panel.handle_event(run_started())  # after shutdown: ignored, no timer
    assert not panel._timer.isActive()


def test_load_events_draws_once_without_a_timer(panel):
    panel.load_events(synthetic_run(epochs=3, steps=20, every=5))
    assert not panel._timer.isActive()
    assert len(panel._plots["loss"].curves["val_loss"].getOriginalDataset()[0]) == 3
    assert panel.best_epoch() == 2


def test_resumed_run_continues_the_curves(panel):
    first = synthetic_run(epochs=10, steps=20, every=5, finish=False)
    stop = next(i for i, e in enumerate(first)
                if isinstance(e, BatchEnd) and e.epoch == 4 and e.batch == 9)
    history = [*first[:stop + 1], RunFinished(status=RunStatus.STOPPED, epochs_done=4,
                                              t=first[stop].t + 1)]
    panel.load_events(history)
    assert len(panel.series("loss")[0]) == 4 * 4 + 2  # epoch 5 half done
    resumed = synthetic_run(epochs=10, steps=20, every=5, initial_epoch=4, t0=T0 + 86_400)
    for event in resumed:
        panel.handle_event(event)
    x, _ = panel.series("loss")
    assert len(x) == 10 * 4 and np.all(np.diff(x) > 0)  # the partial epoch was redone
    assert panel.series("val_loss")[0].tolist() == [float(e) for e in range(1, 11)]
    panel.set_x_axis("time")
    wall = panel.series("loss")[0]
    assert np.all(np.diff(wall) > 0) and wall[-1] < 10  # the day between runs left out


def test_new_run_replaces_the_curves(panel):
    for event in synthetic_run(epochs=2, steps=8):
        panel.handle_event(event)
    panel.handle_event(run_started())
    assert len(panel.series("loss")[0]) == 0 and panel.best_epoch() is None
    panel.reset()
    panel.handle_event(RunFinished(status=RunStatus.STOPPED, epochs_done=0))
