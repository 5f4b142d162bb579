"""The episodes of a vault written by ``to_vault``, rebuilt exactly from its view and its
restoration arrays (:mod:`marl_minari.vaults.exact`), any run of episodes at a time."""

from __future__ import annotations

from typing import Any

import numpy as np

from marl_minari.errors import CorruptedDataError
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.storage.arrays import MultiAgentArrays

from .exact import ExactField, ExactSource, decode_json, restore_arrays
from .rows import check_actions
from .store import METADATA_FILE, VaultReader
from .structure import leaf_name
from .view_plan import ViewPlan


class RestoredVault:
    """Read access to the original dataset a ``to_vault`` vault holds.

    Args:
        reader: the vault.
        ours: its ``metadata.json["marl_minari"]`` record.
        spec: the original dataset's spec.
    """

    def __init__(self, reader: VaultReader, ours: dict[str, Any], spec: MultiAgentSpec) -> None:
        self.reader = reader
        self.plan = checked_plan(reader, ours, spec)
        self.spec = spec
        where = reader.path / METADATA_FILE
        try:
            self.exact = ExactSource(reader, [ExactField.from_dict(d) for d in ours["exact"]])
            total = int(ours["episodes"])
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptedDataError(f"{where}: marl_minari.exact or marl_minari.episodes is "
                                     f"not what to_vault writes ({exc!r}); the vault is "
                                     "damaged: convert the dataset again") from None
        head = self._fields(["episode/length", "episode/stream"], (0, total))
        self.lengths = head["episode/length"].astype(np.int64)
        self.streams = head["episode/stream"].astype(np.int64)
        self._stream_starts = _stream_starts(self.lengths, self.streams)
        self._step_starts = np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int64)
        planned = self.plan.keys()
        self._view_keys = [leaf.path for leaf in reader.leaves if leaf.path in planned]

    def attributes(self, e0: int, e1: int) -> list[tuple[int | None, dict[str, Any] | None]]:
        """Reset ``(seed, options)`` of episodes ``e0..e1-1``."""
        fields = self._fields(["episode/seed", "episode/has_seed", "episode/options"], (e0, e1))
        return [(int(seed) if has else None, decode_json(text) if text else None)
                for seed, has, text in zip(fields["episode/seed"].tolist(),
                                           fields["episode/has_seed"].tolist(),
                                           fields["episode/options"].tolist(), strict=True)]

    def read(self, e0: int, e1: int) -> MultiAgentArrays:
        """Episodes ``e0..e1-1`` as arrays."""
        source = self.exact
        s0, s1 = int(self._step_starts[e0]), int(self._step_starts[e1])
        episode_fields = source.read_fields(
            [f.field for f in source.fields if f.rows == "episode"], "episode", (e0, e1))
        row_fields = source.read_rows((s0, s1), (s0 + e0, s1 + e1))
        lengths = self.lengths[e0:e1]
        view = _read_view(self.reader, self._view_keys, self.streams[e0:e1],
                          self._stream_starts[e0:e1], lengths)
        try:
            arrays = restore_arrays(self.plan, self.spec, view, {**episode_fields, **row_fields},
                                    lengths, np.arange(e0, e1, dtype=np.int64))
        except KeyError as exc:  # a field the view needs is not among the listed arrays
            raise self._missing(exc) from None
        check_actions(self.spec, arrays.actions, arrays.acted, e0, lengths,
                      f"vault {self.reader.path}")
        return arrays


    def _fields(self, names: list[str], rows: tuple[int, int]) -> dict[str, np.ndarray]:
        found = self.exact.read_fields(names, "episode", rows)
        missing = [name for name in names if name not in found]
        if missing:
            raise self._missing(KeyError(missing[0]))
        return found

    def _missing(self, exc: KeyError) -> CorruptedDataError:
        return CorruptedDataError(
            f"{self.reader.path / METADATA_FILE}: marl_minari.exact lists no restoration array "
            f"{exc.args[0]!r}, which the dataset needs; the vault is damaged: convert the "
            "dataset again")


def checked_plan(reader: VaultReader, ours: dict[str, Any], spec: MultiAgentSpec) -> ViewPlan:
    """The view a ``to_vault`` vault records, checked against its arrays and dataset spec.

    Raises:
        CorruptedDataError: naming ``metadata.json`` and the key that disagrees.
    """
    where = reader.path / METADATA_FILE
    try:
        plan = ViewPlan.from_dict(ours["view"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptedDataError(f"{where}: marl_minari.view is not what to_vault writes "
                                 f"({exc!r}); the vault is damaged") from None
    if plan.agents != tuple(spec.possible_agents):
        raise CorruptedDataError(
            f"{where}: marl_minari.view.agents {list(plan.agents)} disagrees with the "
            f"dataset's agents {list(spec.possible_agents)} (marl_minari.minari_metadata); the "
            "vault is damaged: convert the dataset again")
    for path, (shape, dtype) in plan.keys().items():
        leaf = reader.leaf(path)
        if leaf is None or tuple(leaf.row_shape) != tuple(shape) or leaf.dtype != dtype:
            found = "no such array" if leaf is None else f"{leaf.row_shape} {leaf.dtype}"
            raise CorruptedDataError(
                f"{where}: marl_minari.view says {leaf_name(path)[:-1]!r} is {tuple(shape)} "
                f"{dtype} per step, the vault's structure_shape/structure_dtype give {found}; "
                "the vault is damaged: convert the dataset again")
    return plan


def _stream_starts(lengths: np.ndarray, streams: np.ndarray) -> np.ndarray:
    """Each episode's first row in its stream (episodes of a stream are in order)."""
    starts = np.zeros(len(lengths), dtype=np.int64)
    for stream in np.unique(streams).tolist():
        mask = streams == stream
        stream_lengths = lengths[mask]
        starts[mask] = np.concatenate([[0], np.cumsum(stream_lengths)[:-1]])
    return starts


def _read_view(reader: VaultReader, keys: list[tuple[str, ...]], streams: np.ndarray,
               starts: np.ndarray, lengths: np.ndarray) -> dict[tuple[str, ...], np.ndarray]:
    """The view rows of consecutive episodes, in episode order."""
    ranges = {}
    for stream in np.unique(streams).tolist():
        mask = streams == stream
        ranges[stream] = (int(starts[mask].min()), int((starts[mask] + lengths[mask]).max()))
    futures = {(key, stream): reader.read_async(leaf_name(key), (stream, slice(lo, hi)))
               for key in keys for stream, (lo, hi) in ranges.items()}
    out = {}
    single = len(ranges) == 1
    for key in keys:
        blocks = {stream: np.asarray(futures[key, stream].result()) for stream in ranges}
        if single:
            out[key] = next(iter(blocks.values()))
            continue
        parts = []
        for stream, start, length in zip(streams.tolist(), starts.tolist(), lengths.tolist(),
                                         strict=True):
            lo = ranges[stream][0]
            parts.append(blocks[stream][start - lo:start - lo + length])
        out[key] = np.concatenate(parts)
    return out
