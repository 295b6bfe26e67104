"""Which test started TensorFlow or JAX, in its own process or in a child.

Starting an engine costs seconds, so such a test carries the `slow` marker and the inner
loop (`pytest -m "not slow"`) stays fast. tests/conftest.py fails an unmarked test that
starts an engine's runtime itself, or whose children import one: they note it through
child_site/.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHILD_SITE = Path(__file__).parent / "child_site"
LOG_ENV = "MGPU_GUI_TEST_ENGINE_LOG"
ENGINES = ("tensorflow", "jax")


def with_child_site(env: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """`env` with the child site and the project first on PYTHONPATH: for a test that
    builds a child's environment itself."""
    keep = [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
            if p and p not in (str(CHILD_SITE), str(ROOT))]
    env["PYTHONPATH"] = os.pathsep.join([str(CHILD_SITE), str(ROOT), *keep])
    return env


def started_engines() -> set[str]:
    """The engines whose runtime this process has started: an import alone starts none
    (a test module may import one for its slow tests), a first op or device query does."""
    started = set()
    if "tensorflow" in sys.modules:
        from tensorflow.python.eager import context

        made = context.context_safe()
        if made is not None and made._initialized:
            started.add("tensorflow")
    if "jax" in sys.modules:
        from jax._src import xla_bridge

        if xla_bridge._backends:
            started.add("jax")
    return started


def started_by(test: str, log: Path) -> list[str]:
    """What the children of `test` (a node id) noted: 'engine (command line)'."""
    if not log.exists():
        return []
    lines = log.read_text(encoding="utf-8").splitlines()
    return [f"{line.split(chr(9))[1]} ({line.split(chr(9))[3][:120]})" for line in lines
            if line.split("\t")[0] == test]
