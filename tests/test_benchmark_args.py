"""The benchmarks' command lines parse as their docstrings say, without running a benchmark.

Issue 30, item 9: `gui_responsiveness.py` with no arguments failed on Python 3.11 (its
argparse refused the default section list against `choices`).
"""

from __future__ import annotations

import pytest

from tests.benchmarks.gui_responsiveness import SECTIONS, parse_args


def test_gui_responsiveness_runs_every_section_by_default_and_checks_the_names(capsys):
    assert parse_args([]).sections == list(SECTIONS)
    assert parse_args(["click", "batch"]).sections == ["click", "batch"]
    with pytest.raises(SystemExit) as refused:
        parse_args(["click", "nope"])
    assert refused.value.code == 2
    assert "invalid section 'nope' (choose from startup, click, batch, training)" in (
        capsys.readouterr().err)
