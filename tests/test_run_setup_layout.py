"""The run setup's layout: it fits its pane, nothing moves under the cursor, sections remember.

Issue 14, defect 1 (the form was cut off and scrolled sideways) and defect 4 (the
form jumped when a message went away, so a click landed on another field).
"""

from __future__ import annotations

import pytest
from PySide6.QtCore import QCoreApplication, QEvent, QPoint, QRect, QSize
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractSpinBox,
    QComboBox,
    QLabel,
    QLineEdit,
    QWidget,
)

from mgpu_gui.core.devices.nvml import GpuInventory, NvmlState
from mgpu_gui.gui.main_window import DEFAULT_SIZE, MIN_SIZE
from mgpu_gui.gui.panels.run_setup import RunSetupPanel
from mgpu_gui.gui.widgets.form_scroll import FormScrollArea

NO_GPU = GpuInventory(state=NvmlState.NO_DRIVER, message="No NVIDIA driver found (test).")
LONG_PATH = "/home/someone/" + "a-rather-long-folder-name/" * 6 + "model.keras"
FIELDS = (QAbstractButton, QAbstractSpinBox, QComboBox, QLineEdit)


def settle() -> None:
    """Deliver the pending layout requests, nested layouts included (no waiting)."""
    for _ in range(4):
        QCoreApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)


def rect_in(widget: QWidget, ancestor: QWidget) -> QRect:
    return QRect(widget.mapTo(ancestor, QPoint(0, 0)), widget.size())


@pytest.fixture
def panel(qtbot):
    widget = RunSetupPanel()
    area = FormScrollArea(widget)
    qtbot.addWidget(area)
    area.resize(400, 1160)  # tall enough that nothing scrolls: positions are the form's
    area.show()
    yield widget
    widget.shutdown()


def positions(panel: RunSetupPanel) -> dict[str, QRect]:
    """Where every visible field, button and the settings check sit in the form."""
    widgets = [w for w in panel.findChildren(QWidget)
               if isinstance(w, FIELDS) and w.isVisible()]
    widgets.append(panel.summary_label)
    return {f"{type(w).__name__} {w.accessibleName()}": rect_in(w, panel) for w in widgets}


def test_messages_and_hints_that_come_and_go_move_no_field(panel, tmp_path):
    for section in panel.sections.values():
        section.set_open(True)
    panel.check_now()
    settle()
    before = positions(panel)
    assert len(before) > 20

    def unchanged(step: str) -> None:
        panel.check_now()
        settle()
        after = positions(panel)
        moved = {name: (before[name], after[name]) for name in before
                 if after.get(name) != before[name]}
        assert not moved, f"{step}: {moved}"

    panel.lr_edit.setText("fast")  # defect 4: a message appears ...
    unchanged("a problem appears")
    assert "learning_rate" in panel.problems() and panel.problems_label.isVisible()
    panel.lr_edit.setText("0.001")  # ... and goes away
    unchanged("the problem goes")
    assert panel.is_valid() and not panel.problems_label.isVisible()
    (tmp_path / "file").write_text("")
    panel.output_edit.setText(str(tmp_path / "file"))
    panel.batch_spin.setValue(4096)  # more than the demo data hold
    unchanged("two problems")
    assert set(panel.problems()) == {"output_dir", "batch_per_replica"}, panel.problems()
    panel.output_edit.setText(str(tmp_path))
    panel.batch_spin.setValue(32)
    unchanged("fixed again")
    panel.scale_lr.setChecked(True)  # the scaled LR hint below it fills in
    unchanged("LR scaling on")
    assert "scaled" in panel.lr_hint.text()
    panel.model_status.setText("Building model…")
    panel.model_status.setText("388,170 parameters · input 224×224×3 · 1000 outputs")
    unchanged("the model's facts arrive")
    panel.model_status.setText("create_model(): 388,170 params · input 224×224×3")
    unchanged("a .py builder's facts arrive")


def test_a_problem_in_a_closed_section_shows_in_its_header(panel, tmp_path):
    output = panel.sections["output"]
    assert not output.is_open()
    (tmp_path / "file").write_text("")
    panel.output_edit.setText(str(tmp_path / "file"))
    panel.check_now()
    assert "1 problem" in output.marker.text() and output.marker.isVisible()
    assert "Output folder" in panel.summary_label.text()
    assert "is a file" in panel.problems_label.text()
    assert not output.is_open()  # opening it would push the rows below it
    assert all(not s.marker.text() for k, s in panel.sections.items() if k != "output")
    panel.output_edit.setText(str(tmp_path))
    panel.check_now()
    assert output.marker.text() == ""


def test_sections_start_closed_and_remember_being_opened(qtbot):
    first = RunSetupPanel()
    qtbot.addWidget(first)
    assert not any(s.is_open() for s in first.sections.values())
    first.sections["speed"].header.click()  # as the user opens it
    assert first.sections["speed"].is_open()
    assert first.precision_combo.isVisibleTo(first)
    first.shutdown()
    second = RunSetupPanel()
    qtbot.addWidget(second)
    assert second.sections["speed"].is_open()
    assert not second.sections["optimization"].is_open()
    assert second.precision_combo.isVisibleTo(second)
    assert not second.lr_edit.isVisibleTo(second)
    second.shutdown()


def test_the_window_fits_its_screen_and_the_splitter_widens_the_run_setup(window):
    available = window.screen().availableGeometry().size()  # offscreen: 800x800
    assert window.size() == DEFAULT_SIZE.boundedTo(available)
    assert window.minimumSize() == MIN_SIZE.boundedTo(available)
    assert window.run_setup.train_button.defaultAction() is window.train_action
    window.resize(DEFAULT_SIZE)
    narrow = window.run_setup.width()
    window.splitter.setSizes([600, DEFAULT_SIZE.width() - 600])
    settle()
    assert window.splitter.sizes()[0] == 600
    assert window.run_setup.width() > narrow + 150


@pytest.mark.parametrize("size", [DEFAULT_SIZE, QSize(1280, 720), QSize(1024, 700)])
def test_the_run_setup_fits_its_pane(window, size):
    """Defect 1: no sideways scrolling, Browse… and … whole, no label cut, the check in view."""
    setup = window.run_setup
    area = setup.parentWidget().parentWidget()
    window.resize(size)
    setup.model_edit.setText(LONG_PATH)
    setup.data_kind.setCurrentIndex(setup.data_kind.findData("npz"))
    setup.data_edit.setText(LONG_PATH)  # a file that is not there: a long message
    setup.check_now()
    settle()
    assert window.size() == size
    assert "data" in setup.problems()
    # The essentials, Train and the settings check are in view without scrolling.
    viewport = area.viewport()
    for widget in (setup.model_browse, setup.data_browse, setup.epochs_spin,
                   setup.train_button, setup.summary_label):
        assert viewport.rect().contains(rect_in(widget, viewport)), widget.accessibleName()
    for section in setup.sections.values():
        section.set_open(True)
    settle()
    assert not area.horizontalScrollBar().isVisible()
    assert setup.minimumSizeHint().width() <= viewport.width()
    assert setup.width() <= viewport.width()
    for widget in setup.findChildren(QWidget):
        if not widget.isVisible() or not isinstance(widget, (*FIELDS, QLabel)):
            continue
        name = f"{type(widget).__name__} {widget.accessibleName() or widget.objectName()}"
        box = rect_in(widget, setup)
        assert box.left() >= 0 and box.right() < viewport.width(), name  # whole, sideways
        assert widget.width() >= widget.minimumSizeHint().width(), name
        if isinstance(widget, QLabel) and widget.wordWrap() and widget.text():
            assert widget.height() >= widget.heightForWidth(widget.width()), name
    for section in setup.sections.values():
        section.set_open(False)
