"""Notices: one notifier says that an export finished, a queued run started or a run ended,
on screen whichever tab is showing, without taking focus or covering Train.

No TensorFlow and no child processes: the sources' signals carry what their jobs
report (the real export is in test_main_window.py).
"""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtWidgets import QApplication, QToolBar, QWidget

from mgpu_gui.core.children.supervisor import RunOutcome
from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState
from mgpu_gui.core.events import EpochEnd, RunFinished, RunStarted, RunStatus
from mgpu_gui.core.runs.folder import RunDir, create_run_dir
from mgpu_gui.core.runs.lock import RunLock
from mgpu_gui.core.runs.queue import JobQueue
from mgpu_gui.core.runs.store import RunState
from mgpu_gui.gui.jobs.telemetry_source import TelemetrySource
from mgpu_gui.gui.main_window import MainWindow
from mgpu_gui.gui.run_notices import run_end_notice
from mgpu_gui.gui.widgets import notifier as notifier_module
from mgpu_gui.gui.widgets.notifier import Notice, NoticeKind

NO_GPU = GpuInventory(state=NvmlState.NO_DRIVER, message="No NVIDIA driver found (test).")


@pytest.fixture
def window(qtbot):
    win = MainWindow(telemetry=TelemetrySource(inventory=NO_GPU))
    qtbot.addWidget(win)
    win.resize(1280, 720)
    win.show()
    qtbot.waitUntil(lambda: win.reconciler is None or not win.reconciler.is_running())
    win.log.setCurrentWidget(win.runs_panel)  # not the Log tab, where messages go anyway
    return win


def on_screen(win: MainWindow, widget: QWidget) -> QRect:
    return QRect(widget.mapTo(win, QPoint(0, 0)), widget.size())


def assert_shown(win: MainWindow, kind: NoticeKind, title: str, *words: str) -> None:
    toast = win.notifier.toast
    assert toast.isVisible() and toast.is_fading()
    assert (toast.kind, toast.title.text()) == (kind, title)
    assert all(word in toast.text.text() for word in words), toast.text.text()
    assert title in win.statusBar().currentMessage()
    assert win.log.currentWidget() is win.runs_panel  # nothing switched tabs to say it
    area = win.rect()
    assert area.contains(on_screen(win, toast))
    toolbar = win.findChild(QToolBar, "runToolbar")
    assert not on_screen(win, toast).intersects(on_screen(win, toolbar))  # Train stays free


def test_export_done_and_failed_are_said_over_any_tab(qtbot, window):
    focused = QApplication.focusWidget()
    heard = []
    window.notifier.noticed.connect(heard.append)
    window.exporter.finished.emit(
        True, "Exported keras model: /tmp/a/very/long/folder/that/goes/on/and/on/and/on/"
              "model.keras (reloaded in a fresh process, max prediction difference 0)")
    assert_shown(window, NoticeKind.DONE, "Export finished", "Exported keras model:",
                 "model.keras")  # the long path is elided in the middle: its end stays
    assert on_screen(window, window.curves).contains(on_screen(window, window.notifier.toast))
    assert QApplication.focusWidget() is focused  # the toast took no focus
    window.exporter.finished.emit(False, "The disk is full: free some space.")
    assert_shown(window, NoticeKind.FAILED, "Export failed", "The disk is full")
    assert window.banner.isVisible()  # a failure also stays in the banner
    assert [n.kind for n in heard] == [NoticeKind.DONE, NoticeKind.FAILED]  # for other sinks


def test_the_window_s_run_ending_is_said(qtbot, window, tmp_path):
    run_dir = create_run_dir(RunConfig(output_dir=str(tmp_path), run_name="night", epochs=10))
    window.last_run = run_dir
    begun = RunStarted(
        run_dir=str(run_dir.path), device_kind="cpu", devices=[], device_names=[],
        num_replicas=2, batch_per_replica=32, global_batch=64, train_samples=640,
        val_samples=0, test_samples=0, steps_per_epoch=10, dropped_per_epoch=0, epochs=10,
        initial_epoch=0, model_name="m", params=1, cross_device_ops="", tf_version="",
        keras_version="")
    epochs = [EpochEnd(epoch=e, epochs=10, metrics={"loss": 1.0}, samples_per_s=1.0,
                       duration_s=1.0) for e in range(7)]
    window.controller.finished.emit(RunOutcome(
        RunStatus.STOPPED, "", events=[begun, *epochs,
                                       RunFinished(status=RunStatus.STOPPED, epochs_done=7)]))
    assert_shown(window, NoticeKind.INFO, "Run stopped", "night", "7 of 10 epochs")
    window.controller.finished.emit(RunOutcome(
        RunStatus.FAILED, "Out of memory on GPU 0.\nTraceback ...", events=[begun, *epochs]))
    assert_shown(window, NoticeKind.FAILED, "Run failed", "night", "after 7 of 10 epochs",
                 "Out of memory on GPU 0.")


def test_a_queued_run_starting_is_said_once(qtbot, window, tmp_path):
    queue = JobQueue(window.store)
    config = RunConfig(output_dir=str(tmp_path), run_name="later", epochs=3)
    job = queue.add(config, NO_GPU)
    window.queue_panel.refresh()
    assert not window.notifier.toast.isVisible()  # queued, not started
    run_id = window.store.add_run(create_run_dir(config), config)
    queue.mark_started(job.id, run_id)
    with qtbot.waitSignal(window.notifier.noticed) as heard:
        window.queue_panel.refresh()  # what its timer does every few seconds
    assert heard.args[0].title == "Queued run started"
    assert_shown(window, NoticeKind.INFO, "Queued run started", f"Job {job.id}", "later")
    heard_again = []
    window.notifier.noticed.connect(heard_again.append)
    window.queue_panel.refresh()
    assert heard_again == []


def test_a_queued_run_s_start_leaves_the_status_bar_when_the_run_ends(qtbot, window, tmp_path):
    """Issue 30, item 9: "Queued run started: Job 2 (lr2-t2)" stayed after the queue was
    done; a line said since stays."""
    queue = JobQueue(window.store)
    ended = []
    window.queue_panel.job_ended.connect(ended.append)

    def start_and_end(name: str, said_between: Notice | None = None) -> str:
        config = RunConfig(output_dir=str(tmp_path), run_name=name, epochs=3)
        job = queue.add(config, NO_GPU)
        run_id = window.store.add_run(create_run_dir(config), config)
        queue.mark_started(job.id, run_id)
        window.queue_panel.refresh()
        assert window.statusBar().currentMessage().startswith(f"Queued run started: Job {job.id}")
        window.queue_panel.refresh()  # still running: still true
        if said_between is not None:
            window.notifier.notify(said_between)
        recorder = window.store.recorder(run_id)
        recorder.handle(RunFinished(status=RunStatus.COMPLETED, epochs_done=3))
        recorder.close()
        window.queue_panel.refresh()
        assert ended.pop().id == job.id and ended == []
        return window.statusBar().currentMessage()

    assert start_and_end("first") == ""
    exported = Notice(NoticeKind.DONE, "Export finished", "model.keras")
    assert start_and_end("second", exported) == exported.line


def test_a_followed_run_ending_is_said(qtbot, window, tmp_path):
    config = RunConfig(output_dir=str(tmp_path), run_name="queued", epochs=4)
    run_dir = create_run_dir(config)
    run_id = window.store.add_run(run_dir, config)
    lock = RunLock.acquire(run_dir.path)  # what its worker (the queue's) holds while it runs
    try:
        window.show_run_curves(run_id)
        assert window.follower.following
        recorder = window.store.recorder(run_id)
        recorder.handle(RunFinished(status=RunStatus.COMPLETED, epochs_done=4))
        recorder.close()
        qtbot.waitUntil(lambda: not window.follower.following, timeout=5_000)
    finally:
        lock.release()
    assert_shown(window, NoticeKind.DONE, "Run completed", "queued", "4 of 4 epochs")
    assert window.store.get(run_id).status is RunState.COMPLETED


def test_the_toast_fades_and_passes_clicks_through(qtbot, window, monkeypatch):
    monkeypatch.setattr(notifier_module, "SHOW_MS", 10)
    toast = window.notifier.toast
    window.notifier.notify(Notice(NoticeKind.INFO, "Hello", "world"))
    assert toast.testAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
    assert toast.focusPolicy() is Qt.FocusPolicy.NoFocus
    qtbot.waitUntil(lambda: not toast.isVisible(), timeout=3_000)
    assert not toast.is_fading()
    assert "Hello: world" in window.statusBar().currentMessage()  # the line stays


@pytest.mark.parametrize("status, title", [
    (RunStatus.COMPLETED, "Run completed"), (RunStatus.EARLY_STOPPED, "Run stopped early"),
    (RunStatus.STOPPED, "Run stopped"), (RunStatus.FAILED, "Run failed"),
    ("interrupted", "Run interrupted")])
def test_run_end_notices_name_the_run_and_its_epochs(status, title):
    notice = run_end_notice("wide", status, 3, 8, "Disk full.\nmore")
    assert notice.title == title and "wide" in notice.text and "3 of 8 epochs" in notice.text
    assert "more" not in notice.text  # one line of the reason; the banner has the rest


def test_run_dir_name_loses_its_date_stamp(tmp_path):
    from mgpu_gui.gui.run_notices import outcome_notice

    run_dir = RunDir(tmp_path / "20250101-120000-demo")
    notice = outcome_notice(run_dir, RunOutcome(RunStatus.COMPLETED, ""))
    assert notice.text == "demo: all epochs"
