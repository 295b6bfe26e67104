"""Load or build the model for a run, inside the strategy's scope, and compile it.

Pitfalls handled here (see architecture.md): everything is built or loaded
inside `strategy.scope()` (outside it a model trains on one replica only); a
compiled legacy `.h5` is loaded with `compile=False` and compiled again inside
the scope (its saved optimizer cannot train the new variables); Lambda layers
run code from the file, so they load only with the user's explicit consent.

Custom objects: a `.py` file may define a module-level dict
`custom_objects = {"MyLayer": MyLayer, ...}` (keyed by the registered name,
"package>MyLayer", for classes saved with `@register_keras_serializable`).
Pass such a file as `custom_objects_file` to load `.keras`/`.h5` models with
custom layers; importing it also runs its registration decorators.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import sys
import traceback
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import keras

from mgpu_gui.core.config import RunConfig, is_model_file
from mgpu_gui.core.datasets import fit_check
from mgpu_gui.core.errors import ModelError
from mgpu_gui.core.modelfiles.builder import py_builder
from mgpu_gui.core.modelfiles.builtins import architecture
from mgpu_gui.core.modelfiles.compile_facts import CompileSource
from mgpu_gui.core.modelfiles.info import ModelFileInfo, lambda_refused
from mgpu_gui.core.modelfiles.inspection import inspect_model_file, read_h5_training_config
from mgpu_gui.core.runs.preflight import loss_is_classifier
from mgpu_gui.engine import precision
from mgpu_gui.engine.compiling import compile_model, optimizer_in_use, override_optimizer
from mgpu_gui.engine.data_source import LabelMap
from mgpu_gui.engine.legacy_compile import compile_from_training_config, describe_loss
from mgpu_gui.engine.output_head import output_layer_info

Log = Callable[[str], None]
_ONEHOT_LOSSES = {"categoricalcrossentropy", "categoricalfocalcrossentropy", "categoricalhinge"}
_SPARSE_LOSSES = {"sparsecategoricalcrossentropy"}
_UNKNOWN_OBJECT = re.compile(r"(?:Could not locate class|Unknown \w+:) '([^']+)'")
_REGISTERED_NAME = re.compile(r"'registered_name': '([^']+)'")
# What a model file's own classes can be that a saved model names.
_KERAS_OBJECTS = (keras.layers.Layer, keras.losses.Loss, keras.metrics.Metric,
                  keras.optimizers.Optimizer, keras.initializers.Initializer,
                  keras.regularizers.Regularizer, keras.constraints.Constraint)


@dataclass(frozen=True)
class LoadedModel:
    """The run's model, and where the optimizer it trains with came from."""

    model: keras.Model
    source: CompileSource
    file_optimizer: str = ""  # the file's own optimizer's class, when it came compiled


def load_model(
    config: RunConfig, strategy: Any, *, input_shape: tuple[int, ...], num_classes: int,
    log: Log, custom_objects_file: str | Path | None = None,
) -> keras.Model:
    """`load_run_model(...).model`: for callers that do not report the optimizer."""
    return load_run_model(config, strategy, input_shape=input_shape, num_classes=num_classes,
                          log=log, custom_objects_file=custom_objects_file).model


def load_run_model(
    config: RunConfig, strategy: Any, *, input_shape: tuple[int, ...], num_classes: int,
    log: Log, custom_objects_file: str | Path | None = None,
) -> LoadedModel:
    """The run's model, built or loaded inside `strategy.scope()`, compiled, ready to fit.

    The run's dtype policy (`config.precision`) is set first, so what is built
    takes it; a loaded file's layers are switched to it (see precision.py). A
    compiled file keeps its own optimizer unless `config.override_compile`.
    """
    info = inspect_model_file(config.model) if is_model_file(config.model) else None
    # Read as every reload of the run's models reads it (the export check, evaluate,
    # predict): its `custom_objects` dict, else the Keras classes it defines.
    custom_objects = run_custom_objects(custom_objects_file) or {}
    built = info is None or info.format == "py"
    builtin = architecture(config.model)
    # A compiled file is loaded under float32: its optimizer's saved state does not fit
    # the LossScaleOptimizer Keras would wrap it in under mixed_float16 (measured).
    precision.set_global_policy(config.precision if built else precision.FLOAT32)
    with strategy.scope():
        if builtin is not None:
            from mgpu_gui.engine.builtins import build_builtin

            model = build_builtin(builtin, config.pretrained, tuple(input_shape), num_classes,
                                  log)
        elif info is None:
            from mgpu_gui.engine.demo import build_demo_model

            model = build_demo_model(tuple(input_shape), num_classes)
            log(f"built the demo model for inputs {tuple(input_shape)}, {num_classes} classes")
        elif info.format == "py":
            model = _build_from_py(info, config.builder, input_shape, num_classes, log)
        elif info.wrapper is not None:
            model = _unwrap(info, custom_objects, log)
        else:
            model = _load_file(info, config, custom_objects, log)
        precision.set_global_policy(config.precision)
        precision.apply_policy(model, config.precision, input_shape=input_shape, log=log,
                               loaded=not built)
        if keras.backend.backend() == "jax":
            log("BatchNorm statistics are over the global batch on the JAX engine (one "
                "program over all devices): synchronised, as --sync-bn makes them.")
        elif config.sync_batchnorm:
            model = sync_batchnorm(model, log)
        if info is not None and info.format == "h5" and not model.compiled:
            _compile_from_training_config(model, info, config, log)
        source, file_optimizer = CompileSource.RUN, ""
        if not model.compiled:
            compile_model(model, config, input_shape, log)
        else:
            file_optimizer = optimizer_in_use(model)[0]
            if config.override_compile:
                source = CompileSource.OVERRIDE
                override_optimizer(model, config, log)
            else:
                source = CompileSource.FILE
                if info is None or (info.format != "h5" and info.wrapper is None):
                    log(f"the model comes compiled: using its own optimizer ({file_optimizer})"
                        f" and loss ({describe_loss(model.loss)}); the optimizer and "
                        "learning-rate settings are not used (Override uses them)")
        precision.ensure_loss_scaling(model, config.precision, log)
    return LoadedModel(model, source, file_optimizer)


def load_custom_objects(path: str | Path, *, or_its_classes: bool = False) -> dict[str, Any]:
    """The `custom_objects` dict of a `.py` file the user chose (running it is the point).

    `or_its_classes`: without such a dict, the Keras classes the file defines (a layer, a
    subclassed model, a loss, a metric), by class name: a `.py` model's custom objects
    are its own classes. Importing it also registers the ones it decorated with
    `register_keras_serializable`. A model saved by its run reloads with them anywhere.
    """
    module = _import_user_file(Path(path).expanduser())
    found = getattr(module, "custom_objects", None)
    if not isinstance(found, dict) and or_its_classes:
        return {name: value for name, value in vars(module).items()
                if isinstance(value, type) and value.__module__ == module.__name__
                and issubclass(value, _KERAS_OBJECTS)}
    if not isinstance(found, dict):
        raise ModelError(
            f"{Path(path).name} defines no module-level dict `custom_objects`; add "
            "`custom_objects = {'MyLayer': MyLayer}` naming each custom class."
        )
    return found


def run_custom_objects(path: str | Path | None) -> dict[str, Any] | None:
    """How every load of a run's models reads its file (training, the export check,
    export, evaluate, predict): its `custom_objects` dict, else the Keras classes it
    defines (a `.py` model's own classes); None without a file."""
    return load_custom_objects(path, or_its_classes=True) if path else None


# -- sources ----------------------------------------------------------------
def _unwrap(info: ModelFileInfo, custom_objects: dict[str, Any], log: Log) -> keras.Model:
    """A legacy multi-GPU wrapper: train the recovered template, never the wrapper."""
    from mgpu_gui.engine.unwrap import recover_model

    log(f"{info.path.name} is a {info.wrapper.describe()}; training the recovered template "
        "(no code from the file runs)")
    # .h5: compiled afterwards from training_config inside the scope, like any legacy .h5.
    recovered = recover_model(info.path, custom_objects=custom_objects,
                              compile=info.format == "keras", log=log)
    return recovered.model


def _load_file(info: ModelFileInfo, config: RunConfig, custom_objects: dict[str, Any],
               log: Log) -> keras.Model:

    if info.has_lambda and not config.allow_unsafe_code:
        raise ModelError(lambda_refused(info, ", ".join(info.lambda_layers)))
    if info.has_lambda:
        log(f"loading with safe_mode off (allowed by the user): Lambda layers "
            f"{', '.join(info.lambda_layers)} run code from the file")
    try:
        model = keras.saving.load_model(
            info.path, custom_objects=custom_objects or None,
            compile=info.format == "keras", safe_mode=not config.allow_unsafe_code,
        )
    except Exception as exc:  # Keras raises ValueError/TypeError/OSError alike
        raise _load_error(info, exc) from exc
    log(f"loaded {info.path.name} ({info.class_name} '{model.name}', "
        f"{model.count_params():,} parameters, saved by Keras {info.keras_version or '?'})")
    return model


def _load_error(info: ModelFileInfo, exc: Exception) -> ModelError:
    text = str(exc)
    unknown = _UNKNOWN_OBJECT.search(text)
    if unknown:
        registered = _REGISTERED_NAME.search(text)
        key = registered.group(1) if registered else unknown.group(1)
        return ModelError(
            f"{info.path.name} uses a custom class or function '{unknown.group(1)}' that this "
            "app does not know: provide custom_objects, a .py file that defines it and "
            f"`custom_objects = {{'{key}': {unknown.group(1)}}}`."
        )
    if "Lambda" in text and "safe_mode" in text:
        return ModelError(lambda_refused(info, "?"))
    if isinstance(exc, OSError) or "zip" in text.lower() or "truncated" in text.lower():
        return ModelError(f"{info.path.name} is truncated or damaged ({text.splitlines()[0]}); "
                          "copy or save it again.")
    first = text.strip().splitlines()[0] if text.strip() else ""
    return ModelError(f"could not load {info.path.name}: {type(exc).__name__}: {first}")


def _build_from_py(info: ModelFileInfo, requested: str | None, input_shape: tuple[int, ...],
                   num_classes: int, log: Log) -> keras.Model:
    path, name = info.path, py_builder(info, requested)
    module = _import_user_file(path)
    build = getattr(module, name, None)
    if not callable(build):
        raise ModelError(f"{path.name}: {name} is not a function.")
    offered = {"input_shape": tuple(input_shape), "num_classes": num_classes}
    params = inspect.signature(build).parameters
    kwargs = {key: value for key, value in offered.items() if key in params}
    missing = [
        p.name for p in params.values()
        if p.default is p.empty and p.name not in kwargs
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if missing:
        raise ModelError(
            f"{path.name}: {name}() requires {', '.join(missing)}, which the app cannot "
            "give; it may take input_shape and num_classes, anything else needs a default.")
    try:
        model = _in_user_dir(path, lambda: build(**kwargs))
    except Exception as exc:
        raise ModelError(f"{path.name}: {name}() failed{_user_line(exc, path)}: "
                         f"{type(exc).__name__}: {exc}") from exc
    if model is None:
        raise ModelError(f"{path.name}: {name}() returned None; it must return a "
                         "keras.Model (is `return model` missing?).")
    if not isinstance(model, keras.Model):
        kind = f"{type(model).__module__}.{type(model).__qualname__}"
        hint = " (a tf_keras/Keras 2 model: build it with `import keras`, Keras 3)" if (
            kind.startswith("tf_keras")) else ""
        raise ModelError(f"{path.name}: {name}() returned a {kind}, not a keras.Model{hint}.")
    chosen = "named by --builder" if requested else "found by its name"
    log(f"built '{model.name}' with {path.name}: {name}("
        + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + f") ({chosen})")
    return model


def _import_user_file(path: Path) -> Any:
    """Import a user's `.py` under a unique module name; errors name the line."""
    if path.suffix.lower() != ".py" or not path.is_file():
        raise ModelError(f"{path}: not a Python file; give the path to a .py file.")
    name = f"mgpu_user_{path.stem}_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModelError(f"{path.name} cannot be imported as a Python module.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses, pickling and Keras registration look here
    try:
        _in_user_dir(path, lambda: spec.loader.exec_module(module))
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        raise ModelError(f"{path.name}, line {exc.lineno}: syntax error: {exc.msg}.") from exc
    except Exception as exc:
        sys.modules.pop(name, None)
        raise ModelError(f"{path.name} failed on import{_user_line(exc, path)}: "
                         f"{type(exc).__name__}: {exc}") from exc
    return module


def _in_user_dir(path: Path, action: Callable[[], Any]) -> Any:
    """Run user code with its folder importable, so sibling helper modules work."""
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        return action()
    finally:
        if folder in sys.path:
            sys.path.remove(folder)


def _user_line(exc: BaseException, path: Path) -> str:
    target = str(path.resolve())
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__)
             if str(Path(f.filename).resolve()) == target]
    return f" at line {lines[-1]}" if lines else ""


def _compile_from_training_config(model: keras.Model, info: ModelFileInfo, config: RunConfig,
                                  log: Log) -> None:
    """Compile a legacy `.h5` as it was saved: its optimizer class and settings, loss, metrics."""
    training = read_h5_training_config(info.path)
    if training:
        compile_from_training_config(model, training, log, info.path.name)


# -- synchronized BatchNorm -------------------------------------------------
def sync_batchnorm(model: keras.Model, log: Log) -> keras.Model:
    """A copy of `model` whose BatchNormalization layers (nested too) are synchronized.

    Call inside the strategy's scope. Functional and Sequential models are
    rebuilt from their config with `synchronized=True` and get the same weights;
    a compiled model is compiled again with its own settings (fresh optimizer
    state). A subclassed model cannot be rebuilt, so its layers are switched in
    place, which works because the flag is read when the model is first traced.
    """

    count = sum(isinstance(layer, keras.layers.BatchNormalization) and not layer.synchronized
                for layer in _all_layers(model))
    if count == 0:
        log("synchronized BatchNorm: the model has no unsynchronized BatchNormalization layer")
        return model
    if not _is_graph_model(model):
        for layer in _all_layers(model):
            if isinstance(layer, keras.layers.BatchNormalization):
                layer.synchronized = True
        log(f"synchronized BatchNorm: switched {count} layer(s) in place (subclassed model)")
        return model

    def clone(layer: Any) -> Any:
        if isinstance(layer, keras.layers.BatchNormalization):
            return layer.__class__.from_config({**layer.get_config(), "synchronized": True})
        return layer.__class__.from_config(layer.get_config())

    compile_config = model.get_compile_config() if model.compiled else None
    new = keras.models.clone_model(model, clone_function=clone, recursive=True)
    new.set_weights(model.get_weights())
    if compile_config:
        new.compile_from_config(compile_config)
    log(f"synchronized BatchNorm: rebuilt {count} BatchNormalization layer(s) with "
        "synchronized=True, weights kept" + ("; optimizer state starts fresh" if compile_config
                                            else ""))
    return new


def _all_layers(model: Any) -> list[Any]:
    # Keras' own walk: also finds layers held inside custom layers and nested models.
    return list(model._flatten_layers(include_self=False, recursive=True))


def _is_graph_model(model: Any) -> bool:
    """Functional or Sequential all the way down: clone_model can rebuild it."""

    def graph(m: Any) -> bool:
        return any(c.__name__ in ("Functional", "Sequential") for c in type(m).__mro__)

    return graph(model) and all(
        graph(layer) for layer in _all_layers(model) if isinstance(layer, keras.Model))


# -- model and data ---------------------------------------------------------
def loss_wants_onehot(model: keras.Model) -> bool | None:
    """True when the compiled loss takes one-hot labels, False for class indices, else None."""
    name = describe_loss(getattr(model, "loss", None)).split("(")[0].replace("_", "").lower()
    if name in _ONEHOT_LOSSES:
        return True
    return False if name in _SPARSE_LOSSES else None


def label_mapper(wants_onehot: bool | None, label_kind: str, num_classes: int | None
                 ) -> tuple[LabelMap | None, str | None]:
    """How labels must change for the loss, and a log line saying so.

    (None, None) when they already fit. Integer labels for a one-hot loss (or the
    reverse) are converted, not refused; their range is checked before, by
    `fit_check.check_label_range`.
    """

    if wants_onehot is True and label_kind == "sparse" and num_classes:
        return (LabelMap.TO_ONEHOT,
                f"The model's loss expects one-hot labels; converting integer labels "
                f"to one-hot vectors of {num_classes} classes.")
    if wants_onehot is False and label_kind == "onehot":
        return (LabelMap.TO_IDS,
                "The model's loss expects integer labels; converting one-hot labels to class ids.")
    return None, None


def check_model_fits_data(model: keras.Model, input_shape: tuple[int, ...], num_classes: int,
                          label_max: int | None, folder_classes: Sequence[str] = ()) -> None:
    """Fail before training (or an evaluation) when the data cannot fit the model, saying
    what to change. `folder_classes`: an image folder's classes, one per output."""
    inputs = getattr(model, "inputs", None) or []
    if len(inputs) > 1:
        raise ModelError(f"the model has {len(inputs)} inputs but the data gives one; "
                         "use a model with a single input.")
    if inputs:
        fit_check.check_input_shape(tuple(inputs[0].shape[1:]), tuple(input_shape))
    units = output_layer_info(model)[0]
    if loss_is_classifier(describe_loss(getattr(model, "loss", None))) is not False:
        fit_check.check_label_range(units, label_max, num_classes)  # not a regression's
    fit_check.check_folder_classes(units, folder_classes)


def model_summary(model: keras.Model) -> str:
    """The text of `model.summary()`; a wrapper around one nested model shows that model."""

    # A wrapper (e.g. a legacy multi-GPU model) holds one model plus weightless plumbing.
    inner = [layer for layer in model.layers if isinstance(layer, keras.Model)]
    if len(inner) == 1 and not any(
            layer.weights for layer in model.layers if layer is not inner[0]):
        header = f"'{model.name}' wraps '{inner[0].name}':\n"
        return header + model_summary(inner[0])
    lines: list[str] = []
    model.summary(print_fn=lambda text, *args, **kwargs: lines.append(text))
    return "\n".join(lines)
