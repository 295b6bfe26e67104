"""The run's life cycle rehearsed before epoch 1, so that nothing fails after the last one.

Users' models met their defects at the end: an export that cannot be reloaded (a
custom class, a layer SavedModel traces differently), an evaluation that cannot read
the head, class names that do not match the outputs. Each of those is tried here on
the built model and one batch of the run's own data before `RunStarted`, where a
refusal leaves no run folder and no row behind (a setup failure):

- the loss and every compiled metric on the batch (`test_on_batch`: the compiled
  step validation uses);
- the evaluation's judging of the head and the prediction's reading of it
  (judging.py, core/evaluation/heads.py) on the model's outputs;
- every requested export format of the untrained model, written as the export writes
  it. Reloading each in a fresh process (with the run's custom objects) takes a
  TensorFlow start, 3-4 s: that runs beside the first epoch, stops the run at the next
  batch when it fails, and the first epoch's end waits for it, so a run that fails it
  has no complete epoch and is cleaned up as a setup refusal is.
"""

from __future__ import annotations

import math
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import keras
import numpy as np

from mgpu_gui.core.children.runner import ChildProcesses
from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.datasets.inspection import LabelKind
from mgpu_gui.core.errors import ExportError, RehearsalError, UserError
from mgpu_gui.core.evaluation.heads import top_predictions
from mgpu_gui.core.runs.folder import EXPORT_NAMES
from mgpu_gui.engine import judging
from mgpu_gui.engine.data_source import LabelMap, PreparedData, relabeled
from mgpu_gui.engine.export import check_classes_match, check_reloaded, written_for_rehearsal
from mgpu_gui.engine.output_head import output_layer_info

FOLDER = ".rehearsal"  # in the run folder, removed when the checks end
Log = Callable[..., None]


class Rehearsal:
    """The checks of one run; `close()` ends them, whatever happened."""

    def __init__(self, run_folder: Path):
        self.folder = run_folder / FOLDER
        self._children = ChildProcesses("rehearsal-export-check")
        self._thread: threading.Thread | None = None
        self._failure: RehearsalError | None = None
        self._closing = False

    def run(self, config: RunConfig, model: keras.Model, data: PreparedData,
            relabel: LabelMap | None, replicas: int, *, evaluate: bool, exports: bool,
            log: Log) -> None:
        """The in-process checks (a RehearsalError on the first that fails), then the
        export checks started in the background. `evaluate`: the loss and metrics on a
        batch (not in a cluster, where evaluating is collective); `exports`: this process
        writes the run's exports (the chief of a cluster)."""
        split = "validation" if data.val_samples else "training"
        where = f"one batch of {len(data.x_sample)} {split} samples"
        said = [f"Rehearsed before epoch 1 on {where}:"]
        if evaluate:
            said.append(_loss_and_metrics(model, data, relabel, replicas, where))
        raw = model(data.x_sample, training=False)
        if isinstance(raw, list | tuple | dict):
            said.append("several outputs, which the evaluation does not judge")
        else:
            said.append(_heads(model, config, data, keras.ops.convert_to_numpy(raw), log))
        formats = tuple(config.export_formats) if exports else ()
        if formats:
            self._start_exports(config, model, data, formats)
            said.append(f"the {' and '.join(formats)} export{'s' if len(formats) > 1 else ''}"
                        " of the untrained model, reloaded in a fresh process beside the "
                        "first epoch")
        log(f"{said[0]} {'; '.join(said[1:])}.")

    def callback(self) -> keras.callbacks.Callback:
        """Goes first in every `fit`: stops at the batch after an export check failed;
        the first epoch's end waits for the checks, before anything records it."""
        return _Gate(self)

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
        self.raise_failure()

    def raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    def close(self) -> None:
        self._closing = True
        self._children.cancel()
        if self._thread is not None:
            self._thread.join()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _start_exports(self, config: RunConfig, model: keras.Model, data: PreparedData,
                       formats: tuple[str, ...]) -> None:
        self.folder.mkdir(exist_ok=True)
        written = []
        for fmt in formats:  # written here, before `fit` changes the weights
            path = self.folder / EXPORT_NAMES[fmt]
            try:
                x, reference = written_for_rehearsal(model, path, fmt, data.x_sample)
                if data.class_names:
                    check_classes_match(list(data.class_names), reference[0])
            except ExportError as error:
                raise _export_failed(fmt, model, error) from error
            written.append((fmt, path, x, reference))
        custom = config.custom_objects_source()

        def check() -> None:
            for fmt, path, x, reference in written:
                try:
                    check_reloaded(fmt, path, x, reference, EXPORT_NAMES[fmt],
                                   not config.allow_unsafe_code, custom, self._children)
                except ExportError as error:
                    if not self._closing:  # not cancelled: a failure, or a hung check
                        self._failure = _export_failed(fmt, model, error)
                    return
            shutil.rmtree(self.folder, ignore_errors=True)

        self._thread = threading.Thread(target=check, name="rehearsal-exports", daemon=True)
        self._thread.start()


class _Gate(keras.callbacks.Callback):
    def __init__(self, rehearsal: Rehearsal):
        super().__init__()
        self.rehearsal = rehearsal

    def on_train_batch_end(self, batch, logs=None):
        self.rehearsal.raise_failure()

    def on_epoch_end(self, epoch, logs=None):
        # An epoch a stop cut short is not recorded: nothing to wait for (a supervisor
        # killed mid-epoch 1 left its worker waiting on the reload, 20 s under CI 7's load).
        if not self.model.stop_training:
            self.rehearsal.wait()


def _loss_and_metrics(model: keras.Model, data: PreparedData, relabel: LabelMap | None,
                      replicas: int, where: str) -> str:
    """The compiled loss and metrics on the sample, its labels in the form the loss takes
    (as the pipeline gives them: `relabel`), repeated to fill every replica (an empty
    share breaks Conv2D and BatchNorm)."""
    rows = -(-max(len(data.x_sample), replicas) // replicas) * replicas
    units = output_layer_info(model)[0]
    if rows == units:  # labels (rows,) against outputs (rows, rows) would broadcast
        rows += replicas
    index = np.resize(np.arange(len(data.x_sample)), rows)
    y = relabeled(np.asarray(data.y_sample), relabel, data.num_classes)
    try:
        # One batch handed to the compiled step, no dataset: creating and dropping tf.data
        # iterators on many CPU replicas deadlocked (64 on 2 cores, evaluate's reset).
        results = model.test_on_batch(data.x_sample[index], y[index], return_dict=True)
    except Exception as error:
        hint = (f" The labels are class ids (one number per sample) for {units} outputs: a "
                "loss the app does not know may want them one-hot; save them so "
                f"(np.eye({units})[y]) or use a Keras loss by its name."
                if data.label_kind is LabelKind.SPARSE and relabel is None and units
                and units > 1 else "")
        raise _failed("the loss and metrics on " + where, error,
                      "The first training step would fail the same way: check the labels "
                      "against the model's loss and metrics", hint) from error
    bad = sorted(k for k, v in results.items() if not math.isfinite(float(v)))
    if bad:
        raise RehearsalError(
            f"Rehearsal before epoch 1: {', '.join(bad)} on {where} is not finite "
            f"({', '.join(f'{k} {float(results[k])}' for k in bad)}) before any training, "
            "so the first step would stop the run. Check the data for extreme values and "
            "the model's last activation against its loss.")
    return ", ".join(f"{name} {float(value):.4g}" for name, value in results.items())


def _heads(model: keras.Model, config: RunConfig, data: PreparedData, outputs: np.ndarray,
           log: Log) -> str:
    """The evaluation's and the prediction's reading of the outputs; what they are."""
    name = Path(config.model).name
    labels = np.asarray(data.y_sample)
    try:
        judged = judging.judge(model, name, labels, outputs, data.label_kind,
                               data.num_classes, tuple(data.class_names) or None)
    except UserError as error:  # a head the evaluation cannot judge yet: training can
        log(f"Warning: {error} The run trains and exports; `mgpu-train evaluate` and the "
            "Evaluation view will refuse it.", "warning")
        return "the evaluation refused (above)"
    except Exception as error:
        raise _failed("the evaluation of the model's outputs", error,
                      "The evaluation after training would fail the same way") from error
    units, activation = output_layer_info(model)
    if judged.classifier is not None and units:
        top_predictions(outputs[:1], units, linear_output=activation == "linear",
                        names=data.class_names)
    return f"the evaluation reads it as {judged.meaning.describe()}"


def _failed(stage: str, error: BaseException, consequence: str, hint: str = ""
            ) -> RehearsalError:
    said = str(error).strip().splitlines()
    first = said[0].rstrip(".") if said else ""
    return RehearsalError(f"Rehearsal before epoch 1 failed at {stage}: "
                          f"{type(error).__name__}: {first}. {consequence}; "
                          f"nothing was trained.{hint}")


def _export_failed(fmt: str, model: keras.Model, error: ExportError) -> RehearsalError:
    custom = sorted({type(layer).__name__ for layer in model._flatten_layers()
                     if not type(layer).__module__.startswith("keras.")} - {type(model).__name__})
    why = (f" The likely cause: a custom layer ({', '.join(custom)}) whose get_config() "
           "leaves out an argument of its __init__, so the reloaded layer is not the same."
           if custom and fmt != "savedmodel" and "differs" in str(error) else "")
    return RehearsalError(
        f"Rehearsal before epoch 1: the {fmt} export of the untrained model fails its check, "
        f"so the run would fail at its end: {error}{why} Drop {fmt} from the export formats "
        f"(--export), or change the model; nothing was trained.")
