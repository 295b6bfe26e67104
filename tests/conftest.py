"""Shared test setup: no real settings, no GPU, quiet TensorFlow, offscreen Qt.

GUI tests also fail when they leave a QThread or QTimer running (napari's rule):
background work must be stopped by whoever started it.
"""

from __future__ import annotations

import compileall
import gc
import json
import os
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest

from mgpu_gui.core.children import warm_start
from mgpu_gui.core.children.launch import LOG_DIR_ENV
from mgpu_gui.gui import gc_guard
from tests.helpers import engine_starts

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["CUDA_VISIBLE_DEVICES"] = ""  # tests must behave the same with or without a GPU
# One thread per engine op: the suite runs two pytest workers per core, each waiting on
# children, so an engine's own pools (one thread per core each) only contend and spin.
# Measured on two cores, four workers, the training, resume, fault and CLI modules: 184 s
# wall and 312 CPU-s with the pools, 149 s and 273 CPU-s without.
for _variable, _value in (("TF_NUM_INTRAOP_THREADS", "1"), ("TF_NUM_INTEROP_THREADS", "1"),
                          ("OMP_NUM_THREADS", "1")):
    os.environ.setdefault(_variable, _value)
# (XLA's own `intra_op_parallelism_threads=1` takes no dashes and ends its flags there:
# the app's device-count flag after it was ignored.)
os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""),
                                    "--xla_cpu_multi_thread_eigen=false"]).strip()
# Cyclic garbage collection on the main thread only, as the app has it (gui/gc_guard.py):
# a Qt object collected on a reader job's thread deadlocked a window test (CI 11). Each
# test ends with the collections that fell due during it.
gc.disable()
# Children note the engines they start (one log per pytest process, xdist workers too).
_fd, _name = tempfile.mkstemp(prefix="mgpu-engine-starts-", suffix=".tsv")
os.close(_fd)
_ENGINE_LOG = Path(_name)
_ENGINES_BEFORE = pytest.StashKey[set]()
ROOT = Path(__file__).resolve().parents[1]
MODULE_SECONDS = Path(__file__).parent / "module_seconds.json"
os.environ[engine_starts.LOG_ENV] = str(_ENGINE_LOG)
# Children's logs go to a temporary folder, never the user's, from the start: a module- or
# session-scoped fixture's children start before the per-test folder (_isolated_logs).
_LOG_DIR = tempfile.mkdtemp(prefix="mgpu-test-logs-")
os.environ[LOG_DIR_ENV] = _LOG_DIR
engine_starts.with_child_site(os.environ)


def pytest_configure(config):
    """The app's modules and the tests' helpers compiled once, before any worker starts:
    where PYTHONDONTWRITEBYTECODE is set (this workplace's shells set it), every process
    compiled them again, and the suite starts hundreds (a training worker: 3.45 CPU-s
    to import its modules without their bytecode, 2.9 with it)."""
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist)
        for folder in (ROOT / "mgpu_gui", ROOT / "tests" / "helpers"):
            compileall.compile_dir(folder, quiet=1)


def pytest_unconfigure(config):
    _ENGINE_LOG.unlink(missing_ok=True)
    shutil.rmtree(_LOG_DIR, ignore_errors=True)


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: with the slow tests, two workers per core, one per 3 GiB of available
    memory at most (a worker holds TensorFlow and its children theirs): many of them wait
    on a child (a training worker, an export check) that does the work. On two cores, a
    worker per core left a fifth of the CPU idle (19 CPU-minutes in 12 minutes), three
    still left some, four kept both cores busy from start to end (vmstat, every 5 s).
    Without them (`-m "not slow"`) the tests work in their own process: one worker per
    core (817 tests on two cores: 77 s with 2 workers, 84 s with 3, 95 s with 4)."""
    cores = len(os.sched_getaffinity(0))
    if "not slow" in (config.option.markexpr or ""):
        return cores
    return max(1, min(2 * cores, _available_memory() // (3 << 30)))


def _available_memory() -> int:
    """Bytes the kernel could give without swapping (MemAvailable: free and reclaimable)."""
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def pytest_collection_modifyitems(config, items):
    """The longest modules first, each kept whole and in its own order: xdist hands modules
    out in this order (--no-loadscope-reorder), so the long ones run side by side early
    instead of one of them last while the other worker idles (xdist's own reorder, by test
    count, sent the fewest-but-longest last). Times: tests/module_seconds.json (made by
    tests/run_each_file.py); a module not in it goes by its count of slow tests."""
    known = json.loads(MODULE_SECONDS.read_text()) if MODULE_SECONDS.exists() else {}
    slow = Counter(item.nodeid.split("::")[0] for item in items
                   if item.get_closest_marker("slow"))

    def weight(item) -> float:
        module = item.nodeid.split("::")[0]
        return known.get(module, slow[module])

    items.sort(key=lambda item: -weight(item))


@pytest.hookimpl(specname="pytest_runtest_setup", tryfirst=True)
def pytest_runtest_setup_notes_engines(item):
    item.stash[_ENGINES_BEFORE] = engine_starts.started_engines()


@pytest.hookimpl(specname="pytest_runtest_teardown", wrapper=True, tryfirst=True)
def pytest_runtest_teardown_stops_live_runs(item, nextitem):
    """A window closed while its run is live asks "Stop it?" in a modal box that nobody
    answers in a test: after a test failed mid-run, pytest-qt's close at teardown waited
    on it forever (the hang once blamed on the window fixture). Here the answer is Yes:
    the run stops at its next batch and the window closes when it has."""
    window = sys.modules.get("mgpu_gui.gui.main_window")
    if window is None or "qtbot" not in item.fixturenames:
        return (yield)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(window.MainWindow, "confirm_stop_on_close", lambda self: True)
        return (yield)


@pytest.hookimpl(specname="pytest_runtest_teardown", trylast=True)
def pytest_runtest_teardown_collects(item, nextitem):
    gc_guard.collect_due()


@pytest.hookimpl(specname="pytest_runtest_teardown", trylast=True)
def pytest_runtest_teardown_checks_engines(item, nextitem):
    """Fail a test that starts TensorFlow or JAX without `slow`: here (its fixtures too,
    module- and session-wide ones included) or in a child. `gpu` tests run on their own."""
    if (item.get_closest_marker("slow") or item.get_closest_marker("gpu")
            or _ENGINES_BEFORE not in item.stash):
        return
    here = engine_starts.started_engines() - item.stash[_ENGINES_BEFORE]
    children = engine_starts.started_by(item.nodeid, _ENGINE_LOG)
    if here or children:
        pytest.fail(f"started {', '.join([*sorted(here), *children])} without the `slow` "
                    f"marker: mark it slow, or keep the engine out of it")


@pytest.fixture
def nvml():
    """A fake `pynvml` module with two GPUs (see mgpu_gui/testing/fake_pynvml.py)."""
    from mgpu_gui.testing.fake_pynvml import fake_nvml

    return fake_nvml()


@pytest.fixture
def session(nvml):
    from mgpu_gui.core.devices.nvml import NvmlSession

    session = NvmlSession(nvml)
    yield session
    session.shutdown()


@pytest.fixture(scope="module")
def host():
    """A process holding 2 CPU replicas, shared by a module's in-process training tests."""
    from tests.helpers.hosts import ReplicaHost

    made = ReplicaHost(2)
    yield made
    made.close()


@pytest.fixture(autouse=True)
def _isolated_store(tmp_path_factory, monkeypatch):
    """Every test gets a run store of its own, never the user's run history."""
    monkeypatch.setenv("MGPU_GUI_STORE", str(tmp_path_factory.mktemp("store") / "runs.sqlite3"))


@pytest.fixture
def store():
    """That run store, opened (a test module may define its own `store` instead)."""
    from mgpu_gui.core.runs.store import RunStore

    with RunStore() as opened:
        yield opened


@pytest.fixture(autouse=True)
def _isolated_logs(tmp_path_factory, monkeypatch):
    """Children's log files (export, the TensorFlow check) go to a temporary folder."""
    monkeypatch.setenv(LOG_DIR_ENV, str(tmp_path_factory.mktemp("logs")))


@pytest.fixture(autouse=True)
def _no_network(monkeypatch):
    """The same offline and online: where a built-in's ImageNet weights would be downloaded
    from is unreachable in this process (tests/test_weights_check.py says otherwise
    where it needs to)."""
    from mgpu_gui.core.modelfiles import builtins

    monkeypatch.setattr(builtins, "unreachable", lambda url, timeout=0: "no network in tests")


@pytest.fixture(autouse=True)
def _warm_starts_in_slow_tests_only(request, monkeypatch):
    """A test without `slow` starts no engine: neither a warm starter (it imports one) nor a
    child forked from one (which has one imported; mgpu_gui/core/children/warm_start.py).
    Its children start fresh, and the check below sees the engines they import.
    A slow test's process starts its starter at once, not at its second child: the CLIs,
    supervisors and replica hosts its tests start share it from their first child on
    (a CLI starts one worker, which starts one export check: each was a fresh TensorFlow,
    about 45 of them in a suite run)."""
    if request.node.get_closest_marker("slow"):
        warm_start.start_starter()
    else:
        monkeypatch.setenv(warm_start.OFF_ENV, "0")


@pytest.fixture(autouse=True)
def _isolated_settings(request, tmp_path_factory):
    """QSettings of GUI tests go to a temporary folder, never the user's."""
    if "qtbot" not in request.fixturenames and "qapp" not in request.fixturenames:
        yield
        return
    from PySide6.QtCore import QCoreApplication, QSettings

    folder = tmp_path_factory.mktemp("settings")
    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(folder))
    QCoreApplication.setOrganizationName("mgpu-gui-tests")
    QCoreApplication.setApplicationName("mgpu-gui-tests")
    from mgpu_gui.gui.desktop_notify import DESKTOP_ALERTS_KEY
    from mgpu_gui.gui.tool_dialogs import EVALUATE_FINISHED_KEY

    # Windows that finish runs start no evaluator child (TensorFlow, seconds) each, nor
    # say it on a developer's desktop; the tests of those switches turn them on.
    QSettings().setValue(EVALUATE_FINISHED_KEY, False)
    QSettings().setValue(DESKTOP_ALERTS_KEY, False)
    yield


@pytest.fixture(autouse=True)
def _window_runs_at_the_suites_priority(request, monkeypatch):
    """A window's run on CPU replicas works at nice +10 so that the window keeps a core
    (run_controller.py); in the suite, whose own workers keep every core busy, that gave
    it a tenth of one: a window test took 186 s instead of 25 s alone and finished last.
    Here it competes as the tests' other children do."""
    if "qtbot" in request.fixturenames:
        monkeypatch.setattr("mgpu_gui.gui.jobs.run_controller.CPU_RUN_NICE", 0)
    yield


@pytest.fixture(autouse=True)
def _no_leftover_threads_or_timers(request, monkeypatch):
    """Fail a GUI test that leaves a QThread running or a QTimer active."""
    if "qtbot" not in request.fixturenames:
        yield
        return
    from PySide6.QtCore import QThread, QTimer

    threads: list[QThread] = []
    timers: list[QTimer] = []
    thread_start, timer_start = QThread.start, QTimer.start

    def track_thread(self, *args):
        threads.append(self)
        return thread_start(self, *args)

    def track_timer(self, *args):
        timers.append(self)
        return timer_start(self, *args)

    monkeypatch.setattr(QThread, "start", track_thread)
    monkeypatch.setattr(QTimer, "start", track_timer)
    yield
    from PySide6.QtTest import QTest

    QTest.qWait(1)  # let deleteLater and finished signals run
    running = [t for t in threads if _alive(lambda t=t: t.isRunning())]
    active = [t for t in timers if _alive(lambda t=t: t.isActive())]
    assert not running, f"test left {len(running)} QThread(s) running"
    assert not active, f"test left {len(active)} QTimer(s) active"


def _alive(check) -> bool:
    try:
        return bool(check())
    except RuntimeError:  # the C++ object was deleted with its owner: stopped
        return False


@pytest.fixture
def panel(qtbot):
    """A run setup panel of its own, shut down after the test (its checks and probe)."""
    from mgpu_gui.gui.panels.run_setup import RunSetupPanel

    widget = RunSetupPanel()
    qtbot.addWidget(widget)
    yield widget
    widget.shutdown()


@pytest.fixture
def open_runs_panel(qtbot):
    """Opens a Runs tab on a store, shown at a width after its first background read."""
    from mgpu_gui.gui.panels.runs import RunsPanel

    opened = []

    def open_panel(store, width: int = 900, height: int = 260):
        widget = RunsPanel(store)
        qtbot.addWidget(widget)
        widget.resize(width, height)
        with qtbot.waitSignal(widget.refreshed, timeout=5_000):
            widget.show()
        opened.append(widget)
        return widget

    yield open_panel
    for widget in opened:
        widget.shutdown()


@pytest.fixture
def window(qtbot):
    """The main window on a machine without a driver, shown and ready to train."""
    from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState
    from mgpu_gui.gui.jobs.telemetry_source import TelemetrySource
    from mgpu_gui.gui.main_window import MainWindow

    no_gpu = GpuInventory(state=NvmlState.NO_DRIVER, message="No NVIDIA driver found (test).")
    win = MainWindow(telemetry=TelemetrySource(inventory=no_gpu))
    qtbot.addWidget(win)
    win.show()
    qtbot.waitUntil(win.train_action.isEnabled, timeout=10_000)
    yield win
    win.close()
