"""Runs told apart in the Runs table by what differs from the run before them of the same
name (issue 30, finding 7: every demo run was named "demo"). No TensorFlow."""

from __future__ import annotations

import json

from PySide6.QtCore import Qt

from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.runs.run_differences import differences, stored_settings
from mgpu_gui.gui.widgets.runs_table import Column
from tests.test_runs_panel import cell, record_run, refresh


def test_each_run_names_what_differs_from_the_run_before_it_of_its_name(store, tmp_path):
    first = record_run(store, tmp_path, "demo", start_t=1.7e9)
    lr = record_run(store, tmp_path, "demo", start_t=1.7e9 + 60, learning_rate=0.01)
    same = record_run(store, tmp_path, "demo", start_t=1.7e9 + 120, learning_rate=0.01)
    other = record_run(store, tmp_path, "resnet", start_t=1.7e9 + 180, epochs=9)
    many = record_run(store, tmp_path, "demo", start_t=1.7e9 + 240, learning_rate=0.01,
                      batch_per_replica=16, precision="mixed_bfloat16", jit_compile=True,
                      seed=7, data=str(tmp_path / "other.npz"))
    found = differences(store.runs(), stored_settings(store.config_texts()))
    assert first.id not in found and other.id not in found  # the first of their names
    assert same.id not in found  # the same settings as the run before it
    assert found[lr.id].text == "lr=0.01"
    assert found[lr.id].tip.splitlines() == [
        f"Differs from run {first.id}, the run before it of that name:",
        "  learning_rate: 0.01 (was 0.001)"]
    # Three named, the rest counted; the data has its own column, so it is not one of them.
    assert found[many.id].text == "batch=16, precision=mixed_bfloat16, xla=on, +1"
    assert "  seed: 7 (was 42)" in found[many.id].tip
    assert "data" not in found[many.id].tip


def test_stored_settings_of_an_older_version_are_not_a_difference():
    """A setting added since a run was registered reads as its default; a stored text
    that does not parse is left out rather than breaking the table."""
    now = RunConfig(learning_rate=0.01).to_dict()
    older = {k: v for k, v in now.items() if k not in ("input_pipeline", "cache")}
    settings = stored_settings({1: json.dumps(older), 2: json.dumps(now), 3: "{not json",
                                4: "[1, 2]"})
    assert set(settings) == {1, 2}
    assert settings[1] == settings[2]


def test_the_runs_table_shows_the_difference_beside_the_name(qtbot, open_runs_panel, store,
                                                             tmp_path):
    record_run(store, tmp_path, "demo", start_t=1.7e9)
    record_run(store, tmp_path, "demo", start_t=1.7e9 + 60, learning_rate=0.01)
    panel = open_runs_panel(store)
    refresh(qtbot, panel)
    # Newest first; started in the same second, its folder is "…-demo-1".
    assert cell(panel, 0, Column.NAME) in ("demo  lr=0.01", "demo-1  lr=0.01")
    assert cell(panel, 1, Column.NAME) == "demo"
    tip = panel.proxy.index(0, Column.NAME).data(Qt.ItemDataRole.ToolTipRole)
    assert "learning_rate: 0.01 (was 0.001)" in tip


def test_mgpu_train_runs_has_the_same_column(capsys, store, tmp_path):
    from mgpu_gui.cli import main as cli

    record_run(store, tmp_path, "demo", start_t=1.7e9)
    second = record_run(store, tmp_path, "demo", start_t=1.7e9 + 60, epochs=8, done=8)
    assert cli.main(["runs"]) == 0
    header, newest, oldest = capsys.readouterr().out.splitlines()
    assert header.split()[4] == "DIFFERS"
    assert newest.startswith(str(second.id)) and newest.split()[5] == "epochs=8"
    assert oldest.split()[5] == "-"


def test_column_widths_stay_while_a_live_run_goes_on(qtbot, open_runs_panel, store, tmp_path):
    """Issue 30, finding 7: the widths shifted while a run was live, down to "Mode" for
    Model. A running run's row changes each epoch and at its end; no column moves."""
    from mgpu_gui.core.runs.store import RunState

    record_run(store, tmp_path, "baseline", start_t=1.7e9, data=str(tmp_path / "digits.npz"))
    live = record_run(store, tmp_path, "demo", start_t=1.7e9 + 60, epochs=60, done=3, end=None)
    panel = open_runs_panel(store, width=1000)
    refresh(qtbot, panel)
    header = panel.table.horizontalHeader()
    widths = [header.sectionSize(c) for c in Column]
    for column, title in ((Column.MODEL, "Model"), (Column.DATA, "Data")):  # titles whole
        assert header.sectionSize(column) > header.fontMetrics().horizontalAdvance(title) + 4
    store.set_status(live.id, RunState.EARLY_STOPPED)  # the widest state, and 60/60 epochs
    store._db.execute("UPDATE runs SET epochs_done = 60 WHERE id = ?", (live.id,))
    store._db.commit()
    refresh(qtbot, panel)
    assert cell(panel, 0, Column.STATUS) == "Early stopped"
    assert cell(panel, 0, Column.EPOCHS) == "60/60"
    assert [header.sectionSize(c) for c in Column] == widths
