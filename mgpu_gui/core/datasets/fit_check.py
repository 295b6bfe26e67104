"""Does the data fit the model? Pure checks shared by the instant preflight
(shapes read from the model file) and the worker (shapes of the built model)."""

from __future__ import annotations

from collections.abc import Sequence

from mgpu_gui.core.errors import DataError, ModelError


def check_input_shape(expected: Sequence[int | None], got: Sequence[int]) -> None:
    """`None` in the model's shape accepts any size."""
    expected, got = tuple(expected), tuple(got)
    if len(expected) != len(got) or any(e not in (None, g) for e, g in zip(expected, got,
                                                                            strict=False)):
        raise ModelError(
            f"the model expects inputs of shape {expected}, but the data has {got}. "
            "Change the image size / data to match, or use a model built for this shape "
            "(a .py build_model(input_shape) adapts by itself).")


def check_label_range(units: int | None, label_max: float | None, num_classes: int | None) -> None:
    """Integer labels must index the model's output units (one unit: binary 0/1)."""
    if units is None or label_max is None:
        return
    label_max = int(label_max)
    limit = 1 if units == 1 else units - 1
    if label_max > limit:
        raise DataError(
            f"the labels go up to {label_max} ({max(num_classes or 0, label_max + 1)} classes), "
            f"but the model's output has {units} unit(s), so labels must be 0..{limit}. "
            "Use a model with one output per class, or check the labels.")


def check_folder_classes(units: int | None, class_names: Sequence[str]) -> None:
    """An image folder's classes are the model's outputs, one each (one unit: two classes);
    a trained model judged, predicted or exported on another count would name its outputs
    wrong."""
    if units is None or not class_names:
        return
    wanted = 2 if units == 1 else units
    if len(class_names) != wanted:
        shown = ", ".join(class_names[:6]) + (", …" if len(class_names) > 6 else "")
        raise DataError(
            f"the image folder has {len(class_names)} class subfolders ({shown}), but the "
            f"model has {units} output unit(s), {'two classes' if units == 1 else 'one per class'}"
            ". Give the folder the model was trained on (its classes are listed in the "
            "model's .classes.json), or a model with one output per class.")
