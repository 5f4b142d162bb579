"""The episodes of a vault in OG-MARL's or Mava's naming (or a given key map), read in place.

:class:`ImportedVault` finds the episodes once, in a pass over the done flags only
(:class:`~marl_minari.vaults.episodes.StreamCutter`), then reads any of them as dataset arrays
(:func:`~marl_minari.vaults.rows.arrays_from_rows`) straight from the vault's arrays.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from gymnasium import spaces

from marl_minari.errors import LayoutError
from marl_minari.storage.arrays import MultiAgentArrays

from .episodes import Episodes, StreamCutter, check_flags, done_steps, stream_rows
from .keys import KeyLayout, leaf_text, resolve_keys
from .layout import ImportLayout, ImportOptions, import_layout
from .rows import arrays_from_rows
from .store import VAULT_METADATA_KEY, VaultReader, time_chunk
from .structure import flatten_structure, leaf_name
from .view_plan import (
    ACTIONS,
    LEGALS,
    OBSERVATIONS,
    REWARDS,
    STATE,
    TERMINALS,
    TRUNCATIONS,
    VAULT_SOURCE_KEY,
)

OGMARL_PATHS = {"observations": OBSERVATIONS, "actions": ACTIONS, "rewards": REWARDS,
                "terminals": TERMINALS, "dones": TERMINALS, "truncations": TRUNCATIONS,
                "legals": LEGALS, "state": STATE}
"""Where each role goes in the OG-MARL vault ``to_vault`` writes back."""
WRITTEN_DTYPES = {"rewards": "float32", "terminals": "float32", "dones": "float32",
                  "truncations": "float32", "legals": "float32"}
"""dtypes of the roles ``to_vault`` writes as OG-MARL's float32 (the others keep theirs)."""


class ImportedVault:
    """A foreign vault's episodes.

    Args:
        reader: the vault.
        options: how episodes are cut and filled.
        keys: ``{role: leaf name}`` (see :mod:`marl_minari.vaults.keys`); OG-MARL's or Mava's
            naming is recognised without it.
        agents, observation_spaces, action_spaces: given names and spaces.
        chunk_steps: time steps read at a time while finding the episodes.

    Raises:
        LayoutError: the keys or shapes do not fit, a done flag is not 0/1, the vault holds no
            complete episode, or ends mid-episode with ``trailing="error"``.
    """

    def __init__(self, reader: VaultReader, options: ImportOptions, *,
                 keys: Mapping[str, str] | None = None,
                 agents: Sequence[str] | None = None,
                 observation_spaces: Mapping[str, spaces.Space] | None = None,
                 action_spaces: Mapping[str, spaces.Space] | None = None,
                 chunk_steps: int = 65_536) -> None:
        self.reader = reader
        self.options = options
        where = f"vault {reader.path}"
        self.where = where
        key_layout = resolve_keys((leaf.path for leaf in reader.leaves), keys, where)
        self.layout: ImportLayout = import_layout(
            reader.leaves, key_layout, reader.length, where, agents=agents,
            observation_spaces=observation_spaces, action_spaces=action_spaces,
            max_action=lambda: _max_action(reader, key_layout))
        self.window = max(1, chunk_steps // max(1, self.layout.streams))
        self.trailing_steps: list[int] = []
        self.episodes = self._find_episodes()
        self.spec = replace(self.layout.spec, reward_aggregation=options.reward_aggregation,
                            extra={VAULT_SOURCE_KEY: self.record()})

    def _find_episodes(self) -> Episodes:
        reader, layout_, options = self.reader, self.layout, self.options
        flags = [layout_.keys.paths[role] for role in layout_.keys.flag_roles]
        cutter = StreamCutter(layout_.streams)
        found = []
        for t0 in range(0, layout_.length, self.window):
            t1 = min(layout_.length, t0 + self.window)
            futures = [reader.read_async(leaf_name(p), (slice(None), slice(t0, t1)))
                       for p in flags]
            blocks = [np.asarray(f.result()) for f in futures]
            for path, values in zip(flags, blocks, strict=True):
                check_flags(values, leaf_text(path), t0, self.where)
            found.append(cutter.push(done_steps(blocks, options.cut_on)))
        rest = cutter.unfinished()
        self.trailing_steps = (cutter.position - cutter.open_starts).tolist()
        if options.trailing == "truncate":
            found.append(rest)
        elif options.trailing == "error" and len(rest):
            stream, steps = int(rest.streams[0]), int(rest.lengths[0])
            raise LayoutError(
                f"{self.where}: stream {stream} ends with an unfinished episode of {steps} "
                f"steps (no done flag after step {int(rest.starts[0]) - 1}); pass "
                "trailing='truncate' to keep it as a truncated episode or trailing='drop' to "
                "leave it out")
        episodes = Episodes.concat(found)
        if len(episodes) == 0:
            raise LayoutError(f"{self.where} holds no complete episode (no done flag in "
                              f"{layout_.length} steps) and trailing={options.trailing!r}")
        return episodes

    def record(self) -> dict[str, Any]:
        """What a dataset keeps of its source vault (``metadata.json["marl_minari"]
        ["vault"]``), enough for ``to_vault`` to write the same arrays back, in OG-MARL's
        names."""
        reader, layout_ = self.reader, self.layout
        user = {k: v for k, v in reader.metadata.items()
                if k not in ("version", "structure_shape", "structure_dtype", VAULT_METADATA_KEY)}
        shapes = {path: v for path, v in flatten_structure(reader.metadata["structure_shape"])}
        dtypes = {path: v for path, v in flatten_structure(reader.metadata["structure_dtype"])}
        written_shapes, written_dtypes = {}, {}
        for role, path in layout_.keys.paths.items():
            target = ".".join(OGMARL_PATHS[role])
            written_shapes[target] = shapes[path]
            written_dtypes[target] = (dtypes[path] if layout_.keys.naming == "og-marl"
                                      else WRITTEN_DTYPES.get(role, dtypes[path]))
        for path, _ in layout_.extras:
            written_shapes[leaf_text(path)] = shapes[path]
            written_dtypes[leaf_text(path)] = dtypes[path]
        runs: list[list[int]] = []
        for stream in self.episodes.streams.tolist():
            if runs and runs[-1][0] == stream:
                runs[-1][1] += 1
            else:
                runs.append([stream, 1])
        return {
            "format_version": 1,
            "vault_name": reader.path.parent.name,
            "vault_uid": reader.path.name,
            "version": reader.metadata.get("version"),
            "keys": layout_.keys.to_dict(),
            "shapes": written_shapes,
            "dtypes": written_dtypes,
            "user_metadata": user,
            "streams": layout_.streams,
            "length": layout_.length,
            "episode_streams": runs,
            "trailing": self.options.trailing,
            "trailing_steps": self.trailing_steps,
            "final_observation": self.options.final_observation,
            "cut_on": self.options.cut_on,
            "infer_dead": self.options.infer_dead,
            "extras": [{"path": list(p), "name": name} for p, name in layout_.extras],
        }

    def read(self, positions: np.ndarray) -> MultiAgentArrays:
        """The episodes at ``positions`` (of :attr:`episodes`) as arrays, in that order."""
        positions = np.asarray(positions, dtype=np.int64)
        chosen = self.episodes.select(positions)
        keys = [leaf.path for leaf in self.reader.leaves]
        # One read per stream covering its chosen episodes (consecutive episodes of a stream
        # are adjacent rows), then the rows gathered in the order asked.
        ranges = {}
        for stream in np.unique(chosen.streams).tolist():
            mask = chosen.streams == stream
            ranges[stream] = (int(chosen.starts[mask].min()),
                              int((chosen.starts[mask] + chosen.lengths[mask]).max()))
        futures = {(k, s): self.reader.read_async(leaf_name(k), (slice(s, s + 1), slice(a, b)))
                   for k in keys for s, (a, b) in ranges.items()}
        legals = self.layout.keys.path("legals")
        joined = {}
        for key in keys:
            parts = []
            for stream, (lo, _) in ranges.items():
                block = np.asarray(futures[key, stream].result())
                if key == legals:
                    check_flags(block, leaf_text(key), lo, self.where, stream=stream)
                mask = chosen.streams == stream
                parts.append(stream_rows({key: block}, chosen.select(np.flatnonzero(mask)),
                                         lo, stream=stream)[key])
            joined[key] = _in_order(parts, chosen.streams, list(ranges), chosen.lengths)
        arrays = arrays_from_rows(self.layout, self.options, self.spec, joined,
                                  chosen.lengths.copy(), int(positions[0]) if len(positions)
                                  else 0, self.where)
        return replace(arrays, episode_ids=positions.copy())


def _in_order(parts: list[np.ndarray], streams: np.ndarray, order: list[int],
              lengths: np.ndarray) -> np.ndarray:
    """Rows of episodes gathered stream by stream (``parts``, streams in ``order``) put back
    in episode order."""
    if len(parts) == 1:
        return parts[0]
    stacked = np.concatenate(parts)
    # Episode e's rows in the stream-by-stream layout start after all earlier streams' rows.
    episode_order = np.concatenate([np.flatnonzero(streams == s) for s in order])
    starts_grouped = np.zeros(len(lengths), dtype=np.int64)
    starts_grouped[episode_order] = np.concatenate(
        [[0], np.cumsum(lengths[episode_order])[:-1]])
    index = np.concatenate([np.arange(a, a + n) for a, n in zip(
        starts_grouped.tolist(), lengths.tolist(), strict=True)])
    return stacked[index]


def _max_action(reader: VaultReader, keys: KeyLayout) -> int:
    """The largest action in the vault (a pass over the actions only)."""
    path = keys.paths["actions"]
    leaf = next(leaf for leaf in reader.leaves if leaf.path == path)
    window = max(1, time_chunk(leaf.row_bytes * reader.num_streams, 1 << 24))
    best = 0
    for t0 in range(0, reader.length, window):
        block = np.asarray(reader.read_async(leaf_name(path),
                                             (slice(None), slice(t0, t0 + window))).result())
        if block.size:
            best = max(best, int(block.max()))
    return best
