"""What a model file needs besides its weights to be used on raw data.

An export keeps, next to the model, its class names and what the training
pipeline did to a sample before the model saw it (`InputRecord`): `predict`,
`evaluate` and "Try a sample" on the bare file then do exactly the same. The
record is `<stem>.classes.json` (`classes.json` inside a SavedModel folder): the
name predates the input record, and a file of an older export holds only
`{"class_names": [...]}`; its inputs then read as unknown.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mgpu_gui.core.errors import ExportError

IMAGES, ARRAYS = "images", "arrays"


@dataclass(frozen=True)
class InputRecord:
    """`images`: a file decoded to RGB (core.datasets.images), resized to `image_size`
    (bilinear, tf.image.resize), times `rescale`. `arrays`: an `.npz`'s samples as
    float32, uint8 pixels times `rescale`."""

    kind: str
    image_size: tuple[int, int] | None = None
    channels: int = 3
    rescale: float = 1.0

    def describe(self) -> str:
        """In words; a rescale of 1 (a built-in normalises pixels itself) is no multiply,
        so it is said as the 0-255 pixels the model gets."""
        times = f"times {self.rescale:g}"
        if self.kind == IMAGES and self.image_size is not None:
            channels = "1 channel (grey)" if self.channels == 1 else f"{self.channels} channels"
            return (f"images decoded to {channels}, resized to "
                    f"{self.image_size[0]}x{self.image_size[1]}, "
                    f"{'pixels left at 0-255' if self.rescale == 1 else times}")
        return f"arrays as float32 (uint8 pixels {'left at 0-255' if self.rescale == 1 else times})"


@dataclass(frozen=True)
class ModelCard:
    class_names: tuple[str, ...] = ()
    inputs: InputRecord | None = None
    # The .py its custom classes come from (the run's --custom-objects, or its .py
    # model): a copy of the model exported anywhere still loads with them.
    custom_objects: str | None = None

    def to_json(self) -> str:
        data: dict[str, Any] = {"class_names": list(self.class_names)}
        if self.custom_objects:
            data["custom_objects"] = self.custom_objects
        if self.inputs is not None:
            inputs = self.inputs
            data["inputs"] = {"kind": inputs.kind, "channels": inputs.channels,
                              "rescale": inputs.rescale, "image_size": None
                              if inputs.image_size is None else list(inputs.image_size)}
        return json.dumps(data, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ModelCard:
        data = json.loads(text)
        names = data["class_names"] if isinstance(data, dict) else data
        if not isinstance(names, list):
            raise TypeError(f"expected a list of class names, got {type(names).__name__}")
        raw = data.get("inputs") if isinstance(data, dict) else None
        inputs = None if raw is None else InputRecord(
            kind=raw["kind"], channels=int(raw.get("channels", 3)),
            rescale=float(raw.get("rescale", 1.0)),
            image_size=None if raw.get("image_size") is None else (
                int(raw["image_size"][0]), int(raw["image_size"][1])))
        custom = data.get("custom_objects") if isinstance(data, dict) else None
        return cls(tuple(str(n) for n in names), inputs, str(custom) if custom else None)


def card_path(model: Path, fmt: str) -> Path:
    """Where the card of the model file (or SavedModel folder) `model` of `fmt` lives."""
    model = Path(model)
    if fmt == "savedmodel":
        return model / "classes.json"
    return model.with_name(f"{model.stem}.classes.json")


def read_card(path: Path) -> ModelCard | None:
    """The card at `path`; None when there is none."""
    if not path.is_file():
        return None
    try:
        return ModelCard.from_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        raise ExportError(f"Cannot read the class names in {path}: {e}. Fix or delete "
                          "that file.") from e


def checked_class_names(class_names: Sequence[str] | None) -> list[str] | None:
    """Class names fit for a card; None for none (regression data)."""
    if not class_names:
        return None
    names = [str(n) for n in class_names]
    if len(set(names)) != len(names):
        raise ExportError("Class names must be distinct; the list has duplicates.")
    return names
