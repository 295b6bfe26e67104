"""Child entry of the augmentation preview: a few images of a folder, and their variants.

    python -m mgpu_gui.processes.augment_preview --events-fd N --memory-mib M  < request.json

One `PreviewRequest` as JSON on stdin; an `AugmentPreviewRow` per image as JSON lines
on the inherited pipe `N`, then `AugmentPreviewDone`; or an `AugmentPreviewFailed`.
The images are picked before TensorFlow starts, so a folder without images is said
at once; the variants come from the training's own layers (engine/augmentation.py).
It decodes the user's files, so its memory is capped as processes/capped.py says,
from after TensorFlow's start: its address space is not the files'.
"""

from __future__ import annotations

import sys

from mgpu_gui.core.augment_preview import PreviewRequest, pick_images
from mgpu_gui.core.children.limits import cap_memory
from mgpu_gui.core.events import AugmentPreviewDone, AugmentPreviewFailed, Event
from mgpu_gui.core.plain import from_plain
from mgpu_gui.processes.capped import beyond_the_cap, serve
from mgpu_gui.processes.failure import failure_of


def answer(request: PreviewRequest, emit, memory_mib: int) -> Event:
    try:
        picks = pick_images(request)
        from mgpu_gui.engine import augmentation

        cap_memory(memory_mib << 20)
        augmentation.preview(request, picks, emit)
    except MemoryError:
        return AugmentPreviewFailed(beyond_the_cap(memory_mib), "MemoryError", user_error=True)
    except Exception as error:  # a UserError says what to fix; anything else is a bug
        return failure_of(error, AugmentPreviewFailed)
    return AugmentPreviewDone(len(picks))


def main(argv: list[str] | None = None) -> int:
    return serve("mgpu_gui.processes.augment_preview",
                 lambda data: from_plain(PreviewRequest, data), answer, argv, cap=False)


if __name__ == "__main__":
    sys.exit(main())
