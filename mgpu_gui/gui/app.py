"""Entry point of the desktop app (`mgpu-gui`, `python -m mgpu_gui`)."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from PySide6.QtWidgets import QApplication

    from mgpu_gui.gui.main_window import MainWindow

    app = QApplication(list(sys.argv if argv is None else argv))
    app.setApplicationName("mgpu-gui")
    app.setOrganizationName("mgpu-gui")
    window = MainWindow()
    window.show()
    return app.exec()
