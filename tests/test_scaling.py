"""The scaling test: figures, recommendation and CSV (pure), the runner's process
handling (fake children), the dialog (fed with results, no training), and one real
run through `mgpu-train scale` on 1, 2 and 4 CPU replicas (slow).
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from mgpu_gui.cli import main as cli
from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.devices.nvml import GpuInfo, GpuInventory, NvmlState
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.tools.scaling import (
    CSV_COLUMNS,
    CountResult,
    PointStatus,
    ScalingMode,
    ScalingReport,
    batch_for,
    build_report,
    compute_points,
    csv_text,
    even_batches_note,
    format_table,
    parse_counts,
    recommend,
    step_stats,
    write_csv,
)
from mgpu_gui.core.tools.scaling_runner import (
    ScaleProgress,
    ScaleRequest,
    ScaleRunner,
    plan_scaling,
)

NO_GPU = GpuInventory(NvmlState.NO_DRIVER)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CLI_TIMEOUT_S = 240


def result(devices: int, step_s: float, per_device: int = 16, n: int = 10) -> CountResult:
    # Steps spread +-10 % around step_s, so the median is step_s.
    times = tuple(step_s * (0.9 + 0.2 * i / (n - 1)) for i in range(n))
    return CountResult(devices, per_device * devices, per_device, step_times_s=times)


def cpu_report(*results: CountResult, threshold: float = 0.75) -> ScalingReport:
    return build_report(results, mode=ScalingMode.WEAK, device_kind="cpu", threshold=threshold,
                        steps=10, warmup=3, model="demo", data="demo")


# -- figures ---------------------------------------------------------------------
def test_speedup_and_efficiency_are_against_the_one_device_run():
    # Weak scaling: 16 per device; 1 device 10 ms, 2 devices 12.5 ms, 4 devices 20 ms.
    report = cpu_report(result(1, 0.010), result(2, 0.0125), result(4, 0.020))
    one, two, four = report.points
    assert report.baseline_devices == 1
    assert one.samples_per_s == pytest.approx(1600)
    assert two.samples_per_s == pytest.approx(32 / 0.0125)
    assert one.speedup == 1 and one.efficiency == 1.0
    assert two.speedup == pytest.approx(1.6) and two.efficiency == pytest.approx(0.8)
    assert four.speedup == pytest.approx(2.0) and four.efficiency == pytest.approx(0.5)
    assert four.step_median_s == pytest.approx(0.020)
    assert four.step_p10_s < four.step_median_s < four.step_p90_s


def test_strong_scaling_keeps_the_global_batch_and_skips_uneven_splits():
    assert batch_for(ScalingMode.WEAK, 4, 32, 0) == (128, 32)
    assert batch_for(ScalingMode.STRONG, 4, 32, 128) == (128, 32)
    assert batch_for(ScalingMode.STRONG, 3, 32, 128) == (
        "global batch 128 does not split evenly over 3 devices")
    assert even_batches_note(128, [1, 2, 3, 4]) == (
        "Strong scaling skips the counts global batch 128 does not split evenly over (3); a "
        "global batch of 120 or 132 (multiples of 12) splits over every count.")
    assert even_batches_note(128, [1, 2, 4, 8]) == ""
    # Same global batch: speed-up is the ratio of step times.
    points, _ = compute_points([CountResult(1, 128, 128, step_times_s=(0.04,) * 5),
                                CountResult(2, 128, 64, step_times_s=(0.025,) * 5)])
    assert points[1].speedup == pytest.approx(1.6)


def test_step_stats_match_numpy_percentiles():
    times = [0.013, 0.011, 0.012, 0.040, 0.0105, 0.0112, 0.0119]
    median, p10, p90 = step_stats(times)
    assert median == pytest.approx(np.median(times))
    assert p10 == pytest.approx(np.percentile(times, 10))
    assert p90 == pytest.approx(np.percentile(times, 90))


def test_without_a_one_device_figure_the_smallest_count_is_the_baseline():
    oom = CountResult(1, 256, 256, status=PointStatus.FAILED, message="out of memory")
    report = build_report([oom, result(2, 0.010, 128), result(4, 0.012, 64)],
                          mode=ScalingMode.STRONG, device_kind="gpu")
    failed, two, four = report.points
    assert failed.status is PointStatus.FAILED and failed.efficiency is None
    assert report.baseline_devices == 2
    assert two.efficiency == 1.0 and two.speedup == 2
    assert four.efficiency == pytest.approx((256 / 0.012) / (256 / 0.010) / 2)
    assert any("against 2 GPUs, taken as linear" in note for note in report.notes)


def test_recommendation_is_the_largest_count_at_or_above_the_threshold():
    report = cpu_report(result(1, 0.010), result(2, 0.0125), result(3, 0.020),
                        result(4, 0.0125))  # 80 %, then 50 %, then 80 % again
    assert [round(p.efficiency, 2) for p in report.points] == [1.0, 0.8, 0.5, 0.8]
    assert report.recommendation.devices == 4
    assert report.recommendation.sentence.startswith("Use all 4 CPU replicas")

    falls = cpu_report(result(1, 0.010), result(2, 0.0125), result(4, 0.030))
    rec = falls.recommendation
    assert rec.devices == 2
    assert rec.sentence == ("Use 2 CPU replicas: beyond that, efficiency falls under 75% "
                            "(4 CPU replicas: 33%, 1.33x the throughput of one for 4x the "
                            "devices).")
    assert recommend(falls.points, threshold=0.9, kind="cpu").devices == 1
    alone = recommend(cpu_report(result(1, 0.010)).points, kind="cpu")
    assert alone.devices == 1 and alone.sentence.startswith("Only 1 CPU replica measured")
    assert recommend(falls.points, threshold=0.3, kind="cpu").devices == 4


def test_recommendation_mentions_counts_that_failed():
    oom = CountResult(8, 8 * 64, 64, status=PointStatus.FAILED, message="out of memory")
    report = build_report([result(1, 0.010, 64), result(2, 0.011, 64), oom],
                          mode=ScalingMode.WEAK, device_kind="gpu")
    assert report.recommendation.devices == 2
    assert "Use 2 GPUs" in report.recommendation.sentence
    assert "8 GPUs failed" in report.recommendation.sentence


def test_csv_has_a_row_per_count_and_blanks_where_not_measured(tmp_path):
    skipped = CountResult(3, 64, 21, status=PointStatus.SKIPPED, message="uneven split")
    report = cpu_report(result(1, 0.010), result(2, 0.0125), skipped)
    path = write_csv(report, tmp_path / "sub" / "scaling.csv")
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert [r["devices"] for r in rows] == ["1", "2", "3"]
    assert float(rows[0]["efficiency"]) == 1.0
    assert float(rows[1]["efficiency"]) == pytest.approx(0.8)
    assert float(rows[1]["step_median_ms"]) == pytest.approx(12.5)
    assert rows[2]["status"] == "skipped" and rows[2]["samples_per_s"] == ""
    assert rows[2]["note"] == "uneven split"
    assert csv_text(report) == path.read_text()


def test_report_round_trips_through_json_and_prints_a_table():
    report = cpu_report(result(1, 0.010), result(2, 0.0125),
                        CountResult(4, 64, 16, status=PointStatus.FAILED, message="killed"))
    again = ScalingReport.from_json(report.to_json())
    assert again == report
    table = format_table(report)
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["DEVICES", "GLOBAL", "BATCH"]
    assert "1,600" in lines[1] and "1.00x" in lines[1] and "100%" in lines[1]
    assert "80%" in lines[2] and "12.5 (11.5-13.5) ms" in lines[2]
    assert "4 CPU replicas failed: killed" in table
    assert report.recommendation.sentence in table


def test_counts_are_parsed_and_checked():
    assert parse_counts("4, 1,2,2") == [1, 2, 4]
    for bad, words in [("1,x", "separated by commas"), ("0,2", "at least 1"),
                       ("1,8", "only 4 are chosen")]:
        with pytest.raises(UserError, match=words):
            parse_counts(bad, 4)


# -- planning --------------------------------------------------------------------
def _gpu(index: int) -> GpuInfo:
    return GpuInfo(index=index, name="NVIDIA Test GPU", uuid=f"GPU-test-{index}",
                   pci_bus_id=f"00000000:0{index}:00.0", memory_total=80 * 2**30,
                   compute_capability=(9, 0))


def test_count_k_uses_the_first_k_chosen_gpus():
    four = GpuInventory(NvmlState.OK, tuple(_gpu(i) for i in range(4)), "550.54", "12.4")
    config = RunConfig(devices=DeviceSelection(kind=DeviceKind.GPU, gpus=("3", "1", "2")))
    plan = plan_scaling(ScaleRequest(config), four)
    assert plan.kind is DeviceKind.GPU
    assert [c.devices for c in plan.counts] == [1, 2, 3]
    assert [c.plan.env["CUDA_VISIBLE_DEVICES"] for c in plan.counts] == [
        "GPU-test-3", "GPU-test-3,GPU-test-1", "GPU-test-3,GPU-test-1,GPU-test-2"]
    with pytest.raises(UserError, match="4 GPUs asked for, but 3 are chosen"):
        plan_scaling(ScaleRequest(config, counts=(1, 4)), four)
    two_cpu = RunConfig(devices=DeviceSelection(kind=DeviceKind.CPU, replicas=2))
    with pytest.raises(UserError, match="4 CPU replicas asked for, but 2 are chosen"):
        plan_scaling(ScaleRequest(two_cpu, counts=(1, 4)), NO_GPU)
    any_cpu = RunConfig(devices=DeviceSelection(kind=DeviceKind.CPU))
    assert len(plan_scaling(ScaleRequest(any_cpu, counts=(1, 4)), NO_GPU).counts) == 2


def test_strong_plan_skips_uneven_counts_and_batches_the_data_cannot_fill():
    config = RunConfig(batch_per_replica=32, devices=DeviceSelection(kind=DeviceKind.CPU,
                                                                     replicas=4))
    plan = plan_scaling(ScaleRequest(config, mode=ScalingMode.STRONG), NO_GPU)
    assert [(c.devices, c.global_batch, c.batch_per_replica) for c in plan.counts] == [
        (1, 128, 128), (2, 128, 64), (3, 128, 0), (4, 128, 32)]
    assert [bool(c.skip) for c in plan.counts] == [False, False, True, False]
    assert "a global batch of 120 or 132" in plan.notes[-1]
    huge = plan_scaling(ScaleRequest(config.replace(batch_per_replica=1000), counts=(1, 2)),
                        NO_GPU)
    assert huge.counts[0].skip == ""
    assert "fewer than one global batch (2000)" in huge.counts[1].skip


# -- the runner, with fake children ------------------------------------------------
FAKE_CHILD = textwrap.dedent("""
    import json, os, sys, time
    request = json.loads(sys.stdin.read())
    n, per = request["plan"]["replicas"], request["config"]["batch_per_replica"]
    if n == int(sys.argv[2]):
        print("simulated crash", flush=True)
        os._exit(3)
    if sys.argv[3] == "sleep":
        time.sleep(60)
    out = os.fdopen(int(sys.argv[1]), "w")
    if sys.argv[3] == "model_error":
        out.write(json.dumps({"type": "result", "devices": n, "global_batch": n * per,
                              "batch_per_replica": per, "status": "failed",
                              "message": "net.py: build_model() failed",
                              "error_type": "ModelError"}) + "\\n")
        sys.exit(1)
    out.write(json.dumps({"type": "phase", "phase": "timing"}) + "\\n")
    for i in range(request["steps"]):
        out.write(json.dumps({"type": "step", "step": i + 1, "of": request["steps"]}) + "\\n")
    out.write(json.dumps({"type": "result", "devices": n, "global_batch": n * per,
                          "batch_per_replica": per,
                          "step_times_s": [0.01 * n ** 0.5] * request["steps"]}) + "\\n")
""")


def fake_command(crash_at: int = 0, mode: str = "run"):
    return lambda fd: [sys.executable, "-c", FAKE_CHILD, str(fd), str(crash_at), mode]


def cpu_request(replicas: int = 4, **kw) -> ScaleRequest:
    config = RunConfig(batch_per_replica=8, devices=DeviceSelection(kind=DeviceKind.CPU,
                                                                    replicas=replicas))
    return ScaleRequest(config, steps=5, warmup=1, **kw)


def test_a_failing_count_is_reported_and_the_others_run():
    seen: list[ScaleProgress] = []
    partial: list[ScalingReport] = []
    runner = ScaleRunner(cpu_request(counts=(1, 2, 4)), inventory=NO_GPU,
                         command=fake_command(crash_at=2), on_progress=seen.append,
                         on_report=partial.append)
    report = runner.run()
    assert [p.status for p in report.points] == [PointStatus.OK, PointStatus.FAILED,
                                                 PointStatus.OK]
    assert "exited with code 3" in report.points[1].message
    assert "simulated crash" in report.points[1].message
    assert report.points[2].efficiency == pytest.approx(0.5)  # sqrt(4) slower per step
    assert [len(r.points) for r in partial] == [1, 2, 3]
    fractions = [p.fraction for p in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert [p.phase for p in seen if p.phase in ("done", "failed")] == ["done", "failed", "done"]


def test_cancel_kills_the_running_child_and_skips_the_rest():
    started: list[int] = []
    runner = ScaleRunner(cpu_request(counts=(1, 2)), inventory=NO_GPU,
                         command=fake_command(mode="sleep"),
                         on_progress=lambda p: started.append(p.devices)
                         if p.phase == "starting" else None)
    timer = threading.Timer(1.0, runner.cancel)
    timer.start()
    t0 = time.monotonic()
    report = runner.run()
    timer.join()
    assert time.monotonic() - t0 < 20  # the child sleeps 60 s: it was killed
    assert started == [1]
    assert [p.status for p in report.points] == [PointStatus.CANCELLED] * 2
    assert report.recommendation is None
    assert any("cancelled" in note for note in report.notes)


def test_an_error_in_the_model_is_not_repeated_for_every_count():
    started: list[int] = []
    runner = ScaleRunner(cpu_request(counts=(1, 2, 4)), inventory=NO_GPU,
                         command=fake_command(mode="model_error"),
                         on_progress=lambda p: started.append(p.devices)
                         if p.phase == "starting" else None)
    report = runner.run()
    assert started == [1]
    assert [p.status for p in report.points] == [PointStatus.FAILED, PointStatus.SKIPPED,
                                                 PointStatus.SKIPPED]
    assert report.points[0].message == "net.py: build_model() failed"
    assert "the 1 CPU replica count failed with an error in the model" in (
        report.points[1].message)
    assert report.recommendation is None


def test_step_clock_times_only_the_steps_after_the_warm_up():
    from mgpu_gui.processes.scaling_worker import StepClock

    ticks = iter([0.0, 1.0, 1.5, 1.6, 1.8, 2.1])  # begin, then 5 step ends
    sent: list[dict] = []
    clock = StepClock(warmup=2, steps=3, emit=sent.append, clock=lambda: next(ticks))
    clock.begin()
    for batch in range(5):
        clock.step_ended(batch)
    assert clock.warmup_s == 1.5
    assert clock.times == pytest.approx([0.1, 0.2, 0.3])
    assert [m["type"] for m in sent] == ["phase", "step", "step", "step"]


# -- a real scaling test through the CLI ---------------------------------------------
@pytest.mark.slow
def test_cli_scaling_run_on_1_2_and_4_cpu_replicas(tmp_path):
    csv_path, png_path = tmp_path / "scaling.csv", tmp_path / "scaling.png"
    args = ["scale", "--cpu", "--replicas", "4", "--counts", "1,2,4", "--batch-per-replica",
            "16", "--steps", "8", "--warmup", "2", "--csv", csv_path, "--png", png_path,
            "--json"]
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY",
                                                            "QT_QPA_PLATFORM")}
    done = subprocess.run([sys.executable, "-m", "mgpu_gui.cli.main", *map(str, args)],
                          capture_output=True, text=True, timeout=CLI_TIMEOUT_S, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    report = ScalingReport.from_dict(json.loads(done.stdout))
    assert [p.devices for p in report.points] == [1, 2, 4]
    assert all(p.ok and p.timed_steps == 8 for p in report.points), report.points
    assert [p.global_batch for p in report.points] == [16, 32, 64]
    one = report.points[0]
    assert report.baseline_devices == 1 and one.efficiency == 1.0 and one.speedup == 1
    for p in report.points[1:]:
        assert p.speedup == pytest.approx(p.samples_per_s / one.samples_per_s)
        assert p.efficiency == pytest.approx(p.speedup / p.devices)
    assert report.recommendation is not None
    assert report.recommendation.devices in (1, 2, 4)

    rows = list(csv.DictReader(io.StringIO(csv_path.read_text())))
    assert [int(r["devices"]) for r in rows] == [1, 2, 4]
    assert [float(r["efficiency"]) for r in rows] == pytest.approx(
        [p.efficiency for p in report.points], rel=1e-5)
    data = png_path.read_bytes()
    assert data[:8] == PNG_MAGIC
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1100, 520) and len(data) > 20_000
    assert f"Wrote {csv_path}" in done.stderr and f"Wrote {png_path}" in done.stderr


def test_cli_refuses_bad_scaling_settings(capsys):
    code = cli.main(["scale", "--cpu", "--replicas", "2", "--steps", "1", "--warmup", "0"])
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE
    assert "--steps: must be at least 2" in err and "--warmup: must be at least 1" in err
    code = cli.main(["scale", "--cpu", "--global-batch", "64"])
    assert code == cli.EXIT_USAGE
    assert "--global-batch is for strong scaling" in capsys.readouterr().err


# -- the dialog ------------------------------------------------------------------------
@pytest.fixture
def dialog(qtbot):
    from mgpu_gui.gui.dialogs.scaling import ScalingDialog

    config = RunConfig(batch_per_replica=8, devices=DeviceSelection(kind=DeviceKind.CPU,
                                                                    replicas=4))
    dlg = ScalingDialog(None, config, runner_factory=lambda request: ScaleRunner(
        request, inventory=NO_GPU, command=fake_command(mode=dlg.fake_mode)))
    dlg.fake_mode = "run"
    qtbot.addWidget(dlg)
    return dlg


def test_dialog_plots_measured_and_ideal_curves_and_exports(dialog, tmp_path):
    from PySide6.QtGui import QImage

    report = cpu_report(result(1, 0.010), result(2, 0.0125), result(4, 0.030))
    dialog.show_report(report)
    plot = dialog.plot
    x, y = plot.throughput_curve.getData()
    assert list(x) == [1, 2, 4] and y == pytest.approx([p.samples_per_s for p in report.points])
    ix, iy = plot.ideal_curve.getData()
    assert list(ix) == [1, 4] and iy == pytest.approx([1600, 6400])
    ex, ey = plot.efficiency_curve.getData()
    assert ey == pytest.approx([100, 80, 100 / 3])
    assert plot.ideal_efficiency.value() == 100 and plot.ideal_efficiency.isVisible()
    assert plot.threshold_line.value() == 75 and plot.threshold_line.isVisible()
    assert plot.recommended_lines[0].value() == 2
    assert dialog.table.rowCount() == 3 and dialog.table.item(1, 5).text() == "80%"
    assert dialog.recommendation.text().startswith("Use 2 CPU replicas")

    dialog.threshold_spin.setValue(90)  # the recommendation follows the threshold
    assert dialog.report.recommendation.devices == 1
    assert plot.threshold_line.value() == 90

    csv_path = dialog.export_csv(tmp_path / "out.csv")
    assert [r["devices"] for r in csv.DictReader(io.StringIO(csv_path.read_text()))] == [
        "1", "2", "4"]
    png = dialog.export_png(tmp_path / "out.png")
    assert png.read_bytes()[:8] == PNG_MAGIC
    image = QImage(str(png))
    assert (image.width(), image.height()) == (1100, 520)


def test_before_a_test_the_plots_show_devices_1_to_n_and_figures_from_0(dialog):
    """Issue 14: the empty plots showed negative samples/s and devices -0.4 to 0.4."""
    plot = dialog.plot
    for devices in (4, 2):  # the fixture's 4 CPU replicas, then what the spin says
        dialog.max_spin.setValue(devices)
        for widget, top in ((plot.throughput, 1.0), (plot.efficiency, 110.0)):
            item = widget.getPlotItem()
            (x0, x1), (y0, y1) = item.getViewBox().viewRange()
            assert (x0, x1) == pytest.approx((0.7, devices + 0.3))
            assert (y0, y1) == pytest.approx((0, top))
            ticks = item.getAxis("bottom")._tickLevels
            assert ticks == [[(k, str(k)) for k in range(1, devices + 1)]]


def test_dialog_runs_counts_in_the_background(dialog, qtbot):
    dialog.counts_edit.setText("1,2,4")
    with qtbot.waitSignal(dialog.controller.finished, timeout=60_000):
        dialog.start_button.click()
        assert dialog.is_running() and not dialog.start_button.isEnabled()
    assert not dialog.is_running()
    assert [p.devices for p in dialog.report.points] == [1, 2, 4]
    assert dialog.table.rowCount() == 3
    assert dialog.png_button.isEnabled() and dialog.csv_button.isEnabled()
    assert dialog.progress_bar.value() == 1000
    assert dialog.status.text().startswith("Done: 3 of 3")


def test_dialog_cancel_kills_the_child(dialog, qtbot):
    dialog.fake_mode = "sleep"
    dialog.start_button.click()
    qtbot.waitUntil(lambda: "Count 1 of" in dialog.status.text(), timeout=10_000)
    with qtbot.waitSignal(dialog.controller.finished, timeout=15_000):
        dialog.cancel_button.click()
    assert all(p.status is PointStatus.CANCELLED for p in dialog.report.points)
    assert dialog.status.text().startswith("Cancelled")
    assert dialog.start_button.isEnabled() and not dialog.png_button.isEnabled()


def test_dialog_shows_why_a_test_cannot_start(dialog, qtbot):
    dialog.counts_edit.setText("1,9")
    dialog.start_button.click()
    assert "only 4 are chosen" in dialog.status.text()
    assert not dialog.is_running()


def test_scaling_gui_modules_never_load_tensorflow():
    code = ("import sys; import mgpu_gui.gui.dialogs.scaling, mgpu_gui.cli.scale; "
            "print(','.join(m for m in ('tensorflow', 'keras') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


def test_png_written_without_a_display(tmp_path):
    """`mgpu-train scale --png` over SSH: no DISPLAY, Qt goes offscreen by itself."""
    report = cpu_report(result(1, 0.010), result(2, 0.0125))
    target = tmp_path / "plot.png"
    code = textwrap.dedent(f"""
        from mgpu_gui.core.tools.scaling import ScalingReport
        from mgpu_gui.gui.widgets.scaling_plot import save_report_png
        report = ScalingReport.from_json({report.to_json()!r})
        print(save_report_png(report, {str(target)!r}))
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY",
                                                            "QT_QPA_PLATFORM")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == target and target.read_bytes()[:8] == PNG_MAGIC


def test_closing_the_dialog_mid_test_kills_the_child(dialog, qtbot):
    dialog.fake_mode = "sleep"
    dialog.start_button.click()
    qtbot.waitUntil(lambda: "Count 1 of" in dialog.status.text(), timeout=10_000)
    t0 = time.monotonic()
    dialog.close()
    assert not dialog.is_running() and time.monotonic() - t0 < 10


def test_plots_follow_a_dark_palette_and_the_png_stays_light(qtbot, qapp, tmp_path):
    from PySide6.QtGui import QColor, QImage, QPalette

    from mgpu_gui.gui.theme import dark_palette
    from mgpu_gui.gui.widgets.scaling_plot import ScalingPlot, save_report_png

    report = cpu_report(result(1, 0.010), result(2, 0.0125))
    plot = ScalingPlot()
    qtbot.addWidget(plot)
    plot.set_report(report)
    plot.show()

    def background():
        return plot.throughput.backgroundBrush().color().lightness()

    assert background() > 200
    qapp.setPalette(dark_palette())  # what a desktop does on a switch to dark
    try:
        qtbot.waitUntil(lambda: background() < 80)
        png = save_report_png(report, tmp_path / "s.png")
    finally:
        qapp.setPalette(QPalette())
    qtbot.waitUntil(lambda: background() > 200)
    corner = QImage(str(png)).pixelColor(5, 5)
    assert corner.lightness() > 200 and corner != QColor("black")
