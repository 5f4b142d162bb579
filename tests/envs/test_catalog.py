"""The catalog sweep: every installed env, both APIs, through every door a dataset goes.

Each row of ``env_catalog.CATALOG`` records two short seeded episodes with ``collect`` (what
``marl-minari collect`` runs), then: ``check_dataset`` -> plain ``minari.load_dataset``
iteration -> ``publish`` to a ``file://`` registry and ``download`` into another datasets root
-> ``to_vault`` and ``from_vault`` (per-agent returns equal) -> ``describe`` -> the viewer's
offline page (``write_page``: every agent, both episodes). A new env (or env
version) in PettingZoo or mpe2 shows up as a failing completeness test naming it, a vanished
one too, and an env that changed what it hands out as one failing row.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import minari
import numpy as np
import pytest
from env_catalog import (
    CATALOG,
    CatalogRow,
    docs_table,
    installed_envs,
    recorded_features,
    render_table,
)
from gymnasium import spaces
from marl_minari.adapters import from_vault, to_vault
from marl_minari.collectors.collect import collect

import marl_minari as mm
from marl_minari import registry
from marl_minari.view import write_page

DOCS_CATALOG = Path(__file__).resolve().parents[2] / "docs" / "catalog.md"
METADATA = {"author": "tests", "author_email": "tests@example.com",
            "code_permalink": "https://example.com/tests"}


UPSTREAM_WARNINGS = {
    # It renders at every reset, also without a render mode.
    "butterfly/cooperative_pong-v6": (
        "ignore:.*You are calling render method without specifying any render mode"
        ":UserWarning:pettingzoo.butterfly.cooperative_pong.cooperative_pong",),
    # Its observation Box has float64 bounds and a float32 dtype.
    "classic/texas_holdem_no_limit-v6": (
        "ignore:.*Box (low|high)'s precision lowered by casting to float32"
        ":UserWarning:gymnasium.spaces.box",),
}
"""Warnings an env's own code raises, accepted for its rows only (by message and module)."""

SWEEP = [pytest.param(row, id=row.key, marks=[
    pytest.mark.filterwarnings(accepted) for accepted in UPSTREAM_WARNINGS.get(row.env_id, ())])
    for row in CATALOG]


def test_catalog_lists_exactly_the_installed_envs() -> None:
    listed = {(row.env_id, row.api) for row in CATALOG}
    installed = installed_envs()
    assert sorted(installed - listed) == [], "installed but not in env_catalog.CATALOG: add rows"
    assert sorted(listed - installed) == [], "in env_catalog.CATALOG but not installed"
    assert len(listed) == len(CATALOG), "a row is listed twice"


def test_docs_table_is_current() -> None:
    assert docs_table(DOCS_CATALOG.read_text()) == render_table(), (
        "docs/catalog.md is stale: run python tests/support/env_catalog.py")


@pytest.mark.parametrize("row", SWEEP)
def test_every_door(row: CatalogRow, tmp_path: Path, datasets_root: Path,
                    monkeypatch: pytest.MonkeyPatch) -> None:
    name = row.env_id.split("/", 1)[1].replace("-", "_")
    dataset_id = f"catalog/{row.family}/{name}/{row.api}-v0"
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        dataset = collect(row.env_id, 2, seed=7, api=row.api, env_kwargs=row.env_kwargs,
                          dataset_id=dataset_id, **METADATA)
    assert not [w for w in said if "same frame" in str(w.message)]  # the frames move
    returns = _returns(dataset)
    assert len(returns) == 2 and dataset.total_steps > 0
    assert recorded_features(dataset) == {
        key: getattr(row, key)
        for key in ("observations", "actions", "state", "action_mask", "agents_leave")}

    report = mm.check_dataset(dataset_id)
    assert (report.kind, report.total_episodes, report.total_steps) == (
        "marl", 2, dataset.total_steps)

    _read_with_plain_minari(dataset_id, dataset)

    remote = (tmp_path / "registry").as_uri()
    assert registry.publish(dataset_id, remote).outcomes[dataset_id] == "published"
    other_root = tmp_path / "downloaded"
    other_root.mkdir()
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(other_root))
    assert registry.download(dataset_id, remote) == other_root / dataset_id
    assert _returns(mm.load_dataset(dataset_id)) == returns
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(datasets_root))

    vault = to_vault(dataset_id, rel_dir=tmp_path / "vaults", vault_name="sweep",
                     vault_uid="Random")
    assert vault == tmp_path / "vaults" / "sweep" / "Random"
    restored = from_vault("sweep", rel_dir=tmp_path / "vaults", vault_uid="Random",
                          dataset_id=f"{dataset_id[:-3]}-v1")
    assert _returns(restored) == returns

    description = mm.describe(dataset_id)
    assert (description.total_episodes, description.total_steps) == (2, dataset.total_steps)
    np.testing.assert_allclose(
        description.episode_returns,
        [[episode[agent] for agent in description.possible_agents] for episode in returns])

    page = write_page(dataset_id, tmp_path / "page.html")
    shown = json.loads(page.read_text().split('type="application/json">', 1)[1]
                       .split("</script>", 1)[0])
    assert shown["summary"]["agents"] == list(dataset.spec.possible_agents)
    assert len(shown["sample"]) == 2


def _returns(dataset: Any) -> list[dict[str, float]]:
    return [episode.returns for episode in dataset]


def _read_with_plain_minari(dataset_id: str, dataset: Any) -> None:
    """Minari alone reads every episode, images decoded to their spaces' shapes."""
    plain = minari.load_dataset(dataset_id)
    agent = dataset.spec.possible_agents[0]
    space = dataset.spec.observation_spaces[agent]
    lengths = []
    for episode in plain.iterate_episodes():
        lengths.append(len(episode.rewards))
        observations = episode.observations[agent]
        if not isinstance(space, spaces.Dict):
            assert np.asarray(observations).shape[1:] == (space.shape or ())
    assert lengths == [episode.total_steps for episode in dataset]
