"""Coverage of the state-action space, streaming over chunks of whole episodes.

OG-MARL (``og_marl/vault_utils/analyse_vault.py``) characterises datasets by two numbers:

* **SACo**, joint state-action coverage: distinct rows of (global state, joint action) over
  all time steps, divided by the number of steps; the row is the state and every agent's
  flattened action side by side, cast to their common numpy type and rounded to 4 decimals
  (``np.round``; integer actions are unchanged).
* **average OACo**, observation-action coverage: per agent, distinct (observation, action)
  rows over the steps (not rounded), averaged over agents.

OG-MARL loads the whole vault and calls ``np.unique(..., axis=...)``; here rows are hashed
chunk by chunk (:mod:`marl_minari.describe.distinct`) and only their digests are kept, with
how often each occurred, so memory grows with the distinct pairs (24 bytes each), not with the
dataset. The occurrences give OG-MARL's count-frequency data (how many distinct pairs occur
once, twice, ...: :attr:`Coverage.state_frequencies`, :attr:`Coverage.agent_frequencies`).
Counting by value: ``-0.0`` and ``0.0`` are one value, as in ``np.unique``; all NaNs are one
value too (where ``np.unique`` counts every NaN row apart).

A dataset without a global state has its joint observation (every agent's observation side by
side, rounded like a state) stand for the state; :attr:`Coverage.state_source` says which.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Final

import numpy as np

from marl_minari.describe.coverage_results import CountFrequencies, Coverage, StateSource
from marl_minari.describe.distinct import (
    BLOCK_ROWS,
    PENDING_DIGESTS,
    DistinctCounter,
    canonical_floats,
    row_digests,
)
from marl_minari.errors import CorruptedDataError, LayoutError
from marl_minari.format.spaces import leaves
from marl_minari.storage.arrays import MultiAgentArrays

DEFAULT_DECIMALS: Final = 4
"""OG-MARL's rounding of the state for SACo (``get_saco(..., decimals=4)``)."""
MAX_THREADS: Final = 8
"""Most threads hashing at once (each holds one block of rows)."""
MIN_PENDING: Final = 65_536
"""Digests a table may hold unsorted however many tables share :data:`PENDING_DIGESTS`."""

Column = tuple[np.ndarray, np.ndarray | None]
"""An array and the rows of it that make the table's rows (``None``: its rows as they are)."""


class CoverageAccumulator:
    """Counts the distinct pairs of SACo and OACo over chunks of whole episodes.

    Each chunk's tables (one per agent, one for the state) are hashed by a pool of threads
    (numpy releases the interpreter lock while it computes) while the caller reads the next
    chunk: :meth:`add` returns once the previous chunk is counted, so at most two chunks are
    held. Use it as a context manager, or call :meth:`close`.

    Args:
        agents: the agents, in the dataset's order.
        decimals: rounding of the state (and of float actions) for SACo.
        threads: hashing threads (default: the processors, at most :data:`MAX_THREADS`).
        state: whether the dataset records a global state (its metadata's state space):
            ``True``, every episode must have one; ``False``, the joint observation stands
            for it even in episodes that hold a state; ``None``, the first chunk decides and
            every chunk must agree (a vault's state is all or nothing).
        name: the dataset, for errors.
    """

    def __init__(self, agents: Sequence[str], decimals: int = DEFAULT_DECIMALS,
                 threads: int | None = None, *, state: bool | None = None,
                 name: str = "the dataset") -> None:
        self.agents = tuple(agents)
        self.decimals = decimals
        self.name = name
        self._expects_state = state
        pending = max(MIN_PENDING, PENDING_DIGESTS // (len(self.agents) + 1))
        self.state_pairs = DistinctCounter(pending)
        self.agent_pairs = {agent: DistinctCounter(pending) for agent in self.agents}
        self.state_source: StateSource | None = None
        self.transitions = 0
        workers = threads or min(MAX_THREADS, os.cpu_count() or 1)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="coverage")
        self._running: list[Future[None]] = []

    def __enter__(self) -> CoverageAccumulator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the hashing threads (what is in progress is dropped)."""
        for future in self._running:
            future.cancel()
        self._pool.shutdown(wait=True)

    def add(self, arrays: MultiAgentArrays) -> None:
        """Count the pairs of one chunk of whole episodes (read with observations).

        Raises:
            LayoutError: the chunk's agents differ, or (``state=None``) it has a global state
                where earlier chunks had none (or the reverse).
            CorruptedDataError: (``state=True``) the chunk's episodes have no state.
        """
        steps = int(np.asarray(arrays.episode_lengths).sum())
        if steps == 0:
            return
        if tuple(arrays.possible_agents) != self.agents:
            raise LayoutError(f"chunk agents {arrays.possible_agents} differ from {self.agents}")
        if self._expects_state is False and arrays.state is not None:
            arrays = dataclasses.replace(arrays, state=None)  # the dataset declares none
        if self._expects_state and arrays.state is None:
            raise CorruptedDataError(
                f"{self.name}: episode {int(arrays.episode_ids[0])} lacks the global state "
                "the dataset records (episodes added without record_state?); SACo needs "
                "the state of every step: measure the coverage of the episodes that have "
                "one (dataset.subset(...))")
        source: StateSource = "joint_observation" if arrays.state is None else "state"
        if self.state_source is not None and source != self.state_source:
            raise LayoutError(f"{self.name}: some chunks have a global state and others not")
        self.state_source = source
        self._wait()  # one chunk in flight: each table is counted by one thread at a time
        obs_rows = arrays.obs_rows
        observations: dict[str, list[Column]] = {
            a: [(leaf, obs_rows) for _, leaf in leaves(arrays.observations[a])]
            for a in self.agents}
        actions: dict[str, list[Column]] = {
            a: [(leaf, None) for _, leaf in leaves(arrays.actions[a])] for a in self.agents}
        state: list[Column] = ([(arrays.state, obs_rows)] if arrays.state is not None else
                               [c for a in self.agents for c in observations[a]])
        joint_actions = [c for a in self.agents for c in actions[a]]
        self._running = [self._pool.submit(_count, self.state_pairs, state + joint_actions,
                                           steps, self.decimals)]
        self._running += [self._pool.submit(_count, self.agent_pairs[a],
                                            observations[a] + actions[a], steps, None)
                          for a in self.agents]
        self.transitions += steps

    def _wait(self) -> None:
        running, self._running = self._running, []
        for future in running:
            future.result()  # re-raises what a thread raised

    @property
    def table_bytes(self) -> int:
        """Bytes the digest tables take now."""
        self._wait()
        return self.state_pairs.table_bytes + sum(c.table_bytes
                                                  for c in self.agent_pairs.values())

    def result(self) -> Coverage:
        """The coverage of everything added (zero without steps)."""
        self._wait()
        steps = self.transitions
        counters = [self.state_pairs, *self.agent_pairs.values()]
        state_pairs, *agent_counts = self._pool.map(DistinctCounter.count, counters)
        state_frequencies, *agent_frequencies = [
            CountFrequencies(*pair) for pair in self._pool.map(DistinctCounter.count_frequencies,
                                                               counters)]
        per_agent = dict(zip(self.agents, agent_counts, strict=True))
        shares = {a: _share(count, steps) for a, count in per_agent.items()}
        return Coverage(
            saco=_share(state_pairs, steps),
            oaco=float(np.mean(list(shares.values()))) if shares else 0.0,
            agents=shares, transitions=steps, state_pairs=state_pairs, agent_pairs=per_agent,
            state_source=self.state_source or "state", decimals=self.decimals,
            state_frequencies=state_frequencies,
            agent_frequencies=dict(zip(self.agents, agent_frequencies, strict=True)))


def _count(counter: DistinctCounter, columns: Sequence[Column], steps: int,
           decimals: int | None) -> None:
    for digests in _digests(columns, steps, decimals):
        counter.add(digests)


def _digests(columns: Sequence[Column], steps: int,
             decimals: int | None = None) -> Iterator[np.ndarray]:
    """Digests of the table rows made of ``columns``, :data:`BLOCK_ROWS` steps at a time;
    with ``decimals``, the columns are cast to their common type and rounded first."""
    common = np.result_type(*[array.dtype for array, _ in columns])
    rounding = decimals is not None and common.kind == "f"
    for start in range(0, steps, BLOCK_ROWS):
        stop = min(steps, start + BLOCK_ROWS)
        # a gather is a fresh copy, made canonical in place; a slice is a view
        parts = [canonical_floats(array[rows[start:stop]], copy=False) if rows is not None
                 else canonical_floats(array[start:stop])
                 for array, rows in columns]
        if rounding:
            yield _rounded_digests(parts, common, decimals or 0)
        else:
            yield row_digests(parts)


def _rounded_digests(parts: Sequence[np.ndarray], common: np.dtype, decimals: int
                     ) -> np.ndarray:
    """Digests of ``parts`` side by side in ``common`` (a float type), rounded as OG-MARL
    rounds its concatenated (state, action) rows (``np.round``).

    In float64, ``np.round(x, d)`` is ``rint(x * 10**d) / 10**d``, which is one value for one
    ``rint(x * 10**d)`` as long as that is below ``2**31``: such rows are hashed as those
    integers in 32 bits, half the bytes of the rounded floats; other rows (huge values, NaN,
    infinities) as the rounded floats.
    """
    rows = len(parts[0])
    table = np.concatenate([part.reshape(rows, -1).astype(common, copy=False)
                            for part in parts], axis=1)
    if common != np.float64:
        np.round(table, decimals, out=table)
        return row_digests([canonical_floats(table, copy=False)])
    np.multiply(table, 10.0 ** decimals, out=table)
    np.rint(table, out=table)
    if table.size and table.min() > -2.0 ** 31 and table.max() < 2.0 ** 31:  # (no NaN)
        return row_digests([table.astype(np.int32)])
    small = (np.abs(table) < 2.0 ** 31).all(axis=1)
    digests = np.empty((2, rows), dtype=np.uint64)
    digests[:, small] = row_digests([table[small].astype(np.int32)])
    large = canonical_floats(table[~small] / 10.0 ** decimals, copy=False)
    digests[:, ~small] = row_digests([large])
    return digests


def _share(part: int, whole: int) -> float:
    return float(part / whole) if whole else 0.0
