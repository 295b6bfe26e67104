"""The main window's export: the trained model of the run shown, written in the background.

A mixin of `MainWindow`, kept apart so the window module holds the panels and the
run; it uses the window's `last_run`, `exporter`, `log`, `banner`, `notifier` and
`_update_actions`. The export runs in a child process (`ModelExporter`); when it
ends, the notifier says so whichever tab is showing.
"""

from __future__ import annotations

from pathlib import Path

from mgpu_gui.gui.jobs.exporter import ask_export_target
from mgpu_gui.gui.widgets.notifier import Notice, NoticeKind


class ExportActions:
    def _export_source(self) -> Path | None:
        return self.last_run.trained_model() if self.last_run is not None else None

    def export_model(self) -> None:
        source = self._export_source()
        if source is None or self.exporter.is_running():
            return
        target = ask_export_target(self, self.last_run.path.parent / self.last_run.path.name)
        if target is not None:
            self.export_to(*target)

    def export_to(self, target: Path, fmt: str) -> None:
        source = self._export_source()
        assert source is not None
        self.log.append_message(f"Exporting {source.name} as {fmt} to {target}…")
        self.exporter.export(source, target, fmt)
        self._update_actions()

    def _export_finished(self, ok: bool, message: str) -> None:
        self.log.append_message(message)
        if ok:
            self.notifier.notify(Notice(NoticeKind.DONE, "Export finished", message))
        else:
            self.banner.show_error(f"Export failed: {message}")
            self.notifier.notify(Notice(NoticeKind.FAILED, "Export failed", message))
        self._update_actions()
