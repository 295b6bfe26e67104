"""What the augmentation preview asks its child for, and which images it shows.

The run setup's "Preview…" shows a few real images of the picked folder, each as
training decodes and resizes it and then as a few random variants made by the
training's own augmentation layers (`engine/augmentation.py`), in a short-lived
child (`processes/augment_preview.py`). The images are picked here, TensorFlow-free,
so a folder without images is refused before TensorFlow starts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from mgpu_gui.core.datasets.inspection import list_images
from mgpu_gui.core.errors import DataError


@dataclass(frozen=True)
class PreviewRequest:
    """`images` of `folder` at `image_size` (height, width), `variants` of each under `spec`,
    thumbnails `px` on their longer side (device pixels); `seed` picks images and variants."""

    folder: str
    image_size: tuple[int, int]
    spec: str
    seed: int = 0
    images: int = 4
    variants: int = 5
    px: int = 96

    def same_but_seed(self, other: PreviewRequest | None) -> bool:
        return other is not None and replace(other, seed=self.seed) == self


@dataclass(frozen=True)
class Pick:
    path: str
    label: str  # its class


def pick_images(request: PreviewRequest) -> list[Pick]:
    """`request.images` files, one class after another (classes and files in a seeded
    order), so a few images show as many classes as they can; a DataError when the folder
    holds no images."""
    folder = Path(os.path.expanduser(request.folder))
    if not folder.is_dir():
        raise DataError(f"{folder} is not a folder; choose the image folder (one subfolder "
                        "per class) as the data.")
    listing = list_images(folder)
    rng = np.random.default_rng(request.seed)
    members: dict[int, list[int]] = {}
    for index, label in enumerate(listing.labels):
        members.setdefault(label, []).append(index)
    queues = [[int(i) for i in rng.permutation(members[label])]
              for label in rng.permutation(sorted(members))]
    picks: list[Pick] = []
    while len(picks) < request.images and any(queues):
        for queue in queues:
            if queue and len(picks) < request.images:
                index = queue.pop()
                picks.append(Pick(listing.paths[index],
                                  listing.class_names[listing.labels[index]]))
    return picks


__all__ = ["Pick", "PreviewRequest", "pick_images"]
