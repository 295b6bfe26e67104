"""Child processes start the same way from a Python install and from a frozen bundle."""

from __future__ import annotations

import sys

from mgpu_gui.core.children import launch


def test_python_install_uses_dash_m():
    module = "mgpu_gui.processes.training_worker"
    assert launch.module_command(module, "a") == [sys.executable, "-m", module, "a"]


def test_frozen_bundle_runs_itself_with_the_module_flag(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    out = tmp_path / "argv.txt"
    command = launch.module_command("child_module", str(out), "x")
    assert command == [sys.executable, launch.MODULE_FLAG, "child_module", str(out), "x"]
    # What the bundle's entry point does with that command line:
    (tmp_path / "child_module.py").write_text(
        "import sys\nfrom pathlib import Path\n"
        "if __name__ == '__main__':\n    Path(sys.argv[1]).write_text(' '.join(sys.argv))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["bundle", *command[1:]])
    assert launch.run_module_from_argv() is True
    assert out.read_text().endswith(f"{out} x")
    monkeypatch.setattr(sys, "argv", ["bundle"])
    assert launch.run_module_from_argv() is False
