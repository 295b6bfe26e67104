"""The run setup's on-finish command: typed as a command line, kept as an argument list,
a line that cannot be split refused on its field, and remembered with the settings."""

from __future__ import annotations

from mgpu_gui.core.config import RunConfig
from mgpu_gui.gui.panels.run_setup import RunSetupPanel


def test_the_command_line_becomes_the_argument_list(panel):
    panel.on_finish_edit.setText("""true --to 'lab chat' "run ended" """)
    panel.check_now()
    assert panel.build_config().on_finish == ("true", "--to", "lab chat", "run ended")
    assert "on_finish" not in panel.problems()
    panel.on_finish_edit.setText("  ")
    assert panel.build_config().on_finish == ()


def test_an_unclosed_quote_is_refused_on_its_field(panel):
    panel.on_finish_edit.setText("true 'lab chat")
    panel.check_now()
    assert "No closing quotation" in panel.problems()["on_finish"]
    assert not panel.is_valid()
    assert "On finish" in panel.problems_label.text()  # said below the form, by its name
    assert panel.sections["output"].marker.toolTip() == "On finish"  # seen while closed


def test_a_missing_program_is_named(panel):
    panel.on_finish_edit.setText("no-such-program-mgpu --now")
    panel.check_now()
    assert "no-such-program-mgpu" in panel.problems()["on_finish"]


def test_the_command_round_trips_through_the_settings(qtbot, panel):
    panel.set_config(RunConfig(on_finish=("true", "a b", "it's")))
    assert panel.on_finish_edit.text() == """true 'a b' 'it'"'"'s'"""
    panel.save_settings()
    again = RunSetupPanel()
    qtbot.addWidget(again)
    again.restore_settings()
    assert again.build_config().on_finish == ("true", "a b", "it's")
    again.shutdown()
