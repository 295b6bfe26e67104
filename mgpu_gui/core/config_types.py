"""The types a settings file must give, checked as strictly as the flags check theirs.

A `--config` file, a queued job's row and a sweep's base are JSON: nothing stops
`{"epochs": "ten"}`, `{"epochs": true}`, `{"epochs": 1.5}` or `NaN` from reaching the
run, where they failed late with an "unexpected TypeError", or trained one epoch for
`true`. Every field is checked against its dataclass annotation first, every problem
named by its dotted path ("devices.replicas"): a bool is no number, 1.5 and 10.0 are
no whole numbers, numbers must be finite, a list stands for a tuple (JSON has none).
"""

from __future__ import annotations

import dataclasses
import json
import math
from enum import Enum
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

from mgpu_gui.core.errors import ConfigError

_NAMES = {int: "a whole number", float: "a number", bool: "true or false", str: "a string"}


def parse_json(text: str, source: str) -> Any:
    """JSON from `source` (a file's name, for the message), NaN and Infinity refused:
    ConfigError with the line and column of what is wrong."""
    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not a number a setting can take")

    try:
        return json.loads(text, parse_constant=refuse)
    except json.JSONDecodeError as error:
        raise ConfigError([(source, f"not valid JSON: {error.msg} at line {error.lineno}, "
                                    f"column {error.colno}")]) from None
    except ValueError as error:
        raise ConfigError([(source, str(error))]) from None


def type_problems(cls: type, data: Any, prefix: str = "") -> list[tuple[str, str]]:
    """What in `data` (a JSON object) does not fit dataclass `cls`, one pair per field:
    unknown keys, and values of the wrong type."""
    if not isinstance(data, dict):
        return [(prefix.rstrip(".") or "settings",
                 f"must be a JSON object of settings, got {_kind(data)}")]
    hints = get_type_hints(cls)
    names = {field.name for field in dataclasses.fields(cls)}
    found = [(prefix + key, "unknown setting") for key in sorted(set(data) - names)]
    for field in dataclasses.fields(cls):
        if field.name in data:
            found += _check(hints[field.name], data[field.name], prefix + field.name)
    return found


def _check(hint: Any, value: Any, name: str) -> list[tuple[str, str]]:
    origin = get_origin(hint)
    if origin in (Union, UnionType):
        kinds = [kind for kind in get_args(hint) if kind is not type(None)]
        if value is None:
            return []
        return _check(kinds[0], value, name) if len(kinds) == 1 else []
    if origin is tuple:
        return _check_tuple(get_args(hint), value, name)
    if dataclasses.is_dataclass(hint):
        return type_problems(hint, value, f"{name}.")
    if isinstance(hint, type) and issubclass(hint, Enum):
        allowed = [member.value for member in hint]
        return [] if value in allowed else [
            (name, f"must be one of {', '.join(map(str, allowed))}, got {_show(value)}")]
    return _check_scalar(hint, value, name)


def _check_tuple(args: tuple, value: Any, name: str) -> list[tuple[str, str]]:
    if not isinstance(value, list):
        return [(name, f"must be a list, got {_show(value)}")]
    if len(args) == 2 and args[1] is Ellipsis:
        return [p for i, item in enumerate(value) for p in _check(args[0], item, f"{name}[{i}]")]
    if len(value) != len(args):
        return [(name, f"must be a list of {len(args)} values, got {len(value)}")]
    return [p for i, (kind, item) in enumerate(zip(args, value, strict=True))
            for p in _check(kind, item, f"{name}[{i}]")]


def _check_scalar(hint: Any, value: Any, name: str) -> list[tuple[str, str]]:
    if hint is Any or hint not in _NAMES:
        return []
    wanted = _NAMES[hint]
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is str:
        ok = isinstance(value, str)
    elif isinstance(value, bool) or not isinstance(value, int | float):
        ok = False
    elif not math.isfinite(value):
        return [(name, f"must be a finite number, got {value}")]
    else:
        ok = hint is float or isinstance(value, int)
    return [] if ok else [(name, f"must be {wanted}, got {_show(value)}")]


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true or false",
            type(None): "null"}.get(type(value), "a number")


def _show(value: Any) -> str:
    return f"{_kind(value)} ({json.dumps(value)[:40]})"
