"""The GPU panel fed by a fake NVML (two GPUs, or eight from the file fake), and the no-driver
state with the real pynvml."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest
from PySide6.QtWidgets import QWidget

from mgpu_gui.core.config import DeviceKind, DeviceSelection
from mgpu_gui.core.devices.nvml import NA, GpuInventory, NvmlSession, NvmlState, query_inventory
from mgpu_gui.core.devices.plan import plan_devices
from mgpu_gui.core.devices.telemetry import take_snapshots
from mgpu_gui.core.runs.claims import DeviceUse
from mgpu_gui.gui.panels.gpus import MIN_SHOWN_GPUS, SHOWN_GPUS, GpuPanel
from mgpu_gui.testing.fake_pynvml import UUID0, UUID1, GiB, from_file
from tests.helpers.gpu_rows import rows_in_view


@pytest.fixture
def panel(qtbot, session):
    panel = GpuPanel(query_inventory(session))
    qtbot.addWidget(panel)
    return panel


def feed(panel: GpuPanel, session: NvmlSession) -> None:
    panel.update_snapshots(take_snapshots(session, panel.inventory.gpus))


def test_rows_show_every_reading(panel, session):
    feed(panel, session)
    row = panel._rows[0]
    assert row.check.text() == "0  H100 80GB HBM3" and row.check.isChecked()
    assert row.utilization.text == "97%" and row.utilization.fraction == pytest.approx(0.97)
    assert row.memory.text == "61.0/80.0 GiB"
    assert row.stats.text() == "71°C  312/700 W"
    assert row.detail.text() == "P0  fan 55%"
    assert row.memory_busy.text() == "busy 41%"
    assert "pid 4242 (60.0 GiB)" in row.processes.text()
    assert panel.header.text().startswith("<b>GPUs</b> · 2 found · driver 550.54.15")


def test_unsupported_field_shows_na_and_the_rest_still_updates(panel, nvml, session):
    nvml.gpus[1].errors["nvmlDeviceGetFanSpeed"] = "NVMLError_NotSupported"
    nvml.gpus[1].errors["nvmlDeviceGetUtilizationRates"] = "NVMLError_NotSupported"
    feed(panel, session)
    row = panel._rows[1]
    assert row.detail.text() == f"P2  fan {NA}"
    assert row.utilization.text == NA and row.utilization.fraction is None
    assert row.memory_busy.text() == f"busy {NA}"
    assert row.memory.text == "12.0/80.0 GiB"


def test_lost_gpu_shows_na_and_a_warning(panel, nvml, session):
    feed(panel, session)
    nvml.gpus[0].lost = True
    feed(panel, session)
    row = panel._rows[0]
    assert row.utilization.text == "lost" and row.memory.text == NA
    assert row.stats.text() == NA and row.detail.text() == NA
    assert "GPU lost" in row.processes.text()
    assert "GPU 0 (H100 80GB HBM3) is lost" in panel.warning.text()
    assert panel._rows[1].utilization.text == "3%"  # the other GPU carries on
    nvml.gpus[0].lost = False  # back (after a reset): the row recovers
    feed(panel, session)
    assert row.utilization.text == "97%" and "lost" not in panel.warning.text()


def test_foreign_process_on_a_checked_gpu_warns_and_own_pid_is_highlighted(panel, session):
    panel.set_own_pids({4242})
    feed(panel, session)
    assert [g.index for g in panel.checked_gpus()] == [0]  # the first choice left GPU 1 out
    panel.set_checked([0, 1])
    assert not panel.warning.isHidden()
    assert panel.warning.text() == (
        "⚠ GPU 1 (H100 80GB HBM3) is busy with another process: pid 5151 (11.0 GiB). "
        "Training there shares its compute and memory.")
    own = panel._rows[0].processes.text()
    assert own == "<b style='color:#1a7f37'>pid 4242 (60.0 GiB) · this run</b>"
    assert "this run" not in panel._rows[1].processes.text()
    panel.set_checked([0])  # the busy GPU unchecked: nothing to warn about
    assert panel.warning.isHidden()


def test_own_pid_alone_gives_no_warning_and_unknown_pids_warn(panel, nvml, session):
    nvml.gpus[1].processes = []
    feed(panel, session)
    assert "pid 4242" in panel.warning.text()  # not ours yet: someone else's
    panel.set_own_pids([4242])
    assert panel.warning.isHidden() and panel.warning.text() == ""
    assert "no compute processes" in panel._rows[1].processes.text()


def test_least_busy_picks_lowest_utilization_then_least_memory(qtbot, nvml, session):
    nvml.gpus.append(dataclasses.replace(nvml.gpus[1], uuid="GPU-3", utilization=3,
                                         memory_used=2 * GiB, processes=[]))
    nvml.gpus.append(dataclasses.replace(nvml.gpus[1], uuid="GPU-4", utilization=50))
    panel = GpuPanel(query_inventory(session))
    qtbot.addWidget(panel)
    feed(panel, session)
    assert panel.least_busy_count.maximum() == 4
    panel.set_checked([0, 1, 2, 3])  # the first choice left the busy ones out
    # GPU 1 and 2 tie at 3%: GPU 2 uses less memory
    with qtbot.waitSignal(panel.selection_changed):
        assert panel.use_least_busy(1) == [2]
    assert [g.index for g in panel.checked_gpus()] == [2]
    panel.least_busy_count.setValue(3)
    with qtbot.waitSignal(panel.selection_changed):
        panel.least_busy_button.click()
    assert [g.index for g in panel.checked_gpus()] == [1, 2, 3]
    nvml.gpus[2].lost = True  # a lost GPU counts as busiest
    feed(panel, session)
    assert panel.use_least_busy(3) == [0, 1, 3]


def test_device_selection_and_replicas(qtbot, panel, session):
    assert panel.device_selection() == DeviceSelection(kind=DeviceKind.GPU,
                                                       gpus=(UUID0, UUID1))
    assert panel.replicas() == 2
    with qtbot.waitSignal(panel.selection_changed):
        panel._rows[0].check.click()
    assert panel.device_selection() == DeviceSelection(kind=DeviceKind.GPU, gpus=(UUID1,))
    assert panel.replicas() == 1
    plan = plan_devices(panel.device_selection(), panel.inventory)
    assert plan.env["CUDA_VISIBLE_DEVICES"] == UUID1
    panel._rows[1].check.click()
    assert panel.replicas() == 0
    assert panel.device_selection().replicas == 0  # planning refuses it, never "all GPUs"
    assert "No GPU checked" in panel.warning.text()


def test_locked_during_a_run(panel):
    panel.set_enabled_for_run(False)
    assert not any(r.check.isEnabled() for r in panel._rows)
    assert not panel.least_busy_button.isEnabled() and not panel.least_busy_count.isEnabled()
    panel.set_enabled_for_run(True)
    assert all(r.check.isEnabled() for r in panel._rows)


def test_no_driver_shows_the_reason_and_cpu_replicas(qtbot):
    inventory = query_inventory()  # the real pynvml: this machine has no driver
    if inventory.state is NvmlState.OK:
        pytest.skip("this machine has an NVIDIA driver")
    panel = GpuPanel(inventory)
    qtbot.addWidget(panel)
    panel.show()
    assert panel.reason.isVisible() and panel.cpu_replicas.isVisible()
    assert panel.reason.text() == inventory.message
    assert "training will run on CPU replicas" in panel.reason.text()
    assert panel.device_selection() == DeviceSelection(kind=DeviceKind.CPU, replicas=2)
    with qtbot.waitSignal(panel.selection_changed):
        panel.cpu_replicas.setValue(4)
    assert panel.replicas() == 4
    assert plan_devices(panel.device_selection(), inventory).replicas == 4
    panel.set_enabled_for_run(False)
    assert not panel.cpu_replicas.isEnabled()


def test_more_cpu_replicas_than_cores_warns_with_the_core_count(qtbot, monkeypatch):
    monkeypatch.setattr("mgpu_gui.gui.panels.gpus.usable_cores", lambda: 2)
    panel = GpuPanel(GpuInventory(NvmlState.NO_DRIVER))
    qtbot.addWidget(panel)
    panel.show()
    assert not panel.cpu_warning.isVisible()
    panel.cpu_replicas.setValue(64)
    assert panel.cpu_warning.isVisible()
    assert panel.cpu_warning.text().startswith("⚠ 64 CPU replicas on 2 cores")
    panel.cpu_replicas.setValue(2)
    assert not panel.cpu_warning.isVisible()


def test_before_the_gpus_are_listed(qtbot, session):
    panel = GpuPanel()
    qtbot.addWidget(panel)
    assert panel.header.text() == "Looking for GPUs…"
    assert panel.device_selection() == DeviceSelection() and panel.replicas() == 0
    with qtbot.waitSignal(panel.selection_changed):
        panel.set_inventory(query_inventory(session))
    assert panel.replicas() == 2


def test_interactive_widgets_have_accessible_names_and_tooltips(panel):
    row = panel._rows[0]
    for widget in (row.check, panel.least_busy_count, panel.least_busy_button,
                   panel.cpu_replicas, row.sparkline, row.more):
        assert widget.accessibleName() and widget.toolTip()
    assert "memory controller busy" in row.memory_busy.toolTip().lower()


def test_a_thousand_updates_are_fast_and_rebuild_nothing(qtbot, panel, session):
    panel.show()
    qtbot.waitExposed(panel)
    base = take_snapshots(session, panel.inventory.gpus)
    widgets_before = panel.findChildren(QWidget)
    rows_before = [list(r.widgets()) for r in panel._rows]
    start = time.perf_counter()
    for i in range(1000):
        panel.update_snapshots([
            dataclasses.replace(s, timestamp=1000.0 + i, utilization_gpu=i % 101,
                                memory_used=(i % 80) * GiB) for s in base])
        if i % 50 == 0:
            qtbot.wait(0)  # let some paints happen, as a live window would
    elapsed = time.perf_counter() - start
    assert elapsed < 3.0, f"1000 updates took {elapsed:.2f} s"
    assert panel.findChildren(QWidget) == widgets_before
    assert [list(r.widgets()) for r in panel._rows] == rows_before
    assert panel._rows[0].sparkline.point_count() == 121  # the last two minutes


def test_source_feeds_the_panel(qtbot, nvml):
    from mgpu_gui.gui.jobs.telemetry_source import TelemetrySource

    source = TelemetrySource(nvml, interval_s=0.01)
    panel = GpuPanel()
    qtbot.addWidget(panel)
    source.inventory_changed.connect(panel.set_inventory)
    source.snapshots.connect(panel.update_snapshots)
    source.start()
    try:
        qtbot.waitUntil(lambda: bool(panel._rows) and panel._rows[0].utilization.text == "97%",
                        timeout=5000)
    finally:
        source.stop()
    assert panel.replicas() == 2


def test_many_gpus_scroll_and_share_one_busy_line(qtbot, nvml, session):
    """Ten GPUs, all busy: the panel asks room for eight rows and keeps four (the rest
    scroll, never sideways); all stay ticked (nothing is free), one warning line names them."""
    nvml.gpus[:] = [dataclasses.replace(nvml.gpus[1], uuid=f"GPU-{i}", processes=[(6000 + i, GiB)])
                    for i in range(10)]
    panel = GpuPanel(query_inventory(session))
    qtbot.addWidget(panel)
    feed(panel, session)
    assert len(panel.checked_gpus()) == 10 and panel.note.isHidden()
    panel.show()
    qtbot.waitExposed(panel)

    def fitted(hint) -> bool:  # the hints are exact once the rows are laid out
        panel.resize(panel.width(), hint().height())
        return panel.height() == hint().height()

    qtbot.waitUntil(lambda: fitted(panel.sizeHint))
    rows = panel._scroll
    assert rows.verticalScrollBar().maximum() > 0 and not rows.horizontalScrollBar().isVisible()
    assert rows_in_view(panel) == SHOWN_GPUS
    qtbot.waitUntil(lambda: fitted(panel.minimumSizeHint))
    assert rows_in_view(panel) == MIN_SHOWN_GPUS
    assert panel.warning.text() == (
        "⚠ GPUs 0-9 are busy with other processes (▸ on a row lists them). Training there "
        "shares their compute and memory.")


def test_processes_show_on_demand_and_when_the_app_has_a_word(qtbot, panel, nvml, session):
    """Two lines a GPU; its processes under them when asked for (the ▸ says how many),
    and whenever a run of the app holds the GPU or it is lost."""
    panel.show()
    feed(panel, session)
    row = panel._rows[1]
    assert not row.processes.isVisible() and row.more.text() == "1"
    assert row.check.y() + row.check.height() <= row.utilization.y()  # two lines
    row.more.click()
    assert row.processes.isVisible() and "pid 5151 (11.0 GiB)" in row.processes.text()
    row.more.click()
    assert not row.processes.isVisible()
    panel.set_claims({1: DeviceUse(holder="run a (id 3)")})
    assert row.processes.isVisible() and "in use by run a (id 3)" in row.processes.text()
    nvml.gpus[0].lost = True
    feed(panel, session)
    assert panel._rows[0].processes.isVisible() and panel._rows[0].more.text() == NA


@pytest.fixture
def eight_file(tmp_path) -> Path:
    """The issue's machine in the NVML file fake (MGPU_GUI_FAKE_GPUS): GPUs 0-3 idle,
    4-7 busy with other processes at 90-100 % utilization."""
    gpus = [{"index": i, "uuid": f"GPU-fake-{i}", "name": "NVIDIA H100 80GB HBM3",
             "memory_total": 80 * GiB, "utilization": (0, 0, 0, 0, 90, 95, 98, 100)[i],
             "processes": [{"pid": 7000 + i, "used_memory": 30 * GiB}] if i >= 4 else []}
            for i in range(8)]
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps({"gpus": gpus}))
    return path


@pytest.fixture
def eight(eight_file):
    session = NvmlSession(from_file(eight_file))
    yield session
    session.shutdown()


def test_busy_gpus_are_left_out_of_the_first_choice_and_a_line_says_which(qtbot, eight):
    panel = GpuPanel(query_inventory(eight))
    qtbot.addWidget(panel)
    panel.show()
    assert len(panel.checked_gpus()) == 8 and not panel.note.isVisible()  # no readings yet
    with qtbot.waitSignal(panel.selection_changed):
        feed(panel, eight)
    assert [g.index for g in panel.checked_gpus()] == [0, 1, 2, 3]
    assert panel.note.isVisible() and panel.note.text() == (
        "GPUs 4-7 left out: busy with other processes (90-100 % utilization, 30.0 GiB in use).")
    assert panel.warning.isHidden() and panel.least_busy_count.value() == 4
    feed(panel, eight)  # later readings leave the choice alone
    assert [g.index for g in panel.checked_gpus()] == [0, 1, 2, 3]
    panel._rows[5].check.click()  # taken back: the note no longer holds, the warning says
    assert not panel.note.isVisible()
    assert "GPU 5 (H100 80GB HBM3) is busy with another process: pid 7005" in (
        panel.warning.text())


@pytest.mark.parametrize("choose", ["untick GPU 0", "lock for a run"])
def test_the_first_choice_never_overrides_a_choice(qtbot, eight, choose):
    """Before the first readings the user unticked a GPU, or a run took the selection:
    the busy GPUs stay as they are (the warning names them)."""
    panel = GpuPanel(query_inventory(eight))
    qtbot.addWidget(panel)
    if choose == "untick GPU 0":
        panel._rows[0].check.click()
    else:
        panel.set_enabled_for_run(False)
        panel.set_enabled_for_run(True)
    ticked = [g.index for g in panel.checked_gpus()]
    feed(panel, eight)
    assert [g.index for g in panel.checked_gpus()] == ticked and panel.note.isHidden()
    assert "GPUs 4-7 are busy with other processes" in panel.warning.text()


def test_the_window_trains_on_the_free_gpus_by_default(qtbot, eight_file):
    """The same machine in the window: the telemetry's first readings leave GPUs 4-7 out,
    and the run setup counts the four others."""
    from mgpu_gui.gui.jobs.telemetry_source import TelemetrySource
    from mgpu_gui.gui.main_window import MainWindow

    window = MainWindow(telemetry=TelemetrySource(from_file(eight_file), interval_s=0.05))
    qtbot.addWidget(window)
    window.show()
    try:
        panel = window.gpu_panel
        qtbot.waitUntil(panel.note.isVisible, timeout=10_000)
        assert panel.device_selection().gpus == tuple(f"GPU-fake-{i}" for i in range(4))
        assert "× 4 replicas" in window.run_setup.batch_text.text()
    finally:
        window.close()
