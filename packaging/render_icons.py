"""Render resources/icons/mgpu-gui.svg to the PNG sizes the app and the desktop
entry use (mgpu-gui-16.png ... mgpu-gui-256.png), with Qt's SVG renderer.

    .venv/bin/python packaging/render_icons.py [--check]

The PNGs are committed; run this after changing the SVG. --check renders to
memory and fails if a committed PNG is missing or has the wrong size.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ICONS = Path(__file__).resolve().parent.parent / "resources" / "icons"
NAME = "mgpu-gui"
SIZES = (16, 32, 48, 64, 128, 256)


def render(svg: Path, size: int):
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise SystemExit(f"{svg}: not a valid SVG")
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    renderer.render(painter)
    painter.end()
    return image


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="only check that every size is there, at its size")
    args = parser.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication, QImage

    app = QGuiApplication.instance() or QGuiApplication([])  # noqa: F841 (keeps Qt alive)
    svg = ICONS / f"{NAME}.svg"
    problems = []
    for size in SIZES:
        png = ICONS / f"{NAME}-{size}.png"
        if args.check:
            image = QImage(str(png))
            if image.isNull() or (image.width(), image.height()) != (size, size):
                problems.append(f"{png.name}: missing or not {size}x{size}")
            continue
        if not render(svg, size).save(str(png), "PNG"):
            problems.append(f"{png}: could not write")
        else:
            print(f"wrote {png} ({png.stat().st_size} bytes)")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
