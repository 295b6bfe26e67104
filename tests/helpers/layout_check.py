"""A generic layout checker: is every text a top-level window shows whole and reachable?

`check_window(top)` walks the widget tree of a shown window (a main window or a dialog),
every tab of every tab widget included, and returns the problems it finds as plain dicts
(JSON for the pytest side, see tests/test_layout.py). Nothing here knows the app's panels,
so a view a later issue adds is checked the moment it is in a window:

- every visible QLabel, QAbstractButton, QLineEdit, QComboBox, QAbstractSpinBox and
  QProgressBar lies inside every ancestor, up to the window. Inside a scroll area it must
  lie inside the viewport horizontally; vertically it may lie outside the viewport's
  visible rect when vertical scrolling can reach it (a form may scroll down, never
  sideways);
- each is at least as large as its `minimumSizeHint` (what Qt needs to show its text
  whole), and a word-wrapped label at least as tall as its `heightForWidth(width)`;
- a text shortened with "…" is an elided path: the "…" in the middle, the whole path in a
  line of the tooltip; a non-editable combo box shows its current text whole (the style
  would elide it on the right);
- no QScrollArea shows a horizontal scroll bar;
- in every pyqtgraph plot, the axis labels, tick labels, title, legend and text items lie
  inside the view, and every scatter symbol (a best-epoch star) lies whole inside its
  view box, which clips what sticks out.
"""

from __future__ import annotations

from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import QPoint, QRect, QRectF, Qt
from PySide6.QtGui import QImage, QPainter, QTextDocumentFragment
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractScrollArea,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QLabel,
    QLineEdit,
    QProgressBar,
    QScrollArea,
    QStyle,
    QStyleOptionComboBox,
    QTabWidget,
    QWidget,
)

CHECKED = (QLabel, QAbstractButton, QLineEdit, QComboBox, QAbstractSpinBox, QProgressBar)
ELLIPSIS = "…"
Problem = dict[str, Any]


def settle(rounds: int = 4) -> None:
    """Let posted layout requests, resizes and deferred deletes run."""
    for _ in range(rounds):
        QApplication.sendPostedEvents()
        QApplication.processEvents()


def describe(widget: QWidget) -> str:
    """The widget as a reader finds it: class, then accessible name, object name or text."""
    name = widget.accessibleName() or widget.objectName()
    text = _text(widget)
    label = name or (repr(text[:60]) if text else "")
    owner = next((a for a in _ancestors(widget)[1:] if a.accessibleName()), None)
    where = f" in '{owner.accessibleName()}'" if owner is not None else ""
    return f"{type(widget).__name__} {label or '(unnamed)'}{where}"


def check_window(top: QWidget, region_of=lambda widget: "") -> list[Problem]:
    """Every problem in `top`, each tab of its tab widgets shown in turn.

    `region_of(widget)` names the part of the window a problem is in (the report groups by
    it). Tabs are switched back when done.
    """
    problems = _check_tree(top, top, region_of)
    for tabs in top.findChildren(QTabWidget):
        if not tabs.isVisible():
            continue
        current = tabs.currentIndex()
        for index in range(tabs.count()):
            if index != current:
                tabs.setCurrentIndex(index)
                settle()
                problems += _check_tree(tabs.widget(index), top, region_of)
        tabs.setCurrentIndex(current)
        settle()
    unique: dict[tuple[str, str], Problem] = {}
    for problem in problems:
        unique.setdefault((problem["widget"], problem["check"]), problem)
    return list(unique.values())


def check_on_screen(top: QWidget) -> list[Problem]:
    """The window (frame included) fits on its screen's available area."""
    screen = top.screen().availableGeometry()
    frame = top.frameGeometry()
    if screen.contains(frame):
        return []
    return [_problem(top, "", "on screen",
                     f"{_size(frame)} at ({frame.x()}, {frame.y()}) does not fit the "
                     f"screen's {_size(screen)}")]


# -- the tree ------------------------------------------------------------------------------

def _check_tree(root: QWidget, top: QWidget, region_of) -> list[Problem]:
    problems: list[Problem] = []
    for widget in [root, *root.findChildren(QWidget)]:
        if not widget.isVisible() or widget.window() is not top:
            continue
        region = region_of(widget)
        if isinstance(widget, QScrollArea) and widget.horizontalScrollBar().isVisible():
            problems.append(_problem(widget, region, "horizontal scroll bar",
                                     f"content {widget.widget().minimumSizeHint().width()} "
                                     f"px wide in a {widget.viewport().width()} px viewport"
                                     if widget.widget() is not None else "shown"))
        if isinstance(widget, pg.PlotWidget):
            problems += [_problem(widget, region, check, detail)
                         for check, detail in _plot_problems(widget)]
        if isinstance(widget, CHECKED) and not _inner_part(widget):
            problems += [_problem(widget, region, check, detail)
                         for check, detail in _widget_problems(widget, top)]
    return problems


def _inner_part(widget: QWidget) -> bool:
    """The line edit inside a spin box or combo box: its owner is checked instead."""
    return isinstance(widget.parentWidget(), QAbstractSpinBox | QComboBox)


def _widget_problems(widget: QWidget, top: QWidget) -> list[tuple[str, str]]:
    found = []
    outside = _outside(widget, top)
    if outside:
        found.append(("inside", outside))
    hint = widget.minimumSizeHint()
    if hint.isValid() and widget.width() < hint.width():
        found.append(("minimum width", f"{widget.width()} px wide, its text needs "
                                       f"{hint.width()} px"))
    if isinstance(widget, QLabel) and widget.wordWrap():
        needed = widget.heightForWidth(widget.width())
        if needed > widget.height():
            found.append(("wrapped height", f"{widget.height()} px tall, its wrapped text "
                                            f"needs {needed} px at {widget.width()} px"))
    elif hint.isValid() and widget.height() < hint.height():
        found.append(("minimum height", f"{widget.height()} px tall, needs {hint.height()} px"))
    elision = _elision_problem(widget)
    if elision:
        found.append(("elided", elision))
    if isinstance(widget, QComboBox) and not widget.isEditable():
        option = QStyleOptionComboBox()
        widget.initStyleOption(option)
        field = widget.style().subControlRect(QStyle.ComplexControl.CC_ComboBox, option,
                                              QStyle.SubControl.SC_ComboBoxEditField, widget)
        needed = widget.fontMetrics().horizontalAdvance(widget.currentText())
        if needed > field.width():
            found.append(("combo text", f"{widget.currentText()!r} needs {needed} px, its "
                                        f"field is {field.width()} px (elided on the right)"))
    return found


def _outside(widget: QWidget, top: QWidget) -> str:
    """Why `widget` is not whole inside each ancestor up to `top`; "" when it is."""
    rect = _rect_in(widget, top)
    for ancestor in _ancestors(widget)[1:]:
        area = _rect_in(ancestor, top)
        scroll = ancestor.parentWidget()
        if isinstance(scroll, QAbstractScrollArea) and ancestor is scroll.viewport():
            if rect.left() < area.left() or rect.right() > area.right():
                return (f"{_span(rect.left(), rect.right())} sticks out of the scroll viewport "
                        f"{_span(area.left(), area.right())} of {describe(scroll)} sideways")
            # A wrapped paragraph (every problem spelled out) is read by scrolling through it;
            # anything else taller than the viewport can never be seen whole.
            paragraph = isinstance(widget, QLabel) and widget.wordWrap()
            if rect.height() > area.height() and not paragraph:
                return (f"{rect.height()} px tall, taller than the scroll viewport of "
                        f"{describe(scroll)} ({area.height()} px)")
            bar = scroll.verticalScrollBar()
            below, above = rect.bottom() > area.bottom(), rect.top() < area.top()
            if (below and bar.value() >= bar.maximum()) or (above and bar.value() <= 0):
                return f"out of the scroll viewport of {describe(scroll)}, out of scroll reach"
            # Scrolled into view it lies where the viewport is (a paragraph fills it): check
            # the rest from there.
            if paragraph and rect.height() > area.height():
                rect.setTop(area.top())
                rect.setHeight(area.height())
            rect.moveTop(max(min(rect.top(), area.bottom() - rect.height() + 1), area.top()))
            continue
        if not area.contains(rect):
            return (f"{_size(rect)} at ({rect.x()}, {rect.y()}) is not inside "
                    f"{describe(ancestor) if ancestor is not top else 'the window'} "
                    f"({_size(area)} at ({area.x()}, {area.y()}))")
        if ancestor is top:
            break
    return ""


def _elision_problem(widget: QWidget) -> str:
    """Only paths may be elided, in the middle, with the whole path in the tooltip."""
    text = _text(widget)
    if ELLIPSIS not in text:
        return ""
    head, _, tail = text.rpartition(ELLIPSIS)
    whole = [line for line in widget.toolTip().splitlines()
             if len(line) > len(text) - 1 and line.startswith(head) and line.endswith(tail)]
    if tail.strip() and not whole:  # "…" inside the text: elided, or the tooltip lacks it
        return f"{text!r} is shortened but its tooltip does not hold the whole text"
    if not whole:
        return ""  # "Browse…", "Looking for GPUs…": an ellipsis, not an elision
    if not tail.strip():
        return f"{text!r} is elided at its end; only paths may be, in the middle"
    if "/" not in whole[0] and "\\" not in whole[0]:
        return f"{text!r} is elided but {whole[0]!r} is not a path"
    return ""


# -- plots ---------------------------------------------------------------------------------

def _plot_problems(widget: pg.PlotWidget) -> list[tuple[str, str]]:
    item = widget.getPlotItem()
    view = QRectF(widget.viewport().rect())
    box = item.getViewBox()
    box_rect = box.sceneBoundingRect()
    found = []

    def inside(rect: QRectF, what: str, bounds: QRectF = view, where: str = "the view") -> None:
        if rect.isEmpty():
            return
        shown = widget.mapFromScene(rect).boundingRect() if bounds is view else rect
        if not _contains(bounds, QRectF(shown)):
            found.append(("plot", f"{what} ({_rectf(QRectF(shown))}) sticks out of {where} "
                                  f"({_rectf(bounds)})"))

    if item.titleLabel.isVisible() and item.titleLabel.text:
        inside(_text_rect(item.titleLabel.item), f"title {item.titleLabel.text!r}")
    image = QImage(8, 8, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    try:
        for side in ("left", "bottom", "right", "top"):
            axis = item.getAxis(side)
            if not axis.isVisible():
                continue
            if axis.label.isVisible() and axis.labelText:
                inside(_text_rect(axis.label), f"{side} axis label {axis.labelText!r}")
            specs = axis.generateDrawSpecs(painter)
            for rect, _flags, text in (specs[2] if specs else ()):
                inside(axis.mapRectToScene(QRectF(rect)), f"{side} tick label {text!r}")
    finally:
        painter.end()
    legend = item.legend
    if legend is not None and legend.isVisible() and legend.items:
        inside(legend.sceneBoundingRect(), "legend")
    for child in box.allChildren():
        if isinstance(child, pg.TextItem) and child.isVisible() and child.toPlainText():
            inside(_text_rect(child.textItem), f"text {child.toPlainText()!r}", box_rect,
                   "the view box")
        if isinstance(child, pg.ScatterPlotItem) and child.isVisible():
            for spot in child.points():
                if not spot.isVisible():
                    continue
                center = child.mapToScene(spot.pos())
                half = spot.size() / 2
                symbol = QRectF(center.x() - half, center.y() - half, 2 * half, 2 * half)
                inside(symbol, f"marker at ({spot.pos().x():g}, {spot.pos().y():g})", box_rect,
                       "the view box")
    return found


def _text_rect(item) -> QRectF:
    """Where a QGraphicsTextItem's text is, in the scene: its rect less the document margin
    (4 px of nothing around the text)."""
    margin = item.document().documentMargin()
    return item.mapRectToScene(item.boundingRect().adjusted(margin, margin, -margin, -margin))


# -- small helpers -------------------------------------------------------------------------

def _problem(widget: QWidget, region: str, check: str, detail: str) -> Problem:
    return {"region": region, "widget": describe(widget), "check": check, "detail": detail}


def _text(widget: QWidget) -> str:
    if (isinstance(widget, QLabel) and widget.textFormat() is not Qt.TextFormat.PlainText
            and "<" in widget.text()):
        return QTextDocumentFragment.fromHtml(widget.text()).toPlainText()  # as it reads
    if isinstance(widget, QLabel | QAbstractButton | QLineEdit):
        return widget.text()
    if isinstance(widget, QComboBox):
        return widget.currentText()
    return ""


def _ancestors(widget: QWidget) -> list[QWidget]:
    chain = [widget]
    while chain[-1].parentWidget() is not None and not chain[-1].isWindow():
        chain.append(chain[-1].parentWidget())
    return chain


def _rect_in(widget: QWidget, top: QWidget) -> QRect:
    return QRect(widget.mapTo(top, QPoint(0, 0)), widget.size())


def _contains(outer: QRectF, inner: QRectF, slack: float = 0.5) -> bool:
    return (inner.left() >= outer.left() - slack and inner.top() >= outer.top() - slack
            and inner.right() <= outer.right() + slack
            and inner.bottom() <= outer.bottom() + slack)


def _size(rect: QRect) -> str:
    return f"{rect.width()}x{rect.height()}"


def _span(a: int, b: int) -> str:
    return f"x {a}..{b}"


def _rectf(rect: QRectF) -> str:
    return (f"{rect.left():.0f},{rect.top():.0f} to {rect.right():.0f},{rect.bottom():.0f}")
