"""Packaging: the app icon, the desktop entry and AppStream file (validated with
the freedesktop tools), the per-user install script, and the bundle's entry point.

The bundle itself is built and smoke-tested by packaging/build-bundle.sh, a
separate step of .ci/run (it takes minutes and 1.7 GB).
"""

from __future__ import annotations

import configparser
import importlib.resources
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGING = ROOT / "packaging"
DESKTOP = PACKAGING / "mgpu-gui.desktop"
METAINFO = PACKAGING / "invalid.mgpu_gui.mgpu_gui.metainfo.xml"
INSTALL = PACKAGING / "install-desktop.sh"
SIZES = (16, 32, 48, 64, 128, 256)


def tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (Debian package {package}; .ci/run installs it)")
    return path


def desktop_entry(path: Path) -> dict[str, str]:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # keys are case-sensitive
    parser.read(path, encoding="utf-8")
    return dict(parser["Desktop Entry"])


def desktop_file_validate(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([tool("desktop-file-validate", "desktop-file-utils"), str(path)],
                          capture_output=True, text=True, timeout=60)


# -- the icon ------------------------------------------------------------------
def test_icon_pngs_are_package_data_at_every_size(qapp):
    from PySide6.QtGui import QImage
    from PySide6.QtSvg import QSvgRenderer

    icons = importlib.resources.files("mgpu_gui.resources") / "icons"
    assert QSvgRenderer((icons / "mgpu-gui.svg").read_bytes()).isValid()
    for size in SIZES:
        image = QImage.fromData((icons / f"mgpu-gui-{size}.png").read_bytes(), "PNG")
        assert (image.width(), image.height()) == (size, size)
        assert image.hasAlphaChannel()


def test_the_app_has_its_window_icon_and_desktop_entry(qapp):
    from mgpu_gui.gui import app

    saved = (qapp.applicationName(), qapp.organizationName(), qapp.desktopFileName(),
             qapp.windowIcon())
    try:
        app.configure_application(qapp)
        icon = qapp.windowIcon()
        assert not icon.isNull()
        assert {(s.width(), s.height()) for s in icon.availableSizes()} == {
            (size, size) for size in SIZES}
        assert qapp.desktopFileName() == DESKTOP.stem
    finally:
        name, organization, desktop_file, window_icon = saved
        qapp.setApplicationName(name)
        qapp.setOrganizationName(organization)
        qapp.setDesktopFileName(desktop_file)
        qapp.setWindowIcon(window_icon)
    entry = desktop_entry(DESKTOP)
    assert entry["Icon"] == app.ICON_NAME
    assert entry["StartupWMClass"] == app.DESKTOP_ID == DESKTOP.stem


# -- the desktop entry and the AppStream metadata ----------------------------------
def test_desktop_entry_passes_desktop_file_validate():
    result = desktop_file_validate(DESKTOP)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_metainfo_passes_appstreamcli_validate():
    appstreamcli = tool("appstreamcli", "appstream")
    result = subprocess.run([appstreamcli, "validate", "--no-net", str(METAINFO)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    # The one note left is the placeholder id's TLD (see the file's comment).
    issues = [line.split()[2] for line in result.stdout.splitlines()
              if line[:2] in ("E:", "W:", "I:")]
    assert issues == ["cid-maybe-not-rdns"], result.stdout


def test_metainfo_names_the_desktop_entry_and_the_executables():
    import tomllib
    import xml.etree.ElementTree as ET

    component = ET.parse(METAINFO).getroot()
    assert METAINFO.name == component.findtext("id") + ".metainfo.xml"
    assert component.findtext("launchable[@type='desktop-id']") == DESKTOP.name
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    scripts = {*pyproject["project"]["scripts"], *pyproject["project"]["gui-scripts"]}
    assert {b.text for b in component.iter("binary")} == scripts
    license = pyproject["project"]["license"]  # {text = "MIT"} or, newer, "MIT"
    assert component.findtext("project_license") == (
        license["text"] if isinstance(license, dict) else license)
    assert desktop_entry(DESKTOP)["Exec"] == "mgpu-gui"


# -- the per-user install ---------------------------------------------------------
def run_install(data_home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(data_home.parent / "home"),
           "XDG_DATA_HOME": str(data_home)}
    result = subprocess.run(["bash", str(INSTALL), *args], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result


def test_install_script_installs_entry_and_icons_under_xdg_data_home(tmp_path):
    launcher = tmp_path / "an app folder" / "mgpu-gui"  # a space: Exec must quote it
    launcher.parent.mkdir()
    launcher.write_text("#!/bin/sh\n")
    launcher.chmod(0o755)
    data_home = tmp_path / "data"
    run_install(data_home, "--exec", str(launcher))

    installed = data_home / "applications" / "mgpu-gui.desktop"
    entry = desktop_entry(installed)
    assert entry["Exec"] == f'"{launcher}"'
    assert entry["TryExec"] == str(launcher)
    assert desktop_file_validate(installed).returncode == 0
    icon = entry["Icon"]
    hicolor = data_home / "icons" / "hicolor"
    assert (hicolor / "scalable" / "apps" / f"{icon}.svg").is_file()
    for size in SIZES:
        png = hicolor / f"{size}x{size}" / "apps" / f"{icon}.png"
        assert png.read_bytes() == (ROOT / "resources" / "icons" / f"mgpu-gui-{size}.png"
                                    ).read_bytes()
    assert not (tmp_path / "home").exists()  # XDG_DATA_HOME was honoured

    run_install(data_home, "--uninstall")
    assert [p for p in data_home.rglob("*") if p.is_file()] == []


def test_install_script_refuses_a_missing_executable(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "XDG_DATA_HOME": str(tmp_path)}
    result = subprocess.run(["bash", str(INSTALL), "--exec", str(tmp_path / "nothing")],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "not an executable" in result.stderr
    assert list(tmp_path.iterdir()) == []


# -- the bundle's entry point ------------------------------------------------------
@pytest.fixture
def bundle_entry():
    spec = importlib.util.spec_from_file_location("mgpu_gui_bundle",
                                                  PACKAGING / "mgpu_gui_bundle.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bundle_entry_runs_a_child_module_and_traces_it(bundle_entry, monkeypatch, tmp_path):
    from enum import StrEnum

    from mgpu_gui.core.children import launch

    monkeypatch.setattr(sys, "frozen", True, raising=False)
    # The bundle runs registry entries only: register the test's child for this test.
    monkeypatch.setattr(launch, "Child", StrEnum("Child", {"TEST": "child_for_bundle"}))
    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv(bundle_entry.TRACE_ENV, str(trace))
    (tmp_path / "child_for_bundle.py").write_text(
        "import sys\nfrom pathlib import Path\n"
        "if __name__ == '__main__':\n    Path(sys.argv[1]).write_text('ran')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "out.txt"
    command = launch.module_command("child_for_bundle", str(out))
    monkeypatch.setattr(sys, "argv", ["/bundle/mgpu-gui", *command[1:]])
    monkeypatch.setattr("mgpu_gui.gui.app.main", lambda: pytest.fail("the GUI started"))

    assert bundle_entry.main() == 0
    assert out.read_text() == "ran"
    (record,) = [json.loads(line) for line in trace.read_text().splitlines()]
    assert record["job"] == "child_for_bundle" and record["frozen"] is True
    assert record["argv"][1:3] == [launch.MODULE_FLAG, "child_for_bundle"]


def test_bundle_entry_is_the_cli_as_mgpu_train_else_the_gui(bundle_entry, monkeypatch):
    monkeypatch.delenv(bundle_entry.TRACE_ENV, raising=False)
    started = []
    monkeypatch.setattr("mgpu_gui.cli.main.main", lambda: started.append("cli") or 3)
    monkeypatch.setattr("mgpu_gui.gui.app.main", lambda: started.append("gui") or 0)
    monkeypatch.setattr(sys, "argv", ["/opt/mgpu-gui/mgpu-train", "runs"])
    assert bundle_entry.main() == 3
    monkeypatch.setattr(sys, "argv", ["/opt/mgpu-gui/mgpu-gui"])
    assert bundle_entry.main() == 0
    assert started == ["cli", "gui"]


# -- the wheel -----------------------------------------------------------------


def test_the_wheel_holds_every_module_of_the_tree(tmp_path):
    """The package list in pyproject.toml is explicit: a new subpackage must not be left out."""
    import zipfile

    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path), str(ROOT)], check=True, timeout=300,
                   capture_output=True)
    (wheel,) = tmp_path.glob("mgpu_gui-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    tree = {str(p.relative_to(ROOT)) for p in (ROOT / "mgpu_gui").rglob("*.py")}
    assert tree - names == set()
    assert "mgpu_gui/resources/demo/digits.npz" in names
