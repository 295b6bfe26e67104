"""Child entry that reads a dataset in full: NaN/Inf, labels, classes, every image.

    python -m mgpu_gui.processes.data_check --events-fd N --memory-mib M  < request.json

One `ContentRequest` as JSON on stdin; `DataCheckProgress` events (also the
parent's heartbeat), then `DataChecked` or `DataCheckFailed`, as JSON lines on
the inherited pipe `N`. Short-lived, one per check: a check reads gigabytes and
takes seconds, which the warm file inspector (2 s per request, as-you-type
answers) must not wait behind. No TensorFlow: numpy and Pillow, the training
pipeline's own image decoder. Its address space is capped at its imports plus
M MiB (arrays are streamed in chunks, so only a damaged file needs more).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from mgpu_gui.core.children.limits import cap_memory
from mgpu_gui.core.datasets.content import ContentRequest, check_content
from mgpu_gui.core.errors import UserError
from mgpu_gui.core.events import DataCheckFailed, DataCheckProgress, Event


def answer(request: ContentRequest, emit, memory_mib: int) -> Event:
    """The check's outcome; every failure becomes a `DataCheckFailed`."""
    try:
        return check_content(request, lambda what, done, total: emit(
            DataCheckProgress(what, done, total)))
    except UserError as error:
        return DataCheckFailed(str(error), type(error).__name__, user_error=True)
    except MemoryError:
        return DataCheckFailed(
            f"reading the data needs more than {memory_mib} MiB of memory beyond a chunk of "
            "each array, so a file is damaged or not a dataset (e.g. a zip bomb).",
            "MemoryError", user_error=True)
    except Exception as error:  # a damage the readers did not expect, or a bug
        return DataCheckFailed(f"{type(error).__name__}: {error}", type(error).__name__,
                               user_error=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mgpu_gui.processes.data_check")
    parser.add_argument("--events-fd", type=int, required=True)
    parser.add_argument("--memory-mib", type=int, required=True)
    args = parser.parse_args(argv)
    os.set_inheritable(args.events_fd, False)
    data = json.loads(sys.stdin.read())
    request = ContentRequest(tuple(data["sources"]), data["classifier"], data["why"])
    cap_memory(args.memory_mib << 20)
    with os.fdopen(args.events_fd, "w", buffering=1, encoding="utf-8") as events:

        def emit(event: Event) -> None:
            events.write(event.to_json() + "\n")

        emit(answer(request, emit, args.memory_mib))
    return 0


if __name__ == "__main__":
    sys.exit(main())
