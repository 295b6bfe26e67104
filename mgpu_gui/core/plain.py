"""Turn dataclass dicts into JSON-ready values (enums to their values, tuples to lists)."""

from __future__ import annotations

from enum import Enum
from typing import Any


def to_plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    return value
