"""The curves panel: coalesced redraws, best epoch, smoothing, axes, timer (data: test_series)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtCore import QRectF
from PySide6.QtGui import QImage, QPainter

from mgpu_gui.core.events import (
    BatchEnd,
    EpochEnd,
    LogMessage,
    Phase,
    RunFailed,
    RunFinished,
    RunStatus,
)
from mgpu_gui.core.series import ema
from mgpu_gui.gui.panels.curves import CurvesPanel
from tests.helpers.training_events import T0, run_started, synthetic_run


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
    assert panel._key.best() == f"epoch 7, val_loss {val_y[6]:.4g}"
    assert "★&nbsp;best:&nbsp;epoch&nbsp;7," in panel._key.text()
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


# -- edges (issue 14): markers and labels at the ends of a plot are whole -------------------
def _best_first(events):
    """The same run with validation getting worse after epoch 1: the best is the first."""
    changed = []
    for event in events:
        if isinstance(event, EpochEnd):
            event = dataclasses.replace(event, best=event.epoch == 0, metrics={
                **event.metrics, "val_loss": 0.3 + 0.05 * event.epoch})
        changed.append(event)
    return changed


def _inside(inner: QRectF, outer: QRectF) -> bool:
    return outer.adjusted(-0.5, -0.5, 0.5, 0.5).contains(inner)


def _tick_label_rects(widget: pg.PlotWidget, side: str) -> list[QRectF]:
    axis = widget.getPlotItem().getAxis(side)
    image = QImage(8, 8, QImage.Format.Format_ARGB32)  # held: a temporary dies under the painter
    painter = QPainter(image)
    try:
        _, _, texts = axis.generateDrawSpecs(painter)
    finally:
        painter.end()
    return [axis.mapRectToScene(rect) for rect, _, _ in texts]


@pytest.mark.parametrize(("width", "first"), [(1000, False), (520, False), (520, True)])
def test_best_star_label_and_tick_labels_are_whole_at_the_edges(panel, qtbot, width, first):
    """The star on the last epoch was cut in half, and the last tick label was cut at the
    plot's right edge."""
    panel.resize(width, 600)
    panel.show()
    qtbot.waitExposed(panel)
    events = synthetic_run(epochs=10, steps=8, best_at=20, finish=False)
    panel.load_events(_best_first(events) if first else events)
    panel.grab()  # painted: the views lay out their ranges before a paint
    assert panel.best_epoch() == (0 if first else 9)
    for family in ("loss", "accuracy"):
        plot = panel._plots[family]
        view = plot.widget.getPlotItem().getViewBox()
        star = plot.best_marker.scatter
        assert plot.best_marker.isVisible()
        assert _inside(star.mapRectToScene(star.boundingRect()), view.sceneBoundingRect())
        scene = plot.widget.getPlotItem().sceneBoundingRect()
        for side in ("left", "bottom"):
            rects = _tick_label_rects(plot.widget, side)
            assert rects and all(_inside(r, scene) for r in rects), (family, side)


def test_empty_plots_show_zero_to_one_with_both_ends_labelled(panel):
    for widget in panel.plot_widgets():
        (x0, x1), (y0, y1) = widget.getPlotItem().getViewBox().viewRange()
        assert x0 < 0 < 1 < x1 and y0 < 0 < 1 < y1  # a little beyond: 0 and 1 get ticks
        assert x1 - x0 < 1.2 and y1 - y0 < 1.2


# -- issue 30, finding 9 -------------------------------------------------------------------
def _x_range(widget: pg.PlotWidget) -> tuple[float, float]:
    return tuple(widget.getPlotItem().getViewBox().viewRange()[0])


def test_a_new_or_loaded_run_shows_its_own_x_range_not_the_last_runs(panel, qtbot):
    """9a: the empty Loss and Accuracy frames (and the learning rate's) kept the last run's
    x range until the new run's first batch, and for good when a run without data was
    loaded."""
    panel.show()
    qtbot.waitExposed(panel)
    panel.load_events(synthetic_run(epochs=30, steps=8))
    panel.handle_event(run_started(epochs=5, steps=8))  # no batch yet: compiling, say
    fixed = (panel._lr_plot, panel._rate_plot, panel.telemetry_plot.widget)
    frames = [w for w in panel.plot_widgets() if w.isVisible() and w not in fixed]
    assert [w.getPlotItem().titleLabel.text for w in frames] == ["Loss", "Accuracy"]
    for widget in [*frames, panel._lr_plot]:
        low, high = _x_range(widget)
        assert -1 < low < 0 and 5 < high < 6, widget.accessibleName()
    panel.load_events([])  # a stored run that recorded no epoch
    for widget in [*frames, panel._lr_plot]:
        low, high = _x_range(widget)
        assert -0.1 < low < 0 and 1 < high < 1.1, widget.accessibleName()


def test_the_best_epoch_is_said_in_the_key_not_on_the_curves(panel):
    """9d: "best: epoch N val_loss X" sat on the curves, half-way up the plot."""
    panel.load_events(synthetic_run(epochs=10, steps=8, best_at=6))
    for plot in panel._plots.values():
        assert plot.best_line.isVisible() and plot.best_marker.isVisible()
        texts = [item for item in plot.widget.getPlotItem().getViewBox().allChildren()
                 if isinstance(item, pg.TextItem) and item.isVisible()]
        assert texts == [], plot.widget.accessibleName()
    val_loss = panel.series("val_loss")[1][6]
    assert panel._key.best() == f"epoch 7, val_loss {val_loss:.4g}"
    panel.handle_event(run_started(epochs=5, steps=8))
    assert panel._key.best() == "" and "★&nbsp;best&nbsp;epoch" in panel._key.text()


def test_narrow_time_axes_label_ticks_far_enough_apart(qtbot):
    """Issue 30: before any data the throughput and devices plots at 1024x576 read
    "0.20.40.60.8" under their x axis."""
    from mgpu_gui.gui.widgets.plots import MIN_LABEL_PX, SparseAxis

    axis = SparseAxis()
    for size, span in ((90, 1.0), (128, 1.0), (128, 37.0), (600, 1.0)):
        (major, _), *minor = axis.tickSpacing(0, span, size)
        assert span / major * MIN_LABEL_PX <= size, (size, span, major)
        assert all(step < major for step, _ in minor)
    assert axis.tickSpacing(0, 1.0, 600)[0][0] == 0.2  # wide: pyqtgraph's own
