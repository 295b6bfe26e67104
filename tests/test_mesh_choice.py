"""The run setup's mesh (issue 31): the meshes the device count allows, drawn as a grid of
the devices, data parallelism on TensorFlow, and the choice kept across device counts."""

from __future__ import annotations

import pytest

from mgpu_gui.core.config import RunConfig


@pytest.fixture
def panel(qtbot):
    from mgpu_gui.gui.panels.run_setup import RunSetupPanel

    panel = RunSetupPanel()
    qtbot.addWidget(panel)
    yield panel
    panel.shutdown()


def labels(combo) -> list[str]:
    return [combo.itemText(i) for i in range(combo.count())]


def test_the_meshes_of_the_device_count_and_the_choice_kept(panel):
    panel.set_config(RunConfig(engine="jax", mesh="2x2"))
    panel.set_replicas(4)
    combo = panel.mesh_combo
    assert labels(combo) == ["4×1: data parallel", "2×2: 2 replicas × 2 shards",
                             "1×4: 4 shards"]
    assert panel.build_config().mesh == "2x2" and combo.isEnabled()
    assert panel.mesh_grid.toolTip().endswith("c0, c1\nc2, c3")
    panel.set_replicas(2)  # no 2x2 of two devices: the same model axis
    assert panel.build_config().mesh == "1x2"
    panel.set_replicas(3)  # 2 does not divide 3: data parallelism
    assert panel.build_config().mesh is None and labels(combo)[-1] == "1×3: 3 shards"
    panel.set_replicas(4)  # the mesh asked for comes back
    assert panel.build_config().mesh == "2x2"
    panel.set_replicas(1)
    assert not combo.isEnabled() and panel.build_config().mesh is None


def test_tensorflow_holds_data_parallelism_and_says_why(panel):
    panel.set_config(RunConfig(engine="jax", mesh="1x4"))
    panel.set_replicas(4)
    panel.engine_combo.set_engine("tensorflow")
    assert panel.build_config().mesh is None and not panel.mesh_combo.isEnabled()
    assert "ModelParallel" in panel.mesh_combo.toolTip() and "JAX" in panel.mesh_combo.toolTip()
    panel.check_now()
    assert "mesh" not in panel.problems()
    panel.engine_combo.set_engine("jax")
    assert panel.build_config().mesh == "1x4"


def test_a_user_choice_is_the_one_kept(panel, qtbot):
    panel.set_config(RunConfig(engine="jax"))
    panel.set_replicas(4)
    combo = panel.mesh_combo
    assert panel.build_config().mesh is None  # data parallelism by default
    combo.setCurrentIndex(2)
    combo.activated.emit(2)  # as a click on "1×4" does
    panel.set_replicas(2)
    panel.set_replicas(4)
    assert panel.build_config().mesh == "1x4"
    panel.check_now()
    assert panel.problems() == {}, panel.problems()


def test_the_summary_shows_the_layout_on_the_runs_mesh():
    """Issue 31: the run setup shows `mgpu-train layout`'s table on demand (Show summary)."""
    from mgpu_gui.core.events import ModelProbed
    from mgpu_gui.gui.jobs.build_check import mesh_summary

    built = ModelProbed("Model: demo", 2 * 4096 * 256, [8, 8, 1], 10, variables=[
        {"path": "dense/kernel", "shape": [4096, 256], "dtype": "float32", "layer": "Dense"},
        {"path": "dense/bias", "shape": [256], "dtype": "float32", "layer": "Dense"}])
    assert mesh_summary(RunConfig(engine="jax"), built) == ""  # data parallel
    table = mesh_summary(RunConfig(engine="jax", mesh="1x4"), built)
    assert table.startswith("\n\nOn --mesh 1x4:\nVARIABLE")
    assert "dense/kernel" in table and "(None,model)" in table and "1.0 MiB" in table
    bad = mesh_summary(RunConfig(engine="jax", mesh="1x4", layout="dense/bias=(model,None)"),
                       built)
    assert bad.startswith("\n\nNo layout on the mesh: layout rule dense/bias=(model,None) "
                          "gives 2 axes"), bad
