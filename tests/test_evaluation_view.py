"""The Evaluation view: a stored evaluation opens at once, a cell lists its samples most
confident first, a regression model gets its residuals, and a fresh evaluation runs in
the evaluator child (faked here: no TensorFlow) and is kept in the history."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from PySide6.QtWidgets import QProgressBar

from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.evaluation.metrics import (
    classifier_metrics,
    multi_label_metrics,
    regression_metrics,
)
from mgpu_gui.core.evaluation.result import PREDICTIONS_FILE, EvaluationResult, Split
from mgpu_gui.core.evaluation.samples import SampleOrigins
from mgpu_gui.core.events import EpochEnd, PredictionsMade
from mgpu_gui.core.runs.folder import RunDir, create_run_dir
from mgpu_gui.core.runs.store import RunRecord, RunStore
from mgpu_gui.core.tools import evaluate_job
from mgpu_gui.gui.dialogs.cell_samples import SAMPLE_ROLE
from mgpu_gui.gui.dialogs.evaluation import EvaluationDialog, Subject
from mgpu_gui.gui.panels.runs import RunsPanel

NAMES = tuple(f"digit {i}" for i in range(10))


def a_run(store: RunStore, tmp_path) -> RunRecord:
    run_dir = create_run_dir(RunConfig(output_dir=str(tmp_path), run_name="digits"))
    run_id = store.add_run(run_dir, RunConfig(output_dir=str(tmp_path), run_name="digits"))
    return store.get(run_id)


def fixed_predictions() -> tuple[np.ndarray, np.ndarray]:
    """40 samples: 4 of them true 3 predicted 8, at confidences 0.6, 0.9, 0.7, 0.8."""
    labels = np.arange(40) % 10
    outputs = np.full((40, 10), 0.01, dtype=np.float32)
    outputs[np.arange(40), labels] = 0.9
    for sample, confidence in zip((3, 13, 23, 33), (0.6, 0.9, 0.7, 0.8), strict=True):
        outputs[sample] = 0.01
        outputs[sample, 8] = confidence
    return labels, outputs


def pictures(tmp_path: Path, samples: int) -> SampleOrigins:
    """An .npz whose x_test sample i is an 8x8 picture, dark but for pixel (i // 8, i % 8)."""
    data = tmp_path / "digits.npz"
    x = np.zeros((samples, 8, 8), dtype=np.uint8)
    x[np.arange(samples), np.arange(samples) // 8, np.arange(samples) % 8] = 200
    np.savez(data, x_test=x, y_test=np.arange(samples) % 10)
    return SampleOrigins.of_rows(str(data), "x_test", samples, (8, 8))


def keep(record: RunRecord, store: RunStore, result: EvaluationResult, labels, outputs,
         origins: SampleOrigins) -> None:
    result.save(record.run_dir, labels, outputs, origins)
    store.save_evaluation(record.id, result)


def opened(qtbot, record: RunRecord, store: RunStore) -> EvaluationDialog:
    dialog = EvaluationDialog(Subject.of_run(record), store)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitUntil(lambda: dialog.loaded is not None, timeout=15_000)
    return dialog


def test_a_cell_shows_exactly_its_samples_most_confident_first(qtbot, store, tmp_path):
    record = a_run(store, tmp_path)
    labels, outputs = fixed_predictions()
    result = EvaluationResult("model.keras", "digits.npz", Split.TEST, 40, 0.5,
                              classifier=classifier_metrics(labels, outputs, NAMES))
    keep(record, store, result, labels, outputs, pictures(tmp_path, 40))
    dialog = opened(qtbot, record, store)
    assert dialog.pages.currentWidget() is dialog.results
    model = dialog.matrix_model
    assert model.headerData(3, 0x2) == "digit 3" and model.index(3, 8).data() == "4"
    dialog.matrix.clicked.emit(model.index(3, 8))
    cell = dialog.cell
    assert cell.pages.currentWidget() is cell.grid
    items = [cell.grid.item(i) for i in range(cell.grid.count())]
    assert [item.data(SAMPLE_ROLE) for item in items] == [13, 33, 23, 3]
    assert [item.text() for item in items] == [
        f"digit 3 → digit 8\n{c}" for c in ("90.0%", "80.0%", "70.0%", "60.0%")]
    assert items[0].toolTip() == ("Sample #13 (x_test[13]): true digit 3, predicted digit 8 "
                                  "(90.0%)")
    assert "True digit 3, predicted digit 8: 4 sample(s) of the test split" in cell.title.text()
    # The pictures come from the data, drawn in the child: each is its own sample's.
    qtbot.waitUntil(lambda: all(not item.icon().isNull() for item in items), timeout=15_000)
    for item in items:  # 8x enlarged with crisp pixels: the bright one is the sample's own
        sample, image = item.data(SAMPLE_ROLE), item.icon().pixmap(64, 64).toImage()
        bright = [(y // 8, x // 8) for y in range(4, 64, 8) for x in range(4, 64, 8)
                  if image.pixelColor(x, y).red() > 128]
        assert bright == [(sample // 8, sample % 8)]
    cell.grid.itemClicked.emit(items[1])  # sample 33, larger, with its top classes
    large = cell.large
    assert large is not None and large.windowTitle() == "Sample #33 (x_test[33])"
    qtbot.waitUntil(lambda: not large.picture.pixmap().isNull(), timeout=15_000)
    assert large.picture.pixmap().width() == 320
    bars = [b.accessibleName() for b in large.findChildren(QProgressBar)]
    assert bars == ["digit 8: 80.0%", "digit 0: 1.0%", "digit 1: 1.0%", "digit 2: 1.0%",
                    "digit 3: 1.0%"]
    large.close()
    dialog.cell_text.setCurrentText("Row %")
    assert model.index(3, 8).data() == "100%" and model.index(4, 4).data() == "100%"
    cell._fill_table()  # the list the view falls back to, for data it cannot draw
    table = cell.table
    rows = [[table.item(r, c).text() for c in range(4)] for r in range(table.rowCount())]
    assert rows == [["13", "digit 3", "digit 8", "90.0%"], ["33", "digit 3", "digit 8", "80.0%"],
                    ["23", "digit 3", "digit 8", "70.0%"], ["3", "digit 3", "digit 8", "60.0%"]]
    table.cellClicked.emit(0, 1)  # the list's first: sample 13
    assert dialog.try_sample.top.title.text() == "Sample #13 of the test split (true: digit 3):"
    bars = [b.accessibleName() for b in dialog.try_sample.findChildren(QProgressBar)]
    assert bars[:2] == ["digit 8: 90.0%", "digit 0: 1.0%"] and len(bars) == 5
    dialog._tried(PredictionsMade(rows=[{"file": "/x/owl.png", "top": [["digit 7", 0.75]],
                                         "error": ""}], inputs="as its card records"))
    qtbot.waitUntil(lambda: len(dialog.try_sample.findChildren(QProgressBar)) == 1)
    assert dialog.try_sample.top.title.text() == "owl.png (as its card records):"
    assert dialog.scores.rowCount() == 12  # 10 classes, then the two averages
    assert dialog.scores.item(3, 0).text() == "digit 3" and dialog.scores.item(3, 2).text() \
        == "0.000"


def test_a_cell_it_cannot_draw_is_listed_and_says_why(qtbot, store, tmp_path):
    """The data file is gone since the evaluation: the samples are listed, not lost."""
    record = a_run(store, tmp_path)
    labels, outputs = fixed_predictions()
    keep(record, store, EvaluationResult("model.keras", "digits.npz", Split.TEST, 40, 0.5,
                                         classifier=classifier_metrics(labels, outputs, NAMES)),
         labels, outputs, pictures(tmp_path, 40))
    (tmp_path / "digits.npz").unlink()
    dialog = opened(qtbot, record, store)
    dialog.show_cell(dialog.matrix_model.index(3, 8))
    cell = dialog.cell
    qtbot.waitUntil(lambda: cell.pages.currentWidget() is cell.table, timeout=15_000)
    assert "Not drawn: the data file" in cell.title.text() and "is gone" in cell.title.text()
    assert [cell.table.item(r, 0).text() for r in range(4)] == ["13", "33", "23", "3"]


def test_a_regression_model_gets_its_errors_and_residuals(qtbot, store, tmp_path):
    record = a_run(store, tmp_path)
    targets = np.linspace(0, 1, 20, dtype=np.float32)
    outputs = targets + 0.1
    result = EvaluationResult("model.keras", "values.npz", Split.VALIDATION, 20, 0.01,
                              regression=regression_metrics(targets, outputs))
    keep(record, store, result, targets, outputs, pictures(tmp_path, 20))
    dialog = opened(qtbot, record, store)
    text = " ".join(label.text() for label in dialog.results.findChildren(type(dialog.status)))
    assert "MAE 0.1" in text and "does not classify" in text
    assert not hasattr(dialog, "matrix")


def test_a_multi_label_model_gets_its_per_label_table(qtbot, store, tmp_path):
    record = a_run(store, tmp_path)
    labels = np.array([[1, 0, 1], [0, 1, 0], [1, 1, 0], [0, 0, 1]] * 5, dtype=np.float32)
    outputs = np.clip(labels * 0.8 + 0.1, 0, 1)
    outputs[0, 1] = 0.9  # one wrong "yes"
    result = EvaluationResult("model.keras", "tags.npz", Split.VALIDATION, 20, 0.2,
                              multi_label=multi_label_metrics(labels, outputs))
    keep(record, store, result, labels, outputs, pictures(tmp_path, 20))
    dialog = opened(qtbot, record, store)
    text = " ".join(label.text() for label in dialog.results.findChildren(type(dialog.status)))
    assert "every label right 95.00%" in text and "Independent labels" in text
    rows = [dialog.scores.item(r, 0).text() for r in range(dialog.scores.rowCount())]
    assert rows == ["0", "1", "2", "micro avg", "macro avg", "weighted avg"]
    assert dialog.scores.item(1, 1).text() == "0.909"  # label 1: 10 right of 11 said yes
    assert not hasattr(dialog, "matrix")


FAKE_EVALUATOR = """
import json, os, sys
import numpy as np
request = json.loads(sys.stdin.read())
labels, outputs = np.arange(12) % 3, np.eye(3, dtype=np.float32)[np.arange(12) % 3]
result = json.loads(sys.argv[2])
np.savez(os.path.join(request["output"], "evaluation-predictions.npz"), labels=labels,
         outputs=outputs)
with os.fdopen(int(sys.argv[1]), "w") as pipe:
    pipe.write(json.dumps({"type": "evaluation_progress", "done": 6, "total": 12}) + "\\n")
    pipe.write(json.dumps({"type": "evaluation_done", "result": result, "path": None}) + "\\n")
"""


def test_a_fresh_evaluation_runs_in_the_child_and_is_kept(qtbot, store, tmp_path, monkeypatch):
    record = a_run(store, tmp_path)
    (record.run_dir / "model.keras").write_bytes(b"a trained model")
    labels = np.arange(12) % 3
    result = EvaluationResult("model.keras", "demo", Split.TEST, 12, 0.1,
                              classifier=classifier_metrics(labels, np.eye(3)[labels]))
    monkeypatch.setattr(evaluate_job, "evaluator_command", lambda fd: [
        sys.executable, "-c", FAKE_EVALUATOR, str(fd), json.dumps(result.to_dict())])
    seen: list[int] = []
    dialog = EvaluationDialog(Subject.of_run(record), store)
    qtbot.addWidget(dialog)
    dialog._progress.changed.connect(lambda done, total: seen.append(done))
    qtbot.waitUntil(lambda: dialog.loaded is not None, timeout=15_000)
    assert seen == [6] and dialog.bar.maximum() == 12
    assert store.evaluation(record.id) == result  # kept: the next opening is instant
    assert (record.run_dir / PREDICTIONS_FILE).is_file()


def test_the_runs_tab_opens_it_for_a_run_with_a_complete_epoch(qtbot, store, tmp_path):
    record = a_run(store, tmp_path)
    labels, outputs = fixed_predictions()
    keep(record, store, EvaluationResult("model.keras", "demo", Split.TEST, 40, None,
                                         classifier=classifier_metrics(labels, outputs)),
         labels, outputs, pictures(tmp_path, 40))
    panel = RunsPanel(store)
    qtbot.addWidget(panel)
    with qtbot.waitSignal(panel.refreshed):  # the history is read in the background
        panel.refresh()
    panel.select_runs([record.id])
    assert not panel.evaluate_action.isEnabled()  # no complete epoch yet
    assert "at least one complete epoch" in panel.evaluate_action.toolTip()
    store.recorder(record.id).handle(EpochEnd(epoch=0, epochs=1, metrics={"loss": 1.0},
                                             samples_per_s=1.0, duration_s=1.0))
    with qtbot.waitSignal(panel.refreshed):
        panel.refresh()
    panel.select_runs([record.id])
    assert panel.evaluate_action.isEnabled()
    dialog = panel.evaluate()
    qtbot.waitUntil(lambda: dialog.loaded is not None, timeout=15_000)
    assert dialog.windowTitle() == "Evaluation of digits"
    dialog.close()
    panel.shutdown()


def test_the_run_menu_evaluates_the_chosen_model_file_on_the_chosen_data(
        qtbot, window, tmp_path, monkeypatch):
    """No run: the result lives in a temporary folder, gone with the view."""
    assert window.evaluate_model_file() is None  # the demo model is no trained file
    assert "choose a trained .keras or .h5 file in Model" in window.banner.message.text()
    model, data = tmp_path / "net.keras", tmp_path / "d.npz"
    model.write_bytes(b"a trained model")
    labels = np.arange(12) % 3
    np.savez(data, x_train=np.zeros((12, 4), np.float32), y_train=labels)
    result = EvaluationResult(str(model), str(data), Split.VALIDATION, 12, 0.1,
                              classifier=classifier_metrics(labels, np.eye(3)[labels]))
    monkeypatch.setattr(evaluate_job, "evaluator_command", lambda fd: [
        sys.executable, "-c", FAKE_EVALUATOR, str(fd), json.dumps(result.to_dict())])
    window.run_setup.set_model_path(model)
    window.run_setup.set_data_path(data)
    dialog = window.evaluate_model_file()
    qtbot.waitUntil(lambda: dialog.loaded is not None, timeout=15_000)
    assert dialog.windowTitle() == "Evaluation of net.keras on d.npz"
    scratch = Path(dialog._scratch.name)
    assert (scratch / PREDICTIONS_FILE).is_file()
    with RunStore() as store:
        assert store.runs() == []  # nothing recorded: no run
    dialog.close()
    qtbot.waitUntil(lambda: not scratch.exists())


def test_a_finished_run_offers_its_evaluation_view_or_opens_it_when_the_switch_is_on(
        qtbot, window, tmp_path):
    from PySide6.QtCore import QSettings, Qt

    from mgpu_gui.core.children.supervisor import RunOutcome
    from mgpu_gui.core.events import RunStarted, RunStatus
    from mgpu_gui.gui.tool_dialogs import EVALUATE_FINISHED_KEY

    record = a_run(window.store, tmp_path)
    labels, outputs = fixed_predictions()
    keep(record, window.store, EvaluationResult(
        "model.keras", "digits.npz", Split.TEST, 40, 0.5,
        classifier=classifier_metrics(labels, outputs, NAMES)), labels, outputs,
        pictures(tmp_path, 40))
    window.last_run = RunDir(record.run_dir)

    def finish(status: RunStatus, held_out: int) -> list:
        begun = RunStarted(
            run_dir=str(record.run_dir), device_kind="cpu", devices=[], device_names=[],
            num_replicas=2, batch_per_replica=32, global_batch=64, train_samples=640,
            val_samples=0, test_samples=held_out, steps_per_epoch=10, dropped_per_epoch=0,
            epochs=2, initial_epoch=0, model_name="m", params=1, cross_device_ops="",
            tf_version="", keras_version="")
        window.controller.finished.emit(RunOutcome(status, "", events=[begun]))
        return [d for d in window.runs_panel._dialogs if isinstance(d, EvaluationDialog)]

    # Off (the default, issue 30 item 5): no window over the curves; the run's notice
    # offers the view, and its button opens it.
    assert finish(RunStatus.COMPLETED, 40) == []
    notice, toast = window.notifier.last, window.notifier.toast
    assert notice.title == "Run completed" and notice.action == "View evaluation"
    assert toast.button.isVisible() and toast.button.text() == "View evaluation"
    assert not toast.testAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
    qtbot.mouseClick(toast.button, Qt.MouseButton.LeftButton)
    [offered] = [d for d in window.runs_panel._dialogs if isinstance(d, EvaluationDialog)]
    assert offered.subject.run_id == record.id and not toast.isVisible()
    qtbot.waitUntil(lambda: offered.loaded is not None, timeout=15_000)
    offered.close()
    qtbot.waitUntil(lambda: offered not in window.runs_panel._dialogs)  # deleted on close
    assert finish(RunStatus.STOPPED, 40) == [] and window.notifier.last.action == ""
    assert not toast.button.isVisible()
    assert toast.testAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
    window.evaluate_finished_action.setChecked(True)
    assert QSettings().value(EVALUATE_FINISHED_KEY, type=bool) is True  # remembered
    assert finish(RunStatus.STOPPED, 40) == [] and finish(RunStatus.COMPLETED, 0) == []
    [dialog] = finish(RunStatus.COMPLETED, 40)
    assert dialog.subject.run_id == record.id
    qtbot.waitUntil(lambda: dialog.loaded is not None, timeout=15_000)
    dialog.close()
