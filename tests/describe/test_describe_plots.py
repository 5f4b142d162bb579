"""``marl_minari.describe`` figures: panels chosen from the data (2 to 20 agents), one figure
title and legend, bins from the data, outcomes of turn-based games, the user's backend left
alone."""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from marl_minari.describe import (
    MANY_AGENTS,
    PANEL_SIZE,
    ActionSummary,
    DatasetDescription,
    describe,
    draw_descriptions,
    plot_descriptions,
    plot_layout,
    plot_panels,
)
from marl_minari.describe._draw import MAX_BINS, bin_edges
from marl_minari.describe.plots import HEADER_HEIGHT, LEGEND_ROW_HEIGHT
from marl_minari.errors import InvalidOptionError, MarlMinariError

Recorder = Callable[..., tuple[Any, list[dict[str, Any]]]]
KAZ = ("butterfly/knights_archers_zombies_v11",
       {"max_cycles": 150, "spawn_delay": 1, "line_death": True})
SPREAD = ("mpe2/simple_spread_v3", {"max_cycles": 10})
SPREAD_CONTINUOUS = ("mpe2/simple_spread_v3", {"max_cycles": 8, "continuous_actions": True})


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG header, read without PIL."""
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def panel_axes(figure: Any) -> list[Any]:
    """The figure's panels (colour bars are axes too, but not panels)."""
    return [ax for ax in figure.axes if ax.get_label() != "<colorbar>"]


def texts(ax: Any) -> str:
    return " ".join(t.get_text() for t in ax.texts)


def check_structure(figure: Any, descriptions: list[DatasetDescription]) -> None:
    """One axes per panel, titled; a figure title naming every dataset; one figure legend
    (one entry per dataset, in its colour) when comparing and none in any panel."""
    panels = plot_panels(descriptions)
    axes = panel_axes(figure)
    assert len(axes) == len(panels)
    assert all(ax.get_title() for ax in axes)
    assert all(ax.get_legend() is None for ax in figure.axes)
    title = figure.get_suptitle()
    for d in descriptions:
        assert d.label in title
    if len(descriptions) == 1:
        assert figure.legends == []
    else:
        (legend,) = figure.legends
        assert [t.get_text() for t in legend.get_texts()] == [d.label for d in descriptions]
        assert [h.get_facecolor() for h in legend.legend_handles] == [
            pytest.approx(_rgba(f"C{k}")) for k in range(len(descriptions))]


def _rgba(color: str) -> tuple[float, ...]:
    from matplotlib.colors import to_rgba

    return tuple(to_rgba(color))


# --------------------------------------------------------------------------- a few agents
def check_return_groups(panels: list[Any], descriptions: list[DatasetDescription]) -> None:
    """Return panels cover every agent once; agents sharing a panel have equal returns in
    every description, agents of different panels do not."""
    groups = [p.agents for p in panels if p.kind == "returns"]
    agents = list(dict.fromkeys(a for d in descriptions for a in d.possible_agents))
    assert sorted(a for g in groups for a in g) == sorted(agents)

    def column(agent: str) -> list[Any]:
        return [d.episode_returns[:, d.possible_agents.index(agent)].tolist()
                if agent in d.possible_agents else None for d in descriptions]

    for group in groups:
        assert all(column(a) == column(group[0]) for a in group)
    firsts = [column(g[0]) for g in groups]
    assert all(firsts[i] != firsts[j] for i in range(len(firsts)) for j in range(i))


def test_compare_few_agents(record_parallel: Recorder, tmp_path: Path) -> None:
    record_parallel(KAZ[0], episodes=2, dataset_id="tests/kaz-v0", **KAZ[1])
    record_parallel(SPREAD[0], episodes=3, dataset_id="tests/spread-v0", **SPREAD[1])
    record_parallel(SPREAD[0], episodes=4, dataset_id="tests/long-v0", max_cycles=25)
    record_parallel(SPREAD_CONTINUOUS[0], episodes=2, dataset_id="tests/cont-v0",
                    **SPREAD_CONTINUOUS[1])
    kaz, spread, long, cont = (describe(f"tests/{n}-v0")
                               for n in ("kaz", "spread", "long", "cont"))

    # 3 agents: a return panel per group of equal returns, an action panel per agent
    panels = plot_panels([spread, long])
    kinds = [p.kind for p in panels]
    assert kinds[:2] == ["lengths", "team"] and kinds[-3:] == ["actions"] * 3
    check_return_groups(panels, [spread, long])
    figure = draw_descriptions([spread, long])
    check_structure(figure, [spread, long])
    assert figure.get_suptitle() == "tests/spread-v0 vs tests/long-v0"

    # KAZ's 4 agents and spread's 3: 7 distinct action panels are too many: one heat map of
    # agents by actions per dataset instead
    panels = plot_panels([kaz, spread])
    assert [(p.kind, p.dataset) for p in panels if p.kind.startswith("actions")] == [
        ("actions_by_agent", 0), ("actions_by_agent", 1)]
    figure = draw_descriptions([kaz, spread])
    check_structure(figure, [kaz, spread])
    assert figure.get_suptitle() == "tests/kaz-v0 vs tests/spread-v0"
    agents = [*kaz.possible_agents, *spread.possible_agents]
    for k, d in enumerate((kaz, spread)):
        heat = panel_axes(figure)[-2 + k]
        assert heat.get_title() == f"actions by agent: {d.name}"
        width = {"tests/kaz-v0": 6, "tests/spread-v0": 5}[d.name]  # Discrete(6), Discrete(5)
        expected = np.full((7, width), np.nan)  # every agent a row; absent agents blank
        for i, agent in enumerate(agents):
            if agent in d.possible_agents:
                freq = d.agent(agent).actions[0].frequencies
                expected[i, :len(freq)] = freq
        (image,) = heat.get_images()
        np.testing.assert_allclose(np.ma.filled(image.get_array(), np.nan), expected)
    assert len(figure.axes) == len(panels) + 2  # the heat maps' colour bars

    out = plot_descriptions([kaz, spread], tmp_path / "plots" / "compare.png")
    rows, columns = plot_layout([kaz, spread])
    assert rows * columns >= len(panels) > (rows - 1) * columns and columns == 4
    assert png_size(out) == (4 * PANEL_SIZE[0],
                             rows * PANEL_SIZE[1] + HEADER_HEIGHT + LEGEND_ROW_HEIGHT)
    with Image.open(out) as image:
        image.load()
        assert len(set(image.convert("RGB").getdata())) > 10  # something was drawn

    # discrete and continuous actions of the same agents: the continuous dataset is named
    # as not shown in the (discrete) action panels, at half resolution
    figure = draw_descriptions([spread, cont], labels=["d", "c"], dpi=50)
    actions = [ax for ax in panel_axes(figure) if ax.get_title().startswith("actions")]
    assert len(actions) == 3 and all("not shown: c (continuous)" in texts(ax) for ax in actions)
    out = plot_descriptions([spread, cont], tmp_path / "mixed.png", labels=["d", "c"], dpi=50)
    assert png_size(out)[0] == 4 * PANEL_SIZE[0] // 2

    # one dataset: a title with its id and environment, no legend
    figure = draw_descriptions([cont])
    check_structure(figure, [cont])
    assert "mpe2/simple_spread_v3" in figure.get_suptitle()
    assert png_size(plot_descriptions([cont], tmp_path / "one.png")) == (
        4 * PANEL_SIZE[0], 2 * PANEL_SIZE[1] + HEADER_HEIGHT)

    for bad in ({"labels": ["a", "b"]}, {"bins": 0}, {"bins": "many"}):
        with pytest.raises(InvalidOptionError) as caught:
            plot_descriptions([kaz], tmp_path / "x.png", **bad)
        assert isinstance(caught.value, MarlMinariError)
    with pytest.raises(InvalidOptionError, match="at least one"):
        plot_descriptions([], tmp_path / "x.png")


def test_vault_label_is_short(record_parallel: Recorder, tmp_path: Path) -> None:
    from marl_minari.adapters import to_vault

    record_parallel(SPREAD[0], episodes=2, dataset_id="tests/spread-v0", **SPREAD[1])
    to_vault("tests/spread-v0", rel_dir=tmp_path / "vaults", vault_name="spread", vault_uid="Good")
    description = describe(tmp_path / "vaults" / "spread" / "Good")
    assert description.name == str((tmp_path / "vaults" / "spread" / "Good").resolve())
    assert description.label == "spread/Good"
    figure = draw_descriptions([describe("tests/spread-v0"), description])
    assert figure.get_suptitle() == "tests/spread-v0 vs spread/Good"
    assert str(tmp_path) not in figure.get_suptitle()


# --------------------------------------------------------------------------- many agents
def first_dimension(d: DatasetDescription) -> DatasetDescription:
    """``d`` with every agent's continuous action cut to its first dimension (the shape of
    pistonball's pistons, which are slow to record)."""
    def cut(a: ActionSummary) -> ActionSummary:
        return dataclasses.replace(a, labels=a.labels[:1], minimum=a.minimum[:1],
                                   maximum=a.maximum[:1], mean=a.mean[:1], std=a.std[:1])

    agents = tuple(dataclasses.replace(agent, actions=tuple(cut(a) for a in agent.actions))
                   for agent in d.agents)
    return dataclasses.replace(d, agents=agents, name=d.name + "-1d")


def test_twenty_agents_are_summarised(record_parallel: Recorder, tmp_path: Path) -> None:
    """20 agents sharing one global reward (as pistonball's 20 pistons do): the identical
    return histograms become one panel with a note; actions of the 20 agents are one heat map
    per dataset (shares of discrete actions, mean per dimension of continuous ones), or one
    shared panel for one-dimensional continuous actions."""
    record_parallel(SPREAD[0], episodes=2, dataset_id="tests/many-v0", N=20, local_ratio=0.0,
                    max_cycles=4, continuous_actions=True)
    record_parallel(SPREAD[0], episodes=2, dataset_id="tests/many-discrete-v0", N=20,
                    local_ratio=0.0, max_cycles=4)
    cont, disc = describe("tests/many-v0"), describe("tests/many-discrete-v0")
    agents = cont.possible_agents
    assert len(agents) == 20 and disc.possible_agents == agents
    assert (cont.episode_returns == cont.episode_returns[:, :1]).all()  # identical returns

    panels = plot_panels([cont, disc])
    assert [(p.kind, p.agents, p.dataset) for p in panels] == [
        ("lengths", (), None), ("team", (), None), ("returns", agents, None),
        ("actions_by_agent", agents, 0), ("actions_by_agent", agents, 1)]
    figure = draw_descriptions([cont, disc])
    check_structure(figure, [cont, disc])
    returns, means, shares = panel_axes(figure)[2:]
    assert returns.get_title() == "return of 20 agents"
    assert "identical for 20 agents" in texts(returns) and "agent_19" in texts(returns)
    assert means.get_title() == "mean actions by agent: tests/many-v0"
    np.testing.assert_allclose(means.get_images()[0].get_array(),
                               [cont.agent(a).actions[0].mean for a in agents])
    assert shares.get_title() == "actions by agent: tests/many-discrete-v0"
    np.testing.assert_allclose(shares.get_images()[0].get_array(),
                               [disc.agent(a).actions[0].frequencies for a in agents])
    assert len(figure.axes) == len(panels) + 2  # the heat maps' colour bars
    assert len(means.get_yticklabels()) <= 16  # every k-th agent labelled

    one_d = first_dimension(cont)
    panels = plot_panels([one_d])
    assert [p.kind for p in panels] == ["lengths", "team", "returns", "actions_by_agent"]
    figure = draw_descriptions([one_d])
    check_structure(figure, [one_d])
    actions = panel_axes(figure)[3]
    assert actions.get_title() == "actions, 20 agents"
    assert 5 < len(actions.get_xticklabels()) <= 16
    # one dot per agent at its mean action, in agent order
    dots = np.concatenate([np.asarray(line.get_ydata(), dtype=float)
                           for line in actions.get_lines() if line.get_marker() == "o"])
    np.testing.assert_allclose(dots, [cont.agent(a).actions[0].mean[0] for a in agents])
    assert png_size(plot_descriptions([one_d], tmp_path / "many.png")) == (
        4 * PANEL_SIZE[0], PANEL_SIZE[1] + HEADER_HEIGHT)


def test_identical_panels_collapse_below_the_summary_threshold(record_parallel: Recorder
                                                               ) -> None:
    # local_ratio=0: every agent earns the global reward only, so all returns are equal
    record_parallel(SPREAD[0], episodes=3, dataset_id="tests/shared-v0", local_ratio=0.0,
                    **SPREAD[1])
    d = describe("tests/shared-v0")
    assert len(d.possible_agents) == 3 <= MANY_AGENTS
    panels = plot_panels([d])
    # one return panel for the 3 identical returns; random actions differ: 3 action panels
    assert [p.kind for p in panels] == ["lengths", "team", "returns"] + ["actions"] * 3
    assert panels[2].agents == d.possible_agents
    figure = draw_descriptions([d])
    assert panel_axes(figure)[2].get_title() == "return of agent_0, agent_1, agent_2"
    assert "identical for 3 agents" in texts(panel_axes(figure)[2])


# --------------------------------------------------------------------------- bins
def test_bins_are_chosen_from_the_data() -> None:
    rng = np.random.default_rng(0)
    ten = rng.normal(size=10)
    assert len(bin_edges([ten], "auto")) - 1 <= 10  # never more bins than episodes
    many = rng.normal(size=100_000)
    assert len(bin_edges([many], "auto")) - 1 == MAX_BINS
    assert 5 < len(bin_edges([many[:500]], "auto")) - 1 < MAX_BINS
    # integer data: one bin per value, centred on it
    lengths = np.asarray([25] * 10 + [10, 12, 11, 25, 13, 14, 24, 20, 18, 17])
    np.testing.assert_array_equal(bin_edges([lengths], "auto"), np.arange(9.5, 26.0))
    # ... unless there are more values than episodes: whole numbers of values per bin
    edges = bin_edges([np.asarray([10, 25, 12, 11, 20, 17])], "auto")
    assert len(edges) - 1 <= 6
    widths = np.diff(edges)
    assert (widths == widths[0]).all() and widths[0] == round(widths[0]) > 1
    assert edges[0] == 9.5 and edges[-1] >= 25.5
    np.testing.assert_array_equal(bin_edges([np.asarray([7, 7])], "auto"), [6.5, 7.5])
    # a number is taken as is, shared by every sample
    edges = bin_edges([ten, ten + 5], 30)
    assert len(edges) == 31 and edges[0] == ten.min() and edges[-1] == ten.max() + 5


# --------------------------------------------------------------------------- backend
def test_plotting_leaves_the_backend_alone(record_parallel: Recorder, tmp_path: Path) -> None:
    import matplotlib

    record_parallel(SPREAD[0], episodes=2, dataset_id="tests/spread-v0", **SPREAD[1])
    description = describe("tests/spread-v0")
    before = matplotlib.get_backend()
    matplotlib.use("svg")
    try:
        plot_descriptions([description], tmp_path / "p.png")
        assert matplotlib.get_backend() == "svg"
    finally:
        matplotlib.use(before)
    assert png_size(tmp_path / "p.png")[0] == 4 * PANEL_SIZE[0]


# --------------------------------------------------------------------------- outcomes
def replay_outcomes(games: int) -> dict[str, list[int]]:
    """Win/draw/loss per player of the games ``record_tictactoe`` plays, replayed on a plain
    PettingZoo env: the reward ``last()`` hands each player when its game is over."""
    from pettingzoo.classic import tictactoe_v3

    counts = {"player_1": [0, 0, 0], "player_2": [0, 0, 0]}
    env = tictactoe_v3.env()
    for game in range(games):
        env.reset(seed=game)
        rng = np.random.default_rng(game)
        for agent in env.agent_iter():
            observation, reward, terminated, truncated, _ = env.last()
            if terminated or truncated:
                counts[agent][0 if reward > 0 else 2 if reward < 0 else 1] += 1
            env.step(None if terminated or truncated else int(
                rng.choice(np.flatnonzero(observation["action_mask"]))))
    env.close()
    return counts


def test_turn_based_outcomes(record_tictactoe: Callable[..., Any], tmp_path: Path) -> None:
    record_tictactoe("tests/ttt-v0", 12)
    d = describe("tests/ttt-v0")
    expected = replay_outcomes(12)
    assert expected["player_1"][0] and expected["player_2"][2]  # wins and losses to count
    for agent, (wins, draws, losses) in expected.items():
        outcome = d.agent(agent).outcome
        assert outcome is not None
        assert (outcome.wins, outcome.draws, outcome.losses) == (wins, draws, losses)
        assert outcome.games == 12
    assert d.zero_sum and d.team_return_always_zero

    text = d.to_text()
    assert "zero-sum" in text and "outcomes       of 12 terminated games" in text
    p1 = d.agent("player_1").outcome
    assert f"player_1        {p1.wins:>12} {p1.draws:>9} {p1.losses:>9}" in text
    payload = d.to_dict()
    assert payload["zero_sum"] is True
    assert payload["agents"][0]["outcome"] == {"wins": p1.wins, "draws": p1.draws,
                                               "losses": p1.losses, "games": 12}

    # the figure: an outcome panel instead of the team return (always 0)
    panels = plot_panels([d])
    assert [p.kind for p in panels][:2] == ["lengths", "outcomes"]
    figure = draw_descriptions([d])
    outcome_ax = panel_axes(figure)[1]
    assert outcome_ax.get_title() == "outcomes of 12 games: tests/ttt-v0"
    tops = [patch.get_y() + patch.get_height() for patch in outcome_ax.patches]
    assert max(tops) == pytest.approx(1.0)

    from marl_minari.describe import dataset_card

    card = dataset_card(d, tmp_path / "README.md").read_text()
    assert "### Outcomes" in card and "| team |" not in card
    assert (f"| `player_1` | {p1.wins} ({p1.share(p1.wins):.1%}) | {p1.draws} "
            f"({p1.share(p1.draws):.1%}) | {p1.losses} ({p1.share(p1.losses):.1%}) |") in card


def test_parallel_datasets_have_no_outcomes(record_parallel: Recorder) -> None:
    record_parallel(SPREAD[0], episodes=2, dataset_id="tests/spread-v0", **SPREAD[1])
    d = describe("tests/spread-v0")
    assert not d.has_outcomes and not d.zero_sum
    assert "outcomes" not in d.to_text()
    assert all(a["outcome"] is None for a in d.to_dict()["agents"])


def test_twenty_different_returns_share_one_panel(record_parallel: Recorder) -> None:
    record_parallel(SPREAD[0], episodes=3, dataset_id="tests/many-v0", N=20, local_ratio=0.0,
                    max_cycles=4)
    shared = describe("tests/many-v0")
    # the same dataset with every agent's returns shifted apart: 20 distinct histograms
    d = dataclasses.replace(shared, episode_returns=shared.episode_returns + np.arange(20))
    panels = plot_panels([d, shared])
    assert [p.kind for p in panels][:3] == ["lengths", "team", "returns_by_agent"]
    figure = draw_descriptions([d, shared])
    check_structure(figure, [d, shared])
    by_agent = panel_axes(figure)[2]
    assert by_agent.get_title() == "return per episode, 20 agents"
    medians = [np.asarray(line.get_ydata(), dtype=float) for line in by_agent.get_lines()
               if line.get_marker() == "o"]
    np.testing.assert_allclose(medians[0], np.median(d.episode_returns, axis=0))
    np.testing.assert_allclose(medians[1], np.median(shared.episode_returns, axis=0))
