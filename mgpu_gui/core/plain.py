"""Dataclasses to JSON-ready values and back (enums to their values, tuples to lists)."""

from __future__ import annotations

import dataclasses
from enum import Enum
from pathlib import Path
from types import UnionType
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

T = TypeVar("T")


def to_plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    return value


def from_plain(cls: type[T], data: dict[str, Any]) -> T:
    """A dataclass back from its JSON form: tuples, paths, enums and nested dataclasses."""
    hints = get_type_hints(cls)
    return cls(**{f.name: _decode(hints[f.name], data[f.name])
                  for f in dataclasses.fields(cls) if f.name in data})


def _decode(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = get_origin(hint)
    if origin in (Union, UnionType):
        kinds = [kind for kind in get_args(hint) if kind is not type(None)]
        return _decode(kinds[0], value) if len(kinds) == 1 else value
    if origin is tuple:
        args = get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], item) for item in value)
        return tuple(_decode(arg, item) for arg, item in zip(args, value, strict=True))
    if dataclasses.is_dataclass(hint):
        return from_plain(hint, value)
    if isinstance(hint, type) and issubclass(hint, Enum | Path):
        return hint(value)
    return value
