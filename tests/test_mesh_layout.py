"""The mesh plan (core/mesh): mesh shapes, the automatic and ruled layouts, and the
memory each device needs, checked against figures worked out by hand."""

from __future__ import annotations

import json

import pytest

from mgpu_gui.core.errors import UserError
from mgpu_gui.core.mesh.layout import (
    LayoutRule,
    VariableInfo,
    itemsize,
    parse_rules,
    plan_layout,
)
from mgpu_gui.core.mesh.memory import optimizer_state, plan_memory
from mgpu_gui.core.mesh.report import layout_table, plan_json, plan_text
from mgpu_gui.core.mesh.shape import MeshShape, meshes_for, parse_mesh

# 16000 + 160 + 3200 + 160 bytes; all but the moving mean trainable (19360 bytes).
VARIABLES = [
    VariableInfo("dense/kernel", (100, 40), "float32", "Dense"),
    VariableInfo("dense/bias", (40,), "float32", "Dense"),  # under the threshold
    VariableInfo("embedding/embeddings", (50, 16), "float32", "Embedding"),
    VariableInfo("bn/moving_mean", (40,), "float32", "BatchNormalization", trainable=False),
]
THRESHOLD = 1000  # bytes


def layouts(mesh: MeshShape, rules: list[LayoutRule] | None = None,
            variables: list[VariableInfo] | None = None) -> dict[str, tuple]:
    layout = plan_layout(variables or VARIABLES, mesh, rules or [], THRESHOLD)
    return {v.variable.path: (v.axes, v.bytes_per_device) for v in layout.variables}


# -- mesh shapes ---------------------------------------------------------------------------
@pytest.mark.parametrize("text, mesh", [("2x2", MeshShape(2, 2)), ("4X1", MeshShape(4, 1)),
                                        (" 1 x 4 ", MeshShape(1, 4)), ("auto", None),
                                        ("AUTO", None)])
def test_mesh_parses(text, mesh):
    assert parse_mesh(text) == mesh


def test_mesh_must_span_the_runs_devices():
    assert parse_mesh("2x2", 4) == MeshShape(2, 2)
    with pytest.raises(UserError) as error:
        parse_mesh("3x2", 4)
    assert str(error.value) == ("--mesh 3x2 needs 6 devices; the run has 4 (it allows 4x1, "
                                "2x2, 1x4).")


@pytest.mark.parametrize("text", ["2by2", "2x", "x2", "-1x2", "2x2x2", ""])
def test_mesh_that_does_not_parse(text):
    with pytest.raises(UserError, match="give DATAxMODEL"):
        parse_mesh(text)


def test_mesh_sizes_of_zero_refused():
    with pytest.raises(UserError, match="at least 1"):
        parse_mesh("0x4")


def test_meshes_a_device_count_allows():
    assert [m.flag for m in meshes_for(6)] == ["6x1", "3x2", "2x3", "1x6"]
    assert meshes_for(1) == [MeshShape(1, 1)]
    assert MeshShape(2, 3).devices == 6 and MeshShape(4, 1).describe() == "data parallel"


# -- the automatic layout ------------------------------------------------------------------
def test_data_parallel_replicates_everything():
    found = layouts(MeshShape(4, 1))
    assert all(all(axis is None for axis in axes) for axes, _ in found.values())
    assert found["dense/kernel"][1] == 16000


def test_auto_layout_splits_large_variables_of_splittable_layers():
    found = layouts(MeshShape(2, 2))
    assert found["dense/kernel"] == ((None, "model"), 8000)  # output features
    assert found["embedding/embeddings"] == (("model", None), 1600)  # the vocabulary
    assert found["dense/bias"] == ((None,), 160)  # under the threshold
    assert found["bn/moving_mean"] == ((None,), 160)  # not a splittable layer


def test_auto_layout_falls_back_to_a_dimension_the_axis_divides():
    found = layouts(MeshShape(1, 4))
    assert found["dense/kernel"] == ((None, "model"), 4000)
    assert found["embedding/embeddings"] == ((None, "model"), 800)  # 50 % 4: the 16 instead


@pytest.mark.parametrize("layer, shape, model, axes", [
    ("EinsumDense", (8, 6, 12), 4, (None, None, "model")),  # the largest divisible
    ("EinsumDense", (12, 9, 8), 3, ("model", None, None)),
    ("EinsumDense", (32, 32), 4, (None, "model")),  # a tie goes to the trailing dimension
    ("Conv2D", (3, 3, 16, 32), 4, (None, None, None, "model")),  # output channels
    ("Conv1D", (5, 16, 6), 4, (None, "model", None)),  # 6 % 4: the input channels
    ("Dense", (70, 5), 4, (None, None)),  # nothing divides: replicated
])
def test_auto_layout_choice(layer, shape, model, axes):
    variable = VariableInfo("v", shape, "float32", layer)
    assert layouts(MeshShape(1, model), variables=[variable])["v"][0] == axes


def test_large_variable_left_replicated_is_named():
    variable = VariableInfo("head/kernel", (70, 5), "float32", "Dense")
    layout = plan_layout([variable], MeshShape(1, 4), [], THRESHOLD)
    assert layout.notes == ["head/kernel (1.4 KiB) stays replicated: no dimension of (70, 5) "
                            "is divisible by the model axis (4)"]


@pytest.mark.parametrize("dtype, size", [("float32", 4), ("float16", 2), ("bfloat16", 2),
                                         ("float8_e4m3fn", 1), ("int64", 8), ("bool", 1)])
def test_itemsize(dtype, size):
    assert itemsize(dtype) == size


# -- the user's rules ----------------------------------------------------------------------
def test_rules_parse_as_layoutmap_tuples(tmp_path):
    rules = parse_rules("dense.*kernel=(None,model); embedding.*=('model', None);"
                        "bias=(model,)")
    assert rules == [LayoutRule("dense.*kernel", (None, "model")),
                     LayoutRule("embedding.*", ("model", None)), LayoutRule("bias", ("model",))]
    assert [rule.text for rule in rules][2] == "bias=(model,)"
    file = tmp_path / "rules.txt"
    file.write_text("# the big ones\ndense.*kernel = (null, MODEL)\n\n", encoding="utf-8")
    assert parse_rules(str(file)) == [LayoutRule("dense.*kernel", (None, "model"))]


@pytest.mark.parametrize("text, message", [
    ("nowhere.txt", "no such file, and not a rule"),
    ("dense=(None,modl)", "unknown axis 'modl'"),
    ("dense=None,model", "write REGEX=\\(AXES\\)"),
    ("dense(=(model,)", "is not a regular expression"),
    ("dense=(model,model)", "same axis"),
    ("dense=()", "gives no axes"),
])
def test_bad_rules_refused(text, message):
    with pytest.raises(UserError, match=message):
        parse_rules(text)


def test_rules_override_the_automatic_layout():
    rules = parse_rules("dense/kernel=(model,None);bn/moving_mean=(model,)")
    found = layouts(MeshShape(1, 4), rules)
    assert found["dense/kernel"] == (("model", None), 4000)
    assert found["bn/moving_mean"] == (("model",), 40)
    assert found["embedding/embeddings"] == ((None, "model"), 800)  # auto still


def test_rule_over_the_data_axis_splits_over_it_too():
    found = layouts(MeshShape(2, 2), parse_rules("dense/kernel=(data,model)"))
    assert found["dense/kernel"] == (("data", "model"), 4000)


def test_rule_whose_axis_does_not_divide_is_refused_naming_the_variable():
    with pytest.raises(UserError) as error:
        layouts(MeshShape(1, 4), parse_rules("embedding/.*=(model,None)"))
    assert str(error.value) == (
        "layout rule embedding/.*=(model,None): the model axis (4) does not divide "
        "dimension 0 (50) of variable embedding/embeddings (50, 16) on --mesh 1x4.")


def test_rule_of_the_wrong_rank_is_refused():
    with pytest.raises(UserError, match="variable dense/bias has 1 dimensions"):
        layouts(MeshShape(1, 4), parse_rules("dense/.*=(None,model)"))


def test_rules_match_whole_paths_an_exact_one_first_and_never_two():
    assert layouts(MeshShape(1, 2), parse_rules("kernel=(model,None)"))["dense/kernel"][0] == (
        None, "model")  # "kernel" matches no whole path: auto
    exact = parse_rules("dense/k.*=(None,model);dense/kernel=(model,None)")
    assert layouts(MeshShape(1, 2), exact)["dense/kernel"][0] == ("model", None)
    with pytest.raises(UserError, match="dense/kernel matches 2 layout rules"):
        layouts(MeshShape(1, 2), parse_rules("dense/k.*=(None,model);.*kernel=(model,None)"))


def test_rule_matching_nothing_is_noted():
    layout = plan_layout(VARIABLES, MeshShape(1, 2), parse_rules("dnse/kernel=(None,model)"),
                         THRESHOLD)
    assert layout.notes == ["layout rule dnse/kernel=(None,model) matches no variable"]


# -- the memory plan -----------------------------------------------------------------------
@pytest.mark.parametrize("name, slots", [("adam", 2), ("AdamW", 2), ("nadam", 2),
                                         ("adamax", 2), ("sgd", 0), ("sgd_momentum", 1),
                                         ("rmsprop", 1), ("rmsprop-centered", 2),
                                         ("adagrad", 1), ("lion", 1)])
def test_optimizer_slots(name, slots):
    state = optimizer_state(name)
    assert (state.slots, state.note) == (slots, "")


def test_unknown_optimizer_assumed_two_slots_and_said():
    state = optimizer_state("shampoo")
    assert state.slots == 2 and "assumed 2 slots" in state.note


def test_memory_plan_figures():
    plan = plan_memory(VARIABLES, 4, "adam", 40000, shard_above=THRESHOLD)
    figures = {e.mesh.flag: (e.params, e.optimizer, e.gradients, e.total) for e in plan.meshes}
    assert figures == {
        # 19520 bytes of parameters, 19360 trainable: Adam's 2 slots and 1 gradient each
        "4x1": (19520, 38720, 19360, 77600),
        # kernel 16000 / 2, embeddings 3200 / 2; the bias and the moving mean whole
        "2x2": (9920, 19520, 9760, 39200),
        # kernel / 4, embeddings / 4 (along the 16), the same two whole
        "1x4": (5120, 9920, 4960, 20000),
    }
    assert [plan.fits(e.mesh) for e in plan.meshes] == [False, True, True]
    assert plan.pick() == MeshShape(2, 2)  # the smallest model axis that fits
    assert plan.refusal(MeshShape(4, 1)) == (
        "needs 75.8 KiB per GPU as data parallel; your GPUs have 39.1 KiB: --mesh 2x2 needs "
        "38.3 KiB each")


def test_sgd_without_momentum_keeps_data_parallelism():
    plan = plan_memory(VARIABLES, 4, "sgd", 40000, shard_above=THRESHOLD)
    assert plan.memory(MeshShape(4, 1)).total == 19520 + 19360
    assert plan.pick() == MeshShape(4, 1)


def test_nothing_fits():
    plan = plan_memory(VARIABLES, 4, "adam", 10000, shard_above=THRESHOLD)
    with pytest.raises(UserError) as error:
        plan.pick()
    assert str(error.value) == (
        "needs 75.8 KiB per GPU as data parallel; your GPUs have 9.8 KiB, and no mesh of 4 "
        "devices fits: the least is --mesh 1x4 at 19.5 KiB each (more GPUs, a smaller model, "
        "or an optimizer with less state)")


def test_no_gpu_memory_no_verdict():
    plan = plan_memory(VARIABLES, 2, "adam", None, shard_above=THRESHOLD)
    assert plan.fits(MeshShape(2, 1)) is None
    with pytest.raises(UserError, match="--gpu-memory"):
        plan.pick()
    assert "No verdict" in plan_text(plan, MeshShape(1, 2))


def test_a_mesh_the_rules_do_not_fit_is_left_out_of_the_plan_and_said():
    plan = plan_memory(VARIABLES, 4, "adam", None, parse_rules("embedding/.*=(model,None)"),
                       THRESHOLD)
    assert [e.mesh.flag for e in plan.meshes] == ["4x1", "2x2"]
    assert plan.notes[0].startswith("--mesh 1x4: layout rule embedding/.*=(model,None)")


# -- the report ----------------------------------------------------------------------------
def test_table_plan_text_and_json_agree():
    mesh = MeshShape(1, 4)
    layout = plan_layout(VARIABLES, mesh, parse_rules("dense/kernel=(model,None)"), THRESHOLD)
    plan = plan_memory(VARIABLES, 4, "adam", 40000, parse_rules("dense/kernel=(model,None)"),
                       THRESHOLD)
    table = layout_table(layout)
    assert "(model,None) (rule)" in table and "bn/moving_mean (frozen)" in table
    assert "Per device on --mesh 1x4: 5.0 KiB of parameters (19.1 KiB whole; 2 of 4" in table
    text = plan_text(plan, mesh)
    assert "1x4 *" in text and "activations are not estimated" in text
    assert "--mesh auto picks 2x2." in text
    data = json.loads(json.dumps(plan_json(layout, plan)))
    assert data["param_bytes_per_device"] == 5120 and data["auto_pick"] == "2x2"
    assert [p["total"] for p in data["plan"]] == [77600, 39200, 20000]
    assert data["variables"][0]["layout"] == ["model", None]
