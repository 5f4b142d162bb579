"""Spaces as JSON: Minari's keys stay readable by plain Minari, our own keys are compact."""

from __future__ import annotations

import json

import numpy as np
import pytest
from gymnasium import spaces
from minari.serialization import deserialize_space

from marl_minari.errors import LayoutError
from marl_minari.format.space_json import space_from_json, space_to_json
from marl_minari.format.spec import MultiAgentSpec

IMAGE = spaces.Box(0, 255, (560, 880, 3), np.uint8)
MIXED = spaces.Dict({
    "image": IMAGE,
    "unbounded": spaces.Box(-np.inf, np.inf, (3,), np.float32),
    "varying": spaces.Box(np.array([0.0, -1.0]), np.array([1.0, 5.0]), dtype=np.float64),
    "scalar": spaces.Box(-1, 1, (), np.int64),
    "empty": spaces.Box(0, 1, (0,), np.float32),
    "pair": spaces.Tuple((spaces.Discrete(4, start=1), spaces.MultiDiscrete([2, 3]))),
    "bits": spaces.MultiBinary(5),
    "text": spaces.Text(8),
})


@pytest.mark.parametrize("compact", [False, True])
def test_round_trip_to_equal_spaces(compact: bool) -> None:
    assert space_from_json(space_to_json(MIXED, compact_bounds=compact)) == MIXED


def test_compact_bounds_are_scalars_only_where_uniform() -> None:
    text = space_to_json(MIXED, compact_bounds=True)
    stored = json.loads(text)["subspaces"]
    assert stored["image"] == {"type": "Box", "dtype": "uint8", "shape": [560, 880, 3],
                               "low": 0, "high": 255}
    assert stored["unbounded"]["low"] == -np.inf and stored["unbounded"]["high"] == np.inf
    assert stored["varying"]["low"] == [0.0, -1.0]
    assert len(text) < 2000


def test_minari_form_is_what_plain_minari_reads() -> None:
    """Minari 0.5 cannot read scalar bounds with a larger shape: its keys stay element-wise."""
    text = space_to_json(MIXED)
    assert deserialize_space(text) == MIXED
    assert " " not in text.replace('"unbounded"', "")
    with pytest.raises(ValueError):
        deserialize_space(space_to_json(IMAGE, compact_bounds=True))


def test_state_space_is_compact_in_metadata_and_read_back() -> None:
    spec = MultiAgentSpec(api="parallel", possible_agents=("a",),
                          observation_spaces={"a": spaces.Discrete(2)},
                          action_spaces={"a": spaces.Discrete(2)}, state_space=IMAGE)
    marl = spec.to_metadata()
    assert len(marl["state_space"]) < 200
    back = MultiAgentSpec.from_metadata({"marl_minari": marl}, spec.observation_space,
                                        spec.action_space)
    assert back.state_space == IMAGE
    assert MultiAgentSpec.from_json(spec.to_json()) == spec


@pytest.mark.parametrize("bad", ['{"type": "Box"}', "[1, 2]", '{"type": "Nope"}', "{"])
def test_malformed_state_space_is_a_layout_error(bad: str) -> None:
    spec = MultiAgentSpec(api="parallel", possible_agents=("a",),
                          observation_spaces={"a": spaces.Discrete(2)},
                          action_spaces={"a": spaces.Discrete(2)})
    marl = {**spec.to_metadata(), "state_space": bad}
    with pytest.raises(LayoutError, match="state_space"):
        MultiAgentSpec.from_metadata({"dataset_id": "x-v0", "marl_minari": marl},
                                     spec.observation_space, spec.action_space)


@pytest.mark.parametrize("space", [MIXED, IMAGE, spaces.Box(-1.5, 2.5, (2, 3), np.float64)])
def test_minari_form_is_exactly_minaris_serialisation(space: spaces.Space) -> None:
    """Uniform bounds are spelled out as text, not via tolist(): same JSON as Minari's."""
    from minari.serialization import serialize_space

    expected = json.dumps(serialize_space(space, to_string=False), separators=(",", ":"))
    assert space_to_json(space) == expected


def test_unknown_state_encoding_in_metadata_is_a_layout_error() -> None:
    spec = MultiAgentSpec(api="parallel", possible_agents=("a",),
                          observation_spaces={"a": spaces.Discrete(2)},
                          action_spaces={"a": spaces.Discrete(2)}, state_space=IMAGE,
                          state_encoding="lzf")
    marl = spec.to_metadata()
    assert MultiAgentSpec.from_metadata({"marl_minari": marl}, spec.observation_space,
                                        spec.action_space).state_encoding == "lzf"
    del marl["state_encoding"]  # datasets written before the key existed hold raw states
    assert MultiAgentSpec.from_metadata({"marl_minari": marl}, spec.observation_space,
                                        spec.action_space).state_encoding == "raw"
    with pytest.raises(LayoutError, match="state_encoding"):
        MultiAgentSpec.from_metadata({"marl_minari": {**marl, "state_encoding": "zstd"}},
                                     spec.observation_space, spec.action_space)


@pytest.mark.parametrize("space", [
    MIXED,
    spaces.Dict({"low": spaces.Box(-1, 1, (2, 2)), "high": spaces.Discrete(3)}),
    spaces.Box(np.iinfo(np.int64).min, np.iinfo(np.int64).max, (3,), np.int64),
    spaces.Box(0, np.iinfo(np.uint64).max, (2,), np.uint64),
    spaces.Box(np.array([-np.inf, 0.5]), np.array([np.inf, 3e38])),
])
def test_element_wise_bounds_read_by_numpy_equal_minaris(space: spaces.Space) -> None:
    """Bounds in Minari's element-wise form (its own text and ours) are read with numpy's
    parser, exactly: 64-bit integer extremes included (not through float64)."""
    from marl_minari.format.space_json import _load_space_json

    for text in (json.dumps(json.loads(space_to_json(space))), space_to_json(space)):
        parsed_by_numpy = [b for b in _bound_values(_load_space_json(text))
                           if isinstance(b, np.ndarray)]
        assert parsed_by_numpy and len(parsed_by_numpy) == len(
            [b for b in _bound_values(json.loads(text)) if isinstance(b, list)])
        got, reference = space_from_json(text), deserialize_space(text)
        assert str(got) == str(reference)
        for (_, a), (_, b) in zip(_boxes(got), _boxes(reference), strict=True):
            np.testing.assert_array_equal(a.low, b.low)
            np.testing.assert_array_equal(a.high, b.high)
            assert a.low.dtype == b.low.dtype


def _bound_values(tree: object) -> list[object]:
    if isinstance(tree, dict):
        return [tree[k] for k in ("low", "high") if k in tree and tree.get("type") == "Box"] + [
            b for v in tree.values() for b in _bound_values(v)]
    if isinstance(tree, list):
        return [b for v in tree for b in _bound_values(v)]
    return []


def _boxes(space: spaces.Space, path: str = "") -> list[tuple[str, spaces.Box]]:
    if isinstance(space, spaces.Dict):
        return [b for k, sub in space.spaces.items() for b in _boxes(sub, f"{path}/{k}")]
    if isinstance(space, spaces.Tuple):
        return [b for i, sub in enumerate(space.spaces) for b in _boxes(sub, f"{path}/{i}")]
    return [(path, space)] if isinstance(space, spaces.Box) else []


@pytest.mark.parametrize("text", [
    '{"type": "Box", "dtype": "float32", "shape": [3], "low": [0, 0], "high": [1, 1, 1]}',
    '{"type": "Box", "dtype": "float32", "shape": [2], "low": [0, x], "high": [1, 1]}',
    '{"type": "Box", "dtype": "bool", "shape": [1], "low": [false], "high": [true]}',
])
def test_bounds_numpy_cannot_read_take_the_json_path(text: str) -> None:
    """Too few numbers, text that is no number, booleans: the whole text goes through
    ``json.loads`` and Minari's parser, which decide as they always did."""
    try:
        expected: object = deserialize_space(text)
    except Exception as exc:  # noqa: BLE001 - whatever Minari raises is the reference
        expected = type(exc)
    try:
        got: object = space_from_json(text)
    except Exception as exc:  # noqa: BLE001
        got = type(exc)
    assert str(got) == str(expected)
