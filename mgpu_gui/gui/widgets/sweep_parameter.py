"""One row of the Sweep dialog: a setting to vary, its values as text, and what they are.

The text is read by core/sweeps/space.py (`parse_parameter`), the one parser the
CLI's flags use too; the row shows its verdict under the field: the values it
makes (a preview), or what was wrong, in words. The line is reserved (hint_label),
so a message that comes and goes moves no row below it.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QLineEdit, QToolButton, QVBoxLayout, QWidget

from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.errors import ConfigError
from mgpu_gui.core.runs.compare import setting_text
from mgpu_gui.core.sweeps.space import Parameter, Scale, parse_parameter, sweepable, value_text
from mgpu_gui.gui.widgets.field_cells import FieldCell, hint_label, row
from mgpu_gui.gui.widgets.setting_names import setting_label

# What people sweep most, first in the chooser; every other sweepable setting follows.
COMMON = ("learning_rate", "batch_per_replica", "devices.replicas", "optimizer", "epochs",
          "augment")
PREVIEW_MAX = 8  # values spelled out in the preview before "and N more"
SYNTAX = ("Values separated by commas (1e-3,3e-3; adam,sgd; on,off), a log range "
          "log:LOW..HIGH:COUNT (log:1e-4..1e-2:5) or a linear range lin:LOW..HIGH:COUNT; "
          "a random search may leave the count out and draws from the whole range.")


def setting_order() -> list[str]:
    return [*COMMON, *(name for name in sweepable() if name not in COMMON)]


def example(name: str) -> str:
    """A value text that fits the setting, for the field's placeholder."""
    setting = sweepable()[name]
    if setting.choices:
        return ",".join(value_text(c) for c in setting.choices[:3])
    if setting.kind is float:
        return "1e-3,3e-3 or log:1e-4..1e-2:5"
    if setting.kind is int:
        return "32,64,128 or log:16..256:5"
    return "values separated by commas"


def preview(parameter: Parameter) -> str:
    """The values a parameter makes, as the table will show them."""
    if not parameter.values:
        how = "log-uniformly" if parameter.scale is Scale.LOG else "uniformly"
        return (f"drawn {how} from {setting_text(parameter.low)} to "
                f"{setting_text(parameter.high)} (a random search; a grid needs a count)")
    words = [setting_text(v) if v != "" else "off" for v in parameter.values]
    shown = ", ".join(words[:PREVIEW_MAX])
    if len(words) > PREVIEW_MAX:
        shown += f" and {len(words) - PREVIEW_MAX} more"
    scale = {Scale.LOG: " on a log scale", Scale.LINEAR: " evenly spaced"}.get(
        parameter.scale, "")
    count = len(words)
    return f"{count} value{'s' if count != 1 else ''}{scale}: {shown}"


class ParameterRow(QWidget):
    """A setting chooser, its values and a remove button; the verdict below them."""

    changed = Signal()
    remove_requested = Signal(object)  # this row

    def __init__(self, name: str = "learning_rate", text: str = "",
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.parameter: Parameter | None = None
        self.problems: list[str] = []  # what is wrong with the values, in words
        self.setting = QComboBox()
        self.setting.setAccessibleName("Setting to vary")
        self.setting.setToolTip("The run setting this row varies; the others stay as set up")
        for setting in setting_order():
            self.setting.addItem(setting_label(setting), setting)
            # The dotted name, as the CLI and the store say it.
            self.setting.setItemData(self.setting.count() - 1, setting,
                                     Qt.ItemDataRole.ToolTipRole)
        self.setting.setCurrentIndex(max(0, self.setting.findData(name)))
        self.values = QLineEdit(text)
        self.values.setAccessibleName("Values to try")
        self.values.setToolTip(SYNTAX)
        self.remove = QToolButton()
        self.remove.setText("✕")
        self.remove.setAccessibleName("Remove this setting")
        self.remove.setToolTip("Stop varying this setting")
        self.message = hint_label("Values of the setting")
        self.cell = FieldCell((self.values,), (SYNTAX,))
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(row([self.setting, self.values, self.remove]))
        layout.addWidget(self.message)
        self._placeholder()
        self.setting.currentIndexChanged.connect(self._setting_changed)
        self.values.textChanged.connect(self.changed)
        self.remove.clicked.connect(lambda: self.remove_requested.emit(self))

    @property
    def name(self) -> str:
        return self.setting.currentData()

    def check(self, base: RunConfig) -> Parameter | None:
        """Parse the values against `base`; show the preview or what was wrong."""
        text = self.values.text().strip()
        self.parameter, self.problems = None, []
        if not text:
            self.problems = [f"give the values to try, e.g. {example(self.name)}"]
        else:
            try:
                self.parameter = parse_parameter(self.name, text, base)
            except ConfigError as error:
                self.problems = [message for _, message in error.problems]
        self.show_verdict()
        return self.parameter

    def awaits_input(self) -> bool:
        """No values typed yet: what the row lacks is the next step, not said in red."""
        return self.cell.awaits_input()

    def show_verdict(self, more: Sequence[str] = ()) -> None:
        """The preview, or the problems with these values and `more` about this setting
        (the sweep's, such as a compiled model's refusal)."""
        problems = [*self.problems, *more]
        self.cell.show("; ".join(problems) or None)
        self.message.setProperty("role", "error" if problems and not self.awaits_input()
                                 else "hint")
        self.message.style().unpolish(self.message)
        self.message.style().polish(self.message)
        if problems:
            self.message.setText("; ".join(problems))
        else:
            self.message.setText(preview(self.parameter) if self.parameter else "")

    def _setting_changed(self) -> None:
        self._placeholder()
        self.changed.emit()

    def _placeholder(self) -> None:
        self.values.setPlaceholderText(f"e.g. {example(self.name)}")
