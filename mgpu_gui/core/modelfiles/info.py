"""What a model file holds, as plain data read from its config (no h5py, no Keras).

`ModelFileInfo` and the pure helpers on a model config (input shape, output
layer, Lambda layers, loss name, multi-GPU wrapper) live here, apart from the
file parsing (`inspection`), so the GUI can hold and show a `ModelFileInfo`
without importing h5py: untrusted files are to be parsed in a child process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mgpu_gui.core.modelfiles.compile_facts import CompileFacts
from mgpu_gui.core.modelfiles.wrapper import WrapperInfo, config_layers, find_wrapper, walk_config

ModelFormat = Literal["keras", "h5", "py"]
# Layers that only pass the previous layer's output through an activation.
NESTED_MODEL_CLASSES = ("Functional", "Sequential", "Model")  # Keras 3 and Keras 2 names
_ACTIVATION_LAYERS = {"Activation": None, "Softmax": "softmax", "ReLU": "relu"}


@dataclass(frozen=True)
class ModelInput:
    """One input of a model: its name and shape without the batch dimension (None: the
    file does not say)."""

    name: str
    shape: tuple[int | None, ...] | None = None


@dataclass(frozen=True)
class ModelFileInfo:
    """What a model file holds, as far as can be seen without loading it.

    `input_shape` excludes the batch dimension; it and the output fields are
    None when the file does not say (several inputs or outputs, a subclassed
    model, a `.py` file). `lambda_layers` names every Lambda layer, nested
    models included, because each one runs Python code from the file on load.
    `wrapper` describes a legacy multi-GPU wrapper (towers of slicing Lambdas
    around one nested template); such a file is unwrapped, never run. `compile`
    is how a compiled file was compiled (None: not compiled, or not readable).
    `inputs` lists every input (a multi-input model's too); `builder` is the
    function a `.py` file builds the model with.
    """

    path: Path
    format: ModelFormat
    class_name: str | None = None
    name: str | None = None
    input_shape: tuple[int | None, ...] | None = None
    output_units: int | None = None
    output_activation: str | None = None
    compiled: bool = False
    loss: str | None = None
    has_lambda: bool = False
    keras_version: str | None = None
    lambda_layers: tuple[str, ...] = field(default=())
    wrapper: WrapperInfo | None = None
    # A trained file holds its optimizer's slots (None: could not tell, or a .py file).
    optimizer_state: bool | None = None
    compile: CompileFacts | None = None
    inputs: tuple[ModelInput, ...] = ()
    # A .py file: the first of the usual builder names it defines (None: none), and its
    # top-level functions (what --builder may name); see inspection.py_builder.
    builder: str | None = None
    functions: tuple[str, ...] = ()
    # The names of the models nested in a .keras/.h5 model (transfer learning's backbone).
    nested_models: tuple[str, ...] = ()
    # Classes and functions of the user's own a `.keras` file names (registered names):
    # Keras rebuilds them only from their code (a custom-objects file). A `.h5` does not
    # say which classes are Keras' own, so it lists none.
    custom_objects: tuple[str, ...] = ()

    @property
    def code_lambdas(self) -> tuple[str, ...]:
        """The Lambda layers whose code would run in a run, so need the user's consent: a
        legacy wrapper's slicing Lambdas never run (its template is rebuilt from its
        config), only those inside the template do."""
        return self.wrapper.template_lambdas if self.wrapper else self.lambda_layers


_FORMAT_NAMES = {"keras": "Keras model (.keras)", "h5": "Keras model (legacy HDF5 .h5)"}


def describe(info: ModelFileInfo) -> list[str]:
    """What `mgpu-train inspect` says about a file: what it is, its inputs and output,
    compiled or not, wrapped or not; a `.py` builder says what it builds with, and when."""
    name = info.path.name
    if info.format == "py":
        if info.builder is None:
            functions = ", ".join(info.functions) or "none"
            return [f"{name}: a Python file with no builder of the usual names "
                    f"(build_model, create_model, get_model, make_model; its functions: "
                    f"{functions}). Name the one that returns the model with --builder NAME."]
        builder = f"{info.builder}(input_shape, num_classes)"
        return [f"{name}: a model builder file (Python): {builder} builds the model when a "
                f"run starts, for the data's input shape and classes.",
                "  Nothing in it ran: inspect reads it without running it. To see the model "
                "it builds: “Show summary” in the app, or --summary when training."]
    saved = f", saved by Keras {info.keras_version}" if info.keras_version else ""
    lines = [f"{name}: {_FORMAT_NAMES[info.format]}, {info.class_name or 'model'} "
             f"'{info.name or '?'}'{saved}"]
    if len(info.inputs) > 1:
        lines.append(f"  {len(info.inputs)} inputs: " + ", ".join(
            f"{i.name} {_shape_text(i.shape)}" for i in info.inputs))
        lines.append("  (the data gives one input array: runs here train single-input "
                     "models only)")
    elif info.input_shape is not None:
        lines.append(f"  input shape: {info.input_shape}")
    if info.output_units is not None:
        lines.append(f"  output: {info.output_units} units, activation "
                     f"{info.output_activation}")
    lines.append(f"  compiled: {'yes, loss ' + str(info.loss) if info.compiled else 'no'}")
    return lines


def _shape_text(shape: tuple[int | None, ...] | None) -> str:
    return str(shape) if shape is not None else "(shape not saved)"


def lambda_refused(info: ModelFileInfo, names: str | None = None) -> str:
    """Why a model with Lambda layers is refused, and how the user can allow it."""
    names = names or ", ".join(info.lambda_layers) or "?"
    return (f"{info.path.name}: this model contains a Lambda layer ({names}) whose Python code "
            "would run on load. Only if you trust the file, allow it with "
            "--allow-unsafe-code (the 'Allow code from the model file' box in the app).")


def info_from_config(
    path: Path, fmt: ModelFormat, config: dict[str, Any], *,
    compiled: bool, loss: str | None, keras_version: str | None,
    compile: CompileFacts | None = None,
) -> ModelFileInfo:
    lambdas = tuple(
        str((node.get("config") or {}).get("name", "?"))
        for node in walk_config(config) if node.get("class_name") == "Lambda"
    )
    nested = tuple(
        str((node.get("config") or {}).get("name", "?"))
        for node in walk_config(config.get("config"))
        if node.get("class_name") in NESTED_MODEL_CLASSES and "layers" in (node.get("config") or {})
    )
    units, activation = _output_of(config)
    return ModelFileInfo(
        path=path, format=fmt,
        class_name=config.get("class_name"),
        name=(config.get("config") or {}).get("name"),
        input_shape=_input_shape_of(config),
        output_units=units, output_activation=activation,
        compiled=compiled, loss=loss,
        has_lambda=bool(lambdas), keras_version=keras_version, lambda_layers=lambdas,
        wrapper=find_wrapper(config), compile=compile, inputs=_inputs_of(config),
        nested_models=nested, custom_objects=_own_objects(config),
    )


def _own_objects(config: dict[str, Any]) -> tuple[str, ...]:
    """What a Keras 3 config names from outside Keras: each object records its `module`
    (a class of the user's: None or the user's module; a registered function: `builtins`
    with its "package>name" as config)."""
    found: dict[str, None] = {}
    for node in walk_config(config):
        if "module" not in node or "class_name" not in node:
            continue
        module, inner = node.get("module"), node.get("config")
        if module == "builtins" and isinstance(inner, str) and ">" in inner:
            found[inner] = None
        elif module != "builtins" and not str(module or "").startswith("keras"):
            found[str(node.get("registered_name") or node["class_name"])] = None
    return tuple(found)


def _by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    for layer in config_layers(model_config):
        cfg = layer.get("config")  # a Keras 2.0-2.1 nested Sequential's config is a list
        if layer.get("name", cfg.get("name") if isinstance(cfg, dict) else None) == name:
            return layer
    return None


def _endpoints(model_config: dict[str, Any], key: str) -> list[Any] | None:
    """`input_layers`/`output_layers` of a Functional config as a list of [name, i, j]."""
    value = (model_config.get("config") or {}).get(key)
    if not isinstance(value, list) or not value:
        return None
    return [value] if isinstance(value[0], str) else value


def _input_shape_of(model_config: dict[str, Any]) -> tuple[int | None, ...] | None:
    inputs = _endpoints(model_config, "input_layers")
    if inputs is not None:  # Functional
        if len(inputs) != 1:
            return None
        first = _by_name(model_config, inputs[0][0])
    else:
        layers = config_layers(model_config)
        first = layers[0] if layers else None
    candidates = []
    if first is not None:
        cfg = first.get("config") if isinstance(first.get("config"), dict) else {}
        candidates += [cfg.get("batch_shape"), cfg.get("batch_input_shape")]
        if first.get("class_name") in ("Sequential", "Functional", "Model"):
            nested = _input_shape_of(first)
            candidates.append([None, *nested] if nested is not None else None)
        candidates.append((first.get("build_config") or {}).get("input_shape"))
    candidates.append((model_config.get("config") or {}).get("build_input_shape"))
    candidates.append((model_config.get("build_config") or {}).get("input_shape"))
    for shape in candidates:
        if isinstance(shape, list) and shape and all(
                d is None or isinstance(d, int) for d in shape):
            return tuple(shape[1:])
    return None


def _inputs_of(model_config: dict[str, Any]) -> tuple[ModelInput, ...]:
    """Every input of a Functional model, by its input layer; a Sequential's one."""
    endpoints = _endpoints(model_config, "input_layers")
    if endpoints is None or len(endpoints) == 1:
        shape = _input_shape_of(model_config)
        name = str(endpoints[0][0]) if endpoints else "input"
        return (ModelInput(name, shape),)
    inputs = []
    for endpoint in endpoints:
        layer = _by_name(model_config, endpoint[0]) or {}
        cfg = layer.get("config") if isinstance(layer.get("config"), dict) else {}
        shape = cfg.get("batch_shape") or cfg.get("batch_input_shape")
        valid = isinstance(shape, list) and shape and all(
            d is None or isinstance(d, int) for d in shape)
        inputs.append(ModelInput(str(endpoint[0]), tuple(shape[1:]) if valid else None))
    return tuple(inputs)


def _output_of(model_config: dict[str, Any]) -> tuple[int | None, str | None]:
    """Units and activation of the (single) output layer, looking through wrappers."""
    outputs = _endpoints(model_config, "output_layers")
    layers = config_layers(model_config)
    if outputs is not None:
        if len(outputs) != 1:
            return None, None
        last = _by_name(model_config, outputs[0][0])
        index = layers.index(last) if last in layers else -1
    else:
        last, index = (layers[-1], len(layers) - 1) if layers else (None, -1)
    if last is None:
        return None, None
    kind, cfg = last.get("class_name"), last.get("config") or {}
    if kind in ("Sequential", "Functional", "Model"):
        return _output_of(last)
    if kind in _ACTIVATION_LAYERS:
        activation = _ACTIVATION_LAYERS[kind] or _activation_name(cfg.get("activation"))
        # The units come from the layer feeding it: the previous one in a
        # Sequential, its inbound layer in a Functional model.
        before = _inbound(model_config, last) if outputs is not None else (
            {"class_name": "Sequential", "config": {"layers": layers[:index]}} if index > 0
            else None)
        units = _output_of(before)[0] if before is not None else None
        return units, activation
    units = cfg.get("units", cfg.get("output_dim"))
    if units is None and kind and kind.startswith("Conv"):
        units = cfg.get("filters")
    return (units if isinstance(units, int) else None), _activation_name(cfg.get("activation"))


def _inbound(model_config: dict[str, Any], layer: dict[str, Any]) -> dict[str, Any] | None:
    """The layer feeding `layer` in a Functional config, wrapped as a one-output model."""
    nodes = layer.get("inbound_nodes") or []
    name = None
    for node in walk_config(nodes):
        history = (node.get("config") or {}).get("keras_history")
        if isinstance(history, list) and history:
            name = history[0]
            break
    if name is None and nodes and isinstance(nodes[0], list) and nodes[0]:
        name = nodes[0][0][0]  # Keras 2: [[["dense", 0, 0, {}]]]
    if not isinstance(name, str):
        return None
    return {"class_name": "Functional", "config": {
        "layers": config_layers(model_config), "output_layers": [[name, 0, 0]]}}


def _activation_name(activation: Any) -> str | None:
    if isinstance(activation, str):
        return activation
    if isinstance(activation, dict):  # serialized function or Activation object
        cfg = activation.get("config")
        return cfg if isinstance(cfg, str) else activation.get("class_name")
    return None


def loss_name(loss: Any) -> str | None:
    if isinstance(loss, str):
        return loss
    if isinstance(loss, dict) and "class_name" in loss:
        cfg = loss.get("config")
        if isinstance(cfg, str):  # a serialized function: {"class_name": "function", ...}
            return cfg
        return loss["class_name"]
    return None  # several outputs or nothing: the caller cannot name one loss
