"""The mesh flags `train` (and every command that takes train's flags) shares with
`mgpu-train layout`: one wording for both."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MESH_HELP = ("DATAxMODEL, e.g. 1x4 (four model shards), 2x2, 4x1 (data parallelism), or "
             "auto: the smallest model axis that fits the GPUs' memory")
LAYOUT_HELP = ("your layout rules, REGEX=(AXES) separated by ';' (or a file of them, one a "
               "line), e.g. 'dense.*kernel=(None,model);embedding.*=(model,None)': the regex "
               "matches the whole variable path, as Keras' LayoutMap; they override the "
               "automatic layout")


def add_mesh_arguments(p: Any, add: Callable[..., None]) -> None:
    """--mesh and --layout on a command that describes a run (`add`: common's _Flags)."""
    add(p, "--mesh", metavar="DATAxMODEL",
        help=f"train on a data x model mesh of the run's devices (--gpus, or --replicas "
             f"with --cpu): {MESH_HELP}; a model axis > 1 needs --engine jax (default: data "
             f"parallel)")
    add(p, "--layout", metavar="RULES_OR_FILE", help=f"with --mesh: {LAYOUT_HELP}")
