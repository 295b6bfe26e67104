"""Children started as if TensorFlow were not installed (see no_tensorflow/)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

BLOCKER = Path(__file__).parent / "no_tensorflow"


def env_without_tensorflow(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) with TensorFlow hidden from the child."""
    made = dict(os.environ if env is None else env)
    made["PYTHONPATH"] = os.pathsep.join(p for p in (str(BLOCKER), made.get("PYTHONPATH", "")) if p)
    return made
