"""The Runs tab's notes, tags and search, and its history read off the GUI thread.

Stores are filled as the supervisor fills them (test_runs_panel.record_run); no TensorFlow.
"""

from __future__ import annotations

import sqlite3
import threading

import pytest
from PySide6.QtCore import Qt

from mgpu_gui.core.events import RunStatus
from mgpu_gui.core.runs.store import RunStore
from mgpu_gui.gui.panels.runs import RunsPanel
from mgpu_gui.gui.widgets.runs_table import Column
from tests.test_runs_panel import record_run, refresh


@pytest.fixture
def runs(store, tmp_path):
    """baseline (tagged, with a note), wide (tagged), oom (failed), newest last."""
    base = record_run(store, tmp_path, "baseline", start_t=1.7e9)
    store.tag(base.id, ["baseline", "lr-sweep"])
    store.set_note(base.id, "lr 1e-3, no warm-up\nsecond line")
    wide = record_run(store, tmp_path, "wide", start_t=1.7e9 + 60, gpus=2, done=2,
                      end=RunStatus.STOPPED)
    store.tag(wide.id, ["baseline"])
    oom = record_run(store, tmp_path, "oom", start_t=1.7e9 + 120, done=1, end="failed")
    return {"baseline": base.id, "wide": wide.id, "oom": oom.id}


@pytest.fixture
def panel(open_runs_panel, store, runs):
    return open_runs_panel(store, 1000, 300)


def shown(panel: RunsPanel) -> list[str]:
    return [panel.proxy.index(r, Column.NAME).data() for r in range(panel.proxy.rowCount())]


def test_tags_have_a_column_and_the_note_is_in_the_tooltips(panel, runs):
    assert shown(panel) == ["oom", "wide", "baseline"]
    assert [panel.proxy.index(r, Column.TAGS).data() for r in range(3)] == [
        "", "baseline", "baseline, lr-sweep"]
    for column in (Column.NAME, Column.TAGS):
        tip = panel.proxy.index(2, column).data(Qt.ItemDataRole.ToolTipRole)
        assert "Tags: baseline, lr-sweep" in tip and "lr 1e-3, no warm-up\nsecond line" in tip


def test_the_search_box_filters_by_tag_status_and_text(qtbot, panel, runs):
    search, matches = panel.search_bar.edit, panel.search_bar.matches
    assert not matches.isVisible()
    for text, names in (("tag:baseline", ["wide", "baseline"]),
                        ("tag:baseline status:stopped", ["wide"]),
                        ("status:failed", ["oom"]),
                        ("warm-up", ["baseline"]),  # in a note
                        ("lr-sweep", ["baseline"]),  # a tag, as a plain word
                        ('note:"no warm"', ["baseline"]),
                        ("nothing-like-this", [])):
        search.setText(text)
        assert shown(panel) == names, text
        assert matches.isVisible() and matches.text() == f"{len(names)} of 3 runs"
    search.setText("")
    assert shown(panel) == ["oom", "wide", "baseline"] and not matches.isVisible()
    panel.select_runs([runs["oom"]])
    assert panel.notes_action.isEnabled()
    search.setText("tag:baseline")  # the selected run is filtered out: not acted on
    assert panel.selected_records() == [] and not panel.notes_action.isEnabled()
    refresh(qtbot, panel)  # new rows keep the search
    assert shown(panel) == ["wide", "baseline"]


def test_the_note_and_tags_dialog_saves_both_and_completes_tags(qtbot, panel, store, runs):
    panel.select_runs([runs["oom"]])
    panel.buttons["notes"].click()
    [dialog] = [d for d in panel._dialogs if d.isVisible()]
    assert dialog.windowTitle() == "Note and tags of oom"
    assert dialog.note.toPlainText() == "" and dialog.tags.text() == ""
    dialog.note.setPlainText("  out of memory at batch 256\nhalve it  ")
    qtbot.keyClicks(dialog.tags, "oom, BAS")
    assert dialog.completer.completionCount() == 1  # the others' tags, any case
    assert dialog.completer.currentCompletion() == "baseline"
    popup = dialog.completer.popup()
    assert popup.isVisible()
    qtbot.keyClick(popup, Qt.Key.Key_Down)
    qtbot.keyClick(popup, Qt.Key.Key_Return)  # chosen: it replaces the word typed
    assert dialog.tags.text() == "oom, baseline, " and not popup.isVisible()
    assert dialog.isVisible()  # the Return chose the tag; it did not save yet
    with qtbot.waitSignal(panel.refreshed):
        dialog.accept()
    record = store.get(runs["oom"])
    assert record.note == "out of memory at batch 256\nhalve it"
    assert record.tags == ("baseline", "oom")
    assert panel.proxy.index(0, Column.TAGS).data() == "baseline, oom"

    panel.select_runs([runs["oom"]])
    dialog = panel.edit_notes()
    assert dialog.tags.text() == "baseline, oom"  # as stored, to edit
    dialog.tags.setText("")
    dialog.note.setPlainText("")
    dialog.reject()  # Cancel: nothing changes
    assert store.get(runs["oom"]).tags == ("baseline", "oom")
    dialog = panel.edit_notes()
    dialog.tags.setText("")
    dialog.note.setPlainText("")
    with qtbot.waitSignal(panel.refreshed):
        dialog.accept()
    assert store.get(runs["oom"]).tags == () and store.get(runs["oom"]).note == ""


def test_a_run_deleted_while_its_dialog_was_open_is_said_not_raised(qtbot, panel, store,
                                                                   runs):
    panel.select_runs([runs["oom"]])
    dialog = panel.edit_notes()
    store.delete(runs["oom"])  # another window, the CLI
    dialog.note.setPlainText("too late")
    with qtbot.waitSignal(panel.refreshed):
        dialog.accept()
    assert f"no run {runs['oom']}" in panel.message.text() and panel.message.isVisible()
    assert shown(panel) == ["wide", "baseline"]


def test_the_history_is_read_off_the_gui_thread(qtbot, panel, store, runs, monkeypatch):
    reading, release, readers = threading.Event(), threading.Event(), []
    original = RunStore.runs

    def slow_runs(self):
        readers.append(threading.current_thread())
        reading.set()
        release.wait(5)
        return original(self)

    monkeypatch.setattr(RunStore, "runs", slow_runs)
    panel.refresh()  # returns at once while the read waits
    assert reading.wait(5)
    store.set_note(runs["wide"], "written while a read was under way")
    panel.refresh()
    panel.refresh()  # asked twice more during the read: one more read, after it
    with qtbot.waitSignal(panel.refreshed) as delivered:
        release.set()
    assert threading.main_thread() not in readers
    assert len(readers) == 2  # the one under way, and one for both later requests
    # Only the read begun after the last request is shown: it has the new note.
    assert [r.note for r in delivered.args[0] if r.id == runs["wide"]] == [
        "written while a read was under way"]

    def broken(self):
        raise sqlite3.OperationalError("database disk image is malformed")

    monkeypatch.setattr(RunStore, "runs", broken)
    panel.refresh()
    qtbot.waitUntil(panel.message.isVisible)
    assert "Could not read the run history: database disk image is malformed" in (
        panel.message.text())
    assert shown(panel) == ["oom", "wide", "baseline"]  # the rows read before stay
