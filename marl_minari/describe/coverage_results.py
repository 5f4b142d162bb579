"""What a coverage pass finds (:func:`~marl_minari.describe.describe` with ``coverage=True``):
OG-MARL's SACo and OACo with the count frequencies behind them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

StateSource = Literal["state", "joint_observation"]


@dataclass(frozen=True, eq=False)
class CountFrequencies:
    """How often distinct pairs occur: OG-MARL's count-frequency data behind a coverage.

    A dataset that repeats a few transitions has a few pairs with large counts; one that covers
    many has most pairs at count 1. ``pairs[i]`` distinct pairs occur exactly ``counts[i]``
    times each.

    Attributes:
        counts: the numbers of times a distinct pair occurs, increasing (``int64``).
        pairs: how many distinct pairs occur that many times (``int64``, same length).
    """

    counts: np.ndarray
    pairs: np.ndarray

    @property
    def distinct(self) -> int:
        """Distinct pairs (``sum(pairs)``)."""
        return int(self.pairs.sum())

    @property
    def transitions(self) -> int:
        """Pairs counted with repeats (``sum(counts * pairs)``, the steps)."""
        return int((self.counts * self.pairs).sum())

    @property
    def once(self) -> int:
        """Distinct pairs that occur exactly once."""
        return int(self.pairs[0]) if len(self.counts) and self.counts[0] == 1 else 0

    @property
    def most(self) -> int:
        """The largest number of times one pair occurs (0 when there are none)."""
        return int(self.counts[-1]) if len(self.counts) else 0

    def to_dict(self) -> dict[str, list[int]]:
        """``{"counts": [...], "pairs": [...]}`` (JSON-serialisable)."""
        return {"counts": [int(c) for c in self.counts], "pairs": [int(p) for p in self.pairs]}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CountFrequencies):
            return NotImplemented
        return (np.array_equal(self.counts, other.counts)
                and np.array_equal(self.pairs, other.pairs))

    __hash__ = None  # type: ignore[assignment]  # equal by value, and mutable arrays


@dataclass(frozen=True)
class Coverage:
    """How much of the state-action space a dataset covers, as OG-MARL measures it.

    Every step counts once (``transitions``), including steps at which an agent was absent
    (its stored observation and action are one more pair, as in OG-MARL's vaults).

    Attributes:
        saco: joint state-action coverage: distinct (state, joint action) rows over
            ``transitions``, the state and actions rounded to ``decimals`` decimals in their
            common numpy type (integers are unchanged).
        oaco: average observation-action coverage: the mean over agents of ``agents``.
        agents: per agent, distinct (observation, action) rows over ``transitions``
            (observations and actions as stored, not rounded), in ``possible_agents`` order.
        transitions: steps counted.
        state_pairs: distinct (state, joint action) rows.
        agent_pairs: per agent, distinct (observation, action) rows.
        state_source: ``"state"`` (the dataset's global state) or ``"joint_observation"``
            (a dataset without a state: every agent's observation side by side stands for it).
        decimals: the rounding of the state (and of float actions) for ``saco``.
        state_frequencies: how often each distinct (state, joint action) pair occurs (the
            count-frequency behind ``saco``; see :func:`~marl_minari.describe.plot_coverage`).
        agent_frequencies: per agent, how often each distinct (observation, action) pair
            occurs (behind ``agents``), in ``possible_agents`` order.
    """

    saco: float
    oaco: float
    agents: dict[str, float]
    transitions: int
    state_pairs: int
    agent_pairs: dict[str, int]
    state_source: StateSource
    decimals: int
    state_frequencies: CountFrequencies
    agent_frequencies: dict[str, CountFrequencies]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (the count frequencies as ``{"counts", "pairs"}`` lists)."""
        return {"saco": self.saco, "oaco": self.oaco, "agents": dict(self.agents),
                "transitions": self.transitions, "state_pairs": self.state_pairs,
                "agent_pairs": dict(self.agent_pairs), "state_source": self.state_source,
                "decimals": self.decimals,
                "state_frequencies": self.state_frequencies.to_dict(),
                "agent_frequencies": {a: f.to_dict() for a, f in self.agent_frequencies.items()}}

    def brief(self) -> str:
        """One line: SACo (and what stood for the state) and average OACo."""
        state = "state" if self.state_source == "state" else "joint observation, no state"
        return (f"SACo {self.saco:.4f} ({self.state_pairs:,} distinct pairs, {state}), "
                f"OACo {self.oaco:.4f} (mean of {len(self.agents)} agents)")
