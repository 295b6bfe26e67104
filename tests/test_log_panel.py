"""The Log tab follows its newest line through relayouts, until the user scrolls up."""

from __future__ import annotations

from PySide6.QtWidgets import QAbstractSlider

from mgpu_gui.gui.panels.log import LogPanel


def at_end(panel: LogPanel) -> bool:
    bar = panel.log.verticalScrollBar()
    return bar.maximum() > 0 and bar.value() == bar.maximum()


def test_the_log_follows_through_a_relayout_and_stops_when_scrolled_up(qtbot):
    panel = LogPanel()
    qtbot.addWidget(panel)
    panel.resize(700, 140)
    panel.show()
    for i in range(30):
        panel.append_message(f"line {i} " + "wrapped text " * (12 if i % 4 == 0 else 1))
    qtbot.waitUntil(lambda: at_end(panel))
    panel.resize(360, 140)  # narrower: long lines wrap anew, the document grows
    qtbot.waitUntil(lambda: at_end(panel))
    panel.append_message("after the relayout")
    qtbot.waitUntil(lambda: at_end(panel))
    assert panel.log.following

    bar = panel.log.verticalScrollBar()
    bar.triggerAction(QAbstractSlider.SliderAction.SliderPageStepSub)  # the user reads back
    qtbot.waitUntil(lambda: not panel.log.following)
    kept = bar.value()
    panel.append_message("a new line while reading")
    assert bar.value() == kept and not at_end(panel)

    bar.triggerAction(QAbstractSlider.SliderAction.SliderToMaximum)  # back to the end
    qtbot.waitUntil(lambda: panel.log.following)
    panel.append_message("followed again")
    qtbot.waitUntil(lambda: at_end(panel))
