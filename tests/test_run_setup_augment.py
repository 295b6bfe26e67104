"""The run setup's augmentation: boxes and strengths give the run's spec, image folders only."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QSettings

from mgpu_gui.core.config import RunConfig
from mgpu_gui.gui.panels.run_setup import RunSetupPanel


@pytest.fixture
def folder(tmp_path) -> Path:
    for label in ("cat", "dog"):
        (tmp_path / "images" / label).mkdir(parents=True)
    return tmp_path / "images"


def test_ticked_boxes_and_strengths_give_the_canonical_spec(panel, folder):
    panel.set_data_path(folder)
    picker = panel.augment_picker
    assert picker.isEnabled() and panel.build_config().augment == ""
    assert panel.sections["augmentation"].note.text() == "off"
    assert not picker.strengths["rotate"].isEnabled()  # off: its strength is greyed
    picker.boxes["rotate"].setChecked(True)
    picker.boxes["flip"].setChecked(True)
    picker.strengths["rotate"].setValue(0.25)
    picker.boxes["brightness"].setChecked(True)  # its usual strength
    assert panel.build_config().augment == "flip,rotate=0.25,brightness=0.2"
    assert panel.sections["augmentation"].note.text() == "3 transforms"
    assert "rotated up to 90°" in panel.sections["augmentation"].note.toolTip()
    picker.boxes["rotate"].setChecked(False)
    assert panel.build_config().augment == "flip,brightness=0.2"
    picker.boxes["rotate"].setChecked(True)  # the strength it had comes back
    assert panel.build_config().augment == "flip,rotate=0.25,brightness=0.2"


def test_only_an_image_folder_is_augmented(panel, folder):
    picker = panel.augment_picker
    assert panel.data_kind.currentData() == "demo"
    assert not picker.isEnabled()
    assert "image folder" in picker.boxes["zoom"].toolTip()  # says why it is grey
    assert panel.sections["augmentation"].note.text() == "image folders only"
    panel.set_data_path(folder)
    picker.boxes["zoom"].setChecked(True)
    assert "Zoom training images" in picker.boxes["zoom"].toolTip()
    assert panel.build_config().augment == "zoom=0.2"
    panel.data_kind.setCurrentIndex(panel.data_kind.findData("demo"))
    assert not picker.isEnabled() and panel.build_config().augment == ""
    panel.check_now()
    assert "augment" not in panel.problems()  # a leftover tick blocks no demo run
    panel.data_kind.setCurrentIndex(panel.data_kind.findData("images"))
    assert panel.build_config().augment == "zoom=0.2"  # the tick came back with the folder
    panel.data_edit.setText(str(folder / "missing"))
    panel.check_now()
    assert "not found" in panel.problems()["data"]
    assert "augment" not in panel.problems()  # the Data field says what to fix


def test_a_config_round_trips(panel, folder):
    wanted = RunConfig(data=str(folder), image_size=(64, 64),
                       augment="flip,zoom=0.3,translate=0.15,contrast=0.5")
    panel.set_config(wanted)
    assert panel.build_config() == wanted
    assert panel.augment_picker.strengths["translate"].value() == 0.15
    assert not panel.augment_picker.boxes["rotate"].isChecked()
    panel.set_config(RunConfig(data=str(folder)))  # a config without: all off again
    assert panel.build_config().augment == ""
    assert not panel.augment_picker.boxes["flip"].isChecked()


def test_augmentation_is_kept_in_the_settings(qtbot, folder):
    first = RunSetupPanel()
    qtbot.addWidget(first)
    first.set_data_path(folder)
    first.augment_picker.boxes["translate"].setChecked(True)
    first.augment_picker.strengths["translate"].setValue(0.3)
    first.save_settings()
    first.shutdown()
    assert "translate=0.3" in str(QSettings().value("run_setup/config"))

    second = RunSetupPanel()
    qtbot.addWidget(second)
    second.restore_settings()
    assert second.build_config().augment == "translate=0.3"
    assert second.augment_picker.strengths["translate"].isEnabled()
    second.shutdown()
