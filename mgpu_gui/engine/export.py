"""Export a trained model as `.keras`, legacy `.h5` or a TensorFlow SavedModel, verified.

Why the care: an export is what users ship, so a broken one must never replace a
good one. Each export is written under a temporary name in the target's folder,
reloaded in a fresh Python process (no strategy, `CUDA_VISIBLE_DEVICES=""`, so
nothing of the training process or its GPUs helps it load; on Keras' TensorFlow
backend wherever TensorFlow is installed, so a JAX run's export is checked to load
there, else on the training's own backend), its predictions on
a sample compared with the in-memory model's, and only then renamed over the
target. A model built under `MirroredStrategy` saves as the plain single-device
model: the files hold values, not distributed variables.

The model's card (core/modelfiles/card.py: its class names and what the
pipeline did to a sample) goes into `<stem>.classes.json` beside a
`.keras`/`.h5` file, and into `classes.json` inside a SavedModel folder (so the
folder moves as one unit and is replaced atomically with its model).

The verifying process loads with `safe_mode=True` unless the user allowed the
model's Lambda code, and with the same custom-objects file the run used.
Out of scope: models with several inputs.

The verifying child is `mgpu_gui.processes.export_verifier`, started through the
child runner: the sample goes in as an `.npy`, the predictions come back as an
`.npz`, and it says how it went in typed events (`ExportReloaded`, `ExportFailed`).
"""

from __future__ import annotations

import json
import math
import os
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import keras
import numpy as np
from keras.src.export.export_utils import get_input_signature  # model.export's own

from mgpu_gui.core.children.launch import module_command, pythonpath_for_child
from mgpu_gui.core.children.runner import ChildProcesses, died_text
from mgpu_gui.core.config import EXPORT_FORMATS
from mgpu_gui.core.engines import Engine, installed
from mgpu_gui.core.errors import ExportError
from mgpu_gui.core.events import ExportFailed, ExportReloaded, parse_event
from mgpu_gui.core.modelfiles.card import (
    InputRecord,
    ModelCard,
    card_path,
    checked_class_names,
    read_card,
)
from mgpu_gui.core.runs.folder import RunDir
from mgpu_gui.engine.export_sample import as_sample, random_sample
from mgpu_gui.engine.precision import float32_policies

# Predictions must agree within this, scaled by the output's magnitude when it exceeds 1.
TOLERANCE = 1e-5
VERIFY_TIMEOUT_S = 300.0  # TensorFlow import alone takes 2-4 s; big models take longer to load
_BATCH = 256  # forward passes in chunks so a large sample does not need one huge tensor
_FILE_SUFFIXES = {"keras": (".keras",), "h5": (".h5", ".hdf5")}
_MODEL_FILE_SUFFIXES = (".keras", ".h5", ".hdf5")


@dataclass(frozen=True)
class ExportResult:
    """What was written; `verified` is False only when verification was skipped."""

    path: Path
    format: str
    verified: bool
    max_abs_diff: float  # NaN when not verified
    classes_path: Path | None = None
    verify_s: float = 0.0  # wall time of the fresh-process check


def default_export_path(run_dir: Path, fmt: str) -> Path:
    """Where a run's export of `fmt` goes: `model.keras`, `model.h5`, `model_savedmodel/`."""
    _check_format(fmt)
    return RunDir(Path(run_dir)).export_path(fmt)


def export_model(
    model: Any,
    out: Path,
    fmt: str,
    *,
    sample_x: np.ndarray,
    class_names: Sequence[str] | None = None,
    inputs: InputRecord | None = None,
    verify: bool = True,
    safe_mode: bool = True,
    custom_objects_file: str | Path | None = None,
) -> ExportResult:
    """Write `model` to `out` as `fmt`, verify it in a fresh process, then put it in place.

    `sample_x` is a small batch of real inputs (a few dozen rows is plenty: each
    row is run twice). On any failure the target is left as it was and no
    temporary file remains. `verify=False` skips the fresh-process check (the
    write is still atomic); the result then says `verified=False`. `safe_mode=False`
    (only with the user's consent to run the model's Lambda code) applies to the reload.
    """
    out = Path(out).expanduser().absolute()  # the verifier runs in another folder
    _check_target(out, fmt)
    x = as_sample(model, sample_x)
    names = checked_class_names(class_names)
    custom = (str(Path(custom_objects_file).expanduser().absolute())
              if custom_objects_file else None)
    card = (ModelCard(tuple(names or ()), inputs, custom)
            if names is not None or inputs or custom else None)
    # A mixed-precision model is exported with every layer in float32: it loads and
    # predicts in float32 anywhere, CPUs without bfloat16/float16 kernels included.
    with float32_policies(model):
        return _export_model(model, out, fmt, x, card, verify, safe_mode, custom_objects_file)


def _export_model(model: Any, out: Path, fmt: str, x: np.ndarray, card: ModelCard | None,
                  verify: bool, safe_mode: bool,
                  custom_objects_file: str | Path | None) -> ExportResult:
    reference = _reference(model, x) if verify else []
    if card is not None and card.class_names and reference:
        check_classes_match(list(card.class_names), reference[0])

    token = secrets.token_hex(4)
    if fmt == "savedmodel":
        tmp = out.with_name(f".{out.name}.{token}.tmp")
    else:
        # Keras picks the format from the suffix, so the temporary name keeps it.
        tmp = out.with_name(f".{out.stem}.{token}.tmp{out.suffix}")
    classes_tmp: Path | None = None
    try:
        _write(model, tmp, fmt)
        if card is not None:
            payload = card.to_json()
            if fmt == "savedmodel":
                (tmp / "classes.json").write_text(payload, encoding="utf-8")
            else:
                classes_tmp = out.with_name(f".{out.stem}.{token}.tmp.classes.json")
                classes_tmp.write_text(payload, encoding="utf-8")
        diff, seconds = math.nan, 0.0
        if verify:
            diff, seconds = check_reloaded(fmt, tmp, x, reference, out.name, safe_mode,
                                           custom_objects_file)
        _put_in_place(tmp, out, fmt)
        classes_path = card_path(out, fmt) if card is not None else None
        if classes_tmp is not None and classes_path is not None:
            # Without a card an existing one is left alone: `model.keras` and `model.h5`
            # share `model.classes.json`.
            os.replace(classes_tmp, classes_path)
    except OSError as e:
        raise ExportError(f"Could not write the {fmt} export to {out}: {e}") from e
    finally:
        _remove(tmp)
        if classes_tmp is not None:
            _remove(classes_tmp)
    return ExportResult(out, fmt, verify, diff, classes_path, seconds)


def written_for_rehearsal(model: Any, path: Path, fmt: str, sample_x: np.ndarray
                          ) -> tuple[np.ndarray, list[np.ndarray]]:
    """`model` written at `path` as `fmt`, as an export writes it, with the sample as its
    input dtype and the model's outputs on it: what `check_reloaded` compares against
    (the rehearsal before epoch 1, engine/rehearsal.py)."""
    x = as_sample(model, sample_x)
    with float32_policies(model):
        reference = _reference(model, x)
        _write(model, path, fmt)
    return x, reference


def check_reloaded(fmt: str, path: Path, x: np.ndarray, reference: list[np.ndarray],
                   name: str, safe_mode: bool, custom_objects_file: str | Path | None,
                   children: ChildProcesses | None = None) -> tuple[float, float]:
    """The export at `path` reloaded in a fresh process and compared with `reference`:
    (largest difference, seconds); an ExportError naming `name` when it differs or fails.
    `children`: the caller's, to cancel the check."""
    started = time.monotonic()
    reloaded = _run_verifier(fmt, path, x, safe_mode, custom_objects_file, children)
    return _compare(reference, reloaded, name), time.monotonic() - started


def export_file(
    src: Path,
    out: Path,
    fmt: str,
    *,
    sample_x: np.ndarray | None = None,
    class_names: Sequence[str] | None = None,
    inputs: InputRecord | None = None,
    custom_objects_file: str | Path | None = None,
) -> ExportResult:
    """Convert a run's `.keras` or `.h5` model to `fmt` (the CLI's `mgpu-train export`).
    `custom_objects_file`: the run's (its --custom-objects, or its `.py` model), for the
    load here and the reload that verifies the export.

    Loads with `safe_mode=True` and `compile=False`: exporting never runs code
    stored in the file. Without `sample_x`, a deterministic random batch shaped
    like the model's input is used, which checks the file, not the data.
    Without `class_names` (or `inputs`), those of `src`'s card carry over.
    """
    src = Path(src).expanduser().absolute()
    _check_format(fmt)
    if not src.is_file():
        raise ExportError(f"Model file not found: {src}. Give the .keras or .h5 file of a run.")
    if src.suffix.lower() not in _MODEL_FILE_SUFFIXES:
        raise ExportError(
            f"{src.name} is not a Keras model file; give a .keras or .h5 file of a run."
        )

    from mgpu_gui.engine.models import run_custom_objects

    custom = run_custom_objects(custom_objects_file)
    try:
        model = keras.saving.load_model(src, compile=False, safe_mode=True,
                                        custom_objects=custom)
    except Exception as e:  # Keras raises many types for a bad file; all mean "cannot load"
        raise ExportError(f"Could not load {src}: {type(e).__name__}: {e}") from e
    if sample_x is None:
        sample_x = random_sample(model)
    card = read_card(card_path(src, "keras")) or ModelCard()
    return export_model(model, out, fmt, sample_x=sample_x,
                        class_names=card.class_names if class_names is None else class_names,
                        inputs=card.inputs if inputs is None else inputs,
                        custom_objects_file=custom_objects_file)


# -- checks ------------------------------------------------------------------


def _check_format(fmt: str) -> None:
    if fmt not in EXPORT_FORMATS:
        raise ExportError(f"Unknown export format {fmt!r}; use one of {', '.join(EXPORT_FORMATS)}.")


def _check_target(out: Path, fmt: str) -> None:
    _check_format(fmt)
    suffix = out.suffix.lower()
    if fmt == "savedmodel":
        if suffix in _MODEL_FILE_SUFFIXES:
            raise ExportError(
                f"A SavedModel is a folder, but {out.name} ends in {out.suffix}; "
                f"give a folder name without {out.suffix} (e.g. {out.stem}_savedmodel)."
            )
        if out.exists() and not out.is_dir():
            raise ExportError(f"{out} is a file; a SavedModel needs a folder path.")
    else:
        allowed = _FILE_SUFFIXES[fmt]
        if suffix not in allowed:
            raise ExportError(
                f"The {fmt} format needs a file name ending in {allowed[0]}; "
                f"got {out.name!r}. Use {out.with_suffix(allowed[0]).name}."
            )
        if out.is_dir():
            raise ExportError(f"{out} is a folder; give a file path ending in {allowed[0]}.")
    folder = out.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() or _through_file(folder) else "does not exist"
        raise ExportError(
            f"Cannot export to {out}: {folder} {what}. Choose an existing, writable folder."
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ExportError(f"Cannot export to {out}: the folder {folder} is not writable.")


def _through_file(path: Path) -> bool:
    return any(p.is_file() for p in path.parents)


def check_classes_match(names: list[str], first_output: np.ndarray) -> None:
    width = first_output.shape[-1] if first_output.ndim > 1 else 1
    if width == len(names) or (width == 1 and len(names) == 2):  # 1 unit: sigmoid, 2 classes
        return
    raise ExportError(
        f"The model outputs {width} values per sample but {len(names)} class names were "
        "given; pass the class names of the data the model was trained on."
    )


# -- writing -----------------------------------------------------------------


def _write(model: Any, tmp: Path, fmt: str) -> None:

    try:
        if fmt == "keras":
            keras.saving.save_model(model, tmp)
        elif fmt == "h5":
            # Optimizer state is for resuming, not inference, and legacy .h5 cannot
            # hand it back to a Keras 3 optimizer anyway.
            keras.saving.save_model(model, tmp, include_optimizer=False)
        else:
            _write_savedmodel(model, tmp)
    except OSError:
        raise
    except Exception as e:  # e.g. layers without get_config, untraceable call()
        raise ExportError(
            f"Keras could not save the model as {fmt}: {type(e).__name__}: {e}"
        ) from e


def _write_savedmodel(model: Any, tmp: Path) -> None:
    """A SavedModel whose `serve` is Keras' inference, `model(x, training=False)`.

    `model.export` serves `model.__call__` with `training` unset. On JAX that leaves
    each layer's own default, and RandomFlip, RandomRotation and the like default to
    training: the served model augmented every sample (the zoo's Xception-like
    differed by 0.2 from Keras' inference).
    """
    signature = get_input_signature(model)
    if len(signature) != 1:  # a subclassed call() with several positional inputs
        model.export(str(tmp), format="tf_saved_model", verbose=False)
        return
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint("serve", lambda inputs: model(inputs, training=False), signature)
    archive.write_out(str(tmp), verbose=False)


def _put_in_place(tmp: Path, out: Path, fmt: str) -> None:
    if fmt != "savedmodel":
        os.replace(tmp, out)
        return
    # A folder cannot be renamed over a non-empty one: move the old one aside,
    # and delete it only once the new one is in place.
    old = out.with_name(f".{out.name}.{secrets.token_hex(4)}.old") if out.exists() else None
    if old is not None:
        os.replace(out, old)
    try:
        os.replace(tmp, out)
    except OSError:
        if old is not None:
            os.replace(old, out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink(missing_ok=True)


# -- verification ------------------------------------------------------------


def _reference(model: Any, x: np.ndarray) -> list[np.ndarray]:
    try:
        return _predict(lambda b: model(b, training=False), x)
    except Exception as e:  # wrong shape or dtype for this model
        raise ExportError(f"The verification sample (shape {x.shape}) does not fit the "
                          f"model: {type(e).__name__}: {e}") from e


def _predict(call: Callable[[Any], Any], x: np.ndarray) -> list[np.ndarray]:
    """Run `call` over `x` in chunks; outputs flattened (tree order) and concatenated.

    Used on both sides of the check so both see the same chunks. A direct call,
    not `model.predict`: predict would go through the model's strategy and its
    partial-batch pitfalls.
    """

    parts: list[list[np.ndarray]] = []
    for start in range(0, len(x), _BATCH):
        outputs = call(x[start : start + _BATCH])  # numpy: either Keras backend takes it
        parts.append([np.asarray(o) for o in keras.tree.flatten(outputs)])
    return [np.concatenate(chunk, axis=0) for chunk in zip(*parts, strict=True)]


def _run_verifier(fmt: str, path: Path, x: np.ndarray, safe_mode: bool,
                  custom_objects_file: str | Path | None,
                  children: ChildProcesses | None = None) -> list[np.ndarray]:
    """Predictions of the export at `path`, reloaded in a fresh Python process."""
    with tempfile.TemporaryDirectory(prefix="mgpu-export-") as work:
        x_path, y_path = Path(work, "x.npy"), Path(work, "y.npz")
        np.save(x_path, x, allow_pickle=False)
        custom = (None if custom_objects_file is None
                  else str(Path(custom_objects_file).expanduser().absolute()))
        request = {"format": fmt, "path": str(path), "x": str(x_path), "y": str(y_path),
                   "safe_mode": safe_mode, "custom_objects": custom}
        # The export must load without the training GPUs; its folder is not this one.
        # And on the TensorFlow engine whatever trained it: a JAX run's export must load
        # there too (the worker's KERAS_BACKEND=jax would otherwise be inherited). Where
        # TensorFlow is not installed (a JAX-only machine), on the backend that trained it.
        backend = (Engine.TENSORFLOW.value if installed(Engine.TENSORFLOW)
                   else keras.backend.backend())
        # JAX_PLATFORMS: a JAX run on GPUs would pass on "cuda", which no GPU can satisfy.
        env = {"CUDA_VISIBLE_DEVICES": "", "KERAS_BACKEND": backend, "JAX_PLATFORMS": "cpu"}
        pythonpath = pythonpath_for_child(os.environ)
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        children = children or ChildProcesses("export-verifier-output")
        timer = threading.Timer(VERIFY_TIMEOUT_S, children.cancel)
        timer.start()
        try:
            ended = children.run(_verifier_command, request, env, _verifier_event, cwd=work)
        finally:
            timer.cancel()
        if ended is None or children.cancelled:
            raise ExportError(
                f"Verifying the {fmt} export timed out after {VERIFY_TIMEOUT_S:.0f} s "
                "while reloading it in a fresh process.")
        if not isinstance(ended.result, ExportReloaded):
            if isinstance(ended.result, ExportFailed):
                why = ended.result.message
            else:
                how, last = died_text(ended.code, ended.tail, ended.log)
                why = f"the verifying process {how}.{last}"
            raise ExportError(f"The {fmt} export could not be reloaded in a fresh process, "
                              f"so it was not saved: {why}")
        with np.load(y_path, allow_pickle=False) as data:
            return [data[f"arr_{i}"] for i in range(len(data.files))]


def _verifier_command(events_fd: int) -> list[str]:
    return module_command("mgpu_gui.processes.export_verifier", "--events-fd", str(events_fd))


def _verifier_event(message: dict[str, Any]) -> ExportReloaded | ExportFailed | None:
    event = parse_event(json.dumps(message))
    return event if isinstance(event, ExportReloaded | ExportFailed) else None


def _compare(reference: list[np.ndarray], reloaded: list[np.ndarray], name: str) -> float:
    """Largest absolute difference; ExportError when any output disagrees beyond tolerance."""
    if len(reference) != len(reloaded):
        raise ExportError(
            f"Verification failed for {name}: the reloaded model gives "
            f"{len(reloaded)} outputs, the trained one {len(reference)}. Nothing was saved."
        )
    worst = 0.0
    for i, (ref, got) in enumerate(zip(reference, reloaded, strict=True)):
        if ref.shape != got.shape:
            raise ExportError(
                f"Verification failed for {name}: output {i} has shape {got.shape} "
                f"after reloading, {ref.shape} before. Nothing was saved."
            )
        ref64, got64 = ref.astype(np.float64), got.astype(np.float64)
        if not np.array_equal(np.isnan(ref64), np.isnan(got64)):
            raise ExportError(
                f"Verification failed for {name}: output {i} has NaNs in different "
                "places after reloading. Nothing was saved."
            )
        finite = ~np.isnan(ref64)
        if not finite.any():
            continue
        diff = float(np.max(np.abs(ref64[finite] - got64[finite]), initial=0.0))
        if math.isnan(diff):  # inf - inf: both infinite, equal only if same sign
            diff = 0.0 if np.array_equal(ref64[finite], got64[finite]) else math.inf
        scale = max(1.0, float(np.max(np.abs(ref64[finite]), initial=0.0)))
        if not diff <= TOLERANCE * scale:
            raise ExportError(
                f"Verification failed for {name}: output {i} of the reloaded model differs "
                f"by up to {diff:.3g} (allowed {TOLERANCE * scale:.3g}). Nothing was saved."
            )
        worst = max(worst, diff)
    return worst


def reload_and_predict(fmt: str, path: str, x: np.ndarray, safe_mode: bool,
                       custom_objects_file: str | None) -> list[np.ndarray]:
    """The verifier child's side: load the export with nothing from its writer, predict."""
    if fmt == "savedmodel":
        import tensorflow as tf  # a SavedModel is TensorFlow's; refused where it is absent

        # Keep the loaded object alive: its variables die with it, not with `serve`.
        loaded = tf.saved_model.load(path)
        return _predict(lambda b: loaded.serve(b), x)

    from mgpu_gui.engine.models import run_custom_objects

    # The file was checked where it was chosen; a `.py` model's own file has no dict.
    custom = run_custom_objects(custom_objects_file)
    model = keras.saving.load_model(path, compile=False, safe_mode=safe_mode,
                                    custom_objects=custom)
    return _predict(lambda b: model(b, training=False), x)
