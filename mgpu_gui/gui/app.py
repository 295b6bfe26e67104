"""Entry point of the desktop app (`mgpu-gui`, `python -m mgpu_gui`).

The PyInstaller bundle starts here too, through packaging/mgpu_gui_bundle.py.
"""

from __future__ import annotations

import importlib.resources
import sys
from collections.abc import Sequence

from PySide6.QtGui import QGuiApplication, QIcon, QPixmap

# The desktop entry is packaging/mgpu-gui.desktop and its Icon= is this name;
# packaging/install-desktop.sh installs the icons below under this name too.
DESKTOP_ID = "mgpu-gui"
ICON_NAME = "mgpu-gui"
ICON_SIZES = (16, 32, 48, 64, 128, 256)


def app_icon() -> QIcon:
    """The app icon at every size shipped in mgpu_gui.resources/icons."""
    folder = importlib.resources.files("mgpu_gui.resources") / "icons"
    icon = QIcon()
    for size in ICON_SIZES:
        pixmap = QPixmap()
        # From bytes, so it works wherever the resources live (a wheel, a bundle).
        if pixmap.loadFromData((folder / f"{ICON_NAME}-{size}.png").read_bytes(), "PNG"):
            icon.addPixmap(pixmap)
    return icon


def configure_application(app: QGuiApplication) -> None:
    """Names, icon and desktop entry: what the desktop shows for our windows."""
    app.setApplicationName("mgpu-gui")
    app.setOrganizationName("mgpu-gui")
    # Wayland's app_id (and so the taskbar's icon and name) come from the entry.
    app.setDesktopFileName(DESKTOP_ID)
    app.setWindowIcon(app_icon())


def main(argv: Sequence[str] | None = None) -> int:
    from PySide6.QtWidgets import QApplication

    from mgpu_gui.gui.gc_guard import MainThreadCollector
    from mgpu_gui.gui.main_window import MainWindow
    from mgpu_gui.gui.widgets import wheel_guard

    app = QApplication(list(sys.argv if argv is None else argv))
    configure_application(app)
    MainThreadCollector(app)  # no Qt object is ever collected on a job's thread
    wheel_guard.install(app)  # before any window: fields are guarded from their first polish
    window = MainWindow()
    window.show()
    return app.exec()
