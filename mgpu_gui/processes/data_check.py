"""Child entry that reads a dataset in full: NaN/Inf, labels, classes, every image.

    python -m mgpu_gui.processes.data_check --events-fd N --memory-mib M  < request.json

One `ContentRequest` as JSON on stdin; `DataCheckProgress` events (also the
parent's heartbeat), then `DataChecked` or `DataCheckFailed`, as JSON lines on
the inherited pipe `N` (processes/capped.py: also the memory cap). Short-lived,
one per check: a check reads gigabytes and takes seconds, which the warm file
inspector (2 s per request, as-you-type answers) must not wait behind. No
TensorFlow: numpy and Pillow, the training pipeline's own image decoder.
"""

from __future__ import annotations

import sys

from mgpu_gui.core.datasets.content import check_content
from mgpu_gui.core.datasets.content_request import ContentRequest
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.events import DataCheckFailed, DataCheckProgress, Event
from mgpu_gui.processes.capped import beyond_the_cap, serve


def answer(request: ContentRequest, emit, memory_mib: int) -> Event:
    """The check's outcome; every failure becomes a `DataCheckFailed`."""
    try:
        return check_content(request, lambda what, done, total: emit(
            DataCheckProgress(what, done, total)))
    except UserError as error:
        return DataCheckFailed(str(error), type(error).__name__, user_error=True)
    except MemoryError:
        return DataCheckFailed(beyond_the_cap(memory_mib), "MemoryError", user_error=True)
    except Exception as error:  # a damage the readers did not expect, or a bug
        return DataCheckFailed(f"{type(error).__name__}: {error}", type(error).__name__,
                               user_error=False)


def main(argv: list[str] | None = None) -> int:
    return serve("mgpu_gui.processes.data_check", lambda data: ContentRequest(
        tuple(data["sources"]), data["classifier"], data["why"], data["learns"]), answer,
        argv)


if __name__ == "__main__":
    sys.exit(main())
