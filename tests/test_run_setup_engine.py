"""The run setup's Engine choice: what is installed, what JAX decides, settings, problems."""

from __future__ import annotations

import shlex
import sys

from PySide6.QtCore import QSettings, Qt

from mgpu_gui.core.config import RunConfig
from mgpu_gui.core.engines import JAX_EXTRA_HINT, Engine, installed
from mgpu_gui.gui.panels.run_setup import RunSetupPanel
from mgpu_gui.gui.widgets.engine_choice import SYNC_BN_ON_JAX, XLA_ON_JAX, EngineCombo


def items(combo: EngineCombo) -> list[tuple[str, bool, str]]:
    model = combo.model()
    return [(combo.itemText(i), model.item(i).isEnabled(),
             combo.itemData(i, Qt.ItemDataRole.ToolTipRole)) for i in range(combo.count())]


def test_both_engines_are_listed_and_one_not_installed_cannot_be_chosen(qtbot, monkeypatch):
    full = EngineCombo()
    qtbot.addWidget(full)
    assert [(text, usable) for text, usable, _ in items(full)] == [
        ("TensorFlow", True), ("JAX", installed(Engine.JAX))]
    monkeypatch.setattr("mgpu_gui.gui.widgets.engine_choice.installed_engines",
                        lambda: [Engine.TENSORFLOW])
    combo = EngineCombo()
    qtbot.addWidget(combo)
    [_, (text, usable, tip)] = items(combo)
    assert text == "JAX" and not usable and JAX_EXTRA_HINT in tip
    combo.set_engine("jax")  # a saved choice still shows: the setup check names the problem
    assert combo.engine() is Engine.JAX


def test_on_jax_xla_and_sync_bn_show_what_the_engine_does_and_come_back(panel):
    panel.xla_check.setChecked(True)
    panel.sync_bn.setChecked(False)
    tensorflow_tip = panel.xla_check.toolTip()
    panel.engine_combo.setCurrentIndex(panel.engine_combo.findData("jax"))
    for box, tip in ((panel.xla_check, XLA_ON_JAX), (panel.sync_bn, SYNC_BN_ON_JAX)):
        assert box.isChecked() and not box.isEnabled() and box.toolTip() == tip
    assert "synchronized (implied)" in panel.engine_hint.text()
    assert panel.sections["speed"].note.text() == "JAX engine"
    config = panel.build_config()
    # JAX takes no jit_compile flag; the TensorFlow choice of sync BN is kept for later.
    assert (config.engine, config.jit_compile, config.sync_batchnorm) == ("jax", False, False)
    panel.check_now()
    assert panel.is_valid(), panel.problems()

    panel.engine_combo.setCurrentIndex(panel.engine_combo.findData("tensorflow"))
    assert panel.xla_check.isChecked() and panel.xla_check.isEnabled()
    assert not panel.sync_bn.isChecked() and panel.sync_bn.isEnabled()
    assert panel.xla_check.toolTip() == tensorflow_tip
    assert panel.build_config().engine == "tensorflow" and panel.build_config().jit_compile


def test_the_engine_round_trips_through_the_config_and_the_settings(qtbot, panel):
    wanted = RunConfig(engine="jax", sync_batchnorm=True)
    panel.set_config(wanted)
    assert panel.build_config() == wanted
    panel.set_config(RunConfig(jit_compile=True))  # back on TensorFlow: the config's boxes
    assert panel.xla_check.isChecked() and panel.xla_check.isEnabled()
    assert not panel.sync_bn.isChecked()

    panel.set_config(wanted)
    panel.save_settings()
    assert '"engine": "jax"' in str(QSettings().value("run_setup/config"))
    second = RunSetupPanel()
    qtbot.addWidget(second)
    second.restore_settings()
    assert second.build_config().engine == "jax" and not second.xla_check.isEnabled()
    second.shutdown()


def test_jax_not_installed_is_a_setup_problem_on_the_engine(panel, monkeypatch):
    monkeypatch.setattr("mgpu_gui.core.engines.installed", lambda engine: False)
    panel.set_config(RunConfig(engine="jax"))
    panel.check_now()
    assert not panel.is_valid()
    assert JAX_EXTRA_HINT in panel.problems()["engine"]
    assert panel.engine_combo.property("invalid")
    assert "<b>Engine</b>" in panel.problems_label.text()
    assert "Engine" in panel.summary_label.text()


def test_an_engine_not_installed_shows_this_pythons_install_command(qtbot, monkeypatch):
    """Issue 30, finding 9e: JAX's install hint was only in the disabled item's tooltip and
    named a bare `pip`, which may be another environment's."""
    monkeypatch.setattr("mgpu_gui.gui.widgets.engine_choice.installed_engines",
                        lambda: [Engine.TENSORFLOW])
    monkeypatch.setattr("mgpu_gui.core.engines.installed", lambda engine: engine != "jax")
    panel = RunSetupPanel()
    qtbot.addWidget(panel)
    python = shlex.quote(sys.executable)
    commands = [field.text() for field in panel.engine_install.commands]
    assert commands == [f"{python} -m pip install 'mgpu-gui[jax]'",
                        f"{python} -m pip install 'mgpu-gui[jax-cuda]'"]
    panel.sections["speed"].set_open(True)
    assert panel.engine_install.isVisibleTo(panel)
    assert all(field.isReadOnly() for field in panel.engine_install.commands)
    panel.set_config(RunConfig(engine="jax"))  # a saved choice: the check says the same
    panel.check_now()
    assert f"{python} -m pip install 'mgpu-gui[jax]'" in panel.problems()["engine"]
    panel.shutdown()


def test_no_install_note_where_every_engine_is_installed(qtbot, monkeypatch):
    monkeypatch.setattr("mgpu_gui.gui.widgets.engine_choice.installed_engines",
                        lambda: list(Engine))
    panel = RunSetupPanel()
    qtbot.addWidget(panel)
    panel.sections["speed"].set_open(True)
    assert not panel.engine_install.isVisibleTo(panel) and panel.engine_install.commands == []
    panel.shutdown()
