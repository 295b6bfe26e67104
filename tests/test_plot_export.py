"""Export: any plot to PNG or SVG from its context menu, the Runs tab's runs to CSV.

The PNG's size at QT_SCALE_FACTOR=2 is checked in a child Python (the factor must be
set before the QApplication exists); everything else runs in this process. No
TensorFlow: the runs come from the committed v4 store.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QColor, QImage, QPainter
from PySide6.QtSvg import QSvgRenderer
from PySide6.QtWidgets import QMainWindow

from mgpu_gui.cli import main as cli
from mgpu_gui.core.events import EpochEnd, RunStarted
from mgpu_gui.core.runs.store import RunStore
from mgpu_gui.gui.dialogs.run_compare import ComparedRun, RunCompareView
from mgpu_gui.gui.panels import runs_csv
from mgpu_gui.gui.panels.curves import CurvesPanel
from mgpu_gui.gui.panels.runs import RunsPanel
from mgpu_gui.gui.theme import dark_palette
from mgpu_gui.gui.widgets import notifier as notifier_module
from mgpu_gui.gui.widgets import plot_export
from mgpu_gui.gui.widgets.notifier import Notice, NoticeKind, Notifier
from mgpu_gui.gui.widgets.scaling_plot import ScalingPlot

SVG = "{http://www.w3.org/2000/svg}"
EXPORTS = ["Export as PNG…", "Export as SVG…"]
STORE_V4 = Path(__file__).parent / "store_files" / "runs-v4.sqlite3"

# The curves panel as the window shows it, at 2x device pixels: its loss plot exported.
SCALED_EXPORT = """
import json, sys
from pathlib import Path
from PySide6.QtWidgets import QApplication
app = QApplication([])
from mgpu_gui.core.events import EpochEnd
from mgpu_gui.gui.panels.curves import CurvesPanel
from mgpu_gui.gui.widgets.plot_export import ImageFormat, export_plot
panel = CurvesPanel()
panel.resize(900, 600)
panel.load_events([EpochEnd(epoch=e, epochs=3, metrics={"loss": 1 / (e + 1)},
                            samples_per_s=100.0, duration_s=1.0) for e in range(3)])
panel.show()
app.processEvents()
plot = panel.plot_widgets()[0]
export_plot(plot, Path(sys.argv[1]), ImageFormat.PNG)
print(json.dumps({"size": [plot.width(), plot.height()], "ratio": plot.devicePixelRatioF(),
                  "background": panel.colors.background}))
"""


def epochs(n: int = 4) -> list[EpochEnd]:
    return [EpochEnd(epoch=e, epochs=n, metrics={"loss": 1 / (e + 1), "val_loss": 1.2 / (e + 1)},
                     samples_per_s=100.0, duration_s=1.0, t=float(e)) for e in range(n)]


def started_event(run_dir: Path) -> RunStarted:
    return RunStarted(
        run_dir=str(run_dir), device_kind="cpu", devices=["/cpu:0"], device_names=["CPU"],
        num_replicas=1, batch_per_replica=32, global_batch=32, train_samples=320,
        val_samples=32, test_samples=0, steps_per_epoch=10, dropped_per_epoch=0, epochs=4,
        initial_epoch=0, model_name="m", params=10, cross_device_ops="", tf_version="2.21",
        keras_version="3.15", t=0.0)


@pytest.fixture
def window(qtbot):
    """A bare window with the app's notifier: where exports say what happened."""
    win = QMainWindow()
    win.notifier = Notifier(win)
    qtbot.addWidget(win)
    win.resize(1000, 700)
    return win


@pytest.fixture
def curves(window, qtbot):
    panel = CurvesPanel()
    window.setCentralWidget(panel)
    window.show()
    yield panel
    panel.shutdown()


@pytest.fixture
def save_to(monkeypatch):
    """The file dialog answers with the path set here (None: cancelled); `asked` keeps what
    it suggested."""
    answer: dict = {"path": None, "asked": []}

    def ask(parent, title, suggested, file_filter, suffix):
        answer["asked"].append(suggested)
        return answer["path"]

    monkeypatch.setattr(plot_export, "ask_save_path", ask)
    monkeypatch.setattr(runs_csv, "ask_save_path", ask)
    return answer


def test_png_at_scale_factor_2_has_the_views_device_pixels_on_the_theme_background(tmp_path):
    out = tmp_path / "loss.png"
    env = {"QT_QPA_PLATFORM": "offscreen", "QT_SCALE_FACTOR": "2",
           "PYTHONPATH": str(Path(__file__).parents[1])}
    done = subprocess.run([sys.executable, "-c", SCALED_EXPORT, str(out)], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    image = QImage(str(out))
    assert shown["ratio"] == 2.0
    assert (image.width(), image.height()) == (2 * shown["size"][0], 2 * shown["size"][1])
    assert image.pixelColor(0, 0) == QColor(shown["background"])  # opaque, not transparent
    assert image.pixelColor(image.width() - 1, image.height() - 1) == QColor(shown["background"])


def rendered_svg(path: Path, size) -> QImage:
    image = QImage(size, QImage.Format.Format_RGB32)
    image.fill(QColor("white"))
    painter = QPainter(image)
    QSvgRenderer(str(path)).render(painter)
    painter.end()
    return image


def differing_pixels(image: QImage, pixmap) -> float:
    """The share of pixels whose colours differ by more than a quarter in any channel."""
    def rgb(picture: QImage) -> np.ndarray:
        picture = picture.convertToFormat(QImage.Format.Format_RGB32)
        rows = np.frombuffer(picture.constBits(), np.uint8).reshape(
            picture.height(), picture.bytesPerLine() // 4, 4)
        return rows[:, :picture.width(), :3].astype(int)

    return float((np.abs(rgb(image) - rgb(pixmap.toImage())).max(axis=2) > 64).mean())


def context_menu(qtbot, widget) -> list[str]:
    """The entries of the menu a right-click in the plot's view opens."""
    view = widget.getPlotItem().getViewBox()
    centre = widget.mapFromScene(view.sceneBoundingRect().center())
    qtbot.mouseClick(widget.viewport(), Qt.MouseButton.RightButton, pos=QPoint(centre))
    menu = view.menu
    qtbot.waitUntil(menu.isVisible)
    menu.close()
    return [a.text() for a in menu.actions() if not a.isSeparator()]


def test_every_plot_offers_png_and_svg_in_place_of_pyqtgraphs_export(qtbot, curves):
    compare = RunCompareView([ComparedRun("a", (0, 1), {"loss": (1.0, 0.5)}),
                              ComparedRun("b", (0, 1), {"loss": (0.9, 0.4)})])
    scaling = ScalingPlot()
    for widget in (compare, scaling):
        qtbot.addWidget(widget)
    plots = [*curves.plot_widgets(), compare.plot, scaling.throughput, scaling.efficiency]
    for plot in plots:
        assert [a.text() for a in plot.scene().contextMenu] == EXPORTS, plot.accessibleName()
    shown = curves.plot_widgets()[0]
    entries = context_menu(qtbot, shown)
    assert entries[-2:] == EXPORTS and "Export..." not in entries
    scaling.show()
    assert context_menu(qtbot, scaling.throughput)[-2:] == EXPORTS  # its menu was off before


def test_svg_holds_the_curves_and_the_notifier_says_where_it_went(qtbot, window, curves,
                                                                  save_to, tmp_path):
    curves.load_events(epochs())
    qtbot.waitUntil(lambda: curves.plot_widgets()[0].isVisible())
    plot = next(p for p in curves.plot_widgets() if p.accessibleName() == "Loss plot")
    save_to["path"] = tmp_path / "loss.svg"
    svg_action = plot.scene().contextMenu[1]
    svg_action.trigger()
    root = ET.parse(save_to["path"]).getroot()
    assert root.tag == SVG + "svg"
    strokes = {e.get("stroke") for e in root.iter() if e.get("stroke")}
    assert {curves.colors.val, curves.colors.train} <= strokes  # validation and train curves
    assert "Loss" in {e.text.strip() for e in root.iter(SVG + "text") if e.text}
    # Drawn as the view shows it: a drawing at another resolution than the widget's put
    # the axes (pyqtgraph replays them from a QPicture) apart from the curves: 1.5 % of
    # the pixels off, against 0.15 % from antialiasing here.
    assert differing_pixels(rendered_svg(save_to["path"], plot.size()), plot.grab()) < 0.005
    assert save_to["asked"] == [Path.home() / "loss.svg"]  # no run: the home folder
    assert window.notifier.last == Notice(NoticeKind.DONE, "Plot exported",
                                          str(tmp_path / "loss.svg"))


def test_png_follows_a_dark_theme_names_the_run_and_reports_an_unwritable_folder(
        qtbot, window, curves, save_to, tmp_path):
    curves.setPalette(dark_palette())
    assert curves.colors.dark
    run_dir = tmp_path / "runs" / "digits-1"
    curves.load_events([started_event(run_dir), *epochs()])
    plot = next(p for p in curves.plot_widgets() if p.accessibleName() == "Loss plot")
    save_to["path"] = tmp_path / "loss.png"
    plot.scene().contextMenu[0].trigger()
    image = QImage(str(save_to["path"]))
    assert image.pixelColor(0, 0) == QColor(curves.colors.background)
    assert save_to["asked"] == [tmp_path / "runs" / "digits-1-loss.png"]  # beside the run
    save_to["path"] = tmp_path / "missing" / "loss.png"
    plot.scene().contextMenu[0].trigger()
    notice = window.notifier.last
    assert notice.kind is NoticeKind.FAILED and notice.title == "Plot export failed"
    assert notice.text.startswith(f"Could not write {save_to['path']}: No such file")


def test_a_failure_with_no_window_behind_still_shows(qtbot, monkeypatch):
    shown = []
    monkeypatch.setattr(notifier_module.QMessageBox, "warning",
                        lambda parent, title, text: shown.append((title, text)))
    scaling = ScalingPlot()
    qtbot.addWidget(scaling)
    notifier_module.notify_from(scaling.throughput, Notice(NoticeKind.FAILED, "T", "why"))
    notifier_module.notify_from(scaling.throughput, Notice(NoticeKind.DONE, "T", "ok"))
    assert shown == [("T", "why")]


def test_runs_tab_csv_is_the_clis_byte_for_byte(qtbot, window, save_to, tmp_path, capsys):
    path = tmp_path / "runs.sqlite3"
    shutil.copy(STORE_V4, path)
    with RunStore(path) as store:
        panel = RunsPanel(store)
        window.setCentralWidget(panel)
        window.show()
        with qtbot.waitSignal(panel.refreshed):
            pass
        ids = [r.id for r in store.runs()]
        panel.select_runs(ids)
        assert panel.csv_action.isEnabled()
        save_to["path"] = tmp_path / "gui.csv"
        panel.csv_action.trigger()
        qtbot.waitUntil(lambda: window.notifier.last is not None)
        assert cli.main(["--store", str(path), "runs", "export", *map(str, ids), "-o",
                         str(tmp_path / "cli.csv")]) == 0
        said = capsys.readouterr().out.strip()
        assert window.notifier.last == Notice(NoticeKind.DONE, "CSV exported",
                                              said.replace("cli.csv", "gui.csv"))
        assert (tmp_path / "gui.csv").read_bytes() == (tmp_path / "cli.csv").read_bytes()
        with open(tmp_path / "gui.csv", newline="") as handle:
            rows = list(csv.DictReader(handle))
        stored = [(i, e.epoch + 1, e.metrics) for i in ids
                  for e in store.series_events(i, batches=False) if isinstance(e, EpochEnd)]
        assert [(int(r["run_id"]), int(r["epoch"]), {m: float(r[m]) for m in metrics})
                for r, (_, _, metrics) in zip(rows, stored, strict=True)] == stored
        assert stored  # the runs have epochs
        assert save_to["asked"][0].name == "runs-" + "-".join(map(str, ids)) + ".csv"
        save_to["path"] = tmp_path / "missing" / "x.csv"
        window.notifier.last = None
        panel.csv_action.trigger()
        qtbot.waitUntil(lambda: window.notifier.last is not None)
        assert window.notifier.last.kind is NoticeKind.FAILED
        assert window.notifier.last.text.startswith("cannot write ")
        panel.shutdown()
