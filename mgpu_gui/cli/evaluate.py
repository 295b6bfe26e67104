"""`mgpu-train evaluate`: how good a trained model is, per class, on every test sample.

TensorFlow runs in the evaluator child (core/tools/evaluate_job.py), never here.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from mgpu_gui.cli.common import add_store_argument, open_store, run_evaluator
from mgpu_gui.core.children.inspector import file_inspector
from mgpu_gui.core.config import DEMO, DeviceKind, DeviceSelection, RunConfig
from mgpu_gui.core.devices.nvml import query_inventory
from mgpu_gui.core.devices.plan import plan_devices
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.evaluation import report
from mgpu_gui.core.evaluation.result import EvaluationResult, Split, choose_split
from mgpu_gui.core.events import EvaluationDone
from mgpu_gui.core.modelfiles.card import IMAGES, card_path, read_card
from mgpu_gui.core.modelfiles.info import ModelFileInfo
from mgpu_gui.core.runs import preflight
from mgpu_gui.core.runs.folder import RunDir, custom_objects_for
from mgpu_gui.core.tools.evaluate_job import EvaluateRequest

MODEL_SUFFIXES = (".keras", ".h5", ".hdf5")
MATRIX_MAX_CLASSES = 30  # wider than a terminal beyond this: --json or --csv


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evaluate", help="judge a trained model: per-class precision, recall and F1, the "
        "confusion matrix, top-1/top-5 and loss, on every test (or validation) sample")
    p.add_argument("target", help="a run (id, name or folder) or a .keras/.h5 model file")
    p.add_argument("--data", help="an .npz, an image folder or 'demo' (default: the run's "
                   "own data; required for a model file)")
    p.add_argument("--split", choices=[s.value for s in Split],
                   help="test or val (default: test when the data has one, else validation)")
    p.add_argument("--cpu", action="store_true", help="predict on CPU replicas")
    p.add_argument("--replicas", type=int, help="GPUs (the first N) or CPU replicas")
    p.add_argument("--json", action="store_true",
                   help="print the whole result as JSON (the sample count, and the confusion "
                        "matrix under classifier.confusion_matrix, rows = true labels)")
    p.add_argument("--custom-objects", type=Path, help="the .py defining the model's own "
                   "classes, for a file saved outside this app's runs")
    p.add_argument("--csv", type=Path, help="write the per-class table to this CSV file "
                   "(one row per class, then the macro and weighted averages)")
    add_store_argument(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    request, run_id = _request(args)
    outcome = run_evaluator(request, args, "evaluation", None if args.json else print)
    if isinstance(outcome, int):
        return outcome
    assert isinstance(outcome, EvaluationDone)
    result = EvaluationResult.from_dict(outcome.result)
    if run_id is not None and outcome.path is not None:  # the run's own data: its figures
        with open_store(args) as store:
            store.save_evaluation(run_id, result)
    table = result.classifier or result.multi_label
    if args.csv is not None and table is not None:
        with open(args.csv, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(report.CSV_HEADER)
            writer.writerows(report.csv_rows(table))
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    print(report.summary(result))
    if result.multi_label is not None:
        print()
        print(report.class_table(result.multi_label))
    if result.classifier is not None:
        print()
        print(report.class_table(result.classifier))
        print()
        if len(result.classifier.class_names) <= MATRIX_MAX_CLASSES:
            print(report.confusion_text(result.classifier))
        else:
            print(f"{len(result.classifier.class_names)} classes: the confusion matrix is in "
                  "--json (and in evaluation.json when kept).")
    if outcome.path is not None:
        print(f"\nKept in {outcome.path}")
    return 0


def _request(args: argparse.Namespace) -> tuple[EvaluateRequest, int | None]:
    """The model, the data settings and the devices, from a run or a model file; and the
    run's id in the store, when a run is evaluated."""
    target = Path(args.target).expanduser()
    if target.is_file():
        if target.suffix.lower() not in MODEL_SUFFIXES:
            raise UserError(f"{target.name} is not a trained model file; give a .keras or .h5 "
                            "file, or a run.")
        if args.data is None:
            raise UserError(f"give the data to evaluate {target.name} on: --data FILE_OR_FOLDER "
                            "(or --data demo).")
        model, config, output, run_id = target.absolute(), RunConfig(), None, None
    else:
        with open_store(args) as store:
            record = store.resolve(args.target)
        run_id, run_dir = record.id, RunDir(record.run_dir)
        model = run_dir.trained_model()
        if model is None:
            raise UserError(f"the run in {run_dir.path} has no trained model yet (no "
                            "model.keras, no checkpoints/last.keras).")
        config = run_dir.read_config()
        own_data = args.data is None or args.data == config.data
        if own_data:
            run_dir.check_stored_paths()
        if not own_data:
            config = config.replace(validation_data=None)
        output = run_dir.path if own_data else None  # another data set's figures are not its
    if args.data is not None:
        config = config.replace(data=args.data if args.data == DEMO
                                else str(Path(args.data).expanduser().absolute()))
    devices = config.devices
    if args.cpu or args.replicas is not None:
        devices = DeviceSelection(kind=DeviceKind.CPU if args.cpu else devices.kind,
                                  replicas=args.replicas)
    split = None if args.split is None else Split(args.split)
    # Bad data, or data that does not fit the model, refused before the evaluator starts,
    # by the checks training makes (NaN/Inf, labels, shapes, a folder's classes).
    reader = file_inspector()
    facts = reader.inspect_model(str(model))
    custom = custom_objects_for(model, args.custom_objects, facts.custom_objects)
    if run_id is None:
        config = _prepared_as_recorded(config, model, facts)
    info = preflight.check_data_for(config.replace(model=str(model)), facts, reader,
                                    learns=False)
    if config.validation_data is None:
        _, val, test = info.split_counts(config.validation_split)
        choose_split(split, val, test)
    plan = plan_devices(devices, query_inventory())
    return EvaluateRequest(model, config, plan, split, output, custom), run_id


def _prepared_as_recorded(config: RunConfig, model: Path, facts: ModelFileInfo) -> RunConfig:
    """A model file's images prepared as its card records (its run's size and rescale);
    without a card, at the size of its input layer, as `predict` takes them."""
    card = read_card(card_path(model, "keras"))
    recorded = card.inputs if card is not None else None
    if recorded is not None and recorded.kind == IMAGES and recorded.image_size:
        return config.replace(image_size=tuple(recorded.image_size), rescale=recorded.rescale)
    shape = facts.input_shape or ()
    if len(shape) == 3 and isinstance(shape[0], int) and isinstance(shape[1], int):
        return config.replace(image_size=(shape[0], shape[1]))
    return config

