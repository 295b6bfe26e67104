"""The "Check my setup…" dialog: the doctor's findings (`core.doctor`), never blocking.

NVML's facts come from the inventory the window already has; TensorFlow's
from a child process (`TfFactsJob` on a `ChildJobRunner`, a few seconds). The
dialog opens at once saying what it is waiting for, then lists the findings (✓ / ⚠ / ✗, each with
what to do) above the facts they rest on. "Check again" asks TensorFlow anew,
e.g. after installing the CUDA extra.
"""

from __future__ import annotations

import html

from PySide6.QtCore import QEvent, QSize, Qt
from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from mgpu_gui.core.devices.nvml import GpuInventory
from mgpu_gui.core.tools.doctor import Facts, Finding, NvmlFacts, Severity, TfFacts, diagnose
from mgpu_gui.core.tools.doctor_report import SYMBOLS, format_facts, report
from mgpu_gui.core.tools.tf_facts import TfFactsJob
from mgpu_gui.gui.jobs.child_job import ChildJobRunner
from mgpu_gui.gui.theme import on_background
from mgpu_gui.gui.widgets.screen_fit import fit_to_screen

SEVERITY_COLORS = {Severity.OK: "#1a7f37", Severity.WARNING: "#9a6700",
                   Severity.ERROR: "#cf222e"}


class DoctorDialog(QDialog):
    """Non-modal; one per window (the main window raises it when asked again)."""

    def __init__(self, inventory: GpuInventory | None = None, parent: QWidget | None = None,
                 *, ask: bool = True):
        super().__init__(parent)
        self.setWindowTitle("Check my setup")
        self.setAccessibleName("Check my setup")
        self.nvml = NvmlFacts.from_inventory(inventory) if inventory is not None else None
        self.tf: TfFacts | None = None
        self.findings: list[Finding] = []
        self.probe = ChildJobRunner(self)
        self.probe.finished.connect(self.set_tf_facts)

        self.status = QLabel()
        self.status.setWordWrap(True)
        self.status.setAccessibleName("Check status")
        self.busy = QProgressBar()
        self.busy.setRange(0, 0)  # busy: how long TensorFlow takes to start is unknown
        self.busy.setAccessibleName("Checking")
        self.busy.setMaximumHeight(self.fontMetrics().height())
        self.findings_view = QTextBrowser()
        self.findings_view.setAccessibleName("Findings")
        self.findings_view.setOpenExternalLinks(False)
        self.facts_view = QPlainTextEdit(readOnly=True)
        self.facts_view.setAccessibleName("Facts")
        self.facts_view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.facts_view.setPlaceholderText("The facts appear when TensorFlow has answered.")
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.findings_view)
        split.addWidget(self.facts_view)
        split.setSizes([260, 200])

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.again_button = QPushButton("Check again")
        self.again_button.setToolTip("Ask TensorFlow anew (after installing or changing "
                                     "something)")
        self.copy_button = QPushButton("Copy report")
        self.copy_button.setToolTip("Copy the findings and facts to the clipboard, as "
                                    "`mgpu-train doctor` prints them")
        buttons.addButton(self.again_button, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.addButton(self.copy_button, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.reject)
        self.again_button.clicked.connect(self.check)
        self.copy_button.clicked.connect(self.copy)

        layout = QVBoxLayout(self)
        layout.addWidget(self.status)
        layout.addWidget(self.busy)
        layout.addWidget(split, 1)
        layout.addWidget(buttons)
        fit_to_screen(self, QSize(720, 560))
        self._show()
        if ask:
            self.check()

    # -- facts ---------------------------------------------------------------------

    def check(self) -> None:
        """Ask TensorFlow (again) in the background."""
        if self.probe.is_running():
            return
        self.tf = None
        self.probe.start(TfFactsJob())
        self._show()

    def set_inventory(self, inventory: GpuInventory) -> None:
        self.nvml = NvmlFacts.from_inventory(inventory)
        self._show()

    def set_tf_facts(self, facts: TfFacts) -> None:
        self.tf = facts
        self._show()

    def facts(self) -> Facts | None:
        if self.nvml is None or self.tf is None:
            return None
        return Facts(self.nvml, self.tf)

    # -- showing -------------------------------------------------------------------

    def _show(self) -> None:
        facts = self.facts()
        waiting = self.probe.is_running() or facts is None
        self.busy.setVisible(waiting)
        self.again_button.setEnabled(not self.probe.is_running())
        self.copy_button.setEnabled(facts is not None)
        if facts is None:
            parts = []
            if self.nvml is None:
                parts.append("listing the GPUs (NVML)")
            if self.tf is None:
                parts.append("asking TensorFlow and JAX in a child process (a few seconds)")
            self.status.setText("Checking your setup: " + " and ".join(parts) + "…")
            self.findings = []
            self.findings_view.setHtml("")
            self.facts_view.setPlainText("")
            return
        self.findings = diagnose(facts)
        errors = sum(f.severity is Severity.ERROR for f in self.findings)
        warnings = sum(f.severity is Severity.WARNING for f in self.findings)
        if errors:
            verdict = (f"{errors} problem{'s' if errors != 1 else ''} to fix"
                       + (f", {warnings} warning{'s' if warnings != 1 else ''}"
                          if warnings else "") + ": see what to do under each.")
        elif warnings:
            verdict = f"Training works; {warnings} warning{'s' if warnings != 1 else ''}."
        else:
            verdict = "No problems found."
        self.status.setText(f"<b>{verdict}</b>")
        self.findings_view.setHtml(self._findings_html())
        self.facts_view.setPlainText(format_facts(facts))

    def _findings_html(self) -> str:
        base = self.findings_view.palette().color(self.findings_view.backgroundRole())
        rows = []
        for finding in self.findings:
            color = on_background(SEVERITY_COLORS[finding.severity], base).name()
            fix = (f"<div style='margin-left:1.6em'>→ {html.escape(finding.fix)}</div>"
                   if finding.fix else "")
            rows.append(f"<p><span style='color:{color}; font-weight:bold'>"
                        f"{SYMBOLS[finding.severity]} {finding.severity.value}</span> "
                        f"{html.escape(finding.message)}{fix}</p>")
        return "".join(rows)

    def report_text(self) -> str:
        facts = self.facts()
        return report(facts, self.findings) if facts is not None else ""

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.report_text())

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt's name)
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and self.findings:
            self.findings_view.setHtml(self._findings_html())  # colours for the new scheme

    def done(self, result: int) -> None:
        self.probe.shutdown()  # closed while TensorFlow was being asked: no orphan child
        super().done(result)
