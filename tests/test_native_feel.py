"""The desktop app feels native: the system colour scheme (plots included), high DPI,
keyboard shortcuts, tooltips that explain the multi-GPU terms, accessible names on
every interactive widget, and an About dialog whose TensorFlow versions come from a
child process.

Switching the scheme: Qt 6.8's `QStyleHints.setColorScheme()` is a request to the
platform theme, and the offscreen platform ignores it (checked: the scheme stays
Unknown and no signal comes). So the tests do what a desktop does when the user
switches: the platform emits `colorSchemeChanged` (GNOME, and Qt's generic Unix
theme through the XDG portal), or it supplies a new application palette (KDE,
Windows, macOS). Both paths are tested.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import subprocess
import sys
import textwrap

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QKeySequence, QPalette
from PySide6.QtTest import QTest
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractItemView,
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QFileDialog,
    QGraphicsView,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMenuBar,
    QPlainTextEdit,
    QScrollBar,
    QTabBar,
    QTextEdit,
    QWidget,
)

from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState, query_inventory
from mgpu_gui.core.events import BatchEnd, EpochEnd, RunStarted
from mgpu_gui.gui.jobs.run_controller import RunState
from mgpu_gui.gui.jobs.telemetry_source import TelemetrySource
from mgpu_gui.gui.main_window import MainWindow
from mgpu_gui.gui.theme import (
    MIN_CURVE_CONTRAST,
    contrast,
    dark_palette,
    is_dark,
    on_background,
    plot_colors,
)

NO_GPU = GpuInventory(state=NvmlState.NO_DRIVER, message="No NVIDIA driver found (test).",
                      reason="No NVIDIA driver found (test)")
CURVE_ROLES = ("train", "val", "best", "lr", "rate")


def run_events(epochs: int = 3, steps: int = 5) -> list:
    events = [RunStarted(
        run_dir="/tmp/run", device_kind="cpu", devices=["CPU:0", "CPU:1"],
        device_names=["CPU 0", "CPU 1"], num_replicas=2, batch_per_replica=64,
        global_batch=128, train_samples=1437, val_samples=360, test_samples=0,
        steps_per_epoch=steps, dropped_per_epoch=29, epochs=epochs + 2, initial_epoch=0,
        model_name="demo", params=1000, cross_device_ops="ReductionToOneDevice",
        tf_version="2.21.0", keras_version="3.15.1", t=1000.0)]
    for epoch in range(epochs):
        for batch in range(steps):
            step = epoch * steps + batch
            events.append(BatchEnd(epoch=epoch, batch=batch, steps=steps,
                                   metrics={"loss": 2 * math.exp(-step / 6), "accuracy":
                                            1 - math.exp(-step / 5)}, samples_per_s=2000.0,
                                   learning_rate=1e-3, t=1000.0 + step))
        events.append(EpochEnd(epoch=epoch, epochs=epochs + 2, metrics={
            "loss": 2 * math.exp(-epoch), "accuracy": 0.5 + 0.1 * epoch,
            "val_loss": 2.2 * math.exp(-epoch), "val_accuracy": 0.45 + 0.1 * epoch},
            samples_per_s=2000.0, duration_s=5.0, learning_rate=1e-3, best=True,
            t=1000.0 + (epoch + 1) * steps))
    return events


@pytest.fixture
def restore_scheme(qapp):
    """Whatever a test does to the scheme, the next test starts light."""
    yield
    qapp.styleHints().colorSchemeChanged.emit(Qt.ColorScheme.Light)
    qapp.setPalette(QPalette())


def switch_scheme(app: QApplication, scheme: Qt.ColorScheme) -> str:
    """Ask Qt for `scheme` (6.8+); where the platform ignores that (offscreen), emit its
    change signal as the platform would. Returns which path took effect."""
    app.styleHints().setColorScheme(scheme)
    if app.styleHints().colorScheme() == scheme:
        return "setColorScheme"
    app.styleHints().colorSchemeChanged.emit(scheme)
    return "colorSchemeChanged"


def pixel(widget: QWidget, x: int, y: int) -> QColor:
    return widget.grab().toImage().pixelColor(x, y)


def plot_state(window: MainWindow) -> dict[str, str]:
    plot = window.curves.plot_widgets()[0]
    item = plot.getPlotItem()
    return {
        "palette": window.palette().color(QPalette.ColorRole.Window).name(),
        "background": plot.backgroundBrush().color().name(),
        "axis_text": item.getAxis("left").textPen().color().name(),
        "pixel": pixel(plot, 3, 3).name(),  # a corner: background only
        "train": item.listDataItems()[1].opts["pen"].color().name(),  # the smoothed curve
        "meter": pixel(window.progress.total_bar, 2, 2).name(),
        "setup": window.run_setup.palette().color(QPalette.ColorRole.Base).name(),
    }


def assert_follows(window: MainWindow, state: dict[str, str], dark: bool) -> None:
    app_palette = QGuiApplication.palette()
    assert is_dark(app_palette) is dark
    base = app_palette.color(QPalette.ColorRole.Base)
    assert state["background"] == base.name()  # the plots' background is the palette's
    assert state["axis_text"] == app_palette.color(QPalette.ColorRole.Text).name()
    assert (QColor(state["pixel"]).lightness() < 128) is dark
    # A widget with a style sheet (the run setup) follows too.
    assert state["setup"] == base.name()
    colors = window.curves.colors
    assert colors.dark is dark and state["train"] == colors.train
    for role in CURVE_ROLES:
        assert contrast(QColor(getattr(colors, role)), base) >= MIN_CURVE_CONTRAST, role


def test_system_scheme_switch_restyles_palette_and_plots(qtbot, qapp, window, restore_scheme):
    for event in run_events():
        window.curves.handle_event(event)
    window.curves.stop_updates()
    light = plot_state(window)
    assert_follows(window, light, dark=False)

    path = switch_scheme(qapp, Qt.ColorScheme.Dark)
    qtbot.waitUntil(lambda: plot_state(window)["background"] != light["background"])
    dark = plot_state(window)
    assert_follows(window, dark, dark=True)
    assert all(dark[k] != light[k] for k in light), (path, light, dark)

    switch_scheme(qapp, Qt.ColorScheme.Light)
    qtbot.waitUntil(lambda: plot_state(window)["background"] == light["background"])
    assert plot_state(window) == light


def test_a_platform_palette_change_restyles_the_plots_too(qtbot, qapp, window, restore_scheme):
    from mgpu_gui.gui.dialogs.run_compare import ComparedRun, RunCompareView

    compare = RunCompareView([ComparedRun("a", (0, 1), {"loss": (1.0, 0.5)}),
                              ComparedRun("b", (0, 1), {"loss": (1.2, 0.4)})])
    qtbot.addWidget(compare)
    compare.show()
    qapp.setPalette(dark_palette())  # what KDE, Windows or macOS do on a switch
    qtbot.waitUntil(lambda: window.curves.colors.dark and compare.colors.dark)
    assert_follows(window, plot_state(window), dark=True)
    assert compare.plot.backgroundBrush().color().name() == "#1e1e1e"
    assert compare.curves[0].opts["pen"].color().name() == compare.colors.series[0]
    for color in compare.colors.series:
        assert contrast(QColor(color), QColor("#1e1e1e")) >= MIN_CURVE_CONTRAST
    qapp.setPalette(QPalette())
    qtbot.waitUntil(lambda: not window.curves.colors.dark)


def test_curve_colours_are_readable_on_both_schemes(qapp):
    for palette in (qapp.style().standardPalette(), dark_palette()):
        colors = plot_colors(palette)
        base = palette.color(QPalette.ColorRole.Base)
        for color in [getattr(colors, r) for r in CURVE_ROLES] + list(colors.series):
            assert contrast(QColor(color), base) >= MIN_CURVE_CONTRAST, (color, base.name())
        assert contrast(QColor(colors.text), base) >= 4.5
    # Text colours chosen for light backgrounds (GPU processes, run states, findings) stay
    # as designed there and are lightened on dark ones.
    assert on_background("#1a7f37", QColor("#efefef")).name() == "#1a7f37"
    assert contrast(on_background("#1a7f37", QColor("#2b2b2b")), QColor("#2b2b2b")) >= 4.5


HIGH_DPI_SCRIPT = """
import json, sys
from PySide6.QtCore import QSize
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QApplication
import numpy as np
from mgpu_gui.core.devices.nvml import query_inventory
from mgpu_gui.gui.main_window import MainWindow
from mgpu_gui.gui.widgets.gauges import Meter, Sparkline
from mgpu_gui.gui.widgets.runs_table import _status_icon
from mgpu_gui.gui.jobs.telemetry_source import TelemetrySource
from mgpu_gui.testing.fake_pynvml import fake_nvml
from tests.test_native_feel import run_events

app = QApplication([])
app.setOrganizationName("mgpu-gui-tests")
nvml = fake_nvml()
window = MainWindow(telemetry=TelemetrySource(nvml=nvml, inventory=query_inventory(nvml)))
window.resize(1100, 760)
window.show()
for event in run_events():
    window.curves.handle_event(event)
window.curves.stop_updates()
meter = Meter()
meter.set_value(0.42, "42%")
meter.resize(140, 22)
spark = Sparkline(120.0)
t = np.arange(60.0)
spark.set_series(t, 50 + 40 * np.sin(t / 5), 0.5 + 0.3 * np.cos(t / 7))
spark.resize(96, 44)
app.processEvents()

def doubled(image):
    # A 1x rendering scaled up repeats every pixel in 2x2 blocks; a native 2x one does not.
    w, h = image.width() // 2 * 2, image.height() // 2 * 2
    bits = np.frombuffer(image.convertToFormat(image.Format.Format_RGB32).constBits(),
                         dtype=np.uint32).reshape(image.height(), -1)[:h, :w]
    return bool((bits[:, 0::2] == bits[:, 1::2]).all() and (bits[0::2] == bits[1::2]).all())

def grabbed(widget):
    pixmap = widget.grab()
    size = pixmap.size()
    return {"dpr": pixmap.devicePixelRatio(), "pixels": [size.width(), size.height()],
            "logical": [widget.width(), widget.height()], "doubled": doubled(pixmap.toImage())}

plot = window.curves.plot_widgets()[0]
icon = _status_icon("#2e7d32").pixmap(QSize(12, 12), 2.0)
font = app.font()
print(json.dumps({
    "window_dpr": window.devicePixelRatio(),
    "window": grabbed(window), "meter": grabbed(meter), "sparkline": grabbed(spark),
    "plot": grabbed(plot),
    "icon": [icon.width(), icon.height(), icon.devicePixelRatio()],
    "font_pixel_size": font.pixelSize(), "font_point_size": font.pointSizeF(),
    "curve_antialias": plot.getPlotItem().listDataItems()[1].opts["antialias"],
}))
window.close()
"""


@pytest.mark.slow
def test_high_dpi_renders_at_device_pixels(tmp_path):
    """With QT_SCALE_FACTOR=2: the window reports 2 device pixels per logical pixel, its
    grab is twice the logical size, the hand-painted gauges, a pyqtgraph plot and the
    window are painted at device resolution (not a 1x image scaled up: that would repeat
    every pixel in 2x2 blocks), the status icons have a 2x pixmap, the font comes from the
    system in points (it scales), and curves are antialiased."""
    import os

    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "QT_SCALE_FACTOR": "2",
           "XDG_CONFIG_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(HIGH_DPI_SCRIPT)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["window_dpr"] == 2.0
    for name in ("window", "meter", "sparkline", "plot"):
        grab = result[name]
        assert grab["dpr"] == 2.0, name
        assert grab["pixels"] == [2 * n for n in grab["logical"]], (name, grab)
        assert not grab["doubled"], f"{name} was scaled up from 1x, not painted at 2x"
    assert result["icon"] == [24, 24, 2.0]
    assert result["font_pixel_size"] == -1 and result["font_point_size"] > 0
    assert result["curve_antialias"] is True


# -- shortcuts ----------------------------------------------------------------------------


def press(window: MainWindow, key: Qt.Key, focus: QWidget | None = None) -> None:
    window.activateWindow()
    QTest.qWaitForWindowActive(window, 2000)
    target = focus or window
    target.setFocus()
    QTest.keyClick(target, key, Qt.KeyboardModifier.ControlModifier)


def test_shortcuts_are_registered(window):
    assert window.open_action.shortcut() == QKeySequence("Ctrl+O")
    assert window.train_action.shortcut() == QKeySequence("Ctrl+Return")
    assert window.stop_action.shortcut() == QKeySequence("Ctrl+.")
    assert window.export_action.shortcut() == QKeySequence("Ctrl+E")
    for action in (window.open_action, window.train_action, window.stop_action,
                   window.export_action):
        assert action.shortcut().toString() in action.toolTip()  # the tooltip tells it


def test_shortcuts_fire_and_respect_the_enabled_state(qtbot, window, monkeypatch, tmp_path):
    import mgpu_gui.gui.export_actions as export_actions
    from mgpu_gui.core.runs.folder import RunDir

    started, stopped, exports = [], [], []
    monkeypatch.setattr(window.controller, "start", lambda config: started.append(config))
    monkeypatch.setattr(window.controller, "stop", lambda: stopped.append(True))
    monkeypatch.setattr(export_actions, "ask_export_target",
                        lambda parent, suggested: exports.append(suggested))

    # Open (Ctrl+O) opens the model file dialog, even with the focus in a field.
    with qtbot.waitSignal(window.open_action.triggered):
        press(window, Qt.Key.Key_O, window.run_setup.batch_spin)
    dialogs = window.run_setup.findChildren(QFileDialog)
    assert len(dialogs) == 1 and dialogs[0].isVisible()
    dialogs[0].reject()

    # Train (Ctrl+Return): enabled with valid settings; nothing happens when disabled.
    press(window, Qt.Key.Key_Return, window.run_setup.lr_edit)
    assert len(started) == 1
    window.run_setup.lr_edit.setText("fast")
    window.run_setup.check_now()
    assert not window.train_action.isEnabled()
    press(window, Qt.Key.Key_Return)
    assert len(started) == 1

    # Stop (Ctrl+.): only while a run is running.
    press(window, Qt.Key.Key_Period)
    assert stopped == []
    window.controller._set_state(RunState.RUNNING)
    assert window.stop_action.isEnabled()
    press(window, Qt.Key.Key_Period)
    assert stopped == [True]
    window.controller._set_state(RunState.IDLE)

    # Export (Ctrl+E): only when a run left a trained model.
    press(window, Qt.Key.Key_E)
    assert exports == []
    run = RunDir(tmp_path / "run")
    run.last_checkpoint.parent.mkdir(parents=True)
    run.last_checkpoint.write_bytes(b"model")
    window.last_run = run
    window._update_actions()
    assert window.export_action.isEnabled()
    press(window, Qt.Key.Key_E)
    assert len(exports) == 1


# -- tooltips and accessible names -------------------------------------------------------


def test_tooltips_explain_global_and_per_replica_batch_sync_bn_and_dropped_samples(window):
    setup, progress = window.run_setup, window.progress
    expectations = {
        setup.batch_spin: ["per-replica batch", "global batch", "replicas"],
        setup.batch_text: ["global batch", "per-replica batch", "replicas"],
        setup.batch_hint: ["dropped", "global batch", "replica"],
        setup.sync_bn: ["synchronized batchnorm", "global batch", "per-replica"],
        progress.status_label: ["global batch", "per-replica", "dropped per epoch",
                                "replicas"],
    }
    for widget, words in expectations.items():
        tip = widget.toolTip().lower()
        for word in words:
            assert word in tip, (widget.accessibleName(), word, tip)


INTERACTIVE = (QAbstractButton, QLineEdit, QComboBox, QAbstractSpinBox, QAbstractSlider,
               QAbstractItemView, QTabBar, QPlainTextEdit, QTextEdit, QMenuBar, QGraphicsView)
QT_PARTS = {"qt_spinbox_lineedit", "qt_tableview_cornerbutton", "qt_toolbar_ext_button",
            "qt_menubar_ext_button"}


def is_qt_part(widget: QWidget) -> bool:
    """Pieces Qt builds inside its own composite widgets, which expose them through the
    composite's accessible interface: a spin box's editor, a combo box's popup list,
    a scroll area's scroll bars, a table's headers and corner button."""
    if widget.objectName() in QT_PARTS:
        return True
    parent = widget.parentWidget()
    if isinstance(widget, QScrollBar) and parent is not None and (
            parent.objectName().startswith("qt_scrollarea")):
        return True
    if isinstance(widget, QHeaderView) and isinstance(parent, QAbstractItemView):
        return True
    while parent is not None:  # inside a combo box: its popup (its editor is checked)
        if isinstance(parent, QComboBox) and widget is not parent.lineEdit():
            return True
        if isinstance(parent, QAbstractSpinBox):
            return True
        parent = parent.parentWidget()
    return False


def accessible_name(widget: QWidget, buddies: dict[int, str]) -> str:
    """What a screen reader announces: the accessible name; a buddy label's text (Qt uses
    it when there is no name); for a button or tab bar, its text."""
    from PySide6.QtGui import QAccessible

    if widget.accessibleName():
        return widget.accessibleName()
    if id(widget) in buddies:
        return buddies[id(widget)]
    if isinstance(widget, (QAbstractButton, QTabBar)):
        interface = QAccessible.queryAccessibleInterface(widget)
        return interface.text(QAccessible.Text.Name) if interface is not None else ""
    return ""


def unnamed(root: QWidget) -> tuple[list[str], int]:
    widgets = [root, *root.findChildren(QWidget)]
    buddies = {id(label.buddy()): label.text().replace("&", "")
               for label in root.findChildren(QLabel) if label.buddy() is not None}
    checked = [w for w in widgets if isinstance(w, INTERACTIVE) and not is_qt_part(w)]
    missing = [f"{type(w).__name__} {w.objectName()!r} in {type(w.parentWidget()).__name__}"
               for w in checked if not accessible_name(w, buddies).strip()]
    return missing, len(checked)


def test_every_interactive_widget_has_an_accessible_name(qtbot, nvml):
    from mgpu_gui.gui.dialogs.about import AboutDialog
    from mgpu_gui.gui.dialogs.doctor import DoctorDialog
    from mgpu_gui.gui.dialogs.run_compare import ComparedRun, RunCompareView

    inventory = query_inventory(nvml)  # two GPUs: their rows are walked too
    window = MainWindow(telemetry=TelemetrySource(nvml=nvml, inventory=inventory))
    qtbot.addWidget(window)
    window.show()
    window.show_runs()  # the Runs tab: history table and its buttons
    compare = RunCompareView([ComparedRun("a", (0,), {"loss": (1.0,)}),
                              ComparedRun("b", (0,), {"loss": (2.0,)})])
    about = AboutDialog(inventory, ask=False)
    doctor = DoctorDialog(inventory, ask=False)
    for widget in (compare, about, doctor):
        qtbot.addWidget(widget)
    total = 0
    for root in (window, compare, about, doctor):
        missing, count = unnamed(root)
        assert not missing, missing
        total += count
    assert total > 60  # the walk really went through the window
    names = {w.accessibleName() for w in window.findChildren(QWidget)}
    assert {"Run history", "Train on GPU 0", "Train on GPU 1", "Batch per GPU (per replica)",
            "Synchronized BatchNorm", "Smoothing"} <= names
    window.close()


# -- About -------------------------------------------------------------------------------


@pytest.mark.slow
def test_about_opens_at_once_then_shows_what_tensorflow_reports(qtbot, nvml):
    inventory = query_inventory(nvml)
    window = MainWindow(telemetry=TelemetrySource(nvml=nvml, inventory=inventory))
    qtbot.addWidget(window)
    window.show()
    window.about_action.trigger()
    about = window.about_dialog
    assert about is not None and about.isVisible()
    rows = {label: field.text() for label, field in about.values.items()}
    assert rows["NVIDIA driver"] == "550.54.15 (supports CUDA 12.4)"  # NVML, at once
    for label in ("TensorFlow", "Keras", "CUDA", "cuDNN"):
        assert rows[label] == "asking TensorFlow…"
    qtbot.waitUntil(lambda: about.tf is not None, timeout=120_000)
    rows = {label: field.text() for label, field in about.values.items()}
    assert rows["TensorFlow"] == importlib.metadata.version("tensorflow")
    assert rows["Keras"] == importlib.metadata.version("keras")
    # Cross-check CUDA and cuDNN with TensorFlow itself, in another process.
    truth = json.loads(subprocess.run(
        [sys.executable, "-c", "import json, tensorflow as tf; "
         "print(json.dumps(dict(tf.sysconfig.get_build_info())))"],
        capture_output=True, text=True, timeout=120).stdout.strip().splitlines()[-1])
    if truth.get("cuda_version"):
        assert rows["CUDA"] == f"{truth['cuda_version']} (TensorFlow's build)"
        assert rows["cuDNN"] == f"{truth['cudnn_version']} (TensorFlow's build)"
    else:
        assert rows["CUDA"] == rows["cuDNN"] == "not built with CUDA"
    assert rows["GPUs TensorFlow sees"] == "none"  # conftest: CUDA_VISIBLE_DEVICES=""
    about.copy()
    assert "TensorFlow: " + rows["TensorFlow"] in QGuiApplication.clipboard().text()
    with qtbot.waitSignal(about.check_setup_requested):
        about.check_button.click()
    assert window.doctor_dialog is not None and window.doctor_dialog.isVisible()
    window.close()
    assert not about.probe.is_running() and not window.doctor_dialog


@pytest.mark.slow
def test_about_and_doctor_never_load_tensorflow_in_the_gui_process(tmp_path):
    script = """
        import sys
        from PySide6.QtCore import QEventLoop, QTimer
        from PySide6.QtWidgets import QApplication
        from mgpu_gui.gui.main_window import MainWindow
        app = QApplication([])
        app.setOrganizationName("mgpu-gui-tests")
        window = MainWindow()
        window.show()
        about, doctor = window.show_about(), window.check_setup()
        loop = QEventLoop()
        timer = QTimer()
        timer.timeout.connect(lambda: about.tf and doctor.tf and loop.quit())
        timer.start(50)
        loop.exec()
        timer.stop()
        print(about.values["TensorFlow"].text(), bool(doctor.findings))
        window.close()
        print(",".join(m for m in ("tensorflow", "keras") if m in sys.modules) or "none")
    """
    import os

    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                          text=True, timeout=240,
                          env={**os.environ, "QT_QPA_PLATFORM": "offscreen",
                               "XDG_CONFIG_HOME": str(tmp_path)})
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0, done.stderr[-3000:]
    assert lines[-2] == f"{importlib.metadata.version('tensorflow')} True"
    assert lines[-1] == "none"
