"""Comparing runs: differing settings, best and final values, seed bands, the environment record.

No training: runs are ComparedRun values built by hand (tests/helpers/compared_runs.py),
or store rows and run folders written directly. The worker writing environment.json in
a real run is checked in test_worker.py.
"""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pytest
from PySide6.QtCore import Qt

from mgpu_gui.cli import main as cli
from mgpu_gui.core.config import EarlyStoppingConfig, RunConfig
from mgpu_gui.core.events import EpochEnd, RunStarted
from mgpu_gui.core.runs import environment as env
from mgpu_gui.core.runs.compare import (
    ColumnKind,
    ComparedRun,
    Direction,
    comparison_table,
    differing_settings,
    direction,
    flatten,
)
from mgpu_gui.core.runs.folder import create_run_dir
from mgpu_gui.core.runs.seed_bands import BandKind, seed_band, seed_groups
from mgpu_gui.core.runs.store import RunRecorder
from mgpu_gui.gui.dialogs.run_compare import RunCompareDialog, RunCompareView
from mgpu_gui.gui.jobs.compare_reader import CompareRequest
from mgpu_gui.gui.widgets.setting_colors import color_by_setting
from tests.helpers.compared_runs import lr_sweep, sweep_run

# -- settings, best and final ------------------------------------------------------------------


def test_differing_settings_leave_out_names_and_folders_unless_all_are_asked_for():
    a = flatten(RunConfig(learning_rate=1e-3, seed=1, run_name="a", output_dir="/x"))
    b = flatten(RunConfig(learning_rate=3e-3, seed=1, run_name="b", output_dir="/y",
                          early_stopping=EarlyStoppingConfig(patience=2)))
    assert differing_settings([a, b]) == ["learning_rate", "early_stopping.patience"]
    everything = differing_settings([a, b], everything=True)
    assert len(everything) == len(a) and "run_name" in everything and "seed" in everything
    assert a["metrics"] == ("accuracy",)  # lists as tuples: comparable and hashable
    assert differing_settings([a, {}]) == [n for n in a if n not in
                                           ("run_name", "output_dir", "batch_event_interval_s",
                                            "tensorboard", "export_formats")]


def test_best_follows_the_metric_direction_and_final_is_the_last_epoch():
    assert direction("val_loss") is Direction.MIN and direction("mae") is Direction.MIN
    assert direction("val_accuracy") is Direction.MAX and direction("auc") is Direction.MAX
    run = ComparedRun("r", (0, 1, 2, 3), {"val_loss": (1.0, math.nan, 0.4, 0.6),
                                          "val_accuracy": (0.5, 0.9, 0.8, 0.7)})
    loss, accuracy = run.summary("val_loss"), run.summary("val_accuracy")
    assert (loss.best, loss.best_epoch, loss.final) == (0.4, 2, 0.6)
    assert (accuracy.best, accuracy.best_epoch, accuracy.final) == (0.9, 1, 0.7)
    assert run.summary("mae") is None


def test_the_table_marks_the_best_run_and_the_environment_unlike_the_others():
    runs = lr_sweep()
    table = comparison_table(runs)
    titles = [c.title for c in table.columns]
    assert titles == ["Run", "learning_rate", "seed", "best val_loss", "final val_loss",
                      "best val_accuracy", "final val_accuracy", "TensorFlow"]
    best = titles.index("best val_loss")
    values = [row[best].key for row in table.cells]
    marked = [i for i, row in enumerate(table.cells) if row[best].mark]
    assert marked == [int(np.argmin(values))]
    assert table.cells[marked[0]][best].tip.startswith(
        f"Epoch {runs[marked[0]].summary('val_loss').best_epoch + 1}")
    tf = [row[-1] for row in table.cells]
    assert [c.mark for c in tf] == [False] * 5 + [True]  # the one run on TensorFlow 2.20
    assert "Most of these runs have TensorFlow 2.21.0" in tf[-1].tip
    full = comparison_table(runs, everything=True)
    kinds = {c.kind for c in full.columns}
    assert ColumnKind.ENVIRONMENT in kinds and len(full.columns) > 40
    assert {c.name for c in full.columns if c.differs} == {"learning_rate", "seed",
                                                          "run_name", "TensorFlow"}


# -- seed bands --------------------------------------------------------------------------------


def test_runs_that_differ_only_by_seed_group_and_unknown_settings_never_do():
    runs = lr_sweep()
    assert seed_groups([r.settings for r in runs]) == [[0, 1], [2, 3], [4, 5]]
    assert seed_groups([{}, {}]) == [[0], [1]]


def test_seed_band_mean_min_max_and_sd_epoch_by_epoch():
    curves = [((0, 1, 2), (1.0, 2.0, 3.0)), ((0, 1, 2), (3.0, 4.0, math.inf)),
              ((0, 1), (2.0, 6.0))]
    band = seed_band(curves, BandKind.MIN_MAX)
    assert list(band.epochs) == [0, 1, 2] and list(band.counts) == [3, 3, 1]
    assert list(band.mean) == [2.0, 4.0, 3.0]
    assert list(band.low) == [1.0, 2.0, 3.0] and list(band.high) == [3.0, 6.0, 3.0]
    sd = seed_band(curves, BandKind.SD)
    assert list(sd.high - sd.mean) == pytest.approx([1.0, 2.0, 0.0])  # sample sd (ddof 1)
    assert list(sd.low) == pytest.approx([1.0, 2.0, 3.0])


# -- environment record ------------------------------------------------------------------------


def test_environment_record_hashes_files_whole_big_ones_sampled_folders_by_listing(
        tmp_path, monkeypatch):
    data = tmp_path / "data.npz"
    data.write_bytes(b"x" * 1000)
    model = tmp_path / "model.keras"
    model.write_bytes(bytes(range(256)) * 64)
    folder = tmp_path / "images"
    (folder / "cat").mkdir(parents=True)
    (folder / "cat" / "1.png").write_bytes(b"png")
    monkeypatch.setattr(env, "FULL_HASH_BYTES", 10_000)  # the model counts as big
    monkeypatch.setattr(env, "SAMPLE_BYTES", 100)
    config = RunConfig(model=str(model), data=str(data), validation_data=str(folder))
    record = env.record_environment(tmp_path, config, {"tensorflow": "2.21.0", "keras": "3.15",
                                                       "cuda": None, "cudnn": None})
    files = {f.role: f for f in record.files}
    assert files["data"].sha256 == hashlib.sha256(b"x" * 1000).hexdigest()
    assert files["data"].method == env.WHOLE and files["data"].size == 1000
    assert files["model"].method == env.SAMPLED and files["model"].size == 256 * 64
    assert files["validation data"].method == env.LISTING
    assert (files["validation data"].files, files["validation data"].size) == (1, 3)
    back = env.read_environment(tmp_path)
    assert back == record and back.tensorflow == "2.21.0"
    assert back.facts()["data file"].startswith(files["data"].sha256[:12])
    (folder / "cat" / "2.png").write_bytes(b"png")  # a new image: another listing
    assert env.fingerprint("x", folder).sha256 != files["validation data"].sha256
    assert env.fingerprint("x", tmp_path / "gone").error
    assert env.read_environment(tmp_path / "nowhere") is None


def stored_run(store, tmp_path, lr: float, tensorflow: str | None):
    """A run in the store and its folder, as a supervisor leaves them (no training)."""
    config = RunConfig(output_dir=str(tmp_path), learning_rate=lr, run_name=f"lr{lr:g}")
    run_dir = create_run_dir(config)
    run_id = store.add_run(run_dir, config)
    recorder = RunRecorder(store, run_id, owns_store=False)
    recorder.handle(RunStarted(
        run_dir=str(run_dir.path), device_kind="cpu", devices=["cpu:0"], device_names=["cpu"],
        num_replicas=1, batch_per_replica=64, global_batch=64, train_samples=100,
        val_samples=10, test_samples=0, steps_per_epoch=1, dropped_per_epoch=0, epochs=2,
        initial_epoch=0, model_name="m", params=1, cross_device_ops="", tf_version="",
        keras_version=""))
    for epoch in range(2):
        recorder.handle(EpochEnd(epoch=epoch, epochs=2,
                                 metrics={"val_loss": lr * 100 / (epoch + 1)},
                                 samples_per_s=1.0, duration_s=1.0, best=True))
    recorder.flush()
    if tensorflow is not None:
        env.environment_path(run_dir.path).write_text(json.dumps(
            env.RunEnvironment(tensorflow=tensorflow, keras="3.15.0").to_dict()))
    return store.get(run_id)


def test_runs_json_shows_the_environment_from_the_folder(capsys, store, tmp_path):
    recorded = stored_run(store, tmp_path, 1e-3, "2.21.0")
    older = stored_run(store, tmp_path, 1e-2, None)
    assert cli.main(["runs", "--json"]) == 0
    listed = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    assert listed[recorded.id]["environment"]["tensorflow"] == "2.21.0"
    assert listed[older.id]["environment"] is None


# -- the dialog --------------------------------------------------------------------------------


def column(view: RunCompareView, title: str) -> int:
    model = view.table.model()
    titles = [model.headerData(c, Qt.Orientation.Horizontal) for c in range(model.columnCount())]
    return titles.index(title)


def column_texts(view: RunCompareView, title: str) -> list[str]:
    model, c = view.table.model(), column(view, title)
    return [model.index(r, c).data() for r in range(model.rowCount())]


def test_the_table_sorts_by_value_and_shows_every_setting_on_request(qtbot):
    view = RunCompareView(lr_sweep())
    qtbot.addWidget(view)
    best = column(view, "best val_loss")
    view.table.sortByColumn(best, Qt.SortOrder.AscendingOrder)
    values = [float(v) for v in column_texts(view, "best val_loss")]
    assert values == sorted(values)
    view.table.sortByColumn(column(view, "learning_rate"), Qt.SortOrder.DescendingOrder)
    assert column_texts(view, "learning_rate")[:2] == ["0.01", "0.01"]  # numbers, not text
    narrow = view.table.model().columnCount()
    view.all_settings.setChecked(True)
    model = view.table.model()
    assert model.columnCount() > narrow
    seed = column(view, "seed")
    assert model.headerData(seed, Qt.Orientation.Horizontal, Qt.ItemDataRole.FontRole).bold()
    assert model.headerData(column(view, "optimizer"), Qt.Orientation.Horizontal,
                            Qt.ItemDataRole.FontRole) is None  # the same in every run


def test_missing_values_sort_last_either_way(qtbot):
    runs = [sweep_run(1e-3, 1), ComparedRun("no val_accuracy", (0,), {"val_loss": (0.9,)},
                                            settings=sweep_run(1e-2, 1).settings)]
    view = RunCompareView(runs)
    qtbot.addWidget(view)
    for order in (Qt.SortOrder.AscendingOrder, Qt.SortOrder.DescendingOrder):
        view.table.sortByColumn(column(view, "best val_accuracy"), order)
        assert column_texts(view, "best val_accuracy")[-1] == "–"


def test_curves_coloured_by_a_setting_with_a_legend_of_its_values(qtbot):
    view = RunCompareView(lr_sweep())
    qtbot.addWidget(view)
    assert len(view.curves) == 6 and len(view.legend.items) == 6  # per run
    view.set_color_by("learning_rate")
    pens = [c.opts["pen"].color().name() for c in view.curves]
    assert len(set(pens)) == 3 and pens[0] == pens[1] and pens[2] == pens[3]
    assert [label.text for _, label in view.legend.items] == [
        "learning_rate = 0.0001", "learning_rate = 0.001", "learning_rate = 0.01"]
    view.set_color_by("seed")  # two values: a scale from one end to the other
    assert len({c.opts["pen"].color().name() for c in view.curves}) == 2


def test_categories_take_the_palette_and_unknown_values_are_grey(qtbot):
    view = RunCompareView([])
    qtbot.addWidget(view)
    colors = color_by_setting("optimizer", ["adam", "sgd", "adam", None], view.colors)
    assert colors.colors == (view.colors.series[0], view.colors.series[1],
                             view.colors.series[0], view.colors.axis)
    assert colors.legend == (("optimizer = adam", view.colors.series[0]),
                             ("optimizer = sgd", view.colors.series[1]))


def test_group_seeds_draws_each_groups_mean_and_band(qtbot):
    runs = lr_sweep()
    view = RunCompareView(runs)
    qtbot.addWidget(view)
    assert view.group_check.isEnabled() and not view.band_combo.isEnabled()
    view.group_check.setChecked(True)
    assert len(view.curves) == 3 and len(view.bands) == 3
    expected = seed_band([(r.epochs, r.metrics["val_loss"]) for r in runs[:2]],
                         BandKind.MIN_MAX)
    x, mean = view.curves[0].getData()
    assert list(x) == [e + 1.0 for e in expected.epochs]
    assert list(mean) == pytest.approx(list(expected.mean))
    low, high = (edge.getData()[1] for edge in view._band_edges[:2])
    assert list(low) == pytest.approx(list(expected.low))
    assert list(high) == pytest.approx(list(expected.high))
    view.band_combo.setCurrentIndex(view.band_combo.findData(BandKind.SD))
    sd = seed_band([(r.epochs, r.metrics["val_loss"]) for r in runs[:2]], BandKind.SD)
    assert list(view._band_edges[1].getData()[1]) == pytest.approx(list(sd.high))
    assert "mean of 2 seeds" in view.legend.items[0][1].text
    lone = RunCompareView(runs[::2])  # one seed per learning rate: nothing to group
    qtbot.addWidget(lone)
    assert not lone.group_check.isEnabled() and "only by seed" in lone.group_check.toolTip()


def test_the_runs_tab_reads_settings_and_environment_off_the_gui_thread(qtbot, store,
                                                                        tmp_path):
    records = [stored_run(store, tmp_path, 1e-3, "2.21.0"),
               stored_run(store, tmp_path, 1e-2, "2.21.0"),
               stored_run(store, tmp_path, 3e-2, "2.20.0")]
    dialog = RunCompareDialog.reading([CompareRequest(r, r.name) for r in records],
                                      store.path)
    qtbot.addWidget(dialog)
    assert dialog.status.text() == "Reading 3 runs…"
    qtbot.waitUntil(lambda: len(dialog.view.runs) == 3)
    assert dialog.status.isHidden()
    view = dialog.view
    assert column_texts(view, "learning_rate") == ["0.001", "0.01", "0.03"]
    assert column_texts(view, "TensorFlow") == ["2.21.0", "2.21.0", "2.20.0"]
    assert column_texts(view, "final val_loss") == ["0.05", "0.5", "1.5"]
    dialog.close()
