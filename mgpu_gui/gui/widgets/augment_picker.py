"""The run setup's augmentation choice: a checkbox per transform, a strength beside it.

The widgets hold an `Augmentation` (core/augment.py) and give back its canonical
spec, the text `RunConfig.augment` and `--augment` take. Transforms sit two to a
line so the six take three lines of the narrow run-setup pane. A strength stays
when its box is unticked, so ticking it again brings the same value back.
"""

from __future__ import annotations

from PySide6.QtCore import QSignalBlocker, Signal
from PySide6.QtWidgets import QCheckBox, QDoubleSpinBox, QFrame, QGridLayout, QWidget

from mgpu_gui.core.augment import DEFAULTS, LIMITS, Augmentation, parse_augment

STEP = 0.05
TIPS = {
    "flip": "Mirror training images left-right at random (half of them).",
    "rotate": "Rotate training images at random, up to this fraction of a full turn "
              "(0.1: ±36°).",
    "zoom": "Zoom training images in or out at random, up to this fraction of their size.",
    "translate": "Shift training images at random, up to this fraction of their width and "
                 "height.",
    "contrast": "Change the contrast of training images at random, up to this fraction.",
    "brightness": "Change the brightness of training images at random, up to this fraction "
                  "of the value range.",
}
COMMON_TIP = ("\n\nTraining images only: validation and test images are never changed. "
              "Each epoch sees new random variants of the same images.")


class AugmentPicker(QFrame):
    """Which transforms vary the training images, and how strongly; `changed` follows edits."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.boxes: dict[str, QCheckBox] = {}
        self.strengths: dict[str, QDoubleSpinBox] = {}
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setHorizontalSpacing(6)
        grid.setVerticalSpacing(2)
        for index, name in enumerate(DEFAULTS):
            box = QCheckBox(name)
            box.setAccessibleName(f"Augment: {name}")
            box.setToolTip(TIPS[name] + COMMON_TIP)
            box.toggled.connect(self._ticked)
            self.boxes[name] = box
            line, column = divmod(index, 2)
            grid.addWidget(box, line, 3 * column)
            low, high = LIMITS[name]
            if low == high:  # flip: on or off, no strength
                continue
            spin = QDoubleSpinBox()
            spin.setDecimals(2)
            spin.setRange(max(low, STEP / 5), high)  # a strength of 0 would be "off"
            spin.setSingleStep(STEP)
            spin.setValue(DEFAULTS[name])
            spin.setEnabled(False)
            spin.setAccessibleName(f"{name} strength")
            spin.setToolTip(box.toolTip())
            spin.valueChanged.connect(self.changed)
            self.strengths[name] = spin
            grid.addWidget(spin, line, 3 * column + 1)
        grid.setColumnMinimumWidth(2, 6)  # columns 0-1 and 3-4 hold the pairs: a gap between
        grid.setColumnStretch(5, 1)  # spare width after the pairs, not inside them

    def augmentation(self) -> Augmentation:
        """What the ticked boxes and their strengths describe."""
        return Augmentation(**{
            name: self.strengths[name].value() if name in self.strengths else DEFAULTS[name]
            for name, box in self.boxes.items() if box.isChecked()})

    def spec(self) -> str:
        return self.augmentation().spec()

    def set_spec(self, spec: str) -> None:
        """Tick what `spec` names (an AugmentSpecError if it cannot be read); no `changed`."""
        active = parse_augment(spec).active
        for name, box in self.boxes.items():
            with QSignalBlocker(box):
                box.setChecked(name in active)
            spin = self.strengths.get(name)
            if spin is not None:
                with QSignalBlocker(spin):
                    spin.setValue(active.get(name, spin.value()))
                spin.setEnabled(name in active)

    def set_unavailable(self, reason: str) -> None:
        """Disable the transforms, each saying `reason` in its tooltip ("": enable them).

        A disabled widget still shows its tooltip: the user hovering a grey box learns
        why it is grey, not what it would do.
        """
        self.setEnabled(not reason)
        for name, box in self.boxes.items():
            box.setToolTip(reason or TIPS[name] + COMMON_TIP)
            if name in self.strengths:
                self.strengths[name].setToolTip(box.toolTip())

    def _ticked(self) -> None:
        for name, spin in self.strengths.items():
            spin.setEnabled(self.boxes[name].isChecked())
        self.changed.emit()
