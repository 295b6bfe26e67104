"""The batch-size finder: the search and its report (pure, with simulated probes), the
runner's process handling (fake probe children), the probe's cap watchdog, the dialog
(fake children), and one real search through `mgpu-train find-batch` on CPU under a
memory cap (slow).
"""

from __future__ import annotations

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
from mgpu_gui.core.children.launch import command_log
from mgpu_gui.core.config import DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.datasets.batching import steps
from mgpu_gui.core.devices.nvml import GpuInfo, GpuInventory, NvmlState
from mgpu_gui.core.errors import ConfigError, UserError
from mgpu_gui.core.tools.batch_finder import (
    BatchFinder,
    BatchRequest,
    available_memory,
    plan_search,
)
from mgpu_gui.core.tools.batch_search import (
    BatchReport,
    Ended,
    ProbeResult,
    ProbeStatus,
    SearchSettings,
    build_report,
    data_cap,
    describe,
    format_memory,
    format_table,
    is_out_of_memory,
    next_batch,
    parse_memory,
    recommended_batch,
    search,
    use_text,
)

NO_GPU = GpuInventory(NvmlState.NO_DRIVER)
MB = 10 ** 6
CLI_TIMEOUT_S = 180


# -- the search, with simulated probes -------------------------------------------------
def memory_model(base: int, per_sample: int, cap: int, setup_fails: bool = False):
    """A probe whose peak is base + per_sample x batch; over `cap` does not fit."""
    tried: list[int] = []

    def probe(batch: int) -> ProbeResult:
        tried.append(batch)
        if setup_fails or base > cap:
            return ProbeResult(batch, ProbeStatus.TOO_BIG, peak_bytes=base, stage="setup",
                               message="over the cap before the first step")
        peak = base + per_sample * batch
        status = ProbeStatus.FITS if peak <= cap else ProbeStatus.TOO_BIG
        return ProbeResult(batch, status, peak_bytes=peak, base_bytes=base)

    probe.tried = tried  # type: ignore[attr-defined]
    return probe


def largest_under(cap: int, base: int, per_sample: int, top: int, multiple: int = 8) -> int:
    """The answer by brute force: the largest multiple of 8 (or, below 8, any batch) under
    the cap, or the largest batch allowed when it fits."""
    fits = [b for b in range(1, top + 1) if base + per_sample * b <= cap
            and (b % multiple == 0 or b < multiple or b == top)]
    return max(fits, default=0)


@pytest.mark.parametrize("cap_mb", [503, 530, 601, 777, 1000, 1234, 2500, 4095, 5000])
def test_on_a_memory_cap_the_search_returns_the_largest_batch_under_it(cap_mb):
    settings = SearchSettings(start=8, max_batch=4096, precision=0.0)
    probe = memory_model(base=500 * MB, per_sample=1 * MB, cap=cap_mb * MB)
    results = search(settings, probe)
    report = build_report(results, settings, device_kind="cpu", device_name="CPU:0",
                          devices=1, max_batch=4096, cap_bytes=cap_mb * MB)
    expected = largest_under(cap_mb * MB, 500 * MB, MB, 4096)
    assert report.largest_fit == expected
    assert all(r.fits == (r.peak_bytes <= cap_mb * MB) for r in results)
    assert len(results) <= 2 * 12 + 1  # doubling, then bisection: logarithmic
    assert len(set(probe.tried)) == len(probe.tried)  # no batch is tried twice


def test_growth_doubles_then_bisects_on_multiples_of_8():
    settings = SearchSettings(start=8, max_batch=4096, precision=0.0)
    probe = memory_model(base=0, per_sample=1, cap=100)
    results = search(settings, probe)
    assert probe.tried == [8, 16, 32, 64, 128, 96, 112, 104]
    report = build_report(results, settings, device_kind="gpu", device_name="GPU 0",
                          devices=4, max_batch=4096)
    assert (report.largest_fit, report.ended) == (96, Ended.BRACKETED)
    assert report.recommended == 80  # 96 less 10 % = 86.4, down to a multiple of 8
    assert report.global_batch == 320


def test_a_tolerance_stops_the_bisection_early_with_the_answer_bracketed():
    settings = SearchSettings(start=8, max_batch=8192, precision=0.1)
    probe = memory_model(base=0, per_sample=1, cap=3000)
    results = search(settings, probe)
    lo = max(r.batch for r in results if r.fits)
    hi = min(r.batch for r in results if not r.fits)
    assert lo <= 3000 < hi and hi - lo <= 0.1 * lo
    exact = search(SearchSettings(start=8, max_batch=8192, precision=0.0),
                   memory_model(base=0, per_sample=1, cap=3000))
    assert len(results) < len(exact)


def test_when_the_first_batch_is_too_big_it_halves_down():
    probe = memory_model(base=0, per_sample=10, cap=35)  # 3 fits, 4 does not
    results = search(SearchSettings(start=8), probe)
    assert probe.tried == [8, 4, 2, 3]
    report = build_report(results, SearchSettings(start=8), device_kind="gpu",
                          device_name="GPU 0", devices=2, max_batch=4096)
    assert report.largest_fit == 3 and report.recommended == 2  # 2.7 rounds down to 2


def test_out_of_memory_before_the_first_step_ends_the_search_at_once():
    probe = memory_model(base=900 * MB, per_sample=MB, cap=600 * MB)
    results = search(SearchSettings(), probe)
    assert probe.tried == [8]
    report = build_report(results, SearchSettings(), device_kind="cpu", device_name="CPU:0",
                          devices=1, max_batch=4096, cap_bytes=600 * MB)
    assert report.ended is Ended.NOTHING_FITS and report.recommended is None
    assert describe(report).startswith("Not even a batch of 8 per CPU replica fits")


def test_when_every_batch_fits_the_largest_allowed_less_the_margin_is_used():
    settings = SearchSettings(start=8, max_batch=1000)
    probe = memory_model(base=0, per_sample=1, cap=10 ** 9)
    results = search(settings, probe)
    assert probe.tried == [8, 16, 32, 64, 128, 256, 512, 1000]
    report = build_report(results, settings, device_kind="gpu", device_name="GPU 0",
                          devices=2, max_batch=1000)
    assert report.ended is Ended.MAX_BATCH and report.recommended == 896  # 900, down to x8
    assert "memory was not the limit" in describe(report)
    assert "Use 896 per GPU: 10% below it" in describe(report)


def test_the_training_set_caps_the_batch_at_eight_steps_per_epoch():
    """Issue 14: 1,350 training samples on 2 CPU replicas were offered 675 per replica,
    one step per epoch, with no margin taken off."""
    cap, note = data_cap(1350, 2, 8)
    assert cap == 84 and steps(1350, 2 * cap) >= 8 > steps(1350, 2 * (cap + 1))
    assert "at most 84 per device on 2 devices for at least 8 steps per epoch" in note
    settings = SearchSettings()
    probe = memory_model(base=0, per_sample=1, cap=10 ** 9)
    results = search(settings, probe, max_batch=cap)
    assert probe.tried == [8, 16, 32, 64, 84]
    report = build_report(results, settings, device_kind="cpu", device_name="CPU:0",
                          devices=2, max_batch=cap, data_limit=cap, train_samples=1350)
    assert report.ended is Ended.DATA_LIMIT and report.largest_fit == 84
    assert (report.recommended, report.global_batch, report.steps_per_epoch) == (72, 144, 9)
    assert use_text(report) == "Use 72 per CPU replica (144 global, 9 steps per epoch)"
    text = describe(report)
    assert "the most the training set allows for 8 steps per epoch on 2 CPU replicas" in text
    assert "Use 72 per CPU replica: 10% below it" in text
    assert "Global batch: 144 = 72 x 2 CPU replicas, 9 steps per epoch of the 1,350" in text


def test_data_too_small_for_eight_steps_caps_the_batch_at_one_and_says_so():
    assert data_cap(12, 2, 8) == (1, "The training set (12 samples) is too small for 8 steps "
                                     "per epoch on 2 devices: even a batch of 1 per device "
                                     "leaves 6.")
    assert data_cap(16, 2, 8)[0] == 1 and data_cap(1797, 1, 1)[0] == 1797
    assert SearchSettings(min_steps=0).problems() == [("min_steps", "must be at least 1, got 0")]


def test_an_error_that_is_not_about_memory_stops_the_search():
    def probe(batch: int) -> ProbeResult:
        return ProbeResult(batch, ProbeStatus.ERROR, message="net.py: build_model() failed",
                           error_type="ModelError")

    results = search(SearchSettings(), probe)
    assert len(results) == 1
    report = build_report(results, SearchSettings(), device_kind="gpu", device_name="GPU 0",
                          devices=1, max_batch=4096)
    assert report.ended is Ended.ERROR and report.recommended is None
    assert "net.py: build_model() failed" in describe(report)
    assert next_batch(SearchSettings(), [ProbeResult(8, ProbeStatus.CANCELLED)]) is None


def test_recommendation_keeps_the_margin_on_multiples_of_8():
    assert recommended_batch(512, 0.1, 8) == 456
    assert recommended_batch(512, 0.0, 8) == 512
    assert recommended_batch(100, 0.1, 8) == 88
    assert recommended_batch(8, 0.1, 8) == 7  # under one multiple: plain rounding down
    assert recommended_batch(1, 0.5, 8) == 1


def test_memory_sizes_are_parsed_and_printed():
    assert parse_memory("600MB") == 600 * MB
    assert parse_memory("1.5 GiB") == int(1.5 * 2 ** 30)
    assert parse_memory("2G") == 2 * 2 ** 30
    assert parse_memory("800000000") == 800 * MB
    for bad in ("lots", "12 parsecs", "0MB", "-1GB"):
        with pytest.raises(UserError, match="memory size"):
            parse_memory(bad)
    assert format_memory(850 * MB) == "850 MB"
    assert format_memory(int(2.5e9)) == "2,500 MB"
    assert format_memory(int(79.6e9)) == "79.6 GB"
    assert format_memory(None) == "–"


def test_out_of_memory_is_recognised_by_class_or_words():
    assert is_out_of_memory("ResourceExhaustedError", "whatever")
    assert is_out_of_memory("InternalError", "Dst tensor is not initialized.")
    assert is_out_of_memory("UnknownError", "CUDNN_STATUS_ALLOC_FAILED in conv")
    assert not is_out_of_memory("ValueError", "Input 0 of layer dense is incompatible")


def test_report_round_trips_through_json_and_prints_a_table():
    settings = SearchSettings(start=128, max_batch=2048, precision=0.0)
    probe = memory_model(base=600 * MB, per_sample=MB // 2, cap=1000 * MB)
    report = build_report(search(settings, probe), settings, device_kind="gpu",
                          device_name="GPU 1: NVIDIA Test GPU", devices=4, max_batch=2048,
                          cap_bytes=1000 * MB, cap_source="given", notes=("a note",))
    again = BatchReport.from_dict(json.loads(report.to_json()))
    assert again == report
    assert json.loads(report.to_json())["global_batch"] == report.global_batch
    assert report.largest_fit == 800 and report.recommended == 720
    table = format_table(report)
    assert table.splitlines()[0].split() == ["BATCH", "PEAK", "MEMORY", "TIME", "RESULT"]
    assert "fits (100% of the cap)" in table  # 800: exactly at the cap still fits
    text = describe(report)
    assert "The largest batch that fits on GPU 1: NVIDIA Test GPU is 800 per GPU" in text
    assert "Use 720 per GPU" in text and "Global batch: 2880 = 720 x 4 GPUs." in text


# -- planning -------------------------------------------------------------------------
def _gpu(index: int, gib: int) -> GpuInfo:
    return GpuInfo(index=index, name=f"NVIDIA Test GPU {gib}GB", uuid=f"GPU-test-{index}",
                   pci_bus_id=f"00000000:0{index}:00.0", memory_total=gib * 2 ** 30,
                   compute_capability=(9, 0))


def test_probes_run_on_the_chosen_gpu_with_the_least_memory():
    mixed = GpuInventory(NvmlState.OK, (_gpu(0, 80), _gpu(1, 40), _gpu(2, 80)), "550", "12.4")
    config = RunConfig(devices=DeviceSelection(kind=DeviceKind.GPU, gpus=("0", "1", "2")))
    plan = plan_search(BatchRequest(config), mixed)
    assert plan.probe_plan.replicas == 1 and plan.devices == 3
    assert plan.probe_plan.env["CUDA_VISIBLE_DEVICES"] == "GPU-test-1"
    assert any("the chosen GPU with the least memory" in n for n in plan.notes)
    assert plan.cap_bytes is None  # on a GPU: until out of memory
    # The demo's 1455 training samples, 8 steps per epoch on 3 GPUs.
    assert plan.data_limit == plan.max_batch == 1455 // 24 and plan.train_samples == 1455
    assert any("at most 60 per device on 3 devices" in n for n in plan.notes)


def test_on_cpu_without_a_cap_the_available_memory_is_the_cap(tmp_path):
    config = RunConfig(devices=DeviceSelection(kind=DeviceKind.CPU, replicas=2))
    plan = plan_search(BatchRequest(config), NO_GPU, available=lambda: 5 * 10 ** 9)
    assert plan.kind is DeviceKind.CPU and plan.probe_plan.replicas == 1
    assert (plan.cap_bytes, plan.cap_source) == (5 * 10 ** 9, "available memory")
    assert any("CPU replicas all live in one process" in n for n in plan.notes)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24683520 kB\nMemAvailable:   23621632 kB\n")
    assert available_memory(meminfo) == 23621632 * 1024
    with pytest.raises(ConfigError, match="max_batch"):
        plan_search(BatchRequest(config, SearchSettings(start=64, max_batch=32)), NO_GPU)


# -- the runner, with fake probe children -------------------------------------------------
FAKE_PROBE = textwrap.dedent("""
    import json, os, signal, sys, time
    fd, mode, kill_at = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    request = json.loads(sys.stdin.read())
    out = os.fdopen(fd, "w", buffering=1)
    batch = request["config"]["batch_per_replica"]
    assert request["plan"]["replicas"] == 1, request["plan"]
    assert os.environ["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    out.write(json.dumps({"type": "phase", "phase": "building"}) + "\\n")
    if mode == "sleep":
        time.sleep(60)
    if batch >= kill_at:
        print("allocating a lot", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's OOM killer does
    out.write(json.dumps({"type": "phase", "phase": "training"}) + "\\n")
    peak = 500_000_000 + 1_000_000 * batch
    cap = request["cap_bytes"]
    status = "fits" if cap is None or peak <= cap else "too big"
    out.write(json.dumps({"type": "result", "batch": batch, "status": status,
                          "peak_bytes": peak, "base_bytes": 500_000_000,
                          "seconds": 0.1}) + "\\n")
""")


def fake_command(mode: str = "run", kill_at: int = 10 ** 9):
    return lambda fd: [sys.executable, "-c", FAKE_PROBE, str(fd), mode, str(kill_at)]


def cpu_request(cap: int | None = 800 * MB, **settings) -> BatchRequest:
    config = RunConfig(devices=DeviceSelection(kind=DeviceKind.CPU, replicas=2))
    # One step per epoch allowed: the demo's 1455 samples then leave memory the limit.
    settings = {"start": 64, "precision": 0.0, "min_steps": 1, **settings}
    return BatchRequest(config, SearchSettings(**settings),
                        cap)


def test_each_probe_is_a_child_and_one_that_dies_counts_as_too_big():
    partial: list[BatchReport] = []
    finder = BatchFinder(cpu_request(cap=None), inventory=NO_GPU, available=lambda: 800 * MB,
                         command=fake_command(kill_at=256), on_report=partial.append)
    report = finder.run()
    assert [p.batch for p in report.probes] == [64, 128, 256, 192, 224, 240, 248]
    died = report.probes[2]
    assert died.status is ProbeStatus.TOO_BIG
    assert "killed by SIGKILL" in died.message and "allocating a lot" in died.message
    assert f"Its full output is in {command_log('find-batch')}." in died.message
    # Under 256 the memory model decides: 500 MB + 1 MB a sample, 800 MB available.
    assert report.largest_fit == 248 and report.cap_source == "available memory"
    assert report.recommended == 216 and report.global_batch == 432  # 2 replicas
    assert [len(r.probes) for r in partial] == list(range(1, 8))
    assert partial[-1].ended is Ended.RUNNING and report.ended is Ended.BRACKETED


def test_cancel_kills_the_running_probe_and_starts_no_other():
    started: list[int] = []
    finder = BatchFinder(cpu_request(), inventory=NO_GPU, command=fake_command("sleep"),
                         on_progress=lambda p: started.append(p.batch)
                         if p.phase == "starting" else None)
    timer = threading.Timer(1.0, finder.cancel)
    timer.start()
    t0 = time.monotonic()
    report = finder.run()
    timer.join()
    assert time.monotonic() - t0 < 20  # the child sleeps 60 s: it was killed
    assert started == [64]
    assert report.ended is Ended.CANCELLED and report.recommended is None


# -- the probe itself (no TensorFlow) ----------------------------------------------------
def test_the_cap_watchdog_reports_the_peak_once_it_passes_the_cap():
    from mgpu_gui.processes.batch_probe import CapWatchdog

    readings = iter([100, 200, 300, 401, 500])
    over: list[int] = []
    watchdog = CapWatchdog(400, lambda: next(readings), over.append, interval=0.001).start()
    deadline = time.monotonic() + 5
    while not over and time.monotonic() < deadline:
        time.sleep(0.005)
    watchdog.stop()
    assert over == [401]


def test_a_probe_tells_out_of_memory_from_other_errors():
    from mgpu_gui.core.devices.plan import plan_devices
    from mgpu_gui.processes.batch_probe import Probe

    class ResourceExhaustedError(Exception):
        pass

    plan = plan_devices(DeviceSelection(kind=DeviceKind.CPU, replicas=1), NO_GPU)
    probe = Probe(RunConfig(batch_per_replica=64), plan, 2, None, emit=lambda m: None)
    probe.stage = "training"
    oom = probe._failed(ResourceExhaustedError("OOM when allocating tensor"))
    assert oom.status is ProbeStatus.TOO_BIG and oom.batch == 64
    assert oom.message.startswith("out of memory while training")
    bug = probe._failed(ValueError("bad shape"))
    assert bug.status is ProbeStatus.ERROR and bug.message == "ValueError: bad shape"


# -- a real search through the CLI ------------------------------------------------------
CONV_NET = textwrap.dedent("""
    import keras


    def build_model(input_shape, num_classes):
        return keras.Sequential([
            keras.Input(input_shape),
            keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
            keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(num_classes, activation="softmax"),
        ])
""")


@pytest.mark.slow
def test_cli_finds_the_largest_batch_under_a_memory_cap_on_cpu(tmp_path):
    """About 0.5 MB per sample (two 32x32x32 activations, their gradients) on top of
    ~600 MB of TensorFlow: a 1 GB cap falls between 128 and 1024 per replica."""
    model = tmp_path / "net.py"
    model.write_text(CONV_NET)
    data = tmp_path / "data.npz"
    rng = np.random.default_rng(0)
    np.savez(data, x_train=rng.integers(0, 255, (2048, 32, 32, 3), dtype=np.uint8),
             y_train=rng.integers(0, 10, 2048))
    cap = 10 ** 9
    args = ["find-batch", "--cpu", "--replicas", "1", "--model", model, "--data", data,
            "--val-split", "0", "--memory-cap", "1GB", "--start-batch", "128",
            "--max-batch", "2048", "--tolerance", "0.25", "--min-steps", "1", "--json"]
    done = subprocess.run([sys.executable, "-m", "mgpu_gui.cli.main", *map(str, args)],
                          capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    report = BatchReport.from_dict(json.loads(done.stdout))
    probes = report.probes
    assert report.cap_bytes == cap and report.device_kind == "cpu"
    assert all(p.peak_bytes is not None and p.peak_bytes > 0 for p in probes)
    # Every verdict agrees with the peak the probe measured.
    assert all(p.fits == (p.peak_bytes <= cap) for p in probes), probes
    fit = [p.batch for p in probes if p.fits]
    too_big = [p.batch for p in probes if not p.fits]
    assert fit and too_big, probes  # the cap did bind
    # The result is the largest batch tried under the cap, and every larger one was over.
    assert report.largest_fit == max(fit)
    assert min(too_big) > report.largest_fit
    assert min(too_big) - report.largest_fit <= max(8, 0.25 * report.largest_fit)
    assert report.recommended == recommended_batch(report.largest_fit, 0.1, 8)
    assert report.global_batch == report.recommended  # one replica
    steps_text = f"{2048 // report.recommended} steps per epoch of the 2,048 training samples"
    assert steps_text in json.loads(done.stdout)["summary"]
    assert f"[probe 1] batch {probes[0].batch}:" in done.stderr


def test_cli_refuses_bad_search_settings(capsys):
    code = cli.main(["find-batch", "--cpu", "--start-batch", "0", "--margin", "1.5"])
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE
    assert "--start-batch: must be at least 1" in err and "--margin: must be in [0, 1)" in err
    assert cli.main(["find-batch", "--cpu", "--memory-cap", "lots"]) == cli.EXIT_USAGE
    assert "memory size 'lots'" in capsys.readouterr().err


# -- the dialog -------------------------------------------------------------------------
@pytest.fixture
def dialog(qtbot):
    from mgpu_gui.gui.dialogs.batch_finder import BatchFinderDialog

    config = RunConfig(devices=DeviceSelection(kind=DeviceKind.CPU, replicas=2))
    dlg = BatchFinderDialog(None, config, finder_factory=lambda request: BatchFinder(
        request, inventory=NO_GPU, command=fake_command(dlg.fake_mode)))
    dlg.fake_mode = "run"
    qtbot.addWidget(dlg)
    return dlg


def test_dialog_shows_each_probe_and_offers_the_recommendation(dialog, qtbot):
    """The demo's 1455 training samples on 2 CPU replicas: memory would allow 296 per
    replica under 0.8 GB, but 8 steps per epoch allow at most 90, less the margin 80."""
    dialog.cap_spin.setValue(0.8)  # GB
    dialog.start_spin.setValue(64)
    dialog.tolerance_spin.setValue(0)
    assert not dialog.use_button.isEnabled()
    with qtbot.waitSignal(dialog.controller.finished, timeout=60_000):
        dialog.start_button.click()
        assert dialog.is_running() and not dialog.start_button.isEnabled()
    assert dialog.report.largest_fit == 90 and dialog.report.recommended == 80
    assert dialog.table.rowCount() == len(dialog.report.probes) == 2
    assert dialog.table.item(0, 0).text() == "64"
    assert dialog.table.item(0, 1).text() == "564 MB"
    assert "Use 80 per CPU replica" in dialog.result.text()
    assert "9 steps per epoch" in dialog.result.text()
    assert dialog.status.text().startswith("Done:")
    assert dialog.use_button.isEnabled()
    assert dialog.use_button.text() == "&Use 80 per CPU replica (160 global, 9 steps per epoch)"
    with qtbot.waitSignal(dialog.use_batch, timeout=1000) as used:
        dialog.use_button.click()
    assert used.args == [80]


def test_dialog_cancel_kills_the_probe(dialog, qtbot):
    dialog.fake_mode = "sleep"
    dialog.start_button.click()
    qtbot.waitUntil(lambda: dialog.status.text().startswith("Probe 1"), timeout=10_000)
    with qtbot.waitSignal(dialog.controller.finished, timeout=15_000):
        dialog.cancel_button.click()
    assert dialog.report.ended is Ended.CANCELLED
    assert dialog.status.text().startswith("Cancelled")
    assert dialog.start_button.isEnabled() and not dialog.use_button.isEnabled()


def test_closing_the_dialog_mid_search_kills_the_probe(dialog, qtbot):
    dialog.fake_mode = "sleep"
    dialog.start_button.click()
    qtbot.waitUntil(lambda: dialog.status.text().startswith("Probe 1"), timeout=10_000)
    t0 = time.monotonic()
    dialog.close()
    assert not dialog.is_running() and time.monotonic() - t0 < 10


def test_batch_finder_gui_and_cli_never_load_tensorflow():
    code = ("import sys; import mgpu_gui.gui.dialogs.batch_finder, mgpu_gui.cli.find_batch, "
            "mgpu_gui.processes.batch_probe; "
            "print(','.join(m for m in ('tensorflow', 'keras') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


def test_the_probe_runs_as_a_module_of_its_own():
    from mgpu_gui.core.tools.batch_finder import worker_command

    assert worker_command(7)[-3:] == ["mgpu_gui.processes.batch_probe", "--events-fd", "7"]


@pytest.mark.skipif(not Path("/proc/self/oom_score_adj").exists(), reason="Linux only")
def test_a_probe_asks_to_be_the_kernels_first_out_of_memory_victim():
    code = ("from mgpu_gui.processes.batch_probe import volunteer_for_oom_killer; "
            "volunteer_for_oom_killer(); print(open('/proc/self/oom_score_adj').read())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1000"
