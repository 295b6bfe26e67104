"""Says when the model file brings its own optimizer, and lets the user override it.

A compiled model file trains with the optimizer, learning rate, loss and
metrics saved in it; the form's optimizer and learning rate would be ignored.
So while such a file is picked this row says what the file uses and disables
those controls, and "Override" (`RunConfig.override_compile`) enables them
again: the run then trains with them, keeping the file's loss and metrics.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QLabel, QVBoxLayout, QWidget

from mgpu_gui.core.modelfiles.compile_facts import CompileFacts


class CompileSourceRow(QWidget):
    """The file's compile settings in words and an Override box; shown for compiled files."""

    def __init__(self, controls: Sequence[QWidget], parent: QWidget | None = None) -> None:
        """`controls`: the form's widgets the file's settings replace (optimizer, LR)."""
        super().__init__(parent)
        self.setAccessibleName("Compile settings from the model file")
        self._controls = tuple(controls)
        self.facts: CompileFacts | None = None
        # Stacked, not side by side: the box stays in view however narrow the form gets.
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        self.label = QLabel(wordWrap=True)
        self.label.setProperty("role", "hint")
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.label.setAccessibleName("Compile settings from the model file")
        self.override = QCheckBox("Override the file's optimizer")
        self.override.setAccessibleName("Override the model file's optimizer")
        self.override.setToolTip(
            "Train with the optimizer and learning rate set here instead of those saved in "
            "the model file (the file's loss and metrics are kept, its optimizer state is "
            "not used). Same as --override-compile.")
        layout.addWidget(self.label)
        layout.addWidget(self.override)
        self.override.toggled.connect(self._update_controls)
        self.hide()

    def show_for(self, facts: CompileFacts | None) -> None:
        """Show what a compiled file uses (None: the file is not compiled, or none picked)."""
        self.facts = facts
        self.setVisible(facts is not None)
        if facts is not None:
            self.label.setText(f"From the file: {facts.describe()}")
            self.label.setToolTip(
                "The model file was saved compiled: training uses its optimizer, learning "
                "rate, loss and metrics, not the optimizer and learning rate set here, unless "
                "you tick the box below."
                + (f" Metrics: {', '.join(facts.metrics)}." if facts.metrics else ""))
        self._update_controls()

    def _update_controls(self) -> None:
        free = self.facts is None or self.override.isChecked()
        for control in self._controls:
            control.setEnabled(free)
