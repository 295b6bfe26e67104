"""Child processes start the same way from a Python install and from a frozen bundle,
and only the registry's child entries can be started."""

from __future__ import annotations

import sys
from enum import StrEnum

import pytest

from mgpu_gui.core.children import launch
from mgpu_gui.core.children.launch import Child


def test_python_install_uses_dash_m():
    assert launch.module_command(Child.TRAINING_WORKER, "a") == [
        sys.executable, "-m", "mgpu_gui.processes.training_worker", "a"]


def test_every_child_entry_is_a_module_of_the_processes_layer():
    import importlib.util

    for child in Child:
        assert child.value.startswith("mgpu_gui.processes.")
        assert importlib.util.find_spec(child.value) is not None, child


def test_frozen_bundle_runs_itself_with_the_module_flag(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    # A registry with one test entry, so the bundle's dispatch can be watched end to end.
    monkeypatch.setattr(launch, "Child", StrEnum("Child", {"TEST": "child_module"}))
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


def test_only_child_entries_are_started_or_run(monkeypatch):
    with pytest.raises(ValueError):
        launch.module_command("os", "-c", "anything")
    ran = []
    monkeypatch.setattr(launch.runpy, "run_module", lambda *a, **k: ran.append(a))
    monkeypatch.setattr(sys, "argv", ["bundle", launch.MODULE_FLAG, "mgpu_gui.cli.main"])
    with pytest.raises(launch.UnknownChildError, match="not a child entry"):
        launch.run_module_from_argv()
    assert ran == []
    monkeypatch.setattr(sys, "argv", ["bundle", launch.MODULE_FLAG, Child.TF_FACTS.value, "y"])
    assert launch.run_module_from_argv() is True
    assert ran == [(Child.TF_FACTS.value,)] and sys.argv == [Child.TF_FACTS.value, "y"]


def test_a_child_in_another_folder_is_shown_this_package_only_where_it_is_not_installed(
        monkeypatch):
    """The export verifier starts in a folder of its own. This venv has the app installed
    (editable): the child finds it as this process does, its PYTHONPATH unchanged, so the
    warm starter forks it (it was refused for a PYTHONPATH that differed, always). Run
    from a checkout that is not installed, only the start folder finds the package: the
    child is shown the checkout."""
    import importlib.machinery
    from pathlib import Path

    root = str(Path(launch.__file__).resolve().parents[3])
    assert launch.pythonpath_for_child({"PYTHONPATH": "/x"}) == "/x"
    assert launch.pythonpath_for_child({}) is None
    monkeypatch.setattr(sys, "meta_path", [importlib.machinery.PathFinder])
    monkeypatch.setattr(sys, "path", [root, *(p for p in sys.path if p != root)])
    assert launch.pythonpath_for_child({"PYTHONPATH": "/x"}) == f"{root}:/x"
    assert launch.pythonpath_for_child({}) == root
