"""Follow a run another process supervises (a queued job, another window, a terminal).

Its worker reports to that process, not to this window; the store is where
both meet. Once a second the follower reads the rows recorded since the last
look and hands them on as events, until the run is no longer running.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, QTimer, Signal

from mgpu_gui.core.events import Event
from mgpu_gui.core.runs.store import RunState, RunStore

POLL_MS = 1_000


class RunFollower(QObject):
    events = Signal(list)  # BatchEnd/EpochEnd events recorded since the last look
    updated = Signal(object)  # the RunRecord, as of this look
    ended = Signal(object)  # the RunRecord once it stopped running

    def __init__(self, store: RunStore, parent: QObject | None = None):
        super().__init__(parent)
        self.store = store
        self.run_id: int | None = None
        self._after = 0.0
        self._timer = QTimer(self)
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self._look)

    def follow(self, run_id: int, after: float) -> None:
        """Follow from `after` (the time of the last event already shown)."""
        self.run_id, self._after = run_id, after
        self._timer.start()

    def stop(self) -> None:
        self._timer.stop()
        self.run_id = None

    @property
    def following(self) -> bool:
        return self._timer.isActive()

    def _look(self) -> None:
        if self.run_id is None:
            return
        try:
            record = self.store.get(self.run_id)
            events = self.store.series_events(self.run_id, after=self._after)
        except Exception:  # deleted meanwhile, or the store is busy: stop following
            self.stop()
            return
        if events:
            self._after = max(event.t for event in events)
            self.events.emit(events)
        self.updated.emit(record)
        if record.status is not RunState.RUNNING:
            self.stop()
            self.ended.emit(record)


def last_time(events: list[Event]) -> float:
    """Where to follow on from, after showing `events`."""
    return max((event.t for event in events), default=0.0)
