"""Finding runs by tag, status and text: one query language for the Runs tab and the CLI.

A query is words separated by spaces: `tag:baseline status:failed lr` keeps the
failed runs tagged "baseline" whose name, model, data, note or tags contain
"lr". `tag:` must match a whole tag; `status:` a state's start ("early" is
early stopped), and several `status:` words are alternatives; `name:`,
`model:`, `data:` and `note:` look in that field only; quotes keep spaces
(`note:"lr sweep"`). Matching ignores case. An unknown `key:` is plain text,
so a note's "lr:0.1" can still be searched for.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from mgpu_gui.core.runs.store import RunRecord

FIELDS = ("name", "model", "data", "note")


@dataclass(frozen=True)
class RunQuery:
    """What a run must have to be shown; the empty query keeps every run."""

    tags: tuple[str, ...] = ()  # all of them
    statuses: tuple[str, ...] = ()  # any of them (starts of a state's name)
    fields: tuple[tuple[str, str], ...] = ()  # (field, text): each field contains its text
    words: tuple[str, ...] = ()  # each in some field or tag

    @classmethod
    def parse(cls, text: str) -> RunQuery:
        try:
            tokens = shlex.split(text)
        except ValueError:  # an unclosed quote while the user types: plain words
            tokens = text.split()
        tags, statuses, fields, words = [], [], [], []
        for token in tokens:
            key, colon, value = token.partition(":")
            key = key.lower()
            if not colon or not value:
                words.append(token)
            elif key == "tag":
                tags.append(value)
            elif key == "status":
                statuses.append(value)
            elif key in FIELDS:
                fields.append((key, value))
            else:
                words.append(token)
        return cls(tuple(tags), tuple(statuses), tuple(fields), tuple(words))

    def __bool__(self) -> bool:
        return bool(self.tags or self.statuses or self.fields or self.words)

    def matches(self, record: RunRecord) -> bool:
        tags = {t.casefold() for t in record.tags}
        if not all(t.casefold() in tags for t in self.tags):
            return False
        state = record.status.value
        if self.statuses and not any(
                state.startswith(s.casefold().replace(" ", "_")) for s in self.statuses):
            return False
        texts = {"name": record.name, "model": record.model, "data": record.data,
                 "note": record.note}
        if not all(value.casefold() in texts[key].casefold() for key, value in self.fields):
            return False
        everything = "\n".join([*texts.values(), *record.tags]).casefold()
        return all(word.casefold() in everything for word in self.words)

    def narrowed(self, *, tags: Iterable[str] = (), statuses: Iterable[str] = ()) -> RunQuery:
        """This query with more tags to have and states to allow (the CLI's flags)."""
        return RunQuery(self.tags + tuple(tags), self.statuses + tuple(statuses), self.fields,
                        self.words)
