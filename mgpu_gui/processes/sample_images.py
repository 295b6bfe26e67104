"""Child entry of the Evaluation view's cells: pictures of evaluated samples.

    python -m mgpu_gui.processes.sample_images --events-fd N --memory-mib M  < request.json

One `DrawRequest` as JSON on stdin; `SamplesDrawn` events as JSON lines on the
inherited pipe `N`, a chunk of pictures at a time, the last one `final`; or a
`SamplesDrawFailed`. It decodes the user's image files and arrays, so it runs
apart from the GUI, without TensorFlow, started and memory-capped as
processes/capped.py says.
"""

from __future__ import annotations

import sys

from mgpu_gui.core.evaluation.samples import DrawRequest, draw_samples
from mgpu_gui.core.events import Event, SamplesDrawFailed, SamplesDrawn
from mgpu_gui.core.plain import from_plain
from mgpu_gui.processes.capped import beyond_the_cap, serve
from mgpu_gui.processes.failure import failure_of


def answer(request: DrawRequest, emit, memory_mib: int) -> Event:
    try:
        draw_samples(request, lambda first, pngs: emit(SamplesDrawn(first, pngs, False)))
    except MemoryError:
        return SamplesDrawFailed(beyond_the_cap(memory_mib), "MemoryError", user_error=True)
    except Exception as error:  # a UserError says what to fix; anything else is a bug
        return failure_of(error, SamplesDrawFailed)
    return SamplesDrawn(len(request.picks), [], True)


def main(argv: list[str] | None = None) -> int:
    return serve("mgpu_gui.processes.sample_images",
                 lambda data: from_plain(DrawRequest, data), answer, argv)


if __name__ == "__main__":
    sys.exit(main())
