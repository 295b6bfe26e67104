"""The Runs tab, the run comparison and the start-up resume offer, on stores filled by hand.

No TensorFlow: runs are recorded from synthetic events (the same path the
supervisor uses), with a run folder holding config.json and events.jsonl.
The real stop-and-resume through the window is in test_main_window.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt, QUrl
from PySide6.QtWidgets import QMessageBox

from mgpu_gui.core.children.supervisor import prepare_resume
from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.events import (
    BatchEnd,
    EpochEnd,
    Event,
    Phase,
    RunFailed,
    RunFinished,
    RunStarted,
    RunStatus,
)
from mgpu_gui.core.runs import checkpoints as ckpt
from mgpu_gui.core.runs.folder import RunDir, create_run_dir
from mgpu_gui.core.runs.lock import RunLock
from mgpu_gui.core.runs.store import RunRecord, RunRecorder, RunState, RunStore
from mgpu_gui.gui.dialogs.run_compare import ComparedRun, RunCompareView, metric_choices
from mgpu_gui.gui.jobs.telemetry_source import TelemetrySource
from mgpu_gui.gui.main_window import MainWindow
from mgpu_gui.gui.panels.progress import BAR_MAX
from mgpu_gui.gui.panels.runs import RunsPanel
from mgpu_gui.gui.widgets.runs_table import COLUMNS, Column
from tests.helpers.questions import Questions

STEPS = 3
NO_GPU = GpuInventory(state=NvmlState.NO_DRIVER, message="No NVIDIA driver found (test).")


def started(run_dir: RunDir, epochs: int, initial_epoch: int = 0, t: float = 1e9,
            gpus: int = 0) -> RunStarted:
    kind, n = ("gpu", gpus) if gpus else ("cpu", 2)
    names = ([f"GPU {i}: NVIDIA H100 80GB HBM3 (GPU-{i})" for i in range(gpus)] if gpus
             else ["CPU replica 0", "CPU replica 1"])
    return RunStarted(
        run_dir=str(run_dir.path), device_kind=kind, devices=[f"/device:X:{i}" for i in range(n)],
        device_names=names, num_replicas=n, batch_per_replica=32, global_batch=32 * n,
        train_samples=1600, val_samples=197, test_samples=0, steps_per_epoch=STEPS,
        dropped_per_epoch=0, epochs=epochs, initial_epoch=initial_epoch, model_name="m",
        params=1000, cross_device_ops="ReductionToOneDevice", tf_version="2.21",
        keras_version="3.15", t=t)


def epoch_events(epoch: int, epochs: int, val_loss: float, t: float, best: bool) -> list[Event]:
    events: list[Event] = [
        BatchEnd(epoch=epoch, batch=b, steps=STEPS, metrics={"loss": val_loss + 0.1,
                                                             "accuracy": 0.5},
                 samples_per_s=500.0, learning_rate=1e-3, t=t + b) for b in range(STEPS)]
    events.append(EpochEnd(epoch=epoch, epochs=epochs,
                           metrics={"loss": val_loss + 0.05, "accuracy": 0.6 + epoch / 100,
                                    "val_loss": val_loss, "val_accuracy": 0.7 + epoch / 100},
                           samples_per_s=500.0, duration_s=3.0, learning_rate=1e-3,
                           best=best, t=t + STEPS))
    return events


def record_run(store: RunStore, root: Path, name: str, *, epochs: int = 4, done: int = 4,
               end: RunStatus | str | None = RunStatus.COMPLETED, start_t: float = 1.7e9,
               gpus: int = 0, val_losses: list[float] | None = None, model: str = "demo",
               data: str = "demo", **settings) -> RunRecord:
    """A run recorded as the supervisor records it; `end` None: still 'running'
    (its supervisor died), "failed": a RunFailed; `settings`: more of its RunConfig."""
    config = RunConfig(output_dir=str(root), run_name=name, epochs=epochs, model=model,
                       data=data, **settings)
    run_dir = create_run_dir(config)
    run_id = store.add_run(run_dir, config)
    store.begin_attempt(run_id)
    losses = val_losses or [1.0 / (e + 1) for e in range(done)]
    events: list[Event] = [started(run_dir, epochs, t=start_t, gpus=gpus)]
    best = None
    for epoch in range(done):
        is_best = best is None or losses[epoch] < best
        best = min(losses[epoch], best if best is not None else losses[epoch])
        events += epoch_events(epoch, epochs, losses[epoch], start_t + 10 * (epoch + 1), is_best)
    if end == "failed":
        events.append(RunFailed(message="Out of memory on GPU 0.", phase=Phase.TRAINING,
                                error_type="ResourceExhaustedError", t=start_t + 100))
    elif end == "bad data":
        events.append(RunFailed(message="the image b/3.png cannot be decoded",
                                phase=Phase.TRAINING, error_type="DataError",
                                resumable=False, t=start_t + 100))
    elif end is not None:
        events.append(RunFinished(status=end, epochs_done=done, t=start_t + 100))
    recorder = RunRecorder(store, run_id, owns_store=False)
    for event in events:
        recorder.handle(event)
    recorder.flush()
    run_dir.events_jsonl.write_text("".join(e.to_json() + "\n" for e in events))
    if done:  # the worker's backup holds every complete epoch
        run_dir.backup.mkdir()
        ckpt.commit_backup(run_dir.backup, done)
    return store.get(run_id)


@pytest.fixture
def panel(open_runs_panel, store):
    return open_runs_panel(store)


@pytest.fixture
def window(qtbot):
    win = MainWindow(telemetry=TelemetrySource(inventory=NO_GPU))
    qtbot.addWidget(win)
    win.show()
    qtbot.waitUntil(lambda: win.reconciler is None or not win.reconciler.is_running())
    return win


def refresh(qtbot, panel: RunsPanel) -> None:
    """The table as the store stands now (the panel reads it in the background)."""
    with qtbot.waitSignal(panel.refreshed, timeout=5_000):
        panel.refresh()


def cell(panel: RunsPanel, row: int, column: int) -> str:
    return panel.proxy.index(row, column).data()


def test_empty_store_says_what_the_tab_is_for(panel):
    assert panel.stack.currentWidget() is panel.empty_label
    assert "No runs yet" in panel.empty_label.text()
    assert not any(a.isEnabled() for a in panel.actions_by_key.values())


def test_runs_are_listed_newest_first_in_words(qtbot, panel, store, tmp_path):
    record_run(store, tmp_path, "baseline", start_t=1.7e9)
    record_run(store, tmp_path, "wide", done=2, end=RunStatus.STOPPED, start_t=1.7e9 + 60,
               gpus=2, val_losses=[0.5, 0.25])
    record_run(store, tmp_path, "oom", done=1, end="failed", start_t=1.7e9 + 120)
    refresh(qtbot, panel)
    assert panel.stack.currentWidget() is panel.table
    assert [cell(panel, r, Column.NAME) for r in range(3)] == ["oom", "wide", "baseline"]
    assert [cell(panel, r, Column.STATUS) for r in range(3)] == ["Failed", "Stopped",
                                                                 "Completed"]
    assert [cell(panel, r, Column.DEVICES) for r in range(3)] == ["2 CPU replicas", "GPUs 0,1",
                                                                  "2 CPU replicas"]
    assert [cell(panel, r, Column.EPOCHS) for r in range(3)] == ["1/4", "2/4", "4/4"]
    assert cell(panel, 1, Column.BEST) == "val_loss 0.25 (epoch 2)"
    assert "Out of memory" in panel.proxy.index(0, 0).data(3)  # the tooltip says why
    panel.table.sortByColumn(Column.NAME, Qt.SortOrder.AscendingOrder)
    assert [cell(panel, r, Column.NAME) for r in range(3)] == ["baseline", "oom", "wide"]


def test_refresh_keeps_the_selection_and_updates_rows_in_place(qtbot, panel, store, tmp_path):
    first = record_run(store, tmp_path, "a", end=None, done=1)
    record_run(store, tmp_path, "b", start_t=1.7e9 + 5)
    refresh(qtbot, panel)
    panel.select_runs([first.id])
    store.set_status(first.id, RunState.STOPPED)
    refresh(qtbot, panel)
    assert [r.id for r in panel.selected_records()] == [first.id]
    assert panel.selected_records()[0].status is RunState.STOPPED


def test_show_curves_loads_the_stored_series_into_the_plots(qtbot, window, tmp_path):
    with RunStore() as store:
        record = record_run(store, tmp_path, "past", epochs=3, done=3,
                            val_losses=[0.9, 0.4, 0.6])
    panel = window.runs_panel
    refresh(qtbot, panel)
    panel.select_runs([record.id])
    assert panel.show_curves_action.isEnabled()
    with qtbot.waitSignal(panel.show_curves_requested):
        panel.buttons["show"].click()
    x, y = window.curves.series("val_loss")
    assert list(x) == [1.0, 2.0, 3.0] and list(y) == pytest.approx([0.9, 0.4, 0.6])
    assert len(window.curves.series("loss")[0]) == 3 * STEPS
    assert window.curves.best_epoch() == 1
    assert "past" in window.progress.status_label.text()
    assert window.last_run is not None and window.last_run.path == record.run_dir


def test_compare_overlays_one_curve_per_run(qtbot, panel, store, tmp_path):
    a = record_run(store, tmp_path, "a", val_losses=[1.0, 0.5, 0.4, 0.3])
    b = record_run(store, tmp_path, "b", done=2, end=RunStatus.STOPPED, start_t=1.7e9 + 9,
                   val_losses=[0.8, 0.2])
    refresh(qtbot, panel)
    panel.select_runs([a.id])
    assert not panel.compare_action.isEnabled()
    panel.select_runs([a.id, b.id])
    assert panel.compare_action.isEnabled()
    dialog = panel.compare()
    qtbot.addWidget(dialog)
    view = dialog.view
    qtbot.waitUntil(lambda: len(view.runs) == 2)  # read off the GUI thread
    assert view.metric_name() == "val_loss"
    assert len(view.curves) == 2
    assert len(view.legend.items) == 2
    by_label = {c.opts["name"]: c.getData() for c in view.curves}
    xb, yb = by_label["b"]
    assert list(xb) == [1.0, 2.0] and list(yb) == pytest.approx([0.8, 0.2])
    pens = {c.opts["pen"].color().name() for c in view.curves}
    assert len(pens) == 2  # one colour per run
    view.set_metric("val_accuracy")
    assert len(view.curves) == 2 and len(view.legend.items) == 2
    assert list(by_label) != [] and view.plot.getPlotItem().titleLabel.text.startswith(
        "val_accuracy")
    dialog.close()


def test_compare_view_says_which_run_lacks_a_metric(qtbot):
    runs = [ComparedRun("1 a", (0, 1), {"loss": (1.0, 0.5), "val_loss": (1.1, 0.6)}),
            ComparedRun("2 b", (0,), {"loss": (0.9,)})]
    assert metric_choices(runs) == ["val_loss", "loss"]
    view = RunCompareView(runs)
    qtbot.addWidget(view)
    assert len(view.curves) == 1
    assert "2 b" in view.note.text()
    view.log_check.setChecked(True)
    assert len(view.curves) == 1
    view.set_metric("loss")
    assert len(view.curves) == 2 and view.note.text() == ""


def test_delete_asks_naming_the_folder_then_removes_folder_and_row(
        qtbot, panel, store, tmp_path, monkeypatch):
    keep = record_run(store, tmp_path, "keep")
    doomed = record_run(store, tmp_path, "doomed", start_t=1.7e9 + 1)
    (doomed.run_dir / "checkpoints").mkdir()
    (doomed.run_dir / "checkpoints" / "last.keras").write_bytes(b"x" * 1000)
    refresh(qtbot, panel)
    panel.select_runs([doomed.id])
    questions = Questions()
    asked = questions.asked

    questions.answer(monkeypatch, QMessageBox.StandardButton.Cancel)
    panel.buttons["delete"].click()
    assert str(doomed.run_dir) in asked[0]
    assert doomed.run_dir.is_dir() and store.get(doomed.id)

    questions.answer(monkeypatch, QMessageBox.StandardButton.Yes)
    with qtbot.waitSignal(panel.runs_deleted) as deleted, qtbot.waitSignal(panel.refreshed):
        panel.buttons["delete"].click()
    assert [r.id for r in deleted.args[0]] == [doomed.id]
    assert not doomed.run_dir.exists()
    assert [r.id for r in store.runs()] == [keep.id]
    assert [r.id for r in panel.records()] == [keep.id]
    assert panel.wait_for_deletions(10)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "store") == [
        keep.run_dir.name]  # the renamed folder is gone too


def test_delete_refuses_a_live_run(qtbot, panel, store, tmp_path, monkeypatch):
    record = record_run(store, tmp_path, "live", end=None, done=1)
    refresh(qtbot, panel)
    panel.select_runs([record.id])
    monkeypatch.setattr(QMessageBox, "question",
                        lambda *a: pytest.fail("asked to delete a live run"))
    lock = RunLock.acquire(record.run_dir)  # what its worker holds while it runs
    try:
        panel.buttons["delete"].click()
    finally:
        lock.release()
    assert "still running" in panel.message.text()
    assert record.run_dir.is_dir() and store.get(record.id)


def test_reveal_opens_the_run_folder(qtbot, panel, store, tmp_path):
    record = record_run(store, tmp_path, "here")
    opened = []
    panel.open_url = opened.append
    refresh(qtbot, panel)
    panel.select_runs([record.id])
    panel.reveal_action.trigger()
    assert opened == [QUrl.fromLocalFile(str(record.run_dir))]


def test_resume_is_offered_only_for_resumable_idle_runs(qtbot, panel, store, tmp_path):
    completed = record_run(store, tmp_path, "done")
    stopped = record_run(store, tmp_path, "stopped", done=2, end=RunStatus.STOPPED)
    gone = record_run(store, tmp_path, "gone", done=2, end=RunStatus.STOPPED)
    gone.run_dir.rename(gone.run_dir.with_name("elsewhere"))
    refresh(qtbot, panel)

    def resumable(record: RunRecord) -> bool:
        panel.select_runs([record.id])
        refresh(qtbot, panel)  # what the timer and run events do: liveness is checked again
        return panel.resume_action.isEnabled()

    assert not resumable(completed)
    assert "nothing to resume" in panel.resume_action.toolTip()
    assert not resumable(gone)
    assert "folder deleted" in cell(panel, next(
        r for r in range(3) if panel.proxy.index(r, Column.NAME).data().startswith("gone")),
        Column.NAME)
    assert resumable(stopped)
    with qtbot.waitSignal(panel.resume_requested) as asked:
        panel.buttons["resume"].click()
    assert asked.args == [stopped.id]
    lock = RunLock.acquire(stopped.run_dir)
    try:
        assert not resumable(stopped)  # live: its worker (another app's) holds the lock
    finally:
        lock.release()
    panel.set_run_active(True)
    assert not resumable(stopped) and not panel.show_curves_action.isEnabled()
    panel.set_run_active(False)
    assert resumable(stopped)


def test_a_run_that_failed_on_its_data_is_not_offered_for_resume(qtbot, panel, store, tmp_path):
    """A resume would meet the same damaged file: the failure said to start a new run."""
    oom = record_run(store, tmp_path, "oom", done=2, end="failed")
    damaged = record_run(store, tmp_path, "damaged", done=2, end="bad data")
    assert store.get(oom.id).resume_helps and not store.get(damaged.id).resume_helps
    refresh(qtbot, panel)
    panel.select_runs([oom.id])
    assert panel.resume_action.isEnabled()
    panel.select_runs([damaged.id])
    assert not panel.resume_action.isEnabled()
    assert "the same failure" in panel.resume_action.toolTip()
    with pytest.raises(UserError, match="failed for a reason a resume would meet again: "
                                        "the image b/3.png cannot be decoded"):
        prepare_resume(damaged.run_dir, NO_GPU, store)
    store.begin_attempt(damaged.id)  # a resume that went ahead anyway starts afresh
    assert store.get(damaged.id).resume_helps


def test_interrupted_run_is_found_at_start_and_offered(qtbot, tmp_path, monkeypatch):
    with RunStore() as store:
        record = record_run(store, tmp_path, "overnight", epochs=5, done=2, end=None)
        assert store.get(record.id).status is RunState.RUNNING
    window = MainWindow(telemetry=TelemetrySource(inventory=NO_GPU))
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(window.resume_offer.isVisible, timeout=10_000)
    text = window.resume_offer.message.text()
    assert "overnight" in text and "2 of 5 epochs" in text
    assert window.store.get(record.id).status is RunState.INTERRUPTED
    qtbot.waitUntil(lambda: [r.status for r in window.runs_panel.records()] == [
        RunState.INTERRUPTED])
    window.resume_offer.runs_button.click()
    assert window.log.currentWidget() is window.runs_panel
    resumed = []
    monkeypatch.setattr(window.controller, "resume", resumed.append)
    assert window.resume_offer.resume_button.isEnabled()
    window.resume_offer.resume_button.click()
    assert resumed == [record.id]


def test_without_a_store_the_app_says_so_and_still_trains(qtbot, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("MGPU_GUI_STORE", str(blocker / "runs.sqlite3"))
    window = MainWindow(telemetry=TelemetrySource(inventory=NO_GPU))
    qtbot.addWidget(window)
    window.show()
    assert window.store is None and window.controller.store is None
    assert window.banner.isVisible()
    assert "not recorded in the run history" in window.banner.message.text()
    assert "run history is off" in window.runs_panel.empty_label.text()
    qtbot.waitUntil(window.train_action.isEnabled)


def test_status_colours_and_labels_cover_every_state():
    from mgpu_gui.gui.widgets.runs_table import STATUS_TEXT

    assert set(STATUS_TEXT) == set(RunState)
    assert len({color for _, color in STATUS_TEXT.values()}) == len(RunState)


def test_series_x_has_no_duplicate_epochs_after_show_curves(qtbot, window, tmp_path):
    """A run resumed once: the store dropped the redone epoch, so it is drawn once."""
    with RunStore() as store:
        record = record_run(store, tmp_path, "twice", epochs=3, done=2, end=RunStatus.STOPPED)
        recorder = RunRecorder(store, record.id, owns_store=False)
        for event in [started(RunDir(record.run_dir), 3, initial_epoch=1, t=2e9),
                      *epoch_events(1, 3, 0.3, 2e9 + 10, True),
                      *epoch_events(2, 3, 0.2, 2e9 + 20, True),
                      RunFinished(status=RunStatus.COMPLETED, epochs_done=3, t=2e9 + 30)]:
            recorder.handle(event)
        recorder.flush()
    refresh(qtbot, window.runs_panel)
    window.show_run_curves(record.id)
    x, _ = window.curves.series("val_loss")
    assert list(x) == [1.0, 2.0, 3.0]
    assert np.all(np.diff(window.curves.series("loss")[0]) > 0)


def test_data_column_tells_runs_apart_and_long_paths_keep_their_ends(
        qtbot, panel, store, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    deep = tmp_path / "home" / "projects" / ("a-rather-long-folder-name-" * 4) / "digits.npz"
    model = tmp_path / ("models-of-the-spring-experiments-" * 3) / "convnet-wide.keras"
    record_run(store, tmp_path, "demo", start_t=1.7e9)
    record_run(store, tmp_path, "demo", start_t=1.7e9 + 60, data=str(deep), model=str(model),
               gpus=2, done=2, end=RunStatus.EARLY_STOPPED)
    refresh(qtbot, panel)
    assert "Data" in COLUMNS
    data_text = cell(panel, 0, Column.DATA)
    assert data_text == "~/" + str(deep.relative_to(tmp_path / "home"))
    assert cell(panel, 1, Column.DATA) == "Digits (demo)"  # two "demo" runs, told apart
    table, header = panel.table, panel.table.horizontalHeader()
    metrics = table.fontMetrics()
    assert table.textElideMode() is Qt.TextElideMode.ElideMiddle  # the file name stays
    for column, full in ((Column.DATA, str(deep)), (Column.MODEL, str(model))):
        assert header.sectionSize(column) < metrics.horizontalAdvance(cell(panel, 0, column))
        assert full in panel.proxy.index(0, column).data(Qt.ItemDataRole.ToolTipRole)
    for column in (Column.STATUS, Column.STARTED, Column.DEVICES, Column.EPOCHS, Column.BEST,
                   Column.SIZE):
        assert header.sectionSize(column) >= table.sizeHintForColumn(column), COLUMNS[column]
    assert header.length() <= table.viewport().width()  # the whole row, no sideways scroll
    assert header.sectionSize(Column.STATUS) > metrics.horizontalAdvance("Early stopped")
    store.set_status(store.runs()[1].id, RunState.INTERRUPTED)  # a longer word arrives
    refresh(qtbot, panel)
    assert header.sectionSize(Column.STATUS) >= table.sizeHintForColumn(Column.STATUS)
    assert header.sectionSize(Column.STATUS) > metrics.horizontalAdvance("Interrupted")
    panel.resize(4000, 260)  # room enough: the paths whole
    qtbot.waitUntil(lambda: header.sectionSize(Column.DATA) >= table.sizeHintForColumn(
        Column.DATA))
    assert header.sectionSize(Column.MODEL) >= table.sizeHintForColumn(Column.MODEL)


@pytest.mark.parametrize("end, done, state, percent", [
    (RunStatus.STOPPED, 7, "stopped", 70), (RunStatus.COMPLETED, 10, "completed", 100),
    ("failed", 3, "failed", 30)])
def test_a_reopened_run_shows_its_real_progress(window, tmp_path, end, done, state, percent):
    with RunStore() as store:
        record = record_run(store, tmp_path, "reopened", epochs=10, done=done, end=end)
    window.show_run_curves(record.id)
    progress = window.progress
    assert progress.epoch_label.text() == f"Epoch {done}/10"
    assert progress.total_bar.value() == percent * BAR_MAX // 100
    assert progress.total_bar.text().startswith(f"{percent}%")
    assert f"{done} of 10 epochs" in progress.total_bar.text()
    assert progress.total_eta_label.text() == state
    assert "reopened" in progress.status_label.text()


def test_the_progress_bars_survive_any_splitter_drag(qtbot, window):
    window.resize(1280, 720)
    lower, progress = window.lower_splitter, window.progress
    assert lower.handleWidth() >= 6
    qtbot.waitUntil(lambda: progress.epoch_bar.height() > 0)
    for handle, position in ((2, 0), (1, 0), (1, 10_000), (2, 10_000), (1, 10_000)):
        lower.moveSplitter(position, handle)  # what a drag to the window's edge does
        for bar in (progress.epoch_bar, progress.total_bar):
            assert bar.isVisible() and not bar.visibleRegion().isEmpty(), (handle, position)
            assert bar.height() >= bar.minimumSizeHint().height()
        # The tabs fold to their bar at most (issue 30: the plots are served first).
        assert window.log.height() >= lower.folded_height() > 0
        assert window.log.tabBar().isVisible() and not window.log.tabBar().visibleRegion(
        ).isEmpty()
        assert all(lower.handle(i).height() >= 6 for i in (1, 2))


def test_at_1280x720_the_runs_tab_shows_every_column_without_a_sideways_scroll(
        qtbot, window, tmp_path):
    """Typical rows: tagged demo runs with a best metric and a size (the README's picture)."""
    with RunStore() as store:
        for i, name in enumerate(("baseline", "lr-3e-3", "lr-1e-2-b32")):
            record = record_run(store, tmp_path, name, start_t=1.7e9 + i, epochs=6, done=6,
                                val_losses=[0.5, 0.3, 0.2, 0.15, 0.1, 0.06705 + i / 100])
            store.set_tags(record.id, ["digits", "lr-sweep", "best"][:i + 1])
    window.resize(1280, 720)
    window.log.setCurrentWidget(window.runs_panel)
    refresh(qtbot, window.runs_panel)
    table = window.runs_panel.table
    qtbot.waitUntil(lambda: table.horizontalHeader().length() <= table.viewport().width())
    assert not table.horizontalScrollBar().isVisible()
    assert cell(window.runs_panel, 0, Column.NAME) == "lr-1e-2-b32"
