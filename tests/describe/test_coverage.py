"""Coverage (``describe(..., coverage=True)``): SACo and OACo as OG-MARL defines them, checked
on a vault whose coverage is known by construction, on recorded datasets against OG-MARL's
formulas computed by hand on the same arrays, and the distinct-row counter against
``np.unique``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from synthetic import write_known_vault

from marl_minari.describe import dataset_card, describe
from marl_minari.describe.coverage import CoverageAccumulator
from marl_minari.describe.distinct import DistinctCounter, canonical_floats, row_digests
from marl_minari.errors import LayoutError
from marl_minari.format.spaces import leaves

Recorder = Callable[..., tuple[Any, list[dict[str, Any]]]]
SPREAD = ("mpe2/simple_spread_v3", {"max_cycles": 12})


# --------------------------------------------------------------------------- OG-MARL by hand
def ogmarl_saco(state: np.ndarray, actions: np.ndarray, decimals: int = 4) -> float:
    """OG-MARL's SACo on ``(T, S)`` states and ``(T, N, ...)`` actions: the distinct rows of
    (state, flattened joint action), concatenated in their common type and rounded, over T."""
    steps = len(state)
    table = np.concatenate([state.reshape(steps, -1), actions.reshape(steps, -1)], axis=1)
    return len(np.unique(table.round(decimals), axis=0)) / steps


def ogmarl_oaco(observations: list[np.ndarray], actions: list[np.ndarray]) -> list[float]:
    """OG-MARL's OACo per agent: distinct (observation, action) rows (not rounded) over T."""
    shares = []
    for obs, act in zip(observations, actions, strict=True):
        steps = len(obs)
        table = np.concatenate([obs.reshape(steps, -1), act.reshape(steps, -1)], axis=1)
        shares.append(len(np.unique(table, axis=0)) / steps)
    return shares


# --------------------------------------------------------------------------- known vault
def test_vault_coverage_known_by_construction(tmp_path: Path) -> None:
    raw = write_known_vault(tmp_path / "vaults", "known", "Good")
    path = tmp_path / "vaults" / "known" / "Good"
    coverage = describe(path, coverage=True, chunk_steps=15).coverage
    assert coverage is not None
    assert coverage.transitions == 60 and coverage.state_source == "state"
    assert coverage.state_pairs == 10 and coverage.saco == pytest.approx(1 / 6)
    assert coverage.agent_pairs == {"agent_0": 6, "agent_1": 4, "agent_2": 10}
    assert coverage.agents == pytest.approx({"agent_0": 0.1, "agent_1": 1 / 15,
                                             "agent_2": 1 / 6})
    assert coverage.oaco == pytest.approx(1 / 9)
    # OG-MARL's formulas on the vault's own arrays give the same numbers
    assert coverage.saco == pytest.approx(ogmarl_saco(raw["state"], raw["actions"]))
    assert coverage.saco < ogmarl_saco(raw["state"], raw["actions"], decimals=8) == 1.0
    oaco = ogmarl_oaco([raw["observations"][:, i] for i in range(3)],
                       [raw["actions"][:, i] for i in range(3)])
    assert list(coverage.agents.values()) == pytest.approx(oaco)
    assert coverage.oaco == pytest.approx(np.mean(oaco))


def test_without_coverage_nothing_is_measured(tmp_path: Path) -> None:
    write_known_vault(tmp_path / "vaults", "known", "Good")
    assert describe(tmp_path / "vaults" / "known" / "Good").coverage is None


# --------------------------------------------------------------------------- recorded data
def by_hand(dataset: Any, *, state: bool) -> tuple[float, list[float]]:
    """SACo and per-agent OACo by OG-MARL's formulas on the whole dataset in memory."""
    arrays = dataset.to_arrays()
    rows = arrays.obs_rows
    agents = arrays.possible_agents
    obs = [np.concatenate([leaf[rows].reshape(len(rows), -1)
                           for _, leaf in leaves(arrays.observations[a])], axis=1)
           for a in agents]
    acts = [np.concatenate([leaf.reshape(len(rows), -1)
                            for _, leaf in leaves(arrays.actions[a])], axis=1) for a in agents]
    joint_actions = np.stack(acts, axis=1)
    stand_in = arrays.state[rows] if state else np.concatenate(obs, axis=1)
    return ogmarl_saco(stand_in, joint_actions), ogmarl_oaco(obs, acts)


@pytest.mark.parametrize("record_state", [True, False])
def test_recorded_dataset_matches_ogmarl_formulas(recorded_parallel: Recorder, tmp_path: Path,
                                                  record_state: bool) -> None:
    dataset, _ = recorded_parallel(SPREAD[0], episodes=4, collector_record_state=record_state,
                                   **SPREAD[1])
    saco, oaco = by_hand(dataset, state=record_state)
    whole = describe(dataset, coverage=True)
    chunked = describe(dataset, coverage=True, chunk_steps=7)  # one or two episodes a chunk
    for coverage in (whole.coverage, chunked.coverage):
        assert coverage is not None
        assert coverage.transitions == dataset.total_steps == 48
        assert coverage.state_source == ("state" if record_state else "joint_observation")
        assert coverage.saco == pytest.approx(saco)
        assert list(coverage.agents.values()) == pytest.approx(oaco)
        assert coverage.oaco == pytest.approx(np.mean(oaco))
    assert "coverage       SACo" in whole.to_text() and "OACo" in whole.to_text()
    assert whole.to_dict()["coverage"]["saco"] == whole.coverage.saco  # type: ignore[union-attr]
    card = dataset_card(whole, tmp_path / "card" / "README.md").read_text()
    assert "### Coverage" in card and f"{whole.coverage.saco:.4f}" in card  # type: ignore[union-attr]
    assert "no global state" in card or record_state


def test_chunks_with_other_agents_are_refused(recorded_parallel: Recorder) -> None:
    dataset, _ = recorded_parallel(SPREAD[0], episodes=1, **SPREAD[1])
    with CoverageAccumulator(("someone_else",)) as pairs, pytest.raises(LayoutError,
                                                                          match="agents"):
        pairs.add(dataset.to_arrays())


# --------------------------------------------------------------------------- distinct rows
def test_distinct_counter_equals_numpy_unique() -> None:
    rng = np.random.default_rng(0)
    values = rng.integers(0, 6, (5000, 3)).astype(np.float32)
    values[::7, 0] = -0.0  # -0.0 and 0.0 are one value, as for np.unique
    values[1::7, 0] = 0.0
    ints = rng.integers(0, 3, (5000, 2)).astype(np.int64)
    counter = DistinctCounter(pending_limit=300)  # many merges
    for start in range(0, 5000, 333):
        part = slice(start, start + 333)
        counter.add(row_digests([canonical_floats(values[part]), ints[part]]))
    expected = len(np.unique(np.concatenate([values, ints], axis=1), axis=0))
    assert counter.rows == 5000
    assert counter.count() == expected
    # bytes differ but values agree: without canonical floats -0.0 would count apart
    raw = DistinctCounter()
    raw.add(row_digests([values, ints]))
    assert raw.count() > expected


def test_digests_are_stable_across_layouts() -> None:
    """One row's digest does not depend on how its columns are split or on the chunk."""
    rng = np.random.default_rng(1)
    table = rng.normal(size=(100, 6))
    together = row_digests([table])
    assert np.array_equal(together, row_digests([table[:, :2], table[:, 2:]]))
    assert np.array_equal(together[:, 50:], row_digests([table[50:]]))
    assert len(np.unique(together[0])) == 100
