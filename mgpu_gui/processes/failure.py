"""The failure event a child entry ends with when its work raised."""

from __future__ import annotations

import traceback
from typing import TypeVar

from mgpu_gui.core.errors import UserError
from mgpu_gui.core.events import ChildFailure

F = TypeVar("F", bound=ChildFailure)


def failure_of(error: Exception, failed: type[F]) -> F:
    """`failed` for `error`: the input's fault (a UserError, its message is the whole
    story) or a bug, whose traceback goes with it for the parent to show."""
    if isinstance(error, UserError):
        return failed(str(error), type(error).__name__, user_error=True)
    return failed(str(error), type(error).__name__, user_error=False,
                  traceback=traceback.format_exc())
