"""Reading image files without TensorFlow: the data check, the Data view, a cell's pictures.

Pillow, not TensorFlow, so these run in light child processes (no 2.4 s
TensorFlow import), and a failure names its file. The result matches
`tf.io.decode_image(..., channels=3, expand_animations=False)`, the decoder of
the TensorFlow children (training, evaluate, predict: `engine.pipeline`): 8-bit
RGB, the first frame of an animation, alpha dropped, 16-bit samples cut to 8
bits. Measured: PNG, GIF and BMP decode to the same pixels; JPEG (RGB, grey,
CMYK) within 4 levels (the two libraries upsample chroma differently), so a
file the check decodes is one training decodes, and the pictures shown are the
ones trained on, but pixel-exact comparisons go through TensorFlow's decoder.
"""

from __future__ import annotations

import base64
import io
import os
import re
from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageFile

from mgpu_gui.core.errors import DataError

# Truncated files must fail, never decode padded with grey (Pillow's opt-in default).
ImageFile.LOAD_TRUNCATED_IMAGES = False
_SIXTEEN_BIT = {"I;16", "I;16L", "I;16B", "I;16N", "I"}


class CorruptImageError(DataError):
    """An image file that cannot be decoded; the message names it.

    One line: inside the training pipeline it travels in TensorFlow's error text,
    which `engine.failures` reads back.
    """


def decode_image(path: str | os.PathLike[str]) -> np.ndarray:
    """The image at `path` as uint8 (height, width, 3), or a CorruptImageError."""
    try:
        with Image.open(path) as image:
            image.load()
            return _rgb(image)
    except Exception as error:  # Pillow raises OSError, SyntaxError, ValueError, zlib...
        raise corrupt(path, error) from error


def resized(pixels: np.ndarray, size: Sequence[int]) -> np.ndarray:
    """Decoded uint8 pixels (height, width, channels) resized to `size` (height, width) as
    the tf.data pipeline does it (`tf.image.resize`: bilinear, half-pixel centres, no
    antialiasing; then rounded back to uint8), for the Python pipeline. Measured: the
    same pixels as TensorFlow's, enlarged and reduced."""
    rows, cols = _bilinear(pixels.shape[0], int(size[0])), _bilinear(pixels.shape[1], int(size[1]))
    image = pixels.astype(np.float32)
    x_lerp = cols[2][None, :, None]
    top = image[rows[0]]
    bottom = image[rows[1]]
    top = top[:, cols[0]] + (top[:, cols[1]] - top[:, cols[0]]) * x_lerp
    bottom = bottom[:, cols[0]] + (bottom[:, cols[1]] - bottom[:, cols[0]]) * x_lerp
    out = top + (bottom - top) * rows[2][:, None, None]
    return np.clip(np.round(out), 0, 255).astype(np.uint8)


def _bilinear(source: int, target: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each output position's two source positions and the weight of the second, with
    half-pixel centres (TensorFlow's `compute_interpolation_weights`)."""
    centre = (np.arange(target, dtype=np.float32) + 0.5) * np.float32(source / target) - 0.5
    floor = np.floor(centre)
    lower = np.maximum(floor, 0).astype(np.intp)
    upper = np.minimum(np.ceil(centre), source - 1).astype(np.intp)
    return lower, upper, (centre - floor).astype(np.float32)


def check_header(path: str | os.PathLike[str]) -> tuple[int, int]:
    """Open the file far enough to know its format and size (no pixels decoded);
    return that size as (width, height)."""
    try:
        with Image.open(path) as image:
            if image.width < 1 or image.height < 1:
                raise ValueError(f"it is {image.width}x{image.height} pixels")
            return image.width, image.height
    except Exception as error:
        raise corrupt(path, error) from error


def drawable(sample_shape: Sequence[int]) -> bool:
    """Whether array samples of this shape are pictures: 2-D, or 3-D with 1, 3 or 4
    channels."""
    return len(sample_shape) == 2 or (len(sample_shape) == 3 and sample_shape[-1] in (1, 3, 4))


def array_image(sample: np.ndarray) -> Image.Image:
    """An array sample (a `drawable` shape) drawn as imshow would: its own range stretched
    to black..white."""
    values = np.nan_to_num(sample.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    if values.ndim == 3 and values.shape[-1] == 1:
        values = values[..., 0]
    span = values.max() - values.min()
    scaled = (values - values.min()) / span * 255 if span else np.zeros_like(values)
    image = Image.fromarray(scaled.round().astype(np.uint8))
    return image.convert("RGB") if image.mode == "RGBA" else image


def thumbnail_png(image: Image.Image, px: int) -> str:
    """`image` fitted into `px` on its longer side (small ones enlarged with crisp pixels),
    as base64 PNG: plain text for a child's JSON events, decoded by QImage in the GUI."""
    scale = px / max(image.size)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    resample = Image.Resampling.NEAREST if scale > 1 else Image.Resampling.BILINEAR
    buffer = io.BytesIO()
    image.resize(size, resample).save(buffer, "PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


# TensorFlow's wrapping of a decoder's message: "{{function_node __wrapped__DecodeImage_…}}"
# before it, "[Op:DecodeImage]" after.
_DECODER_NOISE = re.compile(r"\{\{function_node [^}]*\}\}|\[Op:\w+\]")
REASON_CHARS = 240


def corrupt(path: str | os.PathLike[str], error: BaseException) -> CorruptImageError:
    """The decoder's own words, without TensorFlow's op names around them, and cut at a
    word, not mid-list ("One of JPEG, JPEG )")."""
    reason = " ".join(_DECODER_NOISE.sub(" ", str(error)).split()) or type(error).__name__
    if len(reason) > REASON_CHARS:
        reason = reason[:REASON_CHARS].rsplit(" ", 1)[0] + " …"
    return CorruptImageError(
        f"the image {os.fspath(path)} cannot be decoded ({reason}); replace it with a "
        "readable image or delete it.")


def _rgb(image: Image.Image) -> np.ndarray:
    if image.mode in _SIXTEEN_BIT:  # 16-bit grey: keep the high byte, as TensorFlow does
        grey = (np.asarray(image).astype(np.uint32) >> 8).clip(0, 255).astype(np.uint8)
        return np.repeat(grey[..., None], 3, axis=-1)
    if image.mode == "P":  # via RGBA: Pillow warns when a palette's transparency goes at once
        image = image.convert("RGBA")
    if image.mode != "RGB":
        image = image.convert("RGB")
    return np.asarray(image, dtype=np.uint8)
