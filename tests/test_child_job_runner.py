"""ChildJobRunner's partial results: in order and before the outcome, and none from a
job a newer start cancelled (the Data view, a cell's pictures and the augmentation
preview rely on it)."""

from __future__ import annotations

import threading

from mgpu_gui.gui.jobs.child_job import ChildJobRunner


class _Job:
    """Reports its parts once released, then returns its name."""

    def __init__(self, name: str, report, parts: int) -> None:
        self.name, self.report, self.parts = name, report, parts
        self.release = threading.Event()

    def run(self) -> str:
        self.release.wait(10)
        for part in range(self.parts):
            self.report(f"{self.name}{part}")
        return self.name

    def cancel(self) -> None:
        self.release.set()


def test_reports_of_the_latest_job_only_in_order_before_its_outcome(qtbot):
    runner = ChildJobRunner()
    seen: list[str] = []
    runner.reported.connect(seen.append)
    runner.finished.connect(lambda outcome: seen.append(f"done {outcome}"))
    jobs: list[_Job] = []

    def make(name: str):
        def build(report) -> _Job:
            jobs.append(_Job(name, report, 3))
            return jobs[-1]
        return build

    runner.start_reporting(make("old"))
    runner.start_reporting(make("new"))  # cancels "old": it reports and ends, unheard
    jobs[1].release.set()
    with qtbot.waitSignal(runner.finished, timeout=5000):
        pass
    assert seen == ["new0", "new1", "new2", "done new"]
    runner.shutdown()
