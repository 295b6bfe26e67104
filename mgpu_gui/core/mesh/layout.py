"""Which variables are split over the mesh, and along which dimension.

A layout gives one mesh axis name (or None: not split) per dimension of a
variable, the tuples Keras' `LayoutMap` takes: `(None, "model")` splits a
Dense kernel's output features over the model axis. Two sources, in order:

- the user's rules, `REGEX=(AXES)` (e.g. `dense.*kernel=(None,model)`): the
  regex must match the whole variable path, as `LayoutMap` matches it
  (`re.fullmatch`, an exact path winning over patterns, a path matched by two
  patterns refused). A rule whose axes do not divide the variable is refused
  here, naming the variable, rather than failing on the devices;
- otherwise the automatic layout: a variable larger than a threshold, of a
  layer whose weights split cleanly (Dense, EinsumDense, Conv, Embedding), is
  split along the dimension the model axis divides (output features for Dense
  and Conv kernels and biases, the vocabulary for Embedding, the largest for
  EinsumDense, whose dimensions have no fixed meaning); any valid choice gives
  the same numbers under XLA's sharding, only the communication differs.
  Everything else is replicated.

A large variable that ends up replicated is named in the notes: a regex that
matches nothing leaves it replicated silently in Keras, and the first sign is
an out-of-memory error on the devices.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import numpy as np

from mgpu_gui.core.errors import UserError
from mgpu_gui.core.mesh.shape import DATA_AXIS, MODEL_AXIS, MeshShape
from mgpu_gui.core.sizes import format_bytes

Axes = tuple[str | None, ...]
DEFAULT_SHARD_ABOVE = 2**20  # bytes: smaller variables are not worth a collective each
_AXIS_NAMES = (DATA_AXIS, MODEL_AXIS)
_RULE = re.compile(r"^(?P<pattern>.+?)\s*=\s*\((?P<axes>[^()]*)\)\s*$")
_BITS = re.compile(r"^[a-z]*?(\d+)")  # "bfloat16", "float8_e4m3fn": dtypes NumPy lacks


class SplitDim(StrEnum):
    """Which dimension a layer's variables are best split along."""

    LAST = "last"  # output features (Dense), output channels (Conv)
    FIRST = "first"  # the vocabulary (Embedding)
    LARGEST = "largest"  # no fixed meaning (EinsumDense)


SPLIT_LAYERS = {
    "Dense": SplitDim.LAST, "EinsumDense": SplitDim.LARGEST,
    "Conv1D": SplitDim.LAST, "Conv2D": SplitDim.LAST, "Conv3D": SplitDim.LAST,
    "Embedding": SplitDim.FIRST,
}


@dataclass(frozen=True)
class VariableInfo:
    """One model variable as the probe child reports it."""

    path: str  # Keras' `variable.path`, e.g. "dense_1/kernel"
    shape: tuple[int, ...]
    dtype: str
    layer: str  # the class of the layer that owns it, e.g. "Dense"
    trainable: bool = True

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * itemsize(self.dtype)


def itemsize(dtype: str) -> int:
    try:
        return np.dtype(dtype).itemsize
    except TypeError:
        match = _BITS.match(dtype)
        if match is None:
            raise UserError(f"unknown variable dtype {dtype!r}") from None
        return max(1, int(match.group(1)) // 8)


@dataclass(frozen=True)
class LayoutRule:
    pattern: str  # matched against the whole variable path
    axes: Axes

    @property
    def text(self) -> str:
        return f"{self.pattern}={axes_text(self.axes)}"


def axes_text(axes: Axes) -> str:
    """As a rule writes them: "(None,model)"; "(model,)" for one axis."""
    names = [str(axis) for axis in axes]
    return f"({','.join(names)}{',' if len(names) == 1 else ''})"


def parse_rules(text: str) -> list[LayoutRule]:
    """--layout: rules separated by ";" or new lines, or a file of them, one a line
    ("#" starts a comment line)."""
    if not is_rules(text):
        path = Path(text).expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise UserError(f"--layout {text!r}: no such file, and not a rule REGEX=(AXES), "
                            "e.g. 'dense.*kernel=(None,model)'.") from None
        except (OSError, UnicodeDecodeError) as error:
            raise UserError(f"--layout {path} cannot be read: {error}") from None
    lines = [line.strip() for chunk in text.splitlines() for line in chunk.split(";")]
    return [_parse_rule(line) for line in lines if line and not line.startswith("#")]


def is_rules(text: str | None) -> bool:
    """Whether a --layout value holds rules (else it names a file of them)."""
    return text is not None and "=" in text


def _parse_rule(text: str) -> LayoutRule:
    match = _RULE.match(text)
    if match is None:
        raise UserError(f"layout rule {text!r}: write REGEX=(AXES), e.g. "
                        "'dense.*kernel=(None,model)' or 'embedding.*=(model,None)'.")
    pattern = match.group("pattern")
    try:
        re.compile(pattern)
    except re.error as error:
        raise UserError(f"layout rule {text!r}: {pattern!r} is not a regular expression "
                        f"({error}).") from None
    words = [word.strip().strip("'\"") for word in match.group("axes").split(",")]
    if words and not words[-1]:
        words.pop()  # "(model,)": Python's one-element tuple
    axes: list[str | None] = []
    for word in words:
        if word.lower() in ("none", "null", ""):
            axes.append(None)
        elif word.lower() in _AXIS_NAMES:
            axes.append(word.lower())
        else:
            raise UserError(f"layout rule {text!r}: unknown axis {word!r}; use "
                            f"{' or '.join(_AXIS_NAMES)}, or None for a dimension not split.")
    if not axes:
        raise UserError(f"layout rule {text!r} gives no axes; replicated is (None,) per "
                        f"dimension.")
    named = [axis for axis in axes if axis is not None]
    if len(named) != len(set(named)):
        raise UserError(f"layout rule {text!r} splits two dimensions over the same axis.")
    return LayoutRule(pattern, tuple(axes))


@dataclass(frozen=True)
class VariableLayout:
    variable: VariableInfo
    axes: Axes  # all None: replicated
    source: str  # "auto", "replicated" or the rule that set it
    bytes_per_device: int

    @property
    def sharded(self) -> bool:
        return any(axis is not None for axis in self.axes)


@dataclass(frozen=True)
class Layout:
    """Every variable's layout on one mesh, and what the user should know about it."""

    mesh: MeshShape
    variables: list[VariableLayout]
    notes: list[str] = field(default_factory=list)

    @property
    def param_bytes(self) -> int:
        """Per device."""
        return sum(v.bytes_per_device for v in self.variables)

    @property
    def trainable_bytes(self) -> int:
        """Per device: what has gradients and optimizer state."""
        return sum(v.bytes_per_device for v in self.variables if v.variable.trainable)


def plan_layout(variables: Sequence[VariableInfo], mesh: MeshShape,
                rules: Sequence[LayoutRule] = (),
                shard_above: int = DEFAULT_SHARD_ABOVE) -> Layout:
    """The layout of every variable on `mesh`: the user's rule where one matches, else
    the automatic one; UserError for a rule that cannot apply."""
    layouts, notes = [], []
    used: set[str] = set()
    for variable in variables:
        rule = _matching_rule(variable, rules)
        if rule is not None:
            used.add(rule.pattern)
            _check_rule(rule, variable, mesh)
            axes, source = rule.axes, rule.text
        else:
            axes = _auto_axes(variable, mesh.model, shard_above)
            source = "auto" if axes is not None else "replicated"
            axes = axes or (None,) * len(variable.shape)
            if (source == "replicated" and mesh.model > 1 and variable.nbytes > shard_above
                    and variable.layer in SPLIT_LAYERS):
                notes.append(f"{variable.path} ({format_bytes(variable.nbytes)}) stays "
                             f"replicated: no dimension of {_shape_text(variable.shape)} is "
                             f"divisible by the model axis ({mesh.model})")
        layouts.append(VariableLayout(variable, axes, source,
                                      _bytes_per_device(variable, axes, mesh)))
    notes += [f"layout rule {rule.text} matches no variable" for rule in rules
              if rule.pattern not in used]
    return Layout(mesh, layouts, notes)


def _matching_rule(variable: VariableInfo, rules: Sequence[LayoutRule]) -> LayoutRule | None:
    exact = [rule for rule in rules if rule.pattern == variable.path]
    if exact:
        return exact[0]
    matching = [rule for rule in rules if re.fullmatch(rule.pattern, variable.path)]
    if len(matching) > 1:
        raise UserError(f"variable {variable.path} matches {len(matching)} layout rules ("
                        f"{', '.join(rule.text for rule in matching)}); make each variable "
                        f"match at most one, as Keras' LayoutMap requires.")
    return matching[0] if matching else None


def _check_rule(rule: LayoutRule, variable: VariableInfo, mesh: MeshShape) -> None:
    shape = _shape_text(variable.shape)
    if len(rule.axes) != len(variable.shape):
        raise UserError(f"layout rule {rule.text} gives {len(rule.axes)} axes; variable "
                        f"{variable.path} has {len(variable.shape)} dimensions {shape}.")
    for dim, (size, axis) in enumerate(zip(variable.shape, rule.axes, strict=True)):
        if axis is not None and size % mesh.axis_size(axis):
            raise UserError(f"layout rule {rule.text}: the {axis} axis "
                            f"({mesh.axis_size(axis)}) does not divide dimension {dim} "
                            f"({size}) of variable {variable.path} {shape} on --mesh "
                            f"{mesh.flag}.")


def _auto_axes(variable: VariableInfo, model: int, shard_above: int) -> Axes | None:
    preference = SPLIT_LAYERS.get(variable.layer)
    if model == 1 or preference is None or variable.nbytes <= shard_above:
        return None
    rank = len(variable.shape)
    # Largest first, ties to the trailing dimension (the output side of a kernel).
    by_size = sorted(range(rank), key=lambda d: (variable.shape[d], d), reverse=True)
    preferred = {SplitDim.LAST: [rank - 1], SplitDim.FIRST: [0]}.get(preference, [])
    for dim in preferred + [d for d in by_size if d not in preferred]:
        if variable.shape[dim] % model == 0:
            return tuple(MODEL_AXIS if d == dim else None for d in range(rank))
    return None


def _bytes_per_device(variable: VariableInfo, axes: Axes, mesh: MeshShape) -> int:
    elements = math.prod(size // mesh.axis_size(axis) if axis is not None else size
                         for size, axis in zip(variable.shape, axes, strict=True))
    return elements * itemsize(variable.dtype)


def _shape_text(shape: tuple[int, ...]) -> str:
    return f"({', '.join(map(str, shape))}{',' if len(shape) == 1 else ''})"
