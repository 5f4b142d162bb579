"""AECDataCollector on real turn-based PettingZoo games, read back through the layout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import minari
import numpy as np
import pytest
from pettingzoo.test import api_test

import marl_minari as mm
from marl_minari.format import layout
from marl_minari.format.spaces import leaves
from marl_minari.rows.turns import agent_transitions

META = {"algorithm_name": "random", "author": "tests", "author_email": "tests@example.com",
        "code_permalink": "https://example.com/tests", "description": "AEC test recording"}


@dataclass
class Turn:
    """One turn of one agent, as the policy saw it through ``last()``."""

    agent: str
    reward: float
    terminated: bool
    truncated: bool
    observation: Any
    action: Any  # None on a dead turn
    mask: np.ndarray | None


@dataclass
class Played:
    """What one episode handed out while it was recorded."""

    seed: int
    turns: list[Turn] = field(default_factory=list)
    cut: bool = False

    def of(self, agent: str) -> list[Turn]:
        return [t for t in self.turns if t.agent == agent]

    def handed(self, agent: str) -> float:
        total = 0.0
        for turn in self.of(agent):
            total += turn.reward
        return total

    def actions_taken(self, agent: str) -> int:
        return sum(t.action is not None for t in self.of(agent))


def mask_of(observation: Any, info: dict[str, Any]) -> np.ndarray | None:
    if isinstance(observation, dict) and "action_mask" in observation:
        return np.asarray(observation["action_mask"])
    if "action_mask" in info:
        return np.asarray(info["action_mask"])
    return None


def legal_action(env: Any, agent: str, mask: np.ndarray | None,
                 rng: np.random.Generator) -> Any:
    """A uniformly random legal action (from the mask when the env gives one)."""
    if mask is not None:
        return int(rng.choice(np.flatnonzero(mask)))
    return int(rng.integers(env.action_space(agent).n))


def play_aec(env: Any, episodes: int, seed: int = 0, max_steps: int | None = None) -> list[Played]:
    """Play random legal games; stop an episode after ``max_steps`` steps (it is then cut)."""
    played = []
    for episode in range(episodes):
        record = Played(seed=seed + episode)
        env.reset(seed=record.seed)
        rng = np.random.default_rng(record.seed)
        for agent in env.agent_iter():
            if max_steps is not None and len(record.turns) >= max_steps:
                record.cut = True
                break
            observation, reward, terminated, truncated, info = env.last()
            mask = mask_of(observation, info)
            action = None if terminated or truncated else legal_action(env, agent, mask, rng)
            record.turns.append(Turn(agent, float(reward), terminated, truncated,
                                     observation, action, mask))
            env.step(action)
        played.append(record)
    return played


def record(env_id: str, episodes: int, dataset_id: str, *, max_steps: int | None = None,
           observe_every_agent: bool = True,
           **env_kwargs: Any) -> tuple[mm.MultiAgentDataset, list[Played]]:
    env = mm.AECDataCollector(mm.make_env(env_id, api="aec", **env_kwargs),
                              observe_every_agent=observe_every_agent)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        played = play_aec(env, episodes, max_steps=max_steps)
    # These games follow the AEC reward contract: no reward correction was needed.
    assert not [w for w in caught if "does not add up" in str(w.message)]
    if played[-1].cut:
        env.reset()  # ends the game in progress: saved as truncated (create_dataset never cuts)
    dataset = env.create_dataset(dataset_id, **META)
    env.close()
    return dataset, played


def same_tree(a: Any, b: Any) -> bool:
    flat_a, flat_b = dict(leaves(a)), dict(leaves(b))
    return flat_a.keys() == flat_b.keys() and all(
        np.array_equal(np.asarray(flat_a[k]), np.asarray(flat_b[k])) for k in flat_a)


def row(tree: Any, index: int) -> Any:
    return {p: np.asarray(v)[index] for p, v in leaves(tree)} if isinstance(
        tree, (dict, tuple)) else np.asarray(tree)[index]


def flat(observation: Any) -> Any:
    return {p: np.asarray(v) for p, v in leaves(observation)} if isinstance(
        observation, (dict, tuple)) else np.asarray(observation)


def same_obs(stored_row: Any, observation: Any) -> bool:
    if isinstance(stored_row, dict):
        seen = flat(observation)
        return stored_row.keys() == seen.keys() and all(
            np.array_equal(stored_row[k], seen[k]) for k in seen)
    return bool(np.array_equal(stored_row, np.asarray(observation)))


def check_against_play(dataset: mm.MultiAgentDataset, played: list[Played]) -> None:
    """Returns, turn counts, selections, observations and masks equal what was handed out."""
    assert dataset.spec.api == "aec"
    assert dataset.metadata[layout.METADATA_KEY][layout.META_API] == "aec"
    assert dataset.total_episodes == len(played)
    agents = dataset.possible_agents
    for episode, record_ in zip(dataset, played, strict=True):
        assert episode.seed == record_.seed
        assert episode.total_steps == len(record_.turns)
        selection = episode.extras[layout.AGENT_SELECTION]
        assert [agents[i] for i in selection[:-1]] == [t.agent for t in record_.turns]
        if not record_.cut:
            assert selection[-1] == -1
            assert not episode.active[-1].any()
        if record_.cut:
            assert episode.episode_truncations[-1] and not episode.episode_terminations[-1]
        else:
            assert episode.episode_terminations[-1] or episode.episode_truncations[-1]
        for agent in agents:
            column = agents.index(agent)
            if not record_.cut:
                assert episode.returns[agent] == record_.handed(agent)
            assert episode.agent_steps[agent] == record_.actions_taken(agent)
        for step, turn in enumerate(record_.turns):
            column = agents.index(turn.agent)
            assert episode.acted[step].sum() == (turn.action is not None)
            assert bool(episode.acted[step, column]) == (turn.action is not None)
            assert same_obs(row(episode.observations[turn.agent], step), turn.observation)
            if turn.action is not None:
                assert int(np.asarray(episode.actions[turn.agent])[step]) == turn.action
        # Rows handed to an agent at its turns add up to what last() returned (exactly).
        for agent in agents:
            column = agents.index(agent)
            turns = [s for s, t in enumerate(record_.turns) if t.agent == agent]
            for previous, current in zip([0, *turns], turns, strict=False):
                credited = 0.0
                for value in episode.rewards[previous:current, column]:
                    credited += value
                assert credited == record_.turns[current].reward


def check_transitions(dataset: mm.MultiAgentDataset, played: list[Played]) -> None:
    """agent_transitions: one per action, rewards/dones/masks as handed by last()."""
    for agent in dataset.possible_agents:
        transitions = agent_transitions(dataset, agent)
        expected = []
        for position, record_ in enumerate(played):
            turns = record_.of(agent)
            for i, turn in enumerate(turns):
                if turn.action is None:
                    continue
                following = turns[i + 1] if i + 1 < len(turns) else None
                expected.append((position, turn, following, record_.cut))
        assert len(transitions) == len(expected)
        for k, (position, turn, following, cut) in enumerate(expected):
            assert transitions.episode_ids[k] == position
            assert int(np.asarray(transitions.actions)[k]) == turn.action
            assert same_obs(row(transitions.observations, k), turn.observation)
            if turn.mask is not None:
                assert transitions.action_masks is not None
                np.testing.assert_array_equal(transitions.action_masks[k], turn.mask)
                assert turn.mask[turn.action] == 1
            if following is not None:
                assert transitions.rewards[k] == following.reward
                assert same_obs(row(transitions.next_observations, k), following.observation)
                assert bool(transitions.terminations[k]) == following.terminated
                assert bool(transitions.truncations[k]) == following.truncated
                if following.mask is not None:
                    assert transitions.next_action_masks is not None
                    np.testing.assert_array_equal(transitions.next_action_masks[k],
                                                  following.mask)
            else:
                assert cut and transitions.dones[k]
        # The last transition of every finished episode is done.
        ends = np.r_[transitions.episode_ids[1:] != transitions.episode_ids[:-1], True]
        assert transitions.dones[ends].all()


def check_minari_reads(dataset_id: str) -> None:
    """Plain Minari opens the dataset and iterates every episode with aligned rows."""
    plain = minari.load_dataset(dataset_id)
    steps = 0
    for episode in plain.iterate_episodes():
        length = len(episode.rewards)
        steps += length
        for agent, observation in episode.observations.items():
            for _, leaf in leaves(observation):
                assert len(leaf) == length + 1, agent
        for _, leaf in leaves(episode.actions):
            assert len(leaf) == length
        marl = episode.infos[layout.INFOS_GROUP]
        if plain.storage.metadata[layout.METADATA_KEY][layout.META_API] == "aec":
            assert len(marl[layout.EXTRAS][layout.AGENT_SELECTION]) == length + 1
        assert marl[layout.AGENT_REWARDS].shape[0] == length + 1
    assert steps == plain.total_steps


def record_and_check(env_id: str, episodes: int, dataset_id: str,
                     **kwargs: Any) -> tuple[mm.MultiAgentDataset, list[Played]]:
    """:func:`record`, then the three checks every recorded game must pass."""
    dataset, played = record(env_id, episodes, dataset_id, **kwargs)
    check_against_play(dataset, played)
    check_transitions(dataset, played)
    check_minari_reads(dataset_id)
    return dataset, played


def test_tictactoe_records_turns_exactly() -> None:
    dataset, played = record_and_check("classic/tictactoe-v3", 6, "ttt/random-v0")
    episode = dataset[0]
    assert episode.episode_terminations[-1] and not episode.episode_truncations[-1]
    # Other agents' action entries hold the fill value.
    for agent in dataset.possible_agents:
        column = dataset.possible_agents.index(agent)
        assert (np.asarray(episode.actions[agent])[~episode.acted[:, column]] == 0).all()


def test_tictactoe_replays_from_descriptor_and_seed() -> None:
    dataset, _ = record("classic/tictactoe-v3", 4, "ttt/replay-v0")
    agents = dataset.possible_agents
    for episode in dataset:
        env = dataset.recover_environment()
        env.reset(seed=episode.seed)
        selection = episode.extras[layout.AGENT_SELECTION]
        for step in range(episode.total_steps + 1):
            live = [a for a in agents if episode.active[step, agents.index(a)]]
            assert live == list(env.agents)
            assert selection[step] == (agents.index(env.agent_selection) if env.agents else -1)
            for agent in live:
                assert same_obs(row(episode.observations[agent], step), env.observe(agent))
            if step == episode.total_steps:
                break
            agent = agents[selection[step]]
            acted = episode.acted[step, agents.index(agent)]
            env.step(int(np.asarray(episode.actions[agent])[step]) if acted else None)
        assert not env.agents
        env.close()


def test_observing_only_the_selected_agent_repeats_latest_observations() -> None:
    dataset, played = record_and_check("classic/connect_four-v3", 3, "c4/turns-v0",
                                       observe_every_agent=False)
    agents = dataset.possible_agents
    for episode, record_ in zip(dataset, played, strict=True):
        observed = episode.extras[layout.OBSERVED]
        selection = episode.extras[layout.AGENT_SELECTION]
        assert observed.shape == episode.active.shape
        np.testing.assert_array_equal(observed[0], episode.active[0])  # all at reset
        for step in range(1, episode.total_steps + 1):
            expected = np.zeros(len(agents), dtype=bool)
            if selection[step] >= 0:
                expected[selection[step]] = True
            np.testing.assert_array_equal(observed[step], expected)
        # A row not observed repeats the agent's latest observation (from its last turn).
        for agent in agents:
            column = agents.index(agent)
            latest = 0
            for step in range(episode.total_steps + 1):
                if not episode.active[step, column]:
                    continue
                if observed[step, column]:
                    latest = step
                assert same_tree(row(episode.observations[agent], step),
                                 row(episode.observations[agent], latest))
        assert [t.agent for t in record_.turns] == [agents[i] for i in selection[:-1]]


def test_connect_four_loser_gets_terminal_reward_on_dead_step() -> None:
    dataset, played = record_and_check("classic/connect_four-v3", 4, "c4/random-v0")
    agents = dataset.possible_agents
    decided = [(e, p) for e, p in zip(dataset, played, strict=True)
               if any(t.reward != 0 for t in p.turns)]
    assert decided, "no random game was won; pick other seeds"
    for episode, record_ in decided:
        loser = next(t.agent for t in record_.turns if t.reward == -1)
        winner = next(a for a in agents if a != loser)
        win_step = max(s for s, t in enumerate(record_.turns) if t.agent == winner
                       and t.action is not None)
        # The -1 was earned at the winner's last move, handed to the loser on its dead turn.
        dead = [t for t in record_.of(loser) if t.action is None]
        assert len(dead) == 1 and dead[0].reward == -1 and dead[0].terminated
        column = agents.index(loser)
        assert episode.rewards[win_step, column] == -1
        assert episode.rewards[:, column].sum() == -1
        assert episode.terminations[win_step].all()
        # The loser's last transition carries it.
        assert episode.id is not None
        transitions = agent_transitions(dataset, loser, [episode.id])
        assert transitions.rewards[-1] == -1 and transitions.terminations[-1]
        assert (transitions.rewards[:-1] == 0).all()


def test_chess_large_action_masks_with_move_cap() -> None:
    # Random chess games run for hundreds of moves: episodes are cut after 30 steps by
    # resetting, which records them as truncated.
    dataset, played = record_and_check("classic/chess-v6", 2, "chess/random-v0", max_steps=30)
    for episode in dataset:
        assert episode.total_steps == 30
        assert episode.episode_truncations[-1] and not episode.episode_terminations.any()
        assert not episode.truncations.any()  # the env itself did not truncate
    transitions = agent_transitions(dataset, "player_0")
    assert transitions.action_masks is not None
    assert transitions.action_masks.shape == (len(transitions), 4672)
    legal = transitions.action_masks[np.arange(len(transitions)),
                                     np.asarray(transitions.actions)]
    assert (legal == 1).all()
    assert transitions.truncations[-1] and not transitions.terminations[-1]


def test_chess_game_to_the_end() -> None:
    dataset, played = record("classic/chess-v6", 1, "chess/full-v0")
    check_against_play(dataset, played)
    check_transitions(dataset, played)
    episode = dataset[0]
    assert episode.episode_terminations[-1]
    assert sum(episode.returns.values()) == 0


def test_leduc_holdem_rewards_at_showdown() -> None:
    dataset, played = record_and_check("classic/leduc_holdem-v4", 12, "leduc/random-v0")
    agents = dataset.possible_agents
    paid = 0
    for episode, record_ in zip(dataset, played, strict=True):
        last_action = max(s for s, t in enumerate(record_.turns) if t.action is not None)
        # Payoffs are earned by the game's final action and nowhere else.
        assert not episode.rewards[:last_action].any()
        assert episode.rewards[last_action].sum() == 0
        paid += int(episode.rewards[last_action].any())
        for agent in agents:
            assert episode.rewards[last_action, agents.index(agent)] == record_.handed(agent)
    assert paid > 0


def test_rock_paper_scissors_same_layout_in_both_apis() -> None:
    cycles, seed = 6, 11
    plan = np.random.default_rng(5).integers(3, size=(cycles, 2))

    parallel = mm.ParallelDataCollector(mm.make_env("classic/rps-v2", max_cycles=cycles))
    parallel.reset(seed=seed)
    cycle = 0
    while parallel.agents:
        parallel.step({a: int(plan[cycle][i]) for i, a in enumerate(parallel.possible_agents)})
        cycle += 1
    from_parallel = parallel.create_dataset("rps/parallel-v0", **META)
    parallel.close()

    aec = mm.AECDataCollector(mm.make_env("classic/rps-v2", api="aec", max_cycles=cycles))
    played = Played(seed=seed)
    aec.reset(seed=seed)
    for agent in aec.agent_iter():
        observation, reward, terminated, truncated, info = aec.last()
        turn = sum(t.agent == agent for t in played.turns)
        action = None if terminated or truncated else int(
            plan[turn][aec.possible_agents.index(agent)])
        played.turns.append(Turn(agent, float(reward), terminated, truncated, observation,
                                 action, None))
        aec.step(action)
    from_aec = aec.create_dataset("rps/aec-v0", **META)
    aec.close()

    check_against_play(from_aec, [played])
    check_transitions(from_aec, [played])
    for dataset_id in ("rps/parallel-v0", "rps/aec-v0"):
        check_minari_reads(dataset_id)
    assert from_parallel.spec.api == "parallel" and from_aec.spec.api == "aec"
    assert from_parallel.possible_agents == from_aec.possible_agents
    assert from_parallel.minari.observation_space == from_aec.minari.observation_space
    assert from_parallel.minari.action_space == from_aec.minari.action_space
    p_episode, a_episode = from_parallel[0], from_aec[0]
    assert p_episode.returns == a_episode.returns
    assert p_episode.agent_steps == a_episode.agent_steps == {a: cycles for a in
                                                              from_aec.possible_agents}
    assert p_episode.episode_truncations[-1] and a_episode.episode_truncations[-1]
    assert a_episode.total_steps == 2 * cycles + 2  # one step per turn, plus two dead steps
    assert set(a_episode.extras) == {layout.AGENT_SELECTION} and not p_episode.extras
    # Per agent, both recordings give the same transitions.
    for agent in from_aec.possible_agents:
        one, two = agent_transitions(from_parallel, agent), agent_transitions(from_aec, agent)
        for name in ("observations", "actions", "rewards", "next_observations",
                     "terminations", "truncations", "episode_ids"):
            np.testing.assert_array_equal(getattr(one, name), getattr(two, name), name)


@pytest.mark.parametrize(("env_id", "cycles", "kwargs"), [
    ("classic/tictactoe-v3", 1000, {}),
    ("classic/connect_four-v3", 1000, {}),
    ("classic/leduc_holdem-v4", 1000, {}),
    ("classic/rps-v2", 100, {"max_cycles": 20}),
    ("classic/chess-v6", 20, {}),
    ("classic/go-v5", 20, {"board_size": 9}),
])
def test_wrapper_passes_pettingzoo_api_test(env_id: str, cycles: int,
                                            kwargs: dict[str, Any]) -> None:
    env = mm.AECDataCollector(mm.make_env(env_id, api="aec", **kwargs))
    api_test(env, num_cycles=cycles)
    # What api_test played (cut episodes, np.int32 actions, reset options) is a dataset.
    dataset_id = f"apitest/{env_id.split('/')[1].replace('_', '-')}-v0"
    dataset = env.create_dataset(dataset_id, **META)
    env.close()
    assert dataset.total_episodes >= 3
    check_minari_reads(dataset_id)


@pytest.mark.parametrize(("env_id", "kwargs"), [
    ("classic/chess-v6", {}),
    ("classic/connect_four-v3", {}),
    ("classic/go-v5", {"board_size": 9}),
    ("classic/tictactoe-v3", {}),
    ("classic/leduc_holdem-v4", {}),
    ("classic/rps-v2", {"max_cycles": 4}),
])
def test_every_classic_game_records(env_id: str, kwargs: dict[str, Any]) -> None:
    dataset_id = f"classic/{env_id.split('/')[1].replace('_', '-')}-v0"
    dataset, played = record_and_check(env_id, 2, dataset_id, max_steps=40, **kwargs)
    assert dataset.spec.env is not None and dataset.spec.env.api == "aec"
    assert dataset.spec.env.kwargs == {**dataset.spec.env.kwargs, **kwargs}


def test_dataset_mid_episode_keeps_the_game_whole_for_the_next_dataset() -> None:
    env = mm.AECDataCollector(mm.make_env("classic/tictactoe-v3", api="aec"))
    env.reset(seed=3)
    first_observation = env.observe("player_1")
    rng = np.random.default_rng(3)
    handed = {a: 0.0 for a in env.possible_agents}
    steps = 0
    for agent in env.agent_iter():
        observation, reward, terminated, truncated, info = env.last()
        handed[agent] += reward
        if steps == 4:
            with pytest.warns(UserWarning, match="episode in progress"):
                first = env.create_dataset("ttt/first-v0", **META)
        env.step(None if terminated or truncated
                 else legal_action(env, agent, mask_of(observation, info), rng))
        steps += 1
    second = env.create_dataset("ttt/second-v0", **META)
    env.close()
    assert first.total_episodes == 0
    whole = second[0]
    assert whole.seed == 3 and whole.total_steps == steps
    assert whole.episode_terminations[-1] and not whole.episode_truncations.any()
    assert same_tree(row(whole.observations["player_1"], 0), flat(first_observation))
    for agent in env.possible_agents:
        assert whole.returns[agent] == handed[agent]


def test_illegal_move_penalty_is_recorded() -> None:
    # TerminateIllegalWrapper ends the game on an illegal move and charges the mover.
    env = mm.AECDataCollector(mm.make_env("classic/tictactoe-v3", api="aec"))
    played = Played(seed=0)
    env.reset(seed=0)
    moves = iter([4, 4])  # the second player takes the occupied centre
    for agent in env.agent_iter():
        observation, reward, terminated, truncated, info = env.last()
        action = None if terminated or truncated else next(moves)
        played.turns.append(Turn(agent, float(reward), terminated, truncated, observation,
                                 action, observation["action_mask"].copy()))
        env.step(action)
    dataset = env.create_dataset("ttt/illegal-v0", **META)
    env.close()
    check_against_play(dataset, [played])
    episode = dataset[0]
    assert episode.total_steps == 4  # two moves, two dead steps
    assert episode.returns == {"player_1": 0.0, "player_2": -1.0}
    assert episode.rewards[1].tolist() == [0.0, -1.0]
    assert episode.terminations[1].all() and episode.truncations[1].all()
    transitions = agent_transitions(dataset, "player_2")
    assert transitions.rewards.tolist() == [-1.0] and transitions.dones.all()
    assert transitions.action_masks is not None and transitions.action_masks[0][4] == 0


def test_stepping_after_the_end_records_nothing() -> None:
    env = mm.AECDataCollector(mm.make_env("classic/tictactoe-v3", api="aec"))
    play_aec(env, 1)
    assert not env.agents
    env.step(None)  # the env warns; nothing is recorded, nothing breaks
    dataset = env.create_dataset("ttt/after-v0", **META)
    env.close()
    assert dataset.total_episodes == 1


@pytest.mark.parametrize("background", [False, True])
def test_killed_process_loses_only_the_episode_in_flight(background: bool,
                                                         datasets_root: Path) -> None:
    # Writing in the caller, both finished episodes are durable when the kill strikes; with
    # the background writer, at least those it had claimed durable are, and nothing else
    # but whole finished episodes.
    script = textwrap.dedent("""
        import os, signal, sys
        import numpy as np
        import marl_minari as mm

        env = mm.AECDataCollector(mm.make_env("classic/connect_four-v3", api="aec"),
                                  background_writing=sys.argv[1] == "True")
        rng = np.random.default_rng(0)
        for episode in range(3):
            env.reset(seed=episode)
            for number, agent in enumerate(env.agent_iter()):
                if episode == 2 and number == 5:
                    print(env.durable_episodes, flush=True)
                    os.kill(os.getpid(), signal.SIGKILL)
                observation, reward, terminated, truncated, info = env.last()
                legal = np.flatnonzero(observation["action_mask"])
                env.step(None if terminated or truncated else int(rng.choice(legal)))
    """)
    result = subprocess.run([sys.executable, "-c", script, str(background)], env={
        **os.environ, "MINARI_DATASETS_PATH": str(datasets_root)}, check=False,
        capture_output=True, text=True)
    assert result.returncode == -signal.SIGKILL
    claimed = int(result.stdout.split()[-1])
    assert claimed == 2 or background
    recordings = mm.list_recordings()
    kept = recordings[0].episodes if recordings else 0
    assert len(recordings) <= 1 and claimed <= kept <= 2
    if not kept:  # the background writer had stored nothing yet, and claimed nothing
        return
    mm.recover_recording(recordings[0].path, "c4/recovered-v0", **META)
    dataset = mm.load_dataset("c4/recovered-v0")
    assert dataset.total_episodes == kept
    assert [e.seed for e in dataset] == list(range(kept))
    assert all(e.episode_terminations[-1] for e in dataset)
    check_minari_reads("c4/recovered-v0")


def test_policy_scribbling_on_observations_cannot_reach_the_recording() -> None:
    env = mm.AECDataCollector(mm.make_env("classic/connect_four-v3", api="aec"))
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    seen = []
    for agent in env.agent_iter():
        observation, _, terminated, truncated, _ = env.last()
        assert env.observe(agent) is observation  # the recorded turn's object is handed out
        action = None if terminated or truncated else legal_action(
            env, agent, observation["action_mask"], rng)
        seen.append((agent, {k: v.copy() for k, v in observation.items()}))
        observation["action_mask"][:] = 0
        observation["observation"][:] = 1
        env.step(action)
    dataset = env.create_dataset("c4/scribbled-v0", **META)
    env.close()
    episode = dataset[0]
    for step, (agent, observation) in enumerate(seen):
        assert same_obs(row(episode.observations[agent], step), observation)


def test_user_docs_example_runs() -> None:
    import re

    text = (Path(__file__).resolve().parents[2] / "docs" / "aec.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 3
    exec(compile("\n".join(blocks), "docs/aec.md", "exec"), {})
