"""The augmentation preview's child answer without the child (TensorFlow, seconds): for
tests of the dialog and the layout probe. Patch it over
`mgpu_gui.gui.jobs.augment_preview.AugmentPreviewJob`."""

from __future__ import annotations

from PIL import Image

from mgpu_gui.core.augment_preview import PreviewRequest
from mgpu_gui.core.datasets import images
from mgpu_gui.core.events import AugmentPreviewDone, AugmentPreviewRow


class CannedJob:
    """A row of plain pictures per image, `error` for the last one when set; the requests
    made are kept in `requests`."""

    requests: list[PreviewRequest] = []
    error = ""

    def __init__(self, request: PreviewRequest, on_row) -> None:
        self.request, self.on_row = request, on_row
        CannedJob.requests.append(request)

    def run(self) -> AugmentPreviewDone:
        picture = Image.new("RGB", (8, 8), (200, 40, 40))
        total = self.request.images
        for index in range(total):
            if self.error and index == total - 1:
                self.on_row(AugmentPreviewRow(index, total, "cat", "broken.png", [], self.error))
                continue
            self.on_row(AugmentPreviewRow(
                index, total, f"class_{index}_with_a_long_folder_name", f"{index}.png",
                [images.thumbnail_png(picture, self.request.px)] * (1 + self.request.variants)))
        return AugmentPreviewDone(total)

    def cancel(self) -> None:
        pass
