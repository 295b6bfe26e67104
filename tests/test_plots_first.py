"""The plots are served first under the curves (issue 30, item 2): on a laptop screen the
tabs start folded to their bar; a tab click opens them, a click on the open tab folds them,
and the user's sizes come back with the window."""

from __future__ import annotations

import pyqtgraph as pg
import pytest


@pytest.fixture
def sized(qtbot):
    """A new main window (no driver) shown at a given size: its first sizes are for it."""
    from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState
    from mgpu_gui.gui.jobs.telemetry_source import TelemetrySource
    from mgpu_gui.gui.main_window import MainWindow

    made = []

    def make(width: int, height: int) -> MainWindow:
        window = MainWindow(telemetry=TelemetrySource(inventory=GpuInventory(
            NvmlState.NO_DRIVER, message="No NVIDIA driver found (test).")))
        qtbot.addWidget(window)
        window.resize(width, height)
        window.show()
        qtbot.waitUntil(lambda: window.lower_splitter.height() > 0)
        made.append(window)
        return window

    yield make
    for window in made:
        window.close()


def data_heights(window) -> list[float]:
    return [w.getPlotItem().getViewBox().height()
            for w in window.curves.findChildren(pg.PlotWidget) if w.isVisible()]


def test_on_a_short_window_the_tabs_fold_and_the_plots_keep_their_height(qtbot, sized):
    """At the window's minimum height here (700; a 1024x576 screen is checked by
    tests/test_layout.py, whose screens are configured), opened tabs would leave the
    plots less than 120 px of data each."""
    window = sized(1024, 700)
    lower, tabs = window.lower_splitter, window.log
    assert lower.is_folded()
    qtbot.waitUntil(lambda: min(data_heights(window)) >= 120)
    assert tabs.tabBar().isVisible() and len(data_heights(window)) == 5
    tabs.tabBarClicked.emit(tabs.indexOf(window.runs_panel))
    tabs.setCurrentWidget(window.runs_panel)
    qtbot.waitUntil(lambda: not lower.is_folded())
    assert tabs.height() >= tabs.minimumSizeHint().height()  # the Runs table fits
    tabs.tabBarClicked.emit(tabs.currentIndex())  # the open current tab: fold
    qtbot.waitUntil(lower.is_folded)


def test_a_tall_window_opens_the_tabs_and_remembers_the_users_sizes(qtbot, sized):
    from mgpu_gui.gui.widgets.plots_first import PlotsFirstSplitter

    window = sized(1400, 1000)
    lower = window.lower_splitter
    qtbot.waitUntil(lambda: min(data_heights(window)) >= 120)
    assert not lower.is_folded()
    lower.fold()
    saved = lower.save_state()
    again = PlotsFirstSplitter(pg.PlotWidget(), pg.PlotWidget(), type(window.log)(),
                               lambda: 0)
    again.restore_state(saved)
    again.resize(400, lower.height())
    again.show()
    qtbot.addWidget(again)
    qtbot.waitUntil(again.is_folded)  # restored: not opened by the first show


def rows_in_view(table) -> int:
    return table.viewport().height() // table.verticalHeader().defaultSectionSize()


def test_the_tabs_expand_over_the_curves_for_a_long_runs_table(qtbot, sized, tmp_path):
    """Issue 30, item 7: at 1280x720 at 125 % (1024x576 logical) an opened Runs tab showed
    about 5 rows and squeezed the plots to 65 px. There a tab opens expanded over the
    curves; a click on it, or a past run shown, brings the curves back as they were. On a
    taller window, opened tabs keep the plots readable and the button expands them."""
    from mgpu_gui.core.config import RunConfig
    from mgpu_gui.core.runs.folder import create_run_dir

    window = sized(1024, 576)
    lower, table, tabs = window.lower_splitter, window.runs_panel.table, window.log
    assert lower.is_folded()
    tabs.setCurrentWidget(window.runs_panel)
    qtbot.waitUntil(lambda: rows_in_view(table) >= 15)
    assert lower.is_expanded() and lower.expand_button.text() == "Restore"
    assert not window.curves_slot.isVisible() and not window.progress.isVisible()
    expanded = rows_in_view(table)
    tabs.setCurrentIndex(0)  # another tab: still expanded
    assert lower.is_expanded()
    tabs.tabBarClicked.emit(tabs.currentIndex())  # the current tab: the curves back, folded
    assert not lower.is_expanded() and lower.is_folded() and window.curves_slot.isVisible()
    qtbot.waitUntil(lambda: min(data_heights(window)) >= 120)
    config = RunConfig(output_dir=str(tmp_path))
    run_id = window.store.add_run(create_run_dir(config), config)
    lower.expand_button.click()
    assert lower.is_expanded()
    window.show_run_curves(run_id)  # as a double-click on its row does
    assert not lower.is_expanded() and window.curves_slot.isVisible()

    tall = sized(1400, 1000)
    tall.log.setCurrentWidget(tall.runs_panel)
    qtbot.waitUntil(lambda: not tall.lower_splitter.is_folded())
    assert not tall.lower_splitter.is_expanded()
    qtbot.waitUntil(lambda: min(data_heights(tall)) >= 120)
    opened = rows_in_view(tall.runs_panel.table)
    tall.lower_splitter.expand_button.click()
    qtbot.waitUntil(lambda: rows_in_view(tall.runs_panel.table) > 2 * opened)
    print(f"Runs rows in view: {expanded} at 1024x576 (a tab opens expanded); at 1400x1000 "
          f"{opened} opened, {rows_in_view(tall.runs_panel.table)} expanded")
