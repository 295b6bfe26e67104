"""The series behind the curves (no Qt): buffers, smoothing, families, best epoch, resume."""

from __future__ import annotations

import math

import numpy as np

from mgpu_gui.core.events import BatchEnd, RunFinished, RunStatus
from mgpu_gui.core.series import SeriesBuffer, SeriesStore, XAxis, ema
from tests.helpers.training_events import T0, synthetic_run


def fed(events) -> SeriesStore:
    store = SeriesStore()
    for event in events:
        store.ingest(event)
    return store


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


def test_store_names_new_families_once_and_keeps_the_lr_apart():
    store = SeriesStore()
    events = synthetic_run(epochs=2, steps=8, every=4, extra_metric=True)
    firsts = [family for event in events for family in store.ingest(event)]
    assert firsts == ["loss", "accuracy", "auc"]
    assert "learning_rate" in store.names() and "lr" not in firsts
    assert store.epochs == 2 and store.steps == 8
    x, y = store.xy("val_loss", XAxis.EPOCH)
    assert x.tolist() == [1.0, 2.0]
    assert store.xy("val_loss", XAxis.STEP)[0].tolist() == [8.0, 16.0]
    assert store.xy("nothing", XAxis.EPOCH)[0].size == 0


def test_store_reports_what_changed_since_it_was_asked():
    store = fed(synthetic_run(epochs=1, steps=8, every=4))
    assert {"loss", "loss:smoothed", "loss:epoch", "val_loss"} <= store.take_changed()
    assert store.take_changed() == set()
    assert store.take_best_changed() and not store.take_best_changed()
    store.set_smoothing(0.9)
    assert store.take_changed() == {"loss:smoothed", "accuracy:smoothed"}
    assert np.allclose(store.xy("loss:smoothed", XAxis.EPOCH)[1],
                       ema(store.xy("loss", XAxis.EPOCH)[1], 0.9)[0])


def test_best_epoch_and_where_it_is_drawn():
    store = fed(synthetic_run(epochs=10, steps=20, every=5, best_at=6))
    assert store.best_epoch == 6 and store.best_metric == "val_loss"
    x, y, name = store.epoch_point("loss", 6, XAxis.EPOCH)
    assert (x, name) == (7.0, "val_loss") and y == store.xy("val_loss", XAxis.EPOCH)[1][6]
    assert store.epoch_point("loss", 6, XAxis.STEP)[0] == 7.0 * 20
    assert store.epoch_point("loss", 42, XAxis.EPOCH) is None


def test_resume_drops_the_unfinished_epoch_and_continues_wall_time():
    first = synthetic_run(epochs=10, steps=20, every=5, finish=False)
    stop = next(i for i, e in enumerate(first)
                if isinstance(e, BatchEnd) and e.epoch == 4 and e.batch == 9)
    store = fed([*first[:stop + 1], RunFinished(status=RunStatus.STOPPED, epochs_done=4,
                                                t=first[stop].t + 1)])
    assert len(store.xy("loss", XAxis.EPOCH)[0]) == 4 * 4 + 2
    for event in synthetic_run(epochs=10, steps=20, every=5, initial_epoch=4, t0=T0 + 86_400):
        store.ingest(event)
    x = store.xy("loss", XAxis.EPOCH)[0]
    assert len(x) == 10 * 4 and np.all(np.diff(x) > 0)
    assert len(store.xy("loss:smoothed", XAxis.EPOCH)[0]) == 10 * 4
    wall = store.xy("loss", XAxis.WALL)[0]
    assert np.all(np.diff(wall) > 0) and wall[-1] < 10  # minutes: the day between left out
    assert not math.isnan(store.xy("loss:smoothed", XAxis.EPOCH)[1][-1])

