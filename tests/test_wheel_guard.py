"""The mouse wheel scrolls a form and changes a field only while it has the focus (issue 30).

Each wheel notch goes through Qt's own delivery (`QTest.wheelEvent` on the window, as the
platform delivers it): Qt picks the widget under the pointer, gives the wheel's focus by the
focus policies and passes an ignored event on to the parents. A `sendEvent` straight to a
field would skip all three, and Qt passes no such event on.
"""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QComboBox,
    QScrollArea,
    QScrollBar,
    QSlider,
    QVBoxLayout,
    QWidget,
)

from mgpu_gui.core.config import RunConfig
from mgpu_gui.gui.widgets import wheel_guard
from mgpu_gui.gui.widgets.form_scroll import FormScrollArea

UP, DOWN = QPoint(0, 120), QPoint(0, -120)  # one notch; DOWN scrolls a form down


def fields(root: QWidget) -> list[QWidget]:
    """The visible spin boxes, combo boxes and sliders under `root`, scroll bars aside."""
    return [w for w in root.findChildren(QWidget) if isinstance(w, wheel_guard.FIELDS)
            and not isinstance(w, QScrollBar) and w.isVisible()]


def name(field: QWidget) -> str:
    return f"{type(field).__name__} {field.accessibleName()!r}"


def value(field: QWidget) -> int | float:
    return field.currentIndex() if isinstance(field, QComboBox) else field.value()


def can_change(field: QWidget) -> bool:
    if isinstance(field, QComboBox):
        return field.count() > 1
    return field.minimum() < field.maximum()


def toward_change(field: QWidget) -> QPoint:
    """The notch that changes `field` (a combo box goes down its list on DOWN)."""
    if isinstance(field, QComboBox):
        return DOWN if field.currentIndex() < field.count() - 1 else UP
    return UP if field.value() < field.maximum() else DOWN


def wheel(widget: QWidget, delta: QPoint) -> None:
    """One notch with the pointer at the centre of `widget`."""
    window = widget.window()
    centre = widget.mapTo(window, widget.rect().center())
    hit = window.childAt(centre)
    assert hit is widget or widget.isAncestorOf(hit), f"{name(widget)} is covered: {hit}"
    QTest.wheelEvent(window.windowHandle(), centre, delta)


def enclosing_area(widget: QWidget) -> QAbstractScrollArea | None:
    parent = widget.parentWidget()
    while parent is not None and not isinstance(parent, QAbstractScrollArea):
        parent = parent.parentWidget()
    return parent


def check_unfocused(root: QWidget) -> list[str]:
    """Both notches over every field of `root`: none changes, nor takes the focus, and the
    scroll area around it (if any) scrolls that way wherever it still can. Returns the
    names of the fields checked."""
    checked = []
    for field in fields(root):
        area = enclosing_area(field)
        scrolled = False
        for delta in (DOWN, UP):
            if isinstance(area, QScrollArea):
                area.ensureWidgetVisible(field)
            bar = area.verticalScrollBar() if area is not None else None
            before, position = value(field), bar.value() if bar is not None else 0
            wheel(field, delta)
            assert value(field) == before, f"{name(field)} changed under the wheel"
            assert not field.hasFocus(), f"{name(field)} took the focus from the wheel"
            if bar is None:
                continue
            if delta == DOWN and position < bar.maximum():
                assert bar.value() > position, f"no scroll down over {name(field)}"
                scrolled = True
            if delta == UP and position > bar.minimum():
                assert bar.value() < position, f"no scroll up over {name(field)}"
                scrolled = True
        assert area is None or scrolled, f"the form never scrolled over {name(field)}"
        checked.append(name(field))
    return checked


def check_focused(field: QWidget, area: QAbstractScrollArea | None = None) -> None:
    """With the focus, the wheel changes `field` as Qt always did, and nothing scrolls."""
    if isinstance(area, QScrollArea):
        area.ensureWidgetVisible(field)
    field.setFocus()
    assert field.hasFocus(), name(field)
    before = value(field)
    position = area.verticalScrollBar().value() if area is not None else None
    wheel(field, toward_change(field))
    assert value(field) != before, f"{name(field)} ignored the wheel with the focus"
    if area is not None:
        assert area.verticalScrollBar().value() == position


def show_active(qtbot, widget: QWidget) -> None:
    with qtbot.waitActive(widget):
        widget.show()
        widget.activateWindow()


@pytest.fixture
def form(qtbot, qapp):
    """The run setup, every section open and most fields enabled, in a window much shorter
    than the form."""
    from mgpu_gui.gui.panels.run_setup import RunSetupPanel

    wheel_guard.install(qapp)
    panel = RunSetupPanel()
    area = FormScrollArea(panel)
    qtbot.addWidget(area)
    area.resize(440, 320)
    for section in panel.sections.values():
        section.set_open(True)
    panel.augment_picker.set_unavailable("")  # as for image data: the strengths ...
    for box in panel.augment_picker.boxes.values():
        box.setChecked(True)  # ... are enabled by their boxes
    panel.scale_lr.setChecked(True)  # enables the warm-up
    show_active(qtbot, area)
    assert area.verticalScrollBar().maximum() > 0, "the form must scroll"
    yield area
    panel.shutdown()


def test_over_every_field_of_the_run_setup_the_wheel_scrolls_the_form(form):
    panel = form.widget()
    panel.lr_edit.setFocus()  # a line edit: no field has the focus
    live = [name(f) for f in fields(panel) if f.isEnabled() and can_change(f)]
    checked = check_unfocused(panel)
    print(f"checked {len(checked)} fields, {len(live)} of them enabled: {', '.join(checked)}")
    assert len(checked) >= 15 and len(live) >= 12, checked
    assert {"QSpinBox", "QDoubleSpinBox", "QComboBox"} <= {n.split()[0] for n in live}
    assert all(f.focusPolicy() == Qt.FocusPolicy.StrongFocus for f in fields(panel))


def test_a_field_with_the_focus_still_takes_the_wheel(form):
    panel = form.widget()
    by_name = {f.accessibleName(): f for f in fields(panel)}
    for field in (by_name["Epochs"], by_name["rotate strength"], by_name["Optimizer"],
                  by_name["Model file"]):  # a spin box, a double one, a combo, an editable combo
        check_focused(field, form)


def test_scroll_bars_keep_the_wheel(form):
    bar = form.verticalScrollBar()
    bar.setValue(0)
    wheel(bar, DOWN)
    assert bar.value() > 0


def test_a_slider_without_the_focus_passes_the_wheel_on(qtbot, qapp):
    wheel_guard.install(qapp)
    content = QWidget()
    layout = QVBoxLayout(content)
    slider = QSlider()
    slider.setAccessibleName("Slider")
    slider.setRange(0, 100)
    slider.setValue(50)
    layout.addWidget(slider)
    layout.addSpacing(2000)
    area = QScrollArea()
    area.setWidget(content)
    area.setWidgetResizable(True)
    qtbot.addWidget(area)
    area.resize(200, 300)
    show_active(qtbot, area)
    area.setFocus()
    assert check_unfocused(content) == ["QSlider 'Slider'"]
    check_focused(slider, area)


def test_a_dialog_is_guarded_too(qtbot, qapp):
    """The Sweep dialog: spin boxes outside any scroll area, a combo box per row inside one."""
    from mgpu_gui.gui.dialogs.sweep import SweepDialog
    from mgpu_gui.gui.widgets.sweep_parameter import setting_order

    wheel_guard.install(qapp)
    dialog = SweepDialog(RunConfig())
    qtbot.addWidget(dialog)
    for setting in setting_order()[1:8]:
        dialog.add_row(setting)
    dialog.resize(760, dialog.minimumSizeHint().height())
    show_active(qtbot, dialog)
    assert dialog.rows_scroll.verticalScrollBar().maximum() > 0, "the rows must scroll"
    dialog.name_edit.setFocus()
    checked = check_unfocused(dialog)
    assert sum(n.startswith("QSpinBox") for n in checked) >= 4, checked
    assert sum(n == "QComboBox 'Setting to vary'" for n in checked) >= 8, checked
    check_focused(dialog.repeats_spin)
    check_focused(dialog.rows[0].setting, dialog.rows_scroll)


def test_install_adds_one_filter_however_often_it_is_called(qapp):
    guard = wheel_guard.install(qapp)
    assert wheel_guard.install(qapp) is guard
    assert qapp.findChildren(wheel_guard.WheelGuard) == [guard]


def test_the_main_window_installs_the_guard(request, qtbot, qapp):  # qtbot: conftest's checks
    for guard in qapp.findChildren(wheel_guard.WheelGuard):
        qapp.removeEventFilter(guard)
        guard.setParent(None)
    window = request.getfixturevalue("window")  # conftest's: a MainWindow, shown
    assert len(qapp.findChildren(wheel_guard.WheelGuard)) == 1
    made = [f for f in window.findChildren(QWidget)
            if isinstance(f, wheel_guard.FIELDS) and not isinstance(f, QScrollBar)]
    assert len(made) >= 20
    wheel_focus = [name(f) for f in made if f.focusPolicy() == Qt.FocusPolicy.WheelFocus]
    assert wheel_focus == []
