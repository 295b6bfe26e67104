"""The run's augmentation as Keras preprocessing layers, in the training pipeline only.

Applied a batch at a time after the cache and the shuffle (each epoch sees new
variations of the cached images), on the pixels' own 0-255 range before the
rescale, on the host's CPU in tf.data: the model, and so the exported file,
carries none of it, and validation, test and evaluation see the images as they are.
`preview` shows what these layers do to a few of the user's images, for the run
setup's preview (processes/augment_preview.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import keras
import numpy as np
import tensorflow as tf
from PIL import Image

from mgpu_gui.core.augment import Augmentation, parse_augment
from mgpu_gui.core.augment_preview import Pick, PreviewRequest
from mgpu_gui.core.datasets import images
from mgpu_gui.core.events import AugmentPreviewRow, Event
from mgpu_gui.engine.pipeline import decode_file, resized

Finish = Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]]
PIXELS = (0.0, 255.0)


def layers(augmentation: Augmentation, seed: int | None) -> list[keras.layers.Layer]:
    """One layer per active transform, in `DEFAULTS`' order, each with its own seed."""
    made = {
        "flip": lambda s: keras.layers.RandomFlip("horizontal", seed=s),
        "rotate": lambda s: keras.layers.RandomRotation(augmentation.rotate, seed=s),
        "zoom": lambda s: keras.layers.RandomZoom(augmentation.zoom, seed=s),
        "translate": lambda s: keras.layers.RandomTranslation(
            augmentation.translate, augmentation.translate, seed=s),
        "contrast": lambda s: keras.layers.RandomContrast(
            augmentation.contrast, value_range=PIXELS, seed=s),
        "brightness": lambda s: keras.layers.RandomBrightness(
            augmentation.brightness, value_range=PIXELS, seed=s),
    }
    return [made[name](None if seed is None else seed + index)
            for index, name in enumerate(augmentation.active)]


def training_finish(finish: Finish, spec: str, seed: int | None) -> Finish:
    """`finish` (an image folder's uint8 batch to the model's float32) with the spec's
    transforms before it; `finish` itself when the spec is empty."""
    chosen = layers(parse_augment(spec), seed)
    if not chosen:
        return finish

    def augmented(images: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        x = tf.cast(images, tf.float32)
        for layer in chosen:
            x = layer(x, training=True)
        return finish(x, labels)

    return augmented


def preview(request: PreviewRequest, picks: Sequence[Pick], emit: Callable[[Event], None]
            ) -> None:
    """A row per pick: the image as training decodes and resizes it, then
    `request.variants` variants made by `training_finish` itself, as thumbnails; a row
    with the reason for a file that cannot be decoded."""
    augment = training_finish(lambda x, y: (x, y), request.spec, request.seed)
    for index, pick in enumerate(picks):
        name = os.path.basename(pick.path)
        try:
            image = resized(decode_file(pick.path), request.image_size)
        except images.CorruptImageError as error:
            emit(AugmentPreviewRow(index, len(picks), pick.label, name, [], str(error)))
            continue
        # One batch of copies: each layer draws its random factors per image of a batch.
        varied, _ = augment(tf.repeat(image[None], request.variants, axis=0),
                            tf.zeros(request.variants))
        pixels = [image.numpy(), *np.clip(np.round(np.asarray(varied)), 0, 255).astype(np.uint8)]
        emit(AugmentPreviewRow(index, len(picks), pick.label, name, [
            images.thumbnail_png(Image.fromarray(p), request.px) for p in pixels]))
