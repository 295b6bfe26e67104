"""Children started as if TensorFlow were not installed (see child_site/)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from mgpu_gui.core.children.warm_start import OFF_ENV
from tests.helpers.engine_starts import with_child_site


def env_without_tensorflow(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) with TensorFlow hidden from the child."""
    made = with_child_site(dict(os.environ if env is None else env))
    made["MGPU_GUI_TEST_HIDE_TENSORFLOW"] = "1"
    made[OFF_ENV] = "0"  # started fresh: a warm starter's fork has TensorFlow imported
    return made
