"""Run tags as words: how people type several, and what the store accepts as one."""

from __future__ import annotations

import re
from collections.abc import Iterable

from mgpu_gui.core.errors import UserError

_SEPARATORS = re.compile(r"[\s,]+")


def split_tags(text: str) -> list[str]:
    """Tags as people type them: separated by commas and/or spaces, each once, in order."""
    return list(dict.fromkeys(t for t in _SEPARATORS.split(text) if t))


def check_tags(tags: Iterable[str]) -> list[str]:
    """Tags fit to store: one word each, as searching (`tag:x`) and typing them expect."""
    checked = [t.strip() for t in tags]
    bad = [t for t in checked if not t or _SEPARATORS.search(t)]
    if bad:
        raise UserError(f"A tag is one word with no commas: {bad[0]!r} is not; "
                        f"give several tags as separate words.")
    return list(dict.fromkeys(checked))
