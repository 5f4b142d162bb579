"""What :func:`~marl_minari.describe.describe` returns: summaries of returns, actions, agents
and whole datasets, with their JSON and plain-text forms."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from marl_minari.describe._format import env_name, num
from marl_minari.describe.coverage_results import Coverage
from marl_minari.errors import InvalidOptionError, UnknownAgentError


def json_document(value: Any, **kwargs: Any) -> str:
    """``value`` (what a ``to_dict`` returns) as strict JSON: a float that JSON cannot hold
    (NaN, an infinity: returns of a dataset whose rewards hold NaN) becomes ``null``, never
    the bare ``NaN`` that ``json.dumps`` writes and JSON parsers refuse. Keyword arguments go
    to ``json.dumps``."""
    return json.dumps(_finite_or_none(value), allow_nan=False, **kwargs)


def _finite_or_none(value: Any) -> Any:
    if isinstance(value, float):
        return value if np.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite_or_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(item) for item in value]
    return value


def require_statistics(descriptions: Sequence[DatasetDescription], what: str) -> None:
    """Refuse metadata-only descriptions (``describe(..., statistics=False)``) where ``what``
    needs returns and actions.

    Raises:
        InvalidOptionError: one of ``descriptions`` has no statistics (named by its label).
    """
    unread = [d.label for d in descriptions if not d.statistics]
    if unread:
        raise InvalidOptionError(
            f"{', '.join(unread)}: a metadata-only description has no statistics to {what}; "
            "describe it with statistics=True (at the command line, without --no-statistics)")


SourceKind = Literal["multi_agent", "single_agent", "vault"]
ActionKind = Literal["discrete", "multi_discrete", "binary", "continuous", "text"]


@dataclass(frozen=True)
class Summary:
    """Order statistics of a sample (``None`` everywhere when it is empty).

    Quartiles use linear interpolation (``numpy.percentile``'s default); ``std`` is the
    population standard deviation (``ddof=0``).
    """

    count: int
    mean: float | None = None
    std: float | None = None
    min: float | None = None
    q25: float | None = None
    median: float | None = None
    q75: float | None = None
    max: float | None = None

    @classmethod
    def of(cls, values: np.ndarray) -> Summary:
        """The summary of a 1-D sample."""
        values = np.asarray(values, dtype=np.float64).reshape(-1)
        if values.size == 0:
            return cls(count=0)
        q25, median, q75 = (float(q) for q in np.percentile(values, [25, 50, 75]))
        return cls(count=int(values.size), mean=float(values.mean()), std=float(values.std()),
                   min=float(values.min()), q25=q25, median=median, q75=q75,
                   max=float(values.max()))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return {"count": self.count, "mean": self.mean, "std": self.std, "min": self.min,
                "q25": self.q25, "median": self.median, "q75": self.q75, "max": self.max}

    def brief(self) -> str:
        """One line: mean, std, min, median and max (``no episodes`` when empty)."""
        if self.count == 0:
            return "no episodes"
        return (f"mean {num(self.mean)}, std {num(self.std)}, min {num(self.min)}, "
                f"median {num(self.median)}, max {num(self.max)}")


@dataclass(frozen=True)
class ActionSummary:
    """What one agent did with one leaf of its action space, over the steps it acted.

    Attributes:
        path: the leaf's path inside a ``Dict``/``Tuple`` action space (``""`` for a plain one).
        kind: ``discrete`` (``Discrete``), ``multi_discrete`` (``MultiDiscrete``, components
            flattened), ``binary`` (``MultiBinary``), ``continuous`` (``Box``) or ``text``.
        space: the leaf space, as text.
        samples: actions counted (steps at which the agent acted).
        labels: what ``counts`` (discrete kinds) or the ranges (continuous) refer to: action
            values (``"3"``), ``"c<i>=<v>"`` (component ``i`` took value ``v``), ``"b<i>"``
            (bit ``i`` set) or ``"d<i>"`` (dimension ``i`` of the flattened Box).
        counts: discrete kinds: how often each label occurred.
        minimum, maximum, mean, std: continuous: per-dimension range, mean and population
            standard deviation.
        out_of_space: actions outside the space (a discrete value out of range, a bit other
            than 0 or 1, a Box value outside its bounds or NaN), by the rule recorders warn by
            (:func:`~marl_minari.format.spaces.rows_outside`); they are not in ``counts``.
    """

    path: str
    kind: ActionKind
    space: str
    samples: int
    labels: tuple[str, ...] = ()
    counts: tuple[int, ...] = ()
    minimum: tuple[float, ...] = ()
    maximum: tuple[float, ...] = ()
    mean: tuple[float, ...] = ()
    std: tuple[float, ...] = ()
    out_of_space: int = 0

    @property
    def frequencies(self) -> np.ndarray:
        """``counts`` as shares of ``samples`` (per component for ``multi_discrete``)."""
        return np.asarray(self.counts, dtype=np.float64) / max(self.samples, 1)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        out: dict[str, Any] = {"path": self.path, "kind": self.kind, "space": self.space,
                               "samples": self.samples, "out_of_space": self.out_of_space,
                               "labels": list(self.labels)}
        if self.kind == "continuous":
            out.update(minimum=list(self.minimum), maximum=list(self.maximum),
                       mean=list(self.mean), std=list(self.std))
        else:
            out["counts"] = list(self.counts)
        return out

    def text(self, top: int = 8) -> str:
        """One line: ranges of continuous components, or the ``top`` most frequent actions."""
        if self.kind == "continuous":
            if not self.mean:
                return "no actions"
            return "; ".join(f"{label} [{lo:.3g}, {hi:.3g}] mean {m:.3g} std {s:.3g}"
                             for label, lo, hi, m, s in zip(self.labels, self.minimum,
                                                            self.maximum, self.mean,
                                                            self.std, strict=True))
        if self.kind == "text":
            return f"{self.samples} text actions"
        freq = self.frequencies
        order = np.argsort(-freq, kind="stable")[:top]
        shown = ", ".join(f"{self.labels[i]}: {freq[i]:.1%}" for i in order)
        more = len(freq) - len(order)
        return shown + (f" (+{more} more)" if more > 0 else "")


@dataclass(frozen=True)
class Outcome:
    """How the terminated games of a turn-based (AEC) dataset ended for one agent.

    Read from the final rewards: the rewards of the last step of the game at which any agent
    was rewarded (where classic games hand out +1 / -1). A positive final reward is a win, a
    negative one a loss, zero (or no reward in the whole game) a draw. Truncated and unfinished
    games are left out: they have no result.
    """

    wins: int
    draws: int
    losses: int

    @property
    def games(self) -> int:
        """Terminated games counted."""
        return self.wins + self.draws + self.losses

    def share(self, count: int) -> float:
        """``count`` as a share of :attr:`games` (0 without games)."""
        return count / self.games if self.games else 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return {"wins": self.wins, "draws": self.draws, "losses": self.losses,
                "games": self.games}


@dataclass(frozen=True)
class AgentDescription:
    """Statistics of one agent.

    Attributes:
        name: the agent.
        returns: its undiscounted return per episode.
        active_steps: steps at which it was present (its observation row was active).
        acted_steps: steps at which it took an action.
        inactive_share: ``1 - active_steps / total_steps``.
        terminations, truncations: how many times its own flag was set.
        actions: one summary per leaf of its action space.
        outcome: win/draw/loss counts of a turn-based (AEC) game; ``None`` for other datasets.
    """

    name: str
    returns: Summary
    active_steps: int
    acted_steps: int
    inactive_share: float
    terminations: int
    truncations: int
    actions: tuple[ActionSummary, ...]
    outcome: Outcome | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return {"name": self.name, "returns": self.returns.to_dict(),
                "active_steps": self.active_steps, "acted_steps": self.acted_steps,
                "inactive_share": self.inactive_share, "terminations": self.terminations,
                "truncations": self.truncations,
                "actions": [a.to_dict() for a in self.actions],
                "outcome": None if self.outcome is None else self.outcome.to_dict()}


@dataclass(frozen=True, eq=False)
class DatasetDescription:
    """Everything :func:`describe` found out about a dataset or vault.

    Attributes:
        name: the dataset id, or the vault folder.
        kind: ``multi_agent``, ``single_agent`` (a plain Minari dataset, one agent
            ``agent_0``) or ``vault``.
        possible_agents: agent names in the environment's order.
        total_episodes, total_steps: counts over what was described.
        episode_lengths: summary of the steps per episode.
        team_returns: summary of the team return per episode (the sum of the team reward,
            Minari's ``rewards`` column, aggregated over agents as ``reward_aggregation`` says).
        agents: per-agent statistics, in ``possible_agents`` order.
        terminated_episodes, truncated_episodes: episodes whose last step terminated / was
            truncated; ``unfinished_episodes``: neither (a vault's last, cut-off episodes).
        inactive_share: share of agent-steps (steps x agents) at which the agent was absent.
        metadata: provenance (env descriptor, spaces, author, algorithm, code permalink,
            layout version...), JSON-serialisable.
        episode_returns: ``(E, N)`` per-agent return of every episode (for plots).
        episode_team_returns: ``(E,)`` team return of every episode.
        episode_length_values: ``(E,)`` steps of every episode.
        zero_sum: the agents' returns add up to zero in every episode (and are not all zero):
            the team return is then 0 by construction and the outcomes say more.
        coverage: SACo and OACo (:class:`Coverage`) when ``describe(..., coverage=True)``,
            else ``None``.
        statistics: ``False`` for a metadata-only description (``describe(...,
            statistics=False)``): name, agents, metadata (env, spaces, size), episode and step
            counts and episode lengths are known, nothing that needs the episodes' data was
            read (``agents`` is empty; :meth:`to_dict` gives ``None`` for returns, episode
            ends, inactive share and zero-sum; plots refuse it).
    """

    name: str
    kind: SourceKind
    possible_agents: tuple[str, ...]
    total_episodes: int
    total_steps: int
    episode_lengths: Summary
    team_returns: Summary
    agents: tuple[AgentDescription, ...]
    terminated_episodes: int
    truncated_episodes: int
    unfinished_episodes: int
    inactive_share: float
    metadata: dict[str, Any] = field(default_factory=dict)
    episode_returns: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)), repr=False)
    episode_team_returns: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)
    episode_length_values: np.ndarray = field(
        default_factory=lambda: np.zeros(0, dtype=np.int64), repr=False)
    zero_sum: bool = False
    coverage: Coverage | None = None
    statistics: bool = True

    @property
    def label(self) -> str:
        """A short name for legends and titles: the dataset id, or ``vault_name/vault_uid``
        for a vault (its full path is :attr:`name`)."""
        if self.kind == "vault" and self.metadata.get("vault_name"):
            return f"{self.metadata['vault_name']}/{self.metadata.get('vault_uid')}"
        return self.name

    @property
    def has_outcomes(self) -> bool:
        """Whether the agents carry win/draw/loss counts (turn-based games)."""
        return any(agent.outcome is not None for agent in self.agents)

    def agent_spaces(self) -> list[tuple[str, str, str]]:
        """``(agent, observation space, action space)`` of every possible agent, the spaces
        as the metadata writes them (``-`` where it has none)."""
        observation_spaces = self.metadata.get("observation_spaces") or {}
        action_spaces = self.metadata.get("action_spaces") or {}
        return [(agent, observation_spaces.get(agent, "-"), action_spaces.get(agent, "-"))
                for agent in self.possible_agents]

    def agent(self, name: str) -> AgentDescription:
        """The statistics of agent ``name``."""
        for agent in self.agents:
            if agent.name == name:
                return agent
        raise UnknownAgentError(
            f"no agent {name!r} in {self.name}; its agents are "
            f"{', '.join(self.possible_agents)}")

    def to_dict(self, *, include_episodes: bool = False) -> dict[str, Any]:
        """A JSON-serialisable dict (``include_episodes`` adds the per-episode arrays)."""
        read = self.statistics
        out: dict[str, Any] = {
            "name": self.name, "kind": self.kind, "possible_agents": list(self.possible_agents),
            "statistics": read,
            "total_episodes": self.total_episodes, "total_steps": self.total_steps,
            "episode_lengths": self.episode_lengths.to_dict(),
            "team_returns": self.team_returns.to_dict() if read else None,
            "normalized_team_returns": (None if self.normalized_team_returns is None
                                        else self.normalized_team_returns.to_dict()),
            "terminated_episodes": self.terminated_episodes if read else None,
            "truncated_episodes": self.truncated_episodes if read else None,
            "unfinished_episodes": self.unfinished_episodes if read else None,
            "inactive_share": self.inactive_share if read else None,
            "zero_sum": self.zero_sum if read else None,
            "coverage": None if self.coverage is None else self.coverage.to_dict(),
            "agents": [a.to_dict() for a in self.agents],
            "metadata": self.metadata,
        }
        if include_episodes:
            out["episodes"] = {
                "lengths": self.episode_length_values.tolist(),
                "team_returns": self.episode_team_returns.tolist(),
                "returns": self.episode_returns.tolist(),
            }
        return out

    def to_json(self, **kwargs: Any) -> str:
        """:meth:`to_dict` as strict JSON (:func:`json_document`: ``null`` for NaN;
        keyword arguments go to ``json.dumps``)."""
        return json_document(self.to_dict(), **kwargs)

    def to_text(self) -> str:
        """A short plain-text report (what ``marl-minari describe`` prints)."""
        if not self.statistics:
            return self._metadata_text()
        lines = [
            f"{'dataset' if self.kind != 'vault' else 'vault'}        {self.name} ({self.kind})",
            f"environment    {env_name(self.metadata)}",
            f"agents         {', '.join(self.possible_agents)}",
            f"episodes       {self.total_episodes}  (terminated {self.terminated_episodes}, "
            f"truncated {self.truncated_episodes}, unfinished {self.unfinished_episodes})",
            f"steps          {self.total_steps}  (length {self.episode_lengths.brief()})",
            f"team return    {self._team_return_text()}",
        ]
        normalized = self.normalized_team_returns
        if normalized is not None:
            lines.append(f"normalised     {normalized.brief()}  (by ref_min_score "
                         f"{self.metadata['ref_min_score']:g}, ref_max_score "
                         f"{self.metadata['ref_max_score']:g}, as minari.get_normalized_score)")
        lines += [
            f"inactive       {self.inactive_share:.2%} of agent-steps",
        ]
        coverage = self.coverage
        if coverage is not None:
            lines.append(f"coverage       {coverage.brief()}")
        header = "agent            return mean       std       min    median       max  inactive"
        lines.append(header + ("    OACo" if coverage is not None else ""))
        for agent in self.agents:
            r = agent.returns
            lines.append(f"{agent.name:<15} {num(r.mean):>12} {num(r.std):>9} "
                         f"{num(r.min):>9} {num(r.median):>9} {num(r.max):>9} "
                         f"{agent.inactive_share:>8.1%}"
                         + (f" {coverage.agents[agent.name]:>7.4f}" if coverage is not None
                            else ""))
        for agent in self.agents:
            for action in agent.actions:
                lines.append(f"actions {agent.name}{'/' + action.path if action.path else ''}: "
                             f"{action.text()}")
        if self.has_outcomes:
            games = max(a.outcome.games for a in self.agents if a.outcome is not None)
            lines.append(f"outcomes       of {games} terminated games (from the final rewards)")
            lines.append("agent                   wins     draws    losses")
            for agent in self.agents:
                if agent.outcome is not None:
                    o = agent.outcome
                    lines.append(f"{agent.name:<15} {o.wins:>12} {o.draws:>9} {o.losses:>9}")
        return "\n".join(lines)

    def _metadata_text(self) -> str:
        """The report of a metadata-only description: what the metadata, the manifest and
        the offset index say, and how to read the rest."""
        meta = self.metadata
        lines = [
            f"{'dataset' if self.kind != 'vault' else 'vault'}        {self.name} ({self.kind})",
            f"environment    {env_name(meta)}",
            f"agents         {', '.join(self.possible_agents)}",
            f"episodes       {self.total_episodes}",
            f"steps          {self.total_steps}  (length {self.episode_lengths.brief()})",
        ]
        if meta.get("dataset_size") is not None:
            lines.append(f"size           {meta['dataset_size']} MB")
        for agent, observation_space, action_space in self.agent_spaces():
            lines.append(f"spaces {agent}: observation {observation_space}; "
                         f"action {action_space}")
        if meta.get("state_space"):
            lines.append(f"state          {meta['state_space']}")
        lines.append("statistics     not read (metadata only): returns, actions and agents "
                     "need the episodes read (statistics=True; drop --no-statistics)")
        return "\n".join(lines)

    @property
    def normalized_team_returns(self) -> Summary | None:
        """Team returns normalised by the reference scores, as
        ``minari.get_normalized_score`` does: ``(return - ref_min_score) / (ref_max_score -
        ref_min_score)``; ``None`` unless both scores exist and differ."""
        scores = [self.metadata.get("ref_min_score"), self.metadata.get("ref_max_score")]
        if not self.statistics or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in scores):
            return None
        low, high = float(scores[0]), float(scores[1])  # type: ignore[arg-type]
        if high == low:
            return None
        return Summary.of((self.episode_team_returns - low) / (high - low))

    @property
    def team_return_always_zero(self) -> bool:
        """A zero-sum game whose team return (sum or mean aggregation) is 0 in every
        episode: reports show the outcomes instead of a column of zeros."""
        return self.zero_sum and self.team_returns.min == 0 == self.team_returns.max

    def _team_return_text(self) -> str:
        if self.team_return_always_zero:
            return "0 in every episode: the agents' returns add up to zero (zero-sum game)"
        return self.team_returns.brief()
