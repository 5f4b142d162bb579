"""Image observations and states as small JPEG frames the page can show (data URLs)."""

from __future__ import annotations

import base64
import io
from typing import Final

import numpy as np
from PIL import Image

MAX_FRAMES: Final = 120
"""Most frames kept per image stream of an episode (evenly spaced over its rows); the page
shows the nearest kept frame while the timeline is scrubbed."""
FRAMES_PER_EPISODE: Final = 600
"""Most frames of all image streams of one episode together (20 pistons get 28 frames each):
opening an episode encodes them, about 2 ms and 4 kB each."""
FRAME_SIDE: Final = 200
"""Longest side of a frame on the page, in pixels (frames are shrunk to it, never grown)."""
FRAME_QUALITY: Final = 70
"""JPEG quality of the frames (small files; the page shows them small)."""


def frame_rows(rows: int, max_frames: int = MAX_FRAMES) -> np.ndarray:
    """Which of ``rows`` observation rows keep a frame: all up to ``max_frames``, else
    ``max_frames`` evenly spaced ones (the first and the last included)."""
    if max_frames <= 0 or rows <= 0:
        return np.zeros(0, dtype=np.int64)
    if rows <= max_frames:
        return np.arange(rows, dtype=np.int64)
    return np.unique(np.linspace(0, rows - 1, max_frames).round().astype(np.int64))


def frames(images: np.ndarray, rows: np.ndarray, side: int = FRAME_SIDE) -> list[str]:
    """The images at ``rows`` (``(H, W)`` or ``(H, W, C)`` uint8 each) as JPEG data URLs."""
    return [jpeg_data_url(np.asarray(images[row]), side) for row in rows.tolist()]


def jpeg_data_url(image: np.ndarray, side: int = FRAME_SIDE) -> str:
    """One image as a ``data:image/jpeg;base64,...`` URL, shrunk to ``side`` pixels at most."""
    if image.ndim == 3 and image.shape[2] == 1:
        image = image[:, :, 0]
    if image.ndim == 3 and image.shape[2] == 4:
        image = image[:, :, :3]
    picture = Image.fromarray(np.ascontiguousarray(image.astype(np.uint8)))
    factor = max(picture.size) // side
    if factor > 1:  # box-average by a whole factor first: a fraction of a full resize's cost
        picture = picture.reduce(factor)
    picture.thumbnail((side, side), Image.Resampling.BILINEAR)
    buffer = io.BytesIO()
    picture.save(buffer, format="JPEG", quality=FRAME_QUALITY)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
