"""What the data check (content.py) is asked to read: light, so that the run setup can
say it after every edit without loading NumPy and Pillow, which the check itself needs."""

from __future__ import annotations

from dataclasses import dataclass

from mgpu_gui.core.config import DEMO


@dataclass(frozen=True)
class ContentRequest:
    """What to check. `classifier`: whether the run trains a classifier (None: not known
    yet, e.g. a `.py` builder's own loss: the worker checks the labels once it is built);
    `why` says what makes it one, for the message."""

    sources: tuple[str, ...]  # the training data, then any validation data
    classifier: bool | None = True
    why: str = ""
    # A run learns from the data: a classifier needs 2 classes. An evaluation judges a
    # model on data of one class too (a test set of cats).
    learns: bool = True

    @property
    def reads_files(self) -> bool:
        """False for the demo alone: the app's own data needs no check."""
        return any(source != DEMO for source in self.sources)
