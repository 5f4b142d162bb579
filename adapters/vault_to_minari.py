"""Flashbax vault -> Minari dataset: the vault opened as a source, written by the one writer.

Two ways to read a vault (:class:`marl_minari.sources.VaultSource`):

* **restore**: the vault was written by :func:`to_vault` (it has the ``marl_minari`` metadata
  and restoration arrays): the original dataset is rebuilt exactly, metadata included.
* **import**: any vault in OG-MARL's or Mava's naming (or a given key map): episodes are cut
  where an agent's done flags are set, spaces are inferred from shapes and dtypes (or given),
  agents are named ``agent_0..N-1`` (or given).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from gymnasium import spaces

from marl_minari.format.spaces import is_image_space, leaf_spaces
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.sources import (
    DatasetSource,
    VaultSource,
    check_chunk_steps,
    load_dataset,
)
from marl_minari.storage.dataset import MultiAgentDataset
from marl_minari.storage.episode_writer import LeafEpisode
from marl_minari.storage.writer import check_new_dataset, write_dataset
from marl_minari.vaults.layout import CutOn, FinalObservation, Trailing
from marl_minari.vaults.store import vault_dir

from ._leaves import leaf_episodes
from .sources import writer_metadata


def from_vault(
    vault_name: str,
    *,
    rel_dir: str | os.PathLike[str] = "vaults",
    vault_uid: str,
    dataset_id: str,
    keys: Mapping[str, str] | None = None,
    agents: Sequence[str] | None = None,
    observation_spaces: Mapping[str, spaces.Space] | None = None,
    action_spaces: Mapping[str, spaces.Space] | None = None,
    trailing: Trailing = "truncate",
    final_observation: FinalObservation = "zeros",
    cut_on: CutOn = "any",
    infer_dead: bool = True,
    reward_aggregation: str = "mean",
    restore: bool | None = None,
    jpeg_encoding: bool | None = None,
    chunk_steps: int | None = None,
    progress: bool = False,
    **metadata: Any,
) -> MultiAgentDataset:
    """Convert a Flashbax vault into a multi-agent Minari dataset.

    The vault is named as Flashbax's ``Vault(vault_name, ..., rel_dir=, vault_uid=)`` names it:
    ``from_vault("smac_v1/3m.vlt", vault_uid="Good", dataset_id=...)`` reads
    ``vaults/smac_v1/3m.vlt/Good``. Only ``vault_name`` is positional (Flashbax's second
    positional argument is the experience structure), so no call can swap the folder parts.

    Args:
        vault_name: the vault's name (may hold ``/``, as OG-MARL's do).
        rel_dir: base folder of vaults (relative to the working directory, as Flashbax).
        vault_uid: the vault's uid (``Good``, ``Medium``, a timestamp...).
        dataset_id: id of the new dataset (``namespace/name-vN``).
        keys: ``{role: key}`` for a vault in neither OG-MARL's nor Mava's naming: roles
            ``observations``, ``actions``, ``rewards`` and ``terminals`` (with optional
            ``truncations``) or ``dones`` (one flag, no terminated/truncated split), optional
            ``legals`` and ``state``; nested keys as ``"infos.legals"`` (import only).
        agents: agent names, ``agent_0..N-1`` by default (import only).
        observation_spaces: ``{agent: space}`` to use instead of inferred ``Box`` spaces; each
            must flatten to the agent's observation row (import only).
        action_spaces: ``{agent: space}`` instead of inferred ones (``Discrete(A)`` with ``A``
            the legal mask width, or the largest action + 1, for integer actions shaped
            ``(B, T, N)`` or ``(B, T, N, 1)``; ``Box`` otherwise).
        trailing: what to do with steps after a stream's last done flag: ``"truncate"`` ends
            them as a truncated episode (as Minari's ``DataCollector`` saves an unfinished
            episode), ``"drop"`` leaves them out, ``"error"`` raises before writing.
        final_observation: row ``T`` of each episode (vaults have no final observation):
            ``"zeros"`` (fill values, every agent inactive in that row) or ``"repeat"`` (row
            ``T - 1`` again, with its presence flags).
        cut_on: an episode ends at a step where ``"any"`` agent (OG-MARL copies the team's
            done to every agent) or ``"all"`` agents are terminated or truncated.
        infer_dead: with legal masks, an agent whose observation is all zeros and whose only
            legal action is 0 (how OG-MARL stores dead agents) is marked inactive.
        reward_aggregation: how the scalar ``rewards`` column is made from the agents'
            rewards (``"mean"``: OG-MARL copies the team reward to every agent).
        restore: rebuild the original dataset from a vault written by :func:`to_vault`
            (default: whenever its metadata is there); ``False`` imports it like any vault.
        jpeg_encoding: JPEG-encode image observations in the new dataset; by default off when
            the data has image leaves (re-encoding is lossy), else the original's setting.
        chunk_steps: time steps read at a time (memory is proportional to it, plus the
            longest episode).
        progress: show a progress bar.
        **metadata: Minari metadata for the new dataset (``algorithm_name``, ``author``,
            ``author_email``, ``code_permalink``, ``description``, ``extra``...); on restore
            they override the original's.

    Returns:
        The new dataset (``.minari`` is the plain ``MinariDataset``).

    Raises:
        DatasetNotFoundError: no vault at ``rel_dir/vault_name/vault_uid``.
        EmptyVaultError: the vault holds no time step.
        LayoutError: the vault's keys follow no known naming and no ``keys`` map is given (the
            message lists them and the map to pass), an array's shape does not fit (named), or
            it ends mid-episode with ``trailing="error"``.
        InvalidDatasetIdError: ``dataset_id`` is malformed.
        DatasetExistsError: ``dataset_id`` exists.
        InvalidOptionError: unknown metadata or a value of the wrong kind.
    """
    check_chunk_steps(chunk_steps)
    check_new_dataset(dataset_id)  # malformed or taken: refused before the vault is read
    options: dict[str, Any] = {
        "restore": restore, "keys": keys, "agents": agents,
        "observation_spaces": observation_spaces, "action_spaces": action_spaces,
        "trailing": trailing, "final_observation": final_observation, "cut_on": cut_on,
        "infer_dead": infer_dead, "reward_aggregation": reward_aggregation}
    source = VaultSource(vault_dir(rel_dir, vault_name, vault_uid),
                         {k: v for k, v in options.items() if v is not None})
    spec = source.spec
    if source.restored:
        original = dict(source.metadata)
        if jpeg_encoding is None:
            jpeg_encoding = False if _has_images(spec) else bool(
                original.get("jpeg_encoding", True))
        if not jpeg_encoding and spec.state_encoding == "jpeg":
            # The vault holds decoded pixels: keep them exact, and compact.
            spec = replace(spec, state_encoding="lzf")
        kwargs = writer_metadata(original, spec.extra)
        kwargs["extra"] = {**kwargs["extra"], **(metadata.pop("extra", None) or {})}
        kwargs.update(metadata)
    else:
        jpeg_encoding, kwargs = bool(jpeg_encoding), metadata
    write_dataset(dataset_id, source_episodes(source, chunk_steps), spec,
                  jpeg_encoding=jpeg_encoding,
                  progress=f"{source.vault_path.name} -> {dataset_id}" if progress else False,
                  total=source.total_episodes, **kwargs)
    return load_dataset(dataset_id)


def source_episodes(source: DatasetSource, chunk_steps: int | None) -> Iterator[LeafEpisode]:
    """Every episode of ``source``, with its reset seed and options, as the writer's
    :class:`LeafEpisode` objects, a chunk of whole episodes at a time."""
    for batch in source.batches(chunk_steps):
        attributes = source.episode_attributes(batch)
        yield from leaf_episodes(source.read(batch), [seed for seed, _ in attributes],
                                 [given or None for _, given in attributes])


def _has_images(spec: MultiAgentSpec) -> bool:
    return any(is_image_space(leaf) for agent in spec.possible_agents
               for field in (spec.observation_spaces, spec.action_spaces)
               for _, leaf in leaf_spaces(field[agent]))
