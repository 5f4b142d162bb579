"""``describe``'s action summaries for every kind of action leaf, counted by hand.

A plain single-agent Minari dataset recorded from a small env whose ``Dict`` action space holds
one leaf of each kind (``Discrete`` with a non-zero start, ``MultiDiscrete`` with starts,
``MultiBinary``, ``Box`` and ``Discrete`` inside a ``Tuple``, ``Text``), played with actions of
which some lie outside the space. With a ``Text`` leaf describe reads through Minari's own
episode decoding; without it, through its direct HDF5 column reader: both must agree with the
counts made here from the actions that were played.
"""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import minari
import numpy as np
import pytest
from gymnasium import spaces

from marl_minari.describe import ActionSummary, describe

MOVE = spaces.Discrete(4, start=-2)
PICK = spaces.MultiDiscrete([2, 3], start=[1, -1])
FLAGS = spaces.MultiBinary(3)
PAIR = spaces.Tuple((spaces.Discrete(2), spaces.Box(-1.0, 1.0, (2,), np.float32)))
SAY = spaces.Text(5)
EPISODES, STEPS = 4, 30


class ToyEnv(gym.Env):  # type: ignore[type-arg]
    """Any action is accepted; episodes last ``STEPS`` steps."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)

    def __init__(self, action_space: spaces.Dict) -> None:
        self.action_space = action_space
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return np.zeros(2, np.float32), 1.0, self.t >= STEPS, False, {}


def _actions(rng: np.random.Generator, with_text: bool) -> list[dict[str, Any]]:
    """One episode of actions; about one in five of each leaf lies outside its space."""
    out = []
    for _ in range(STEPS):
        bad = rng.random(4) < 0.2
        action: dict[str, Any] = {
            "move": np.int64(rng.integers(-3, 3) if bad[0] else rng.integers(-2, 2)),
            "pick": np.asarray([rng.integers(1, 3), rng.integers(-1, 2) + 3 * bad[1]]),
            "flags": np.asarray([*rng.integers(0, 2, 2), 2 if bad[2] else rng.integers(2)],
                                dtype=np.int8),
            "pair": (np.int64(rng.integers(2)),
                     rng.uniform(-1, 1, 2).astype(np.float32) * (3 if bad[3] else 1)),
        }
        text = "".join(rng.choice(list("abc"), rng.integers(1, 6)))  # drawn either way
        if with_text:
            action["say"] = text
        out.append(action)
    return out


def _record(dataset_id: str, with_text: bool) -> list[dict[str, Any]]:
    leaves = {"move": MOVE, "pick": PICK, "flags": FLAGS, "pair": PAIR}
    env = minari.DataCollector(ToyEnv(spaces.Dict({**leaves, **({"say": SAY} if with_text
                                                                else {})})))
    rng = np.random.default_rng(3)
    played = []
    with warnings.catch_warnings():  # Minari warns about each action outside the space
        warnings.filterwarnings("ignore", message=".*action space", category=UserWarning)
        for episode in range(EPISODES):
            env.reset(seed=episode)
            for action in _actions(rng, with_text):
                env.step(action)
                played.append(action)
    with warnings.catch_warnings():  # no env spec to record: a small env of the test's own
        warnings.filterwarnings("ignore", message="(`eval_env` is set to None|env_spec is None)",
                                category=UserWarning)
        env.create_dataset(dataset_id, algorithm_name="random", author="tests",
                           author_email="tests@example.com",
                           code_permalink="https://example.com/tests", description="toy actions")
    env.close()
    return played


def _by_path(dataset_id: str) -> dict[str, ActionSummary]:
    description = describe(dataset_id, chunk_steps=STEPS + 7)  # chunks cut inside episodes
    (agent,) = description.possible_agents
    return {action.path: action for action in description.agent(agent).actions}


@pytest.fixture(scope="module")
def summaries(tmp_path_factory: pytest.TempPathFactory
              ) -> dict[bool, tuple[list[dict[str, Any]], dict[str, ActionSummary]]]:
    """``{with_text: (actions played, describe's summaries by leaf path)}``."""
    out = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINARI_DATASETS_PATH", str(tmp_path_factory.mktemp("datasets")))
        for with_text in (True, False):
            dataset_id = f"toy/actions-{'text' if with_text else 'plain'}-v0"
            played = _record(dataset_id, with_text)
            out[with_text] = (played, _by_path(dataset_id))
    return out


def test_every_leaf_is_summarised(summaries: dict[bool, Any]) -> None:
    _, with_text = summaries[True]
    _, without = summaries[False]
    assert sorted(with_text) == ["flags", "move", "pair/_index_0", "pair/_index_1", "pick",
                                 "say"]
    assert sorted(without) == sorted(set(with_text) - {"say"})
    kinds = {path: s.kind for path, s in with_text.items()}
    assert kinds == {"flags": "binary", "move": "discrete", "pair/_index_0": "discrete",
                     "pair/_index_1": "continuous", "pick": "multi_discrete", "say": "text"}
    for path, summary in with_text.items():
        assert summary.samples == EPISODES * STEPS, path
    # Minari's decoding and the direct HDF5 reader give the same summaries.
    for path, summary in without.items():
        assert summary == with_text[path], path


@pytest.mark.parametrize("with_text", [True, False], ids=["minari-decoding", "direct-hdf5"])
def test_discrete_with_a_start(summaries: dict[bool, Any], with_text: bool) -> None:
    played, by_path = summaries[with_text]
    move = by_path["move"]
    values = [int(a["move"]) for a in played]
    assert move.labels == ("-2", "-1", "0", "1")
    assert move.counts == tuple(values.count(v) for v in (-2, -1, 0, 1))
    assert move.out_of_space == sum(not -2 <= v <= 1 for v in values) > 0
    flag = by_path["pair/_index_0"]
    assert flag.counts == tuple(sum(int(a["pair"][0]) == v for a in played) for v in (0, 1))
    assert flag.out_of_space == 0


@pytest.mark.parametrize("with_text", [True, False], ids=["minari-decoding", "direct-hdf5"])
def test_multi_discrete_and_binary_leave_out_of_space_actions_uncounted(
        summaries: dict[bool, Any], with_text: bool) -> None:
    played, by_path = summaries[with_text]
    picks = [tuple(int(v) for v in a["pick"]) for a in played]
    inside = [p for p in picks if 1 <= p[0] <= 2 and -1 <= p[1] <= 1]
    pick = by_path["pick"]
    assert pick.labels == ("c0=1", "c0=2", "c1=-1", "c1=0", "c1=1")
    assert pick.out_of_space == len(picks) - len(inside) > 0
    assert pick.counts == tuple([sum(p[0] == v for p in inside) for v in (1, 2)]
                                + [sum(p[1] == v for p in inside) for v in (-1, 0, 1)])
    bits = [tuple(int(v) for v in a["flags"]) for a in played]
    valid_bits = [b for b in bits if set(b) <= {0, 1}]
    flags = by_path["flags"]
    assert flags.labels == ("b0", "b1", "b2")
    assert flags.out_of_space == len(bits) - len(valid_bits) > 0
    assert flags.counts == tuple(sum(b[i] for b in valid_bits) for i in range(3))


@pytest.mark.parametrize("with_text", [True, False], ids=["minari-decoding", "direct-hdf5"])
def test_multi_discrete_and_binary_labels_and_out_of_space(summaries: dict[bool, Any],
                                                           with_text: bool) -> None:
    """What holds whichever way out-of-space components are counted."""
    played, by_path = summaries[with_text]
    picks = np.asarray([a["pick"] for a in played])
    pick = by_path["pick"]
    assert pick.labels == ("c0=1", "c0=2", "c1=-1", "c1=0", "c1=1")
    assert pick.out_of_space == int((~((picks >= [1, -1]) & (picks <= [2, 1])).all(1)).sum()) > 0
    inside = picks[((picks >= [1, -1]) & (picks <= [2, 1])).all(1)]
    counts = np.asarray(pick.counts)
    assert (counts >= [*(np.sum(inside[:, 0] == v) for v in (1, 2)),
                       *(np.sum(inside[:, 1] == v) for v in (-1, 0, 1))]).all()
    bits = np.asarray([a["flags"] for a in played])
    flags = by_path["flags"]
    assert flags.out_of_space == int((bits == 2).any(1).sum()) > 0
    assert np.array_equal(np.asarray(flags.counts) >= (bits[(bits <= 1).all(1)] == 1).sum(0),
                          [True] * 3)


@pytest.mark.parametrize("with_text", [True, False], ids=["minari-decoding", "direct-hdf5"])
def test_box_inside_a_tuple(summaries: dict[bool, Any], with_text: bool) -> None:
    played, by_path = summaries[with_text]
    values = np.asarray([a["pair"][1] for a in played], dtype=np.float64)
    box = by_path["pair/_index_1"]
    assert box.labels == ("d0", "d1")
    np.testing.assert_allclose(box.minimum, values.min(0))
    np.testing.assert_allclose(box.maximum, values.max(0))
    np.testing.assert_allclose(box.mean, values.mean(0), rtol=1e-9)
    np.testing.assert_allclose(box.std, values.std(0), rtol=1e-7)
    assert box.out_of_space == int((np.abs(values) > 1).any(1).sum()) > 0


def test_text_is_counted_by_samples_only(summaries: dict[bool, Any]) -> None:
    _, by_path = summaries[True]
    say = by_path["say"]
    assert (say.kind, say.samples, say.counts, say.out_of_space) == ("text", EPISODES * STEPS,
                                                                     (), 0)
