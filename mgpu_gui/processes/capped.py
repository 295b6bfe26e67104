"""What the short-lived, memory-capped data children share: how they start and answer.

    python -m mgpu_gui.processes.<child> --events-fd N --memory-mib M  < request.json

The data check and the Data view read a user's dataset for seconds. Each reads
one request as JSON on stdin, caps its address space at its imports plus M MiB
(arrays are streamed a chunk at a time, so only a damaged file needs more), and
writes its events as JSON lines to the inherited pipe `N`, its answer last.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from mgpu_gui.core.children.limits import cap_memory
from mgpu_gui.core.events import Event

R = TypeVar("R")
Emit = Callable[[Event], None]


def serve(prog: str, read_request: Callable[[Any], R],
          answer: Callable[[R, Emit, int], Event], argv: list[str] | None = None,
          cap: bool = True) -> int:
    """Parse the child's arguments, read its request, cap its memory, emit `answer(...)`.

    `cap=False`: `answer` caps it, once what it loads first (TensorFlow) is in."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--events-fd", type=int, required=True)
    parser.add_argument("--memory-mib", type=int, required=True)
    args = parser.parse_args(argv)
    os.set_inheritable(args.events_fd, False)
    request = read_request(json.loads(sys.stdin.read()))
    if cap:
        cap_memory(args.memory_mib << 20)
    with os.fdopen(args.events_fd, "w", buffering=1, encoding="utf-8") as events:

        def emit(event: Event) -> None:
            events.write(event.to_json() + "\n")

        emit(answer(request, emit, args.memory_mib))
    return 0


def beyond_the_cap(memory_mib: int) -> str:
    """Why a read hit the memory cap, for the user."""
    return (f"reading the data needs more than {memory_mib} MiB of memory beyond a chunk of "
            "each array, so a file is damaged or not a dataset (e.g. a zip bomb).")
