"""The child of tests/test_layout.py: the window and its dialogs at one screen size and scale.

    python -m tests.helpers.layout_probe WIDTH HEIGHT

The caller sets the screen (`QT_QPA_PLATFORM=offscreen:configfile=...`) and the scale
(`QT_SCALE_FACTOR`). The window is built once, filled with the longest texts the app can
show (8 GPUs with long names, foreign processes and the busy warning, a run's curves and
progress, long paths, the legacy-model notice, the longest field messages), sized to
WIDTH x HEIGHT device-independent pixels and checked (tests/helpers/layout_check.py); then
the no-driver state, then each dialog. Prints one JSON object: the problems by view, and
under GPU_ROWS how many GPU rows the panel shows whole without scrolling.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PySide6.QtCore import QCoreApplication, QEventLoop, QSettings, Qt, QTimer
from PySide6.QtWidgets import QApplication, QDialog, QScrollArea, QToolButton, QWidget

from tests.helpers.gpu_rows import rows_in_view
from tests.helpers.layout_check import Problem, check_on_screen, check_window, settle

FACTS = Path(__file__).parents[1] / "doctor_facts"
PROJECT = "/home/researcher/projects/image-classification-2025/experiments/resnet50-finetune"
LONG_MODEL = f"{PROJECT}/checkpoints/resnet50_multi_gpu_epoch_120_val_accuracy_0.9412.h5"
LONG_DATA = f"{PROJECT}/data/imagenet_subset_224px_train_and_validation_arrays.npz"
LONG_OUTPUT = f"{PROJECT}/runs/learning-rate-sweep-with-linear-scaling-and-warmup"
GPU_NAMES = ("NVIDIA H100 80GB HBM3",) * 8
OWN_PID = 4242
VIEWS = ("window size", "run setup", "GPU panel", "curves", "rest of the window", "About",
         "Check my setup", "Train across machines", "Compare runs", "Scaling test",
         "Find batch size", "Evaluation", "Data view", "Augmentation preview")
GPU_ROWS = "GPU rows in view"


def wait_until(condition: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    """Run the event loop (the GIL free for the telemetry thread) until `condition`."""
    loop, timer = QEventLoop(), QTimer()
    timer.timeout.connect(lambda: loop.quit() if condition() else None)
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        timer.start(20)
        loop.exec()
    timer.stop()
    return condition()


def fake_machine():
    """8 GPUs with long names, each busy with processes of others (the busy warning)."""
    from mgpu_gui.testing.fake_pynvml import FakeGpu, GiB, fake_nvml

    gpus = [FakeGpu(name=name, uuid=f"GPU-{index}", utilization=97 - 12 * index,
                    memory_used=(61 + index) * GiB, memory_busy=41, temperature=71,
                    power_mw=312_000, fan=55,
                    processes=[(OWN_PID + index, 60 * GiB), (51510 + index, 11 * GiB),
                               (123456 + index, 2 * GiB)])
            for index, name in enumerate(GPU_NAMES)]
    return fake_nvml(gpus)


def fill_gpu_panel(window) -> None:
    from mgpu_gui.core.runs.claims import DeviceUse

    panel = window.gpu_panel
    ok = wait_until(lambda: len(panel.checked_gpus()) == len(GPU_NAMES) and all(
        row.snapshot is not None for row in panel._rows))
    if not ok:
        raise SystemExit("the fake GPUs never reported")
    window.telemetry.stop()  # nothing changes while the checks run
    panel.set_own_pids({OWN_PID})
    panel.set_claims({3: DeviceUse(holder="run 2025-06-01_12-00-00 (resnet50)",
                                   waiting=(17, 18))})


def fill_run(window) -> None:
    """A run's events as the run controller emits them: the best epoch is the last one."""
    from tests.helpers.training_events import synthetic_run

    for event in synthetic_run(epochs=10, best_at=9, finish=False):
        window.controller.event.emit(event)
    window.curves.stop_updates()  # draw what is pending now, not on the next tick


def longest_message() -> str:
    """The longest message a run setup field shows (a file name with Lambda layers)."""
    from mgpu_gui.core.modelfiles.info import ModelFileInfo, lambda_refused

    info = ModelFileInfo(path=Path(LONG_MODEL), format="h5", lambda_layers=(
        "normalize_inputs_lambda", "random_crop_and_flip_lambda", "channel_shuffle_lambda"))
    return lambda_refused(info)


def legacy_info():
    """What the file inspector reports for a legacy multi_gpu_model file."""
    from mgpu_gui.core.modelfiles.info import ModelFileInfo
    from mgpu_gui.core.modelfiles.wrapper import WrapperInfo

    wrapper = WrapperInfo(towers=(8,), template_name="resnet50_imagenet_finetuned_template",
                          template_class="Functional", template_layers=177, depth=1)
    return ModelFileInfo(path=Path(LONG_MODEL), format="h5", class_name="Functional",
                         name="model_1", compiled=True, wrapper=wrapper)


def fill_run_setup(window) -> None:
    """Long paths, real problems, the longest message on every other field, the notice."""
    from mgpu_gui.core.config import LRScalingConfig, RunConfig
    from mgpu_gui.gui.panels.run_setup_form import FIELD_NAMES

    setup = window.run_setup
    setup.set_config(RunConfig(model=LONG_MODEL, data=LONG_DATA, output_dir=LONG_OUTPUT,
                               epochs=10, lr_scaling=LRScalingConfig(enabled=True,
                                                                     warmup_epochs=12)))
    setup.check_now()
    problems = setup.problems()  # the model and data not found (with their paths), ...
    for field in FIELD_NAMES:
        problems.setdefault(field, longest_message())
    setup.show_problems(problems, None)
    setup.wrapper_notice.show_for(legacy_info())
    for button in setup.findChildren(QToolButton):  # collapsible sections: all open
        if button.isCheckable() and not button.isChecked() and (
                button.arrowType() is not Qt.ArrowType.NoArrow):
            button.click()


def window_regions(window) -> Callable[[QWidget], str]:
    setup = window.run_setup
    scroll = setup.parentWidget()
    while scroll is not None and not isinstance(scroll, QScrollArea):
        scroll = scroll.parentWidget()
    setup_area = scroll or setup

    def region_of(widget: QWidget) -> str:
        if widget is setup_area or setup_area.isAncestorOf(widget):
            return "run setup"
        if widget is window.gpu_panel or window.gpu_panel.isAncestorOf(widget):
            return "GPU panel"
        return "rest of the window"
    return region_of


def size_problems(window, width: int, height: int) -> list[Problem]:
    """The window really got the size: in device-independent and in device pixels."""
    found = []
    scale = window.devicePixelRatioF()
    if (window.width(), window.height()) != (width, height):
        found.append(f"the window is {window.width()}x{window.height()}, not {width}x{height}")
    handle = window.windowHandle()
    physical = (round(handle.width() * scale), round(handle.height() * scale))
    wanted = (round(width * scale), round(height * scale))
    if physical != wanted:
        found.append(f"the window is {physical[0]}x{physical[1]} device pixels, not "
                     f"{wanted[0]}x{wanted[1]}")
    expected_scale = float(os.environ.get("QT_SCALE_FACTOR", "1"))
    if abs(scale - expected_scale) > 1e-6:
        found.append(f"device pixel ratio {scale}, QT_SCALE_FACTOR asked for {expected_scale}")
    return [{"region": "window size", "widget": "MainWindow", "check": "size", "detail": text}
            for text in found] + check_on_screen(window)


def progress_problems(window) -> list[Problem]:
    """The progress bars are there, whatever the splitters did."""
    from PySide6.QtWidgets import QProgressBar

    found = []
    for bar in window.progress.findChildren(QProgressBar):
        if not bar.isVisible() or bar.height() < bar.fontMetrics().height():
            found.append({"region": "rest of the window", "widget": bar.accessibleName(),
                          "check": "progress bar",
                          "detail": f"visible {bar.isVisible()}, {bar.height()} px tall"})
    return found


PLOT_MIN_PX = 120  # of data height per plot (issue 30): curves stay readable


def plot_problems(window) -> list[Problem]:
    """Every visible plot: at least PLOT_MIN_PX of data height, inside the window, and
    its axis titles whole (inside the plot, not cut)."""
    import pyqtgraph as pg
    from PySide6.QtCore import QPoint, QRectF

    found = []
    inside = window.rect()
    for widget in window.curves.findChildren(pg.PlotWidget):
        if not widget.isVisible():
            continue
        name = widget.accessibleName() or "a plot"

        def problem(check: str, detail: str, name=name) -> None:
            found.append({"region": "curves", "widget": name, "check": check,
                          "detail": detail})

        item = widget.getPlotItem()
        data = item.getViewBox().sceneBoundingRect()
        if data.height() < PLOT_MIN_PX:
            problem("plot height", f"{data.height():.0f} px of data, needs {PLOT_MIN_PX}")
        corner = widget.mapTo(window, QPoint(0, 0))
        if not inside.contains(corner) or corner.x() + widget.width() > inside.width() \
                or corner.y() + widget.height() > inside.height():
            problem("inside the window", f"at {corner.x()},{corner.y()} "
                    f"{widget.width()}x{widget.height()} in {inside.width()}x{inside.height()}")
        area = QRectF(0, 0, widget.width(), widget.height())
        for side in ("left", "bottom"):
            label = item.getAxis(side).label
            if not item.getAxis(side).isVisible() or not label.toPlainText():
                continue
            margin = label.document().documentMargin()  # blank around the text
            box = label.sceneBoundingRect().adjusted(margin, margin, -margin, -margin)
            if not label.isVisible() or not area.contains(box):
                problem("axis title", f"the {side} title '{label.toPlainText()}' at "
                        f"{box.x():.0f},{box.y():.0f} {box.width():.0f}x{box.height():.0f} "
                        f"is cut ({widget.width()}x{widget.height()} plot)")
    return found


def check_dialog(make: Callable[[], QDialog]) -> list[Problem]:
    dialog = make()
    dialog.show()
    settle()
    found = check_window(dialog) + check_on_screen(dialog)
    dialog.close()
    settle()
    return found


def dialogs(window) -> dict[str, Callable[[], QDialog]]:
    from mgpu_gui.core.tools.doctor import Facts
    from mgpu_gui.gui.dialogs.about import AboutDialog
    from mgpu_gui.gui.dialogs.doctor import DoctorDialog
    from mgpu_gui.gui.dialogs.run_compare import RunCompareDialog
    from tests.helpers.compared_runs import lr_sweep

    def facts(name: str):
        return Facts.from_dict(json.loads((FACTS / f"{name}.json").read_text())).tf

    def about() -> QDialog:
        dialog = AboutDialog(window.telemetry.inventory, window, ask=False)
        dialog.set_tf_facts(facts("all_fine_two_gpus"))
        return dialog

    def doctor() -> QDialog:
        dialog = DoctorDialog(window.telemetry.inventory, window, ask=False)
        dialog.set_tf_facts(facts("gpus_but_no_cuda_libraries"))
        return dialog

    def cluster() -> QDialog:
        dialog = window.train_across_machines()
        dialog.workers.setText("gpu-node-01.cluster.example.org:2222, "
                               "gpu-node-02.cluster.example.org:22x22")
        return dialog

    def compare() -> QDialog:
        """A learning-rate sweep with repeated seeds: its table (one run on another
        TensorFlow), coloured by the rate, seeds grouped."""
        dialog = RunCompareDialog(lr_sweep(), window)
        dialog.view.set_color_by("learning_rate")
        dialog.view.group_check.setChecked(True)
        return dialog

    def evaluation() -> QDialog:
        """20 classes with long names, a cell's samples listed."""
        from mgpu_gui.core.config import RunConfig
        from mgpu_gui.core.evaluation.metrics import classifier_metrics
        from mgpu_gui.core.evaluation.result import EvaluationResult, Split
        from mgpu_gui.core.evaluation.samples import SampleOrigins
        from mgpu_gui.core.runs.folder import create_run_dir
        from mgpu_gui.core.runs.store import RunStore
        from mgpu_gui.gui.dialogs.evaluation import EvaluationDialog, Subject

        config = RunConfig(output_dir=str(Path(os.environ["MGPU_GUI_STORE"]).parent / "runs"),
                           run_name="resnet50_multi_gpu_epoch_120")
        store = RunStore()
        run_dir = create_run_dir(config)
        record = store.get(store.add_run(run_dir, config))
        rng = np.random.default_rng(0)
        labels = rng.integers(0, 20, 2000)
        outputs = rng.dirichlet(np.ones(20), 2000)
        names = tuple(f"class_{i:02d}_with_a_long_folder_name" for i in range(20))
        data = run_dir.path.parent / "flowers.npz"  # pictures for the cell's thumbnails
        np.savez(data, x_test=rng.integers(0, 256, (2000, 32, 32, 3), dtype=np.uint8),
                 y_test=labels)
        result = EvaluationResult(str(run_dir.path / "model.keras"), str(data),
                                  Split.TEST, 2000, 2.9,
                                  classifier=classifier_metrics(labels, outputs, names))
        result.save(run_dir.path, labels, outputs,
                    SampleOrigins.of_rows(str(data), "x_test", 2000, (32, 32, 3)))
        store.save_evaluation(record.id, result)
        dialog = EvaluationDialog(Subject.of_run(record), store, window)
        wait_until(lambda: dialog.loaded is not None)
        dialog.show_cell(dialog.matrix_model.index(3, 8))
        return dialog

    def data_view() -> QDialog:
        """An image folder of 20 classes with long names, one 6x the others (the warning),
        read to the end, then shown with its counts as estimates (the note and the ≈)."""
        from dataclasses import replace

        from PIL import Image

        from mgpu_gui.core.datasets.overview import Stage
        from mgpu_gui.gui.dialogs.data_view import DataViewDialog
        from mgpu_gui.gui.jobs.data_overview import OverviewFigures

        folder = Path(os.environ["MGPU_GUI_STORE"]).parent / "flowers_photographed_2025"
        for k in range(20):
            (folder / f"class_{k:02d}_with_a_long_folder_name").mkdir(parents=True)
            for i in range(36 if k == 3 else 6):
                Image.new("RGB", (20 + 7 * (i % 5), 16 + 3 * (i % 4)), (40 * i % 255, 90, 160)
                          ).save(folder / f"class_{k:02d}_with_a_long_folder_name" / f"{i}.png")
        dialog = DataViewDialog(str(folder), (224, 224), window)
        dialog.show()  # it loads once on screen
        view = dialog.view
        wait_until(lambda: view.overview is not None and view.overview.stage is Stage.DONE)
        dialog.loader.shutdown()
        estimated = replace(view.overview, estimated=12)
        view.show_figures(OverviewFigures(estimated, ()))
        return dialog

    def augment_preview() -> QDialog:
        """Every transform at once, four rows of pictures as the child sends them, and the
        longest message a row can bring (an unreadable file under a long path)."""
        from mgpu_gui.core.augment import DEFAULTS, Augmentation
        from mgpu_gui.core.augment_preview import PreviewRequest
        from mgpu_gui.core.datasets.images import corrupt
        from mgpu_gui.gui.dialogs.augment_preview import AugmentPreviewDialog
        from mgpu_gui.gui.jobs import augment_preview as jobs
        from tests.helpers.augment_preview import CannedJob

        jobs.AugmentPreviewJob = CannedJob  # this probe's process only
        CannedJob.error = str(corrupt(f"{PROJECT}/data/flowers/tulip/IMG_20250612_1433.jpg",
                                      OSError("cannot identify image file")))
        dialog = AugmentPreviewDialog(PreviewRequest(
            f"{PROJECT}/data/flowers_photographed_2025", (224, 224),
            Augmentation(**DEFAULTS).spec()), "", window)
        wait_until(lambda: bool(dialog.message.text()) and not dialog.loader.is_running())
        return dialog

    return {"About": about, "Check my setup": doctor, "Train across machines": cluster,
            "Compare runs": compare, "Scaling test": window.show_scaling_test,
            "Find batch size": window.show_batch_finder, "Evaluation": evaluation,
            "Data view": data_view, "Augmentation preview": augment_preview}


def main(width: int, height: int) -> dict[str, list[Problem] | int]:
    from mgpu_gui.core.devices.nvml import query_inventory
    from mgpu_gui.gui.jobs.telemetry_source import TelemetrySource
    from mgpu_gui.gui.main_window import MainWindow
    from mgpu_gui.testing.fake_pynvml import ERRORS, fake_nvml

    report: dict[str, list[Problem] | int] = {view: [] for view in VIEWS}
    window = MainWindow(telemetry=TelemetrySource(fake_machine(), interval_s=0.1))
    window.move(0, 0)
    window.resize(width, height)
    window.show()
    fill_gpu_panel(window)
    fill_run(window)
    fill_run_setup(window)
    settle()
    region_of = window_regions(window)

    def check_main(note: str) -> None:
        # The plots first, as the window opens: the tab checks below open the folded tabs
        # (on a short window, expanded over the curves and the progress: back after).
        problems = plot_problems(window) + check_window(window, region_of)
        window.lower_splitter.expand(False)
        settle()
        for problem in problems + progress_problems(window):
            problem["detail"] = note + problem["detail"]
            report[problem["region"]].append(problem)

    report["window size"] = size_problems(window, width, height)
    report[GPU_ROWS] = rows_in_view(window.gpu_panel)
    check_main("")
    for view, make in dialogs(window).items():
        report[view] = check_dialog(make)
    # No driver: the CPU page with the longest reason NVML's failures give.
    failing = [query_inventory(fake_nvml(init_error=error)) for error in ERRORS]
    window.telemetry.inventory_changed.emit(max(failing, key=lambda inv: len(inv.message)))
    settle()
    # The new devices schedule a check of the setup (a timer), whose real problems would
    # replace the longest ones at some moment during the checks: fill it again, at once.
    fill_run_setup(window)
    window.lower_splitter.fold()  # the checks above opened the tabs
    settle()
    check_main("no driver: ")
    window.close()
    return report


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        os.environ["MGPU_GUI_STORE"] = str(Path(folder) / "runs.sqlite3")
        app = QApplication(sys.argv[:1])
        QSettings.setDefaultFormat(QSettings.Format.IniFormat)
        QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, folder)
        QCoreApplication.setOrganizationName("mgpu-gui-tests")
        QCoreApplication.setApplicationName("mgpu-gui-tests")
        result = main(int(sys.argv[1]), int(sys.argv[2]))
        print(json.dumps(result))
