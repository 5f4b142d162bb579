"""JPEG frames: which leaves are JPEG-encoded, encoding them once, and carrying the bytes.

Minari JPEG-encodes image-like observations frame by frame (PIL, default quality). The
recorder's journal writer encodes them when it writes the journal record, and
``create_dataset`` copies those bytes into the dataset (:class:`JpegFrames`) instead of
decoding and encoding again: encoding is the costliest step of recording an image env.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from gymnasium import spaces

from marl_minari.format import layout
from marl_minari.format.spaces import is_image_space, leaf_spaces

if TYPE_CHECKING:
    from marl_minari.format.spec import MultiAgentSpec


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


@dataclass(frozen=True)
class FrameRows:
    """An image leaf's rows as the env handed them out, not stacked yet.

    A recorder hands these to the journal writer for leaves it stores as JPEG: each row is
    encoded on its own, so stacking them first (hundreds of MB per image episode) would be a
    copy made only to be read once, and on the recorder's thread. The rows were checked
    against the space's shape when the episode ended; ``None`` rows are the fill value.
    """

    dtype: np.dtype
    shape: tuple[int, ...]
    rows: Sequence[Any]

    def __len__(self) -> int:
        return len(self.rows)

    def row(self, index: int) -> np.ndarray:
        """Row ``index`` as an array of the leaf's dtype (zeros for a ``None`` row)."""
        value = self.rows[index]
        if value is None:
            return np.zeros(self.shape[1:], dtype=self.dtype)
        return np.asarray(value, dtype=self.dtype)

    def stack(self) -> np.ndarray:
        """The rows stacked (for a consumer that needs the whole array)."""
        out = np.empty(self.shape, dtype=self.dtype)
        for index in range(len(self)):
            out[index] = self.row(index)
        return out


def jpeg_paths(spec: MultiAgentSpec, jpeg_encoding: bool) -> frozenset[str]:
    """Leaves (HDF5 paths inside an episode group) stored as JPEG frames.

    The one rule the recorder, the readers and the check share (docs/format.md, *JPEG-encoded
    leaves*): Minari's image-like observation and action leaves when ``jpeg_encoding`` is on
    (:func:`image_leaf_paths`), and the global state when its ``state_encoding`` is
    ``"jpeg"``, whatever ``jpeg_encoding`` says. No other info leaf is ever encoded.
    """
    paths = set(image_leaf_paths(spec.observation_space, spec.action_space, jpeg_encoding))
    if spec.state_encoding == "jpeg":
        paths.add(layout.STATE_PATH)
    return frozenset(paths)


def image_leaf_paths(observation_space: spaces.Space, action_space: spaces.Space,
                     jpeg_encoding: bool) -> frozenset[str]:
    """Observation and action leaves Minari stores as JPEG frames (also in plain datasets).

    ``observation_space`` and ``action_space`` are the dataset's own (metadata.json's); the
    paths are ``observations/...`` and ``actions/...`` as in an episode group.
    """
    if not jpeg_encoding:
        return frozenset()
    return frozenset(path
                     for field, space in (("observations", observation_space),
                                          ("actions", action_space))
                     for path, leaf in leaf_spaces(space, field) if is_image_space(leaf))


def encode_frame(frame: np.ndarray) -> np.ndarray:
    """One frame as the bytes of a JPEG file (as Minari encodes it)."""
    from PIL import Image

    if frame.ndim == 3 and not frame.flags.c_contiguous and (
            frame.transpose(1, 0, 2).flags.c_contiguous):
        # A transposed view (pygame surfaces are column-major: PettingZoo's butterfly envs
        # hand out such views): PIL transposes pixels blocked and in C, 2x faster than the
        # copy numpy would make for PIL first. The JPEG bytes are the same.
        image = Image.fromarray(frame.transpose(1, 0, 2)).transpose(Image.Transpose.TRANSPOSE)
    else:
        image = Image.fromarray(frame)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG")
    return np.frombuffer(buffer.getbuffer(), dtype=np.uint8)


def encode(leaf: np.ndarray | FrameRows) -> JpegFrames:
    """Every row of ``leaf`` JPEG-encoded."""
    if isinstance(leaf, FrameRows):
        frames = [encode_frame(leaf.row(i)) for i in range(len(leaf))]
    else:
        frames = [encode_frame(row) for row in leaf]
    return JpegFrames(leaf.dtype, tuple(leaf.shape), frames)
