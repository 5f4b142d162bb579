"""JPEG frames: which leaves are JPEG-encoded, encoding them once, and carrying the bytes.

Minari JPEG-encodes image-like observations frame by frame (PIL, default quality). The
recorder's journal writer encodes them when it writes the journal record, and
``create_dataset`` copies those bytes into the dataset (:class:`JpegFrames`) instead of
decoding and encoding again: encoding is the costliest step of recording an image env.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from marl_minari import layout
from marl_minari.spaces import is_image_space, leaf_spaces

if TYPE_CHECKING:
    from marl_minari.spec import MultiAgentSpec


class JpegFrames(NamedTuple):
    """The rows of one image leaf, each row a JPEG file's bytes.

    ``dtype`` and ``shape`` are those of the decoded leaf (all rows stacked).
    """

    dtype: np.dtype
    shape: tuple[int, ...]
    frames: Sequence[np.ndarray]

    def decode(self) -> np.ndarray:
        """The stacked pixels (lossy: what a reader of the dataset gets back)."""
        from PIL import Image

        out = np.empty(self.shape, dtype=self.dtype)
        for row, frame in enumerate(self.frames):
            out[row] = np.asarray(Image.open(io.BytesIO(frame.tobytes())))
        return out


def jpeg_paths(spec: MultiAgentSpec, jpeg_encoding: bool) -> frozenset[str]:
    """Leaves (HDF5 paths inside an episode group) stored as JPEG frames.

    Image-like observation and action leaves when ``jpeg_encoding`` is on (Minari's rule), and
    the global state when its ``state_encoding`` is ``"jpeg"``.
    """
    paths = set()
    if jpeg_encoding:
        for field, by_agent in (("observations", spec.observation_spaces),
                                ("actions", spec.action_spaces)):
            for agent, space in by_agent.items():
                for path, leaf in leaf_spaces(space, f"{field}/{agent}"):
                    if is_image_space(leaf):
                        paths.add(path)
    if spec.state_encoding == "jpeg":
        paths.add(layout.STATE_PATH)
    return frozenset(paths)


def encode_frame(frame: np.ndarray) -> np.ndarray:
    """One frame as the bytes of a JPEG file (as Minari encodes it)."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(frame).save(buffer, format="JPEG")
    return np.frombuffer(buffer.getbuffer(), dtype=np.uint8)


def encode(array: np.ndarray) -> JpegFrames:
    """Every row of ``array`` JPEG-encoded."""
    return JpegFrames(array.dtype, tuple(array.shape), [encode_frame(row) for row in array])
