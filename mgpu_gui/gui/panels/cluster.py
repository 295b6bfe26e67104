"""The Cluster tab: the workers of a multi-worker run, as TensorFlow gathered them.

Filled from the chief's `ClusterFormed` event (one collective at the start:
each worker's host and devices); the run's end sets every worker's state. No
protocol of our own: what the chief's TensorFlow knows is all it shows.
"""

from __future__ import annotations

from PySide6.QtWidgets import (
    QLabel,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from mgpu_gui.core.events import ClusterFormed, Event, RunFailed, RunFinished, RunStarted
from mgpu_gui.gui.widgets.tables import read_only_table

COLUMNS = ("Worker", "Address", "Host", "Devices", "State")


class ClusterPanel(QWidget):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setAccessibleName("Cluster")
        self.summary = QLabel("No multi-worker run yet.", self, wordWrap=True)
        self.summary.setAccessibleName("Cluster summary")
        self.table = read_only_table(COLUMNS, "Cluster workers")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.summary)
        layout.addWidget(self.table, 1)
        self.workers: list[dict] = []

    def handle_event(self, event: Event) -> None:
        if isinstance(event, ClusterFormed):
            self.workers = list(event.workers)
            self._fill("joined")
            replicas = sum(int(w.get("replicas", 0)) for w in self.workers)
            self.summary.setText(f"{len(self.workers)} workers, {replicas} replicas in all, as "
                                 f"TensorFlow gathered them at the start (this machine is "
                                 f"worker {event.this_worker}).")
        elif isinstance(event, RunStarted) and self.workers:
            self._fill("training")
        elif isinstance(event, RunFinished) and self.workers:
            self._fill(event.status.value.replace("_", " "))
        elif isinstance(event, RunFailed) and self.workers:
            self._fill("stopped")
            self.summary.setText(event.message)

    def _fill(self, state: str) -> None:
        self.table.setRowCount(len(self.workers))
        for row, worker in enumerate(self.workers):
            index = int(worker["index"])
            values = (f"{index}" + (" (chief)" if worker.get("chief") else ""),
                      str(worker.get("address", "")), str(worker.get("host", "")),
                      "; ".join(worker.get("devices", [])), state)
            for column, text in enumerate(values):
                item = QTableWidgetItem(text)
                item.setToolTip(text)
                self.table.setItem(row, column, item)
