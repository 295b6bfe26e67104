"""Follow the system's light or dark colour scheme, the plots included.

Qt gives every widget the system palette and sends `QEvent.PaletteChange` when
it changes; widgets drawn from the palette (the gauges, every standard widget)
follow by themselves. Two things need help:

- pyqtgraph plots take explicit colours: `plot_colors()` derives them from the
  palette (background = Base, text = Text) and the panels restyle their plots
  on `PaletteChange` (see `CurvesPanel.changeEvent`). Curve colours have a
  light and a dark variant, each kept at 3:1 contrast or more against the
  background (WCAG's minimum for graphics), so every curve stays readable.
- A widget with a style sheet keeps the palette it was polished with when the
  application palette changes (Qt re-polishes only on a new style sheet):
  `refresh_style_sheets()` sets each style sheet again; the main window calls
  it when the palette changes.
- Some platform themes report the scheme (`QStyleHints.colorScheme`, Qt 6.5+)
  without supplying a matching palette (Fusion on a bare X11 or Wayland
  session, the offscreen platform). `follow_system_scheme()` watches
  `colorSchemeChanged` and, only when the palette disagrees with the scheme,
  sets a dark palette (or restores the default one).
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QWidget

WATCHER_NAME = "mgpu_theme_watcher"
MIN_CURVE_CONTRAST = 3.0  # graphics (WCAG 2.1, 1.4.11)
MIN_TEXT_CONTRAST = 4.5  # body text (WCAG 2.1, 1.4.3)

# (light, dark) variants of each curve role: same hue, lighter on dark backgrounds.
CURVES = {
    "train": ("#1f77b4", "#5aa9e6"),
    "val": ("#c75400", "#ff9f43"),
    "best": ("#c2185b", "#f06292"),
    "lr": ("#2e7d32", "#66bb6a"),
    "rate": ("#6a1b9a", "#ce93d8"),
}
# Okabe-Ito, then Tableau: distinguishable with the common colour-vision deficiencies.
SERIES = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#000000",
          "#8c564b", "#7f7f7f", "#bcbd22")


def is_dark(palette: QPalette | None = None) -> bool:
    """Whether `palette` (default: the application's) is a dark one."""
    palette = palette if palette is not None else QGuiApplication.palette()
    window = palette.color(QPalette.ColorRole.Window)
    text = palette.color(QPalette.ColorRole.WindowText)
    return window.lightness() < text.lightness()


def luminance(color: QColor) -> float:
    """WCAG relative luminance, 0 (black) .. 1 (white)."""
    def channel(value: float) -> float:
        return value / 12.92 if value <= 0.04045 else ((value + 0.055) / 1.055) ** 2.4

    return (0.2126 * channel(color.redF()) + 0.7152 * channel(color.greenF())
            + 0.0722 * channel(color.blueF()))


def contrast(a: QColor, b: QColor) -> float:
    """WCAG contrast ratio, 1 .. 21."""
    light, dark = sorted((luminance(a), luminance(b)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def readable(color: QColor | str, background: QColor, minimum: float = MIN_TEXT_CONTRAST
             ) -> QColor:
    """`color`, made lighter (dark background) or darker (light one) until it has
    `minimum` contrast against `background`; the hue stays."""
    color = QColor(color)
    lighten = luminance(background) < 0.5
    for _ in range(20):
        if contrast(color, background) >= minimum:
            break
        h, s, lightness, a = color.getHslF()
        lightness = min(1.0, lightness + 0.05) if lighten else max(0.0, lightness - 0.05)
        color = QColor.fromHslF(max(h, 0.0), s, lightness, a)
    return color


def on_background(color: QColor | str, background: QColor) -> QColor:
    """A text colour chosen for light backgrounds, as designed there; on a dark background,
    lightened until readable (4.5:1)."""
    if luminance(background) >= 0.5:
        return QColor(color)
    return readable(color, background)


@dataclass(frozen=True)
class PlotColors:
    """The colours of a pyqtgraph plot in the current palette (names like '#rrggbb')."""

    dark: bool
    background: str
    text: str
    axis: str
    train: str
    val: str
    best: str
    lr: str
    rate: str
    series: tuple[str, ...]  # one per compared run

    def fill(self, alpha: int) -> tuple[int, int, int, int]:
        """The background as an RGBA tuple (labels over curves)."""
        color = QColor(self.background)
        return color.red(), color.green(), color.blue(), alpha


def plot_colors(palette: QPalette | None = None) -> PlotColors:
    palette = palette if palette is not None else QGuiApplication.palette()
    dark = is_dark(palette)
    background = palette.color(QPalette.ColorRole.Base)
    text = palette.color(QPalette.ColorRole.Text)
    axis = _mix(text, background, 0.75)
    variant = 1 if dark else 0
    curve = {role: readable(pair[variant], background, MIN_CURVE_CONTRAST).name()
             for role, pair in CURVES.items()}
    return PlotColors(
        dark=dark, background=background.name(), text=text.name(), axis=axis.name(),
        series=tuple(readable(c, background, MIN_CURVE_CONTRAST).name() for c in SERIES),
        **curve)


PALETTE_EVENTS = (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange)


def is_palette_change(event: QEvent) -> bool:
    """Whether a widget's `changeEvent` says its palette (light or dark) changed."""
    return event.type() in PALETTE_EVENTS


def changed_plot_colors(widget: QWidget, event: QEvent, current: PlotColors) -> PlotColors | None:
    """The plot colours for `widget`'s new palette when `event` changed it to another
    scheme; None when the plots may keep `current` (pyqtgraph draws explicit colours)."""
    if not is_palette_change(event):
        return None
    colors = plot_colors(widget.palette())
    return None if colors == current else colors


def _mix(a: QColor, b: QColor, weight: float) -> QColor:
    """`weight` of a, the rest b."""
    return QColor.fromRgbF(*(weight * x + (1 - weight) * y for x, y in
                             zip(a.getRgbF()[:3], b.getRgbF()[:3], strict=True)))


def dark_palette() -> QPalette:
    """A dark palette for platforms that report a dark scheme but supply no palette."""
    palette = QPalette()
    roles = QPalette.ColorRole
    colors = {
        roles.Window: "#2b2b2b", roles.WindowText: "#e6e6e6", roles.Base: "#1e1e1e",
        roles.AlternateBase: "#262626", roles.ToolTipBase: "#3a3a3a",
        roles.ToolTipText: "#f0f0f0", roles.PlaceholderText: "#9a9a9a", roles.Text: "#e6e6e6",
        roles.Button: "#353535", roles.ButtonText: "#e6e6e6", roles.BrightText: "#ff6b6b",
        roles.Light: "#505050", roles.Midlight: "#404040", roles.Mid: "#5a5a5a",
        roles.Dark: "#1a1a1a", roles.Shadow: "#000000", roles.Highlight: "#2f81f7",
        roles.HighlightedText: "#ffffff", roles.Link: "#58a6ff", roles.LinkVisited: "#bc8cff",
        roles.Accent: "#2f81f7",
    }
    for role, color in colors.items():
        palette.setColor(role, QColor(color))
    disabled = QPalette.ColorGroup.Disabled
    for role in (roles.WindowText, roles.Text, roles.ButtonText):
        palette.setColor(disabled, role, QColor("#7a7a7a"))
    palette.setColor(disabled, roles.Base, QColor("#262626"))
    return palette


def refresh_style_sheets(root: QWidget) -> int:
    """Re-polish `root` and its descendants that have a style sheet, so they take the new
    application palette (`palette(...)` in their sheets included); returns how many."""
    count = 0
    for widget in [root, *root.findChildren(QWidget)]:
        sheet = widget.styleSheet()
        if sheet:
            widget.setStyleSheet(sheet)
            count += 1
    return count


class SchemeFollower(QObject):
    """Keeps the application palette in line with the system colour scheme (one per app)."""

    def __init__(self, app: QGuiApplication):
        super().__init__(app)
        self.setObjectName(WATCHER_NAME)
        self._app = app
        self.scheme = app.styleHints().colorScheme()
        self.own_palette = False  # whether the dark palette is ours (to undo on light)
        app.styleHints().colorSchemeChanged.connect(self.apply)
        self.apply(self.scheme)

    def apply(self, scheme: Qt.ColorScheme) -> None:
        """The system says `scheme`: make the palette match, if the platform did not."""
        self.scheme = scheme
        if scheme is Qt.ColorScheme.Dark and not is_dark(self._app.palette()):
            self.own_palette = True
            self._app.setPalette(dark_palette())
        elif scheme is Qt.ColorScheme.Light and self.own_palette:
            self.own_palette = False
            self._app.setPalette(QPalette())  # back to the platform's (default) palette


def follow_system_scheme(app: QGuiApplication | None = None) -> SchemeFollower | None:
    """Start following the system scheme (idempotent); None without an application."""
    app = app or QGuiApplication.instance()
    if app is None:
        return None
    existing = app.findChild(SchemeFollower, WATCHER_NAME)
    return existing if existing is not None else SchemeFollower(app)
