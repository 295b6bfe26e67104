"""Epoch and total progress with ETAs, and what the multi-GPU choice means for the run.

Fractions and ETAs come from `core.progress.Progress`, the same as the CLI's line.
ETAs are computed at each event's own time, so they need no timer and a loaded
run shows what it showed live. From Train to the first batch (minutes for a big model
on a busy machine) the status line names what the worker does and for how long, counted
by a one-second timer, so the run never looks dead; while other processes leave the
worker little CPU, the line under it says so. A past run shown from the Runs tab has no
live events: `show_past` shows how far it got and how it ended, from its record.
"""

from __future__ import annotations

import re
import time

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QGridLayout, QLabel, QProgressBar, QSizePolicy, QWidget

from mgpu_gui.core.devices.cpu_share import CpuShareSampler
from mgpu_gui.core.events import (
    BatchEnd,
    Diagnosed,
    EpochEnd,
    Event,
    RunFailed,
    RunFinished,
    RunStarted,
    RunStatus,
    SetupProgress,
)
from mgpu_gui.core.progress import Progress, format_duration, format_rate

BAR_MAX = 1000
CPU_SAMPLE_MS = 2000  # the worker's CPU share over this long: seconds-long stalls show
_GPU_NAME = re.compile(r"^GPU \d+(?: MIG \d+)?")
_GPU_DEVICE = re.compile(r"GPU:(\d+)$")


def device_text(event: RunStarted) -> str:
    """'GPUs 0,1', 'GPU 3', 'GPU 0 MIG 1' or '2 CPU replicas', as a person names them."""
    if event.device_kind != "gpu":
        n = event.num_replicas
        return f"{n} CPU replica{'s' if n != 1 else ''}"
    labels = []
    for i, device in enumerate(event.devices):
        name = event.device_names[i] if i < len(event.device_names) else ""
        match = _GPU_NAME.match(name)  # the nvidia-smi index, not TensorFlow's
        if match:
            labels.append(match.group(0).removeprefix("GPU "))
        elif found := _GPU_DEVICE.search(device):
            labels.append(found.group(1))
    if not labels:
        return f"{event.num_replicas} GPU{'s' if event.num_replicas != 1 else ''}"
    return ("GPU " if len(labels) == 1 else "GPUs ") + ",".join(labels)


def status_text(event: RunStarted, samples_per_s: float | None) -> str:
    parts = [device_text(event)]
    if event.device_kind == "gpu":
        parts.append(f"{event.num_replicas} replica{'s' if event.num_replicas != 1 else ''}")
    if event.mesh:  # issue 31: variables split over the model axis
        parts.append(f"{event.mesh.replace('x', '×')} mesh")
    parts.append(f"global batch {event.global_batch} "
                 f"({event.batch_per_replica} × {event.num_replicas})")
    if samples_per_s:
        parts.append(format_rate(samples_per_s))
    dropped = event.dropped_per_epoch
    parts.append(f"{dropped} sample{'s' if dropped != 1 else ''} dropped per epoch"
                 if dropped else "no samples dropped")
    return " · ".join(parts)


class VerdictLabel(QLabel):
    """The diagnosis on one line that never widens the window or grows the panel: its end
    elided at the panel's width, the whole verdict in the tooltip."""

    HELP = ("Why the run is as fast as it is, updated as it trains: input-bound (the steps "
            "wait for their data), compute-bound (the devices are busy), or "
            "synchronisation-bound (several GPUs, little input wait, yet the GPUs are not "
            "busy: they wait for each other).")

    def __init__(self) -> None:
        super().__init__()
        self.setAccessibleName("Why is it slow")
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.verdict = ""
        self.set_verdict("")

    def set_verdict(self, text: str) -> None:
        self.verdict = text
        self.setToolTip(f"{text}\n\n{self.HELP}" if text else self.HELP)
        self.setAccessibleDescription(text)
        self._elide()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        self.setText(self.fontMetrics().elidedText(self.verdict, Qt.TextElideMode.ElideRight,
                                                   max(self.width(), 1)))


class ProgressPanel(QWidget):
    """Two bars with ETAs and a status line; fed by `handle_event`."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName("Training progress")
        layout = QGridLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        self.epoch_label = QLabel()
        self.total_label = QLabel("Total")
        self.epoch_bar = self._bar("Epoch progress")
        self.total_bar = self._bar("Total progress")
        self.epoch_eta_label = QLabel()
        self.total_eta_label = QLabel()
        for label in (self.epoch_eta_label, self.total_eta_label):
            label.setMinimumWidth(label.fontMetrics().horizontalAdvance("ETA 59 m 59 s"))
        self.status_label = QLabel()
        self.status_label.setAccessibleName("Run status")
        self.status_label.setToolTip(
            "Replicas: copies of the model, one per GPU (or CPU device), each fed its share "
            "of every batch.\nGlobal batch = per-replica batch × replicas, shown as "
            "'global batch G (per-replica × replicas)'.\nSamples dropped per epoch: the "
            "training samples that do not fill a last global batch; skipped so every "
            "replica gets a full share (reshuffled, so not the same samples each epoch).")
        self.status_label.setWordWrap(True)
        self.diagnosis_label = VerdictLabel()
        # The two bars side by side: one row less under the plots, which a laptop screen's
        # height needs (issue 30: 1024x576 logical).
        for column, widget in enumerate((self.epoch_label, self.epoch_bar, self.epoch_eta_label,
                                         self.total_label, self.total_bar,
                                         self.total_eta_label)):
            layout.addWidget(widget, 0, column)
        layout.addWidget(self.status_label, 1, 0, 1, 6)
        layout.addWidget(self.diagnosis_label, 2, 0, 1, 6)
        layout.setColumnStretch(1, 3)  # "100 % · 100/100 steps" needs more than "100 %"
        layout.setColumnStretch(4, 2)
        layout.setRowStretch(3, 1)  # given more height (a splitter drag), the rows stay on top
        self._ticker = QTimer(self)
        self._ticker.setInterval(1000)
        self._ticker.timeout.connect(self._tick)
        self._step, self._step_since, self._prefix = "", 0.0, ""
        # The worker's CPU share, from its launch to its end (core/devices/cpu_share.py).
        self._cpu: CpuShareSampler | None = None
        self._cpu_timer = QTimer(self)
        self._cpu_timer.setInterval(CPU_SAMPLE_MS)
        self._cpu_timer.timeout.connect(self._sample_cpu)
        self._verdict = ""  # the diagnosis's, shown again once the CPU is free
        self.reset()

    @staticmethod
    def _bar(name: str) -> QProgressBar:
        bar = QProgressBar()
        bar.setRange(0, BAR_MAX)
        bar.setAccessibleName(name)
        bar.setTextVisible(True)
        return bar

    def reset(self) -> None:
        self._end_steps()
        self.progress = Progress()
        self._started: RunStarted | None = None
        self.epoch_label.setText("Epoch –")
        for bar in (self.epoch_bar, self.total_bar):
            self._set_bar(bar, 0.0)
        self.epoch_eta_label.setText("")
        self.total_eta_label.setText("")
        self.status_label.setText("No run")
        self._verdict = ""
        self.diagnosis_label.set_verdict("")

    def show_past(self, epochs_done: int, epochs: int, state: str, note: str) -> None:
        """A stored run: its last complete epoch of `epochs`, the share of all epochs
        done, and `state` ("stopped", "completed", ...) where the ETAs were."""
        self.reset()
        shown = min(epochs_done, epochs)
        self.epoch_label.setText(f"Epoch {shown}/{epochs}")
        self._set_bar(self.epoch_bar, 1.0 if epochs_done else 0.0,
                      f"epoch {shown} complete" if epochs_done else "no epoch complete")
        self._set_bar(self.total_bar, epochs_done / epochs if epochs else 0.0,
                      f"{epochs_done} of {epochs} epochs")
        self.epoch_eta_label.setText(state)
        self.total_eta_label.setText(state)
        self.status_label.setText(note)

    def starting(self, prefix: str = "") -> None:
        """The worker was launched: its steps before the first batch are said, each with
        its time so far, after `prefix` (a resume's note)."""
        self._prefix = prefix
        self._set_step("starting the engine")

    def _set_step(self, step: str) -> None:
        self._step, self._step_since = step, time.monotonic()
        self._ticker.start()
        self._tick()

    def _tick(self) -> None:
        text = (f"{self._step[:1].upper()}{self._step[1:]}… "
                f"{format_duration(time.monotonic() - self._step_since)}")
        self.status_label.setText(f"{self._prefix}: {text}" if self._prefix else text)

    def follow_cpu(self, pid: int | None) -> None:
        """Say when the worker `pid` gets little CPU because other processes take it (its
        first step's build on a busy machine looked dead for minutes: issue 30)."""
        self._cpu = None if pid is None else CpuShareSampler(pid)
        if self._cpu is not None:
            self._cpu.sample()
            self._cpu_timer.start()

    def _sample_cpu(self) -> None:
        share = self._cpu.sample() if self._cpu is not None else None
        if share is not None and share.contended:
            self.diagnosis_label.set_verdict(share.text())
        elif share is not None:
            self.diagnosis_label.set_verdict(self._verdict)

    def run_ended(self) -> None:
        """The worker is gone, whatever it said: no step goes on being counted."""
        self._end_steps()
        self._stop_following_cpu()

    def _stop_following_cpu(self) -> None:
        self._cpu_timer.stop()
        self._cpu = None
        self.diagnosis_label.set_verdict(self._verdict)

    def _end_steps(self) -> None:
        self._ticker.stop()
        self._step = ""

    def handle_event(self, event: Event) -> None:
        if isinstance(event, SetupProgress):
            self._set_step(event.step)
            return
        if isinstance(event, BatchEnd | RunFinished | RunFailed):
            self._end_steps()
        if isinstance(event, RunStarted):
            if event.initial_epoch == 0 or self._started is None:
                self.reset()
            self._started = event
        if isinstance(event, RunStarted | BatchEnd | EpochEnd):
            self.progress.update(event)
            self._show(now=event.t)
        elif isinstance(event, Diagnosed):
            self._verdict = event.text  # the same words as the terminal
            self.diagnosis_label.set_verdict(event.text)
        elif isinstance(event, RunFinished):
            self._on_finished(event)
        elif isinstance(event, RunFailed):
            self.epoch_eta_label.setText("failed")
            self.total_eta_label.setText("failed")
        # Once the epochs are over, the run's work is mostly its export checks, processes
        # that the warm starter forks (not the worker's children): counted as others, they
        # made a finishing run "get 0 % of a core" (issue 30).
        if (isinstance(event, RunFinished | RunFailed)
                or isinstance(event, EpochEnd) and self.progress.done):
            self._stop_following_cpu()

    def _show(self, now: float) -> None:
        p = self.progress
        epoch = min(p.epoch + 1, p.epochs) if p.epochs else 0
        self.epoch_label.setText(f"Epoch {epoch}/{p.epochs}")
        steps = p.steps if p.done else p.step
        self._set_bar(self.epoch_bar, p.epoch_fraction,
                      f"{steps}/{p.steps} steps" if p.steps else "")
        self._set_bar(self.total_bar, p.total_fraction)
        if p.done:  # the epochs are over; the test set and the exports are not
            self.epoch_eta_label.setText("done")
            self.total_eta_label.setText("finishing…")
        else:
            self.epoch_eta_label.setText(f"ETA {format_duration(p.epoch_eta(now))}")
            self.total_eta_label.setText(f"ETA {format_duration(p.total_eta(now))}")
        if self._started is not None and not self._step:
            self.status_label.setText(status_text(self._started, p.samples_per_s))

    def _on_finished(self, event: RunFinished) -> None:
        p = self.progress
        if event.status in (RunStatus.COMPLETED, RunStatus.EARLY_STOPPED):
            self._set_bar(self.epoch_bar, 1.0, f"{p.steps}/{p.steps} steps" if p.steps else "")
            self._set_bar(self.total_bar, 1.0)
            self.epoch_label.setText(f"Epoch {event.epochs_done}/{p.epochs}")
            done = ("done" if event.status is RunStatus.COMPLETED
                    else f"stopped early after epoch {event.epochs_done}")
            self.epoch_eta_label.setText("done")
            self.total_eta_label.setText(done)
        else:
            if event.status is RunStatus.STOPPED and p.step and not p.done:
                self._discarded(event.epochs_done)
            self.epoch_eta_label.setText(event.status.value)
            self.total_eta_label.setText(event.status.value)

    def _discarded(self, epochs_done: int) -> None:
        """A stop mid-epoch: the steps of that epoch are not kept (a resume trains it again
        from its start), so the bars say so instead of a complete-looking epoch."""
        p = self.progress
        self._set_bar(self.epoch_bar, p.epoch_fraction, f"{p.step}/{p.steps} steps, discarded")
        self._set_bar(self.total_bar, epochs_done / p.epochs if p.epochs else 0.0,
                      f"{epochs_done} of {p.epochs} epochs kept")
        self.status_label.setText(
            f"Stopped in epoch {p.epoch + 1}: its {p.step} steps are not kept; a resume "
            f"trains from epoch {epochs_done + 1}.")

    @staticmethod
    def _set_bar(bar: QProgressBar, fraction: float, detail: str = "") -> None:
        fraction = min(max(fraction, 0.0), 1.0)
        percent = f"{fraction * 100:.0f}%"
        text = f"{percent}  ·  {detail}" if detail else percent
        # QProgressBar.setValue repaints at once (synchronously), and in this window that
        # costs as much as a plot redraw (py-spy during a run): batch it into one update.
        bar.setUpdatesEnabled(False)
        bar.setValue(round(fraction * BAR_MAX))
        bar.setFormat(text)
        bar.setUpdatesEnabled(True)
        bar.setAccessibleDescription(text)
