"""What the file inspector child is asked: one JSON line on its stdin per file
(processes/inspector.py answers, core/children/inspector.py asks)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from enum import StrEnum

from mgpu_gui.core.plain import to_plain


class InspectKind(StrEnum):
    MODEL = "model"  # a .keras, .h5 or .py model file -> ModelFileInfo
    DATA = "data"  # an .npz dataset file -> DataInfo (folders need no child: nothing is parsed)


@dataclass(frozen=True)
class InspectRequest:
    """One file for the inspector child to read."""

    kind: InspectKind
    path: str

    def to_json(self) -> str:
        return json.dumps(to_plain(dataclasses.asdict(self)))

    @classmethod
    def from_json(cls, line: str) -> InspectRequest:
        data = json.loads(line)
        return cls(InspectKind(data["kind"]), data["path"])
