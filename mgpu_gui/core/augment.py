"""Image augmentation as the user writes it: `flip,rotate=0.1,zoom=0.2,...`.

The spec is what a run records (`RunConfig.augment`) and what `--augment` and the
run setup's checkboxes produce; `engine/augmentation.py` turns it into Keras
preprocessing layers in the training pipeline only. A bare name takes its usual
strength (`DEFAULTS`). Each strength is the Keras layer's `factor`: a fraction of
a full turn for rotate, of the image's size for zoom and translate, of the value
range for contrast and brightness.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

# The usual strength of each, in the order the layers apply.
DEFAULTS = {"flip": 1.0, "rotate": 0.1, "zoom": 0.2, "translate": 0.1, "contrast": 0.2,
            "brightness": 0.2}
LIMITS = {"flip": (1.0, 1.0), "rotate": (0.0, 0.5), "zoom": (0.0, 0.9),
          "translate": (0.0, 0.9), "contrast": (0.0, 1.0), "brightness": (0.0, 1.0)}


class AugmentSpecError(ValueError):
    """A spec that cannot be read; the message says what to write instead."""


@dataclass(frozen=True)
class Augmentation:
    """Each transform's strength; 0 leaves it out. `flip` is horizontal mirroring."""

    flip: float = 0.0
    rotate: float = 0.0
    zoom: float = 0.0
    translate: float = 0.0
    contrast: float = 0.0
    brightness: float = 0.0

    @property
    def active(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name)}

    def spec(self) -> str:
        """The canonical spec: `flip` bare, the others with their strength."""
        return ",".join(name if name == "flip" else f"{name}={value:g}"
                        for name, value in self.active.items())

    def describe(self) -> str:
        words = {"flip": "mirrored left-right at random", "rotate": "rotated up to {:.0f}°",
                 "zoom": "zoomed up to ±{:.0%}", "translate": "shifted up to ±{:.0%}",
                 "contrast": "contrast up to ±{:.0%}", "brightness": "brightness up to ±{:.0%}"}
        parts = [words[name].format(value * 360 if name == "rotate" else value)
                 for name, value in self.active.items()]
        return "training images " + ", ".join(parts) if parts else "no augmentation"


NONE_WORDS = ("off", "none")


def parse_augment(spec: str) -> Augmentation:
    """`spec` ("", "off" or "none" for none: the word a sweep's values and the README
    use) as an Augmentation, or an AugmentSpecError saying what is wrong."""
    values: dict[str, float] = {}
    if spec.strip().lower() in NONE_WORDS:
        spec = ""
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        name, sep, value = (s.strip() for s in part.partition("="))
        if name not in DEFAULTS:
            raise AugmentSpecError(f"unknown augmentation {name!r}; use any of "
                                   f"{', '.join(DEFAULTS)} (e.g. flip,rotate=0.1,zoom=0.2)")
        if name in values:
            raise AugmentSpecError(f"{name!r} is given twice")
        if not sep:
            values[name] = DEFAULTS[name]
            continue
        if name == "flip":
            raise AugmentSpecError("flip takes no strength: write 'flip'")
        try:
            strength = float(value)
        except ValueError:
            raise AugmentSpecError(f"{name}={value!r}: the strength must be a number, e.g. "
                                   f"{name}={DEFAULTS[name]:g}") from None
        low, high = LIMITS[name]
        if not low < strength <= high:
            raise AugmentSpecError(f"{name}={value}: the strength must be above {low:g} and "
                                   f"at most {high:g}")
        values[name] = strength
    return Augmentation(**values)


__all__ = ["DEFAULTS", "AugmentSpecError", "Augmentation", "parse_augment"]
