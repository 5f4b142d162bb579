"""Subsets of a dataset as new datasets: whole episodes chosen uniformly, by a return profile or
to match another dataset's returns (OG-MARL's ``subsample_smaller``, ``subsample_bespoke`` and
``subsample_similar``), with their provenance in the metadata.

Episodes are chosen from their returns and lengths alone (one pass over actions and rewards,
chunk by chunk), then the chosen ones are read and written through
:func:`marl_minari.storage.writer.write_dataset`, as :func:`~marl_minari.derive.combine.
combine_datasets` writes (staged, indexed, digests remembered, moved into place in one rename):
a crash leaves no partial subset. An episode's return is its team return, the sum of the team
reward column (for OG-MARL's vaults, where every agent gets the team reward, agent 0's return,
which OG-MARL uses).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any, Final, Literal, overload

import numpy as np

from marl_minari.derive.combine import COMBINED_KEY
from marl_minari.errors import EmptyDatasetError, IncompatibleSourcesError, InvalidOptionError
from marl_minari.format.metadata import check_minari_metadata
from marl_minari.sources import DatasetSource, load_dataset, open_source
from marl_minari.storage.dataset import MultiAgentDataset
from marl_minari.storage.episode import MultiAgentEpisode
from marl_minari.storage.writer import check_new_dataset, write_dataset

SUBSET_KEY: Final = "subset"
"""Top-level metadata key of a subset's provenance."""
DEFAULT_TOLERANCE: Final = 0.01
"""How far apart two returns may be and still match (``like=``), OG-MARL's ``tol``."""

Rule = Literal["uniform", "profile", "like"]
Profile = tuple[Sequence[float], Sequence[float]]
"""``(bin_edges, weights)``: K + 1 increasing edges and K non-negative weights."""

@dataclasses.dataclass(frozen=True)
class EpisodeTable:
    """The stored ids, lengths and team returns of a source's episodes, in stored order."""

    ids: np.ndarray
    lengths: np.ndarray
    returns: np.ndarray


def episode_table(source: DatasetSource, chunk_steps: int | None = None, *,
                  returns_needed: bool = True) -> EpisodeTable:
    """Every episode's stored id, length and team return (:meth:`DatasetSource.team_returns`:
    the reward column alone where the source can read it so, as a dataset read in place does).

    ``returns_needed=False``: the ids and lengths only (the returns are NaN), which read no
    episode at all: the uniform rule needs nothing else, so a subset of a dataset read in
    place moves only the episodes it keeps.
    """
    lengths = np.asarray(source.episode_lengths(), dtype=np.int64)
    returns = (source.team_returns(chunk_steps) if returns_needed
               else np.full(len(lengths), np.nan))
    return EpisodeTable(ids=np.asarray(source.episode_indices, dtype=np.int64),
                        lengths=lengths, returns=returns)


@overload
def subsample(source: Any, dataset_id: str, *, max_steps: int | None = None,
              profile: Profile | None = None, like: Any = None,
              like_dataset_id: None = None, seed: int = 0,
              tolerance: float = DEFAULT_TOLERANCE, progress: bool = False,
              **metadata: Any) -> MultiAgentDataset: ...


@overload
def subsample(source: Any, dataset_id: str, *, max_steps: int | None = None,
              profile: Profile | None = None, like: Any = None,
              like_dataset_id: str, seed: int = 0,
              tolerance: float = DEFAULT_TOLERANCE, progress: bool = False,
              **metadata: Any) -> tuple[MultiAgentDataset, MultiAgentDataset]: ...


def subsample(source: Any, dataset_id: str, *, max_steps: int | None = None,
              profile: Profile | None = None, like: Any = None,
              like_dataset_id: str | None = None, seed: int = 0,
              tolerance: float = DEFAULT_TOLERANCE, progress: bool = False,
              **metadata: Any) -> MultiAgentDataset | tuple[MultiAgentDataset, MultiAgentDataset]:
    """Write a subset of ``source``'s whole episodes as the new dataset ``dataset_id``.

    One rule chooses the episodes:

    - ``max_steps`` alone: episodes in a random order, as many as fit in ``max_steps``
      steps (the first that would go over stops it: within one episode of ``max_steps``,
      never over; every episode when the dataset is smaller).
    - ``profile=(bin_edges, weights)``: the returns' histogram over the bins
      ``[e0, e1), [e1, e2), ... [eK-1, eK]`` follows the weights (relative): the largest
      subset that does so without repeating an episode; episodes outside the bins are left
      out. OG-MARL's ``subsample_bespoke``.
    - ``like=other``: episodes whose returns match ``other``'s, each matched to one episode of
      ``other`` within ``tolerance`` (returns sorted and matched greedily, which matches as
      many as can be; ``other``'s episodes of equal return are taken in a random order).
      With ``like_dataset_id``, the matched episodes of ``other`` are written too, as a second
      dataset: two subsets with as many episodes each and returns matched pair by pair,
      OG-MARL's ``subsample_similar``.

    With ``profile`` or ``like``, ``max_steps`` also caps the subset: a profile is scaled
    down as a whole; matched pairs are taken in a random order (with ``like_dataset_id``,
    until either subset would go over ``max_steps``).

    Both ids are checked before anything is read or written: a malformed or existing id
    (either of them, or the same id twice) writes nothing. The pair is written one dataset
    after the other, ``dataset_id`` first; each is complete or absent on its own. If writing
    the second fails (another process takes its id or holds its lock meanwhile, the disk
    fills up), or the process dies between the two, ``dataset_id`` stays, complete, its
    metadata naming a ``twin`` that does not exist; the error says so. To get the pair, delete
    it (``minari.delete_dataset``) and run the same call again: the same seed chooses the
    same pairs.

    Args:
        source: anything :func:`marl_minari.sources.open_source` opens (a local id, a dataset
            folder, a remote dataset's URL, a vault folder, a dataset object); multi-agent.
        dataset_id: the new dataset's id.
        max_steps: most steps of the subset (>= 1).
        profile: ``(bin_edges, weights)``.
        like: a second source whose returns to match.
        like_dataset_id: with ``like``: write ``like``'s matched episodes as this new dataset
            too (``like`` must then be multi-agent).
        seed: the seed of every random choice: the same seed gives the same subset.
        tolerance: for ``like``: largest difference of two matched returns (>= 0).
        progress: show a progress bar while writing.
        **metadata: Minari metadata of the new dataset (both, with ``like_dataset_id``):
            ``algorithm_name``, ``author``, ``author_email``, ``code_permalink``,
            ``description``, ``requirements``, ``ref_min_score``, ``ref_max_score``.

    Returns:
        The new dataset; with ``like_dataset_id``, the pair ``(subset of source, subset of
        like)``. A subset's metadata's ``subset`` records the source's id, the rule and its
        options, the seed and the chosen stored episode ids (in the order written: the
        source's order); a pair's also ``twin`` (the other subset's id) and
        ``twin_episode_ids`` (each episode's partner, a stored id of the other source, in the
        same order). Every episode keeps its reset seed and options.

    Raises:
        InvalidOptionError: no rule, both ``profile`` and ``like``, a bad ``max_steps``,
            ``profile``, ``tolerance`` or metadata key, ``like_dataset_id`` without ``like``
            or equal to ``dataset_id``, or nothing chosen (the option responsible is named).
        IncompatibleSourcesError: the source (or, with ``like_dataset_id``, ``like``) is a
            plain single-agent dataset.
        EmptyDatasetError: the source or ``like`` holds no episodes.
        DatasetExistsError: ``dataset_id`` or ``like_dataset_id`` exists.
    """
    _check_options(max_steps, profile, like, tolerance, seed, metadata)
    _check_new_ids(dataset_id, like_dataset_id, like)
    opened = open_source(source)
    other = None if like is None else open_source(like)
    try:
        _check_multi_agent(opened)
        if like_dataset_id is not None and other is not None:
            _check_multi_agent(other)
        for given, role in ((opened, "source"), (other, "like")):
            if given is not None and not given.total_episodes:
                raise EmptyDatasetError(
                    f"the {role} dataset {given.dataset_id!r} ({given.name}) holds no "
                    "episodes, so none can be chosen: give a dataset that holds some")
        table = episode_table(opened, returns_needed=profile is not None or other is not None)
        rng = np.random.default_rng(seed)
        record: dict[str, Any] = {"source": opened.dataset_id, "source_name": opened.name,
                                  "seed": seed, "max_steps": max_steps}
        partners = other_table = None
        if profile is not None:
            chosen = profile_selection(table, profile, rng, max_steps)
            record.update(rule="profile", profile={"bin_edges": [float(e) for e in profile[0]],
                                                   "weights": [float(w) for w in profile[1]]})
        elif other is not None:
            other_table = episode_table(other)
            chosen, partners = like_pairs(table, other_table, rng, tolerance, max_steps,
                                          cap_both=like_dataset_id is not None)
            record.update(rule="like", like=other.dataset_id, like_name=other.name,
                          tolerance=tolerance)
        else:
            assert max_steps is not None  # checked above
            chosen = uniform_selection(table, rng, max_steps)
            record.update(rule="uniform")
        if not len(chosen):
            option = "profile" if profile is not None else "like" if like is not None else (
                "max_steps")
            raise InvalidOptionError(
                f"{option} chose no episode of {opened.dataset_id!r} "
                f"({table.ids.size} episodes, shortest "
                f"{int(table.lengths.min()) if table.lengths.size else 0} steps); loosen "
                f"{option}")
        if like_dataset_id is None or other is None or other_table is None or partners is None:
            _write_subset(opened, dataset_id, table, chosen, record, progress, metadata)
            return load_dataset(dataset_id)
        twin_record = {**record, "source": other.dataset_id, "source_name": other.name,
                       "like": opened.dataset_id, "like_name": opened.name}
        _write_subset(opened, dataset_id, table, chosen, record, progress, metadata,
                      twin=(like_dataset_id, other_table.ids[partners]))
        try:
            _write_subset(other, like_dataset_id, other_table, partners, twin_record,
                          progress, metadata, twin=(dataset_id, table.ids[chosen]))
        except BaseException as exc:
            _explain_half_pair(exc, dataset_id, like_dataset_id)
            raise
        return load_dataset(dataset_id), load_dataset(like_dataset_id)
    finally:
        for handle, given in ((opened, source), (other, like)):
            if handle is not None and handle is not given:
                handle.close()


def _write_subset(source: DatasetSource, dataset_id: str, table: EpisodeTable,
                  chosen: np.ndarray, record: dict[str, Any], progress: bool,
                  metadata: dict[str, Any], twin: tuple[str, np.ndarray] | None = None
                  ) -> None:
    """Write ``source``'s episodes at ``chosen`` (positions in ``table``) in the source's
    order, ``record`` (and the ``twin``'s id and partner ids, aligned with ``chosen``) as
    their provenance."""
    order = np.argsort(chosen, kind="stable")  # written in the source's order
    ids = table.ids[chosen[order]]
    record = {**record, "episode_ids": [int(i) for i in ids],
              "total_steps": int(table.lengths[chosen].sum())}
    if twin is not None:
        record.update(twin=twin[0], twin_episode_ids=[int(i) for i in twin[1][order]])
    extra: dict[str, Any] = {SUBSET_KEY: record, **_episode_metadata(source, ids)}
    if COMBINED_KEY in source.metadata:
        extra[COMBINED_KEY] = source.metadata[COMBINED_KEY]
    spec = dataclasses.replace(source.spec, extra={})
    write_dataset(dataset_id, _episodes(source, ids, table.lengths[chosen[order]]), spec,
                  jpeg_encoding=False, progress=progress, total=len(ids), extra=extra,
                  **metadata)


def _explain_half_pair(exc: BaseException, written: str, missing: str) -> None:
    """Say, in the error of the pair's second write, what the first left behind."""
    exc.add_note(
        f"The subset {written!r} was written, its twin {missing!r} was not: delete "
        f"{written!r} (minari.delete_dataset) and run the same call again (the same seed "
        "chooses the same pairs).")


# ---------------------------------------------------------------------------- the rules
def uniform_selection(table: EpisodeTable, rng: np.random.Generator, max_steps: int
                      ) -> np.ndarray:
    """Positions of the episodes of a random order that fit in ``max_steps`` (a prefix)."""
    return _fitting_prefix(rng.permutation(len(table.ids)), table.lengths, max_steps)


def profile_selection(table: EpisodeTable, profile: Profile, rng: np.random.Generator,
                      max_steps: int | None = None) -> np.ndarray:
    """Positions of the largest subset whose returns' histogram follows ``profile``.

    For a subset of ``n`` episodes, bin ``k`` gets ``round(n * w_k / sum(w))`` of its episodes
    (a random prefix of them); ``n`` is the largest for which no bin runs out (and, with
    ``max_steps``, the steps fit).
    """
    edges = np.asarray(profile[0], dtype=np.float64)
    weights = np.asarray(profile[1], dtype=np.float64)
    shares = weights / weights.sum()
    bins = np.searchsorted(edges, table.returns, side="right") - 1
    bins[table.returns == edges[-1]] = len(weights) - 1  # the last bin is closed
    members = [rng.permutation(np.flatnonzero(bins == k)) for k in range(len(weights))]
    for k, share in enumerate(shares):
        if share > 0 and not len(members[k]):
            raise InvalidOptionError(
                f"profile: bin {k} [{edges[k]:g}, {edges[k + 1]:g}] has weight "
                f"{weights[k]:g} but no episode's return falls in it; give it weight 0 or "
                "widen the bins")

    def take(n: int) -> np.ndarray:
        counts = np.rint(n * shares).astype(np.int64)
        return np.concatenate([m[:c] for m, c in zip(members, counts, strict=True)]
                              ).astype(np.int64)

    def fits(n: int) -> bool:
        counts = np.rint(n * shares).astype(np.int64)
        available = np.asarray([len(m) for m in members])
        if (counts > available).any():
            return False
        return max_steps is None or int(table.lengths[take(n)].sum()) <= max_steps

    low, high = 0, len(table.ids)  # fits(0); the largest n that fits, by bisection
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return take(low)


def like_pairs(table: EpisodeTable, other: EpisodeTable, rng: np.random.Generator,
               tolerance: float, max_steps: int | None = None, *, cap_both: bool = False
               ) -> tuple[np.ndarray, np.ndarray]:
    """Positions of ``table``'s episodes matched one to one to ``other``'s within
    ``tolerance``, and the positions in ``other`` of their partners (aligned).

    Both are sorted by return and matched greedily (the smallest unused return of ``other``
    within ``tolerance`` of each); ties are broken at random on both sides. With
    ``max_steps``, pairs are taken in a random order until ``table``'s episodes (with
    ``cap_both``, either side's) would go over it.
    """
    # other's ties from a child generator: rng's draws (one side's choice) stay as they were
    other_ties = rng.spawn(1)[0]
    mine = rng.permutation(len(table.ids))
    mine = mine[np.argsort(table.returns[mine], kind="stable")]
    theirs = other_ties.permutation(len(other.ids))
    theirs = theirs[np.argsort(other.returns[theirs], kind="stable")]
    values = other.returns[theirs]
    chosen: list[int] = []
    partners: list[int] = []
    j = 0
    for position in mine:
        value = table.returns[position]
        while j < len(values) and values[j] < value - tolerance:
            j += 1  # too small for this episode and every later (larger) one
        if j < len(values) and values[j] <= value + tolerance:
            chosen.append(int(position))
            partners.append(int(theirs[j]))
            j += 1
    matched = np.asarray(chosen, dtype=np.int64)
    partnered = np.asarray(partners, dtype=np.int64)
    if max_steps is None:
        return matched, partnered
    order = rng.permutation(len(matched))
    count = len(_fitting_prefix(order, table.lengths[matched], max_steps))
    if cap_both:
        count = min(count, len(_fitting_prefix(order, other.lengths[partnered], max_steps)))
    return matched[order[:count]], partnered[order[:count]]


def _fitting_prefix(order: np.ndarray, lengths: np.ndarray, max_steps: int) -> np.ndarray:
    """The longest prefix of ``order`` whose episodes' steps add up to at most ``max_steps``."""
    total = np.cumsum(lengths[order])
    return order[:int(np.searchsorted(total, max_steps, side="right"))]


# ---------------------------------------------------------------------------- checks, writing
def _check_options(max_steps: int | None, profile: Profile | None, like: Any,
                   tolerance: float, seed: int, metadata: dict[str, Any]) -> None:
    if max_steps is None and profile is None and like is None:
        raise InvalidOptionError("subsample needs a rule: max_steps, profile or like")
    if profile is not None and like is not None:
        raise InvalidOptionError("profile and like are two rules; give one of them")
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(
            max_steps, (int, np.integer)) or max_steps < 1):
        raise InvalidOptionError(f"max_steps must be an integer >= 1, got {max_steps!r}")
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not (
            0 <= tolerance < np.inf):
        raise InvalidOptionError(f"tolerance must be a finite number >= 0, got {tolerance!r}")
    if profile is not None:
        _check_profile(profile)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InvalidOptionError(f"seed must be an integer >= 0, got {seed!r}")
    check_minari_metadata(metadata, extra=False)


def _check_new_ids(dataset_id: str, like_dataset_id: str | None, like: Any) -> None:
    if like_dataset_id is not None:
        if like is None:
            raise InvalidOptionError(
                f"like_dataset_id {like_dataset_id!r} names the subset of the like= source: "
                "give like= too")
        if like_dataset_id == dataset_id:
            raise InvalidOptionError(
                f"dataset_id and like_dataset_id are both {dataset_id!r}; the two subsets "
                "need two ids")
    check_new_dataset(dataset_id)
    if like_dataset_id is not None:
        check_new_dataset(like_dataset_id)


def _check_multi_agent(source: DatasetSource) -> None:
    if not source.multi_agent:
        raise IncompatibleSourcesError(
            f"{source.dataset_id!r} is a plain single-agent Minari dataset; subsets are "
            "written in the multi-agent layout: record or convert it as one")


def _check_profile(profile: Any) -> None:
    try:
        edges_in, weights_in = profile
        edges = np.asarray(edges_in, dtype=np.float64)
        weights = np.asarray(weights_in, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidOptionError(
            f"profile must be (bin_edges, weights), two sequences of numbers, got {profile!r}"
        ) from None
    if edges.ndim != 1 or len(edges) < 2 or not np.isfinite(edges).all() or (
            np.diff(edges) <= 0).any():
        raise InvalidOptionError(
            f"profile bin_edges must be at least 2 increasing finite numbers, got {edges_in!r}")
    if weights.shape != (len(edges) - 1,):
        raise InvalidOptionError(
            f"profile needs one weight per bin: {len(edges) - 1} for {len(edges)} edges, got "
            f"{weights.size}")
    if not np.isfinite(weights).all() or (weights < 0).any() or weights.sum() <= 0:
        raise InvalidOptionError(
            f"profile weights must be finite, >= 0 and not all 0, got {weights_in!r}")


def _episodes(source: DatasetSource, ids: np.ndarray, lengths: np.ndarray,
              chunk_steps: int | None = None) -> Iterator[MultiAgentEpisode]:
    """The stored episodes ``ids`` (of ``lengths`` steps), read in runs of about
    ``chunk_steps`` steps (by default as many as fit the source's chunk budget, as
    :meth:`DatasetSource.batches`), with their reset seeds and options."""
    chunk_steps = source.steps_per_chunk(chunk_steps)
    ends = np.cumsum(lengths)
    start = 0
    while start < len(ids):
        done = int(ends[start - 1]) if start else 0
        stop = max(start + 1, int(np.searchsorted(ends, done + chunk_steps, side="right")))
        batch = ids[start:stop]
        arrays = source.read(batch)
        for position, (seed, options) in enumerate(source.episode_attributes(batch)):
            yield dataclasses.replace(arrays.episode(position), seed=seed, options=options)
        start = stop


def _episode_metadata(source: DatasetSource, ids: np.ndarray) -> dict[str, Any]:
    """The chosen episodes' entries of the source's per-episode metadata list (if any)."""
    notes = source.metadata.get("episode_metadata")
    if not isinstance(notes, list):
        return {}
    return {"episode_metadata": [notes[int(i)] if int(i) < len(notes) else None for i in ids]}
