"""The environment catalog: every env the ``envs`` extra installs, as the sweep records it.

``CATALOG`` names each (env, API) the sweep (``tests/envs/test_catalog.py``) records, with the
small settings that keep its episodes short and what its datasets hold; the sweep checks both
that ``CATALOG`` lists exactly the envs installed (:func:`installed_envs`) and that each
recorded dataset holds what its row says (:func:`recorded_features`). ``docs/catalog.md``'s
table is rendered from it (:func:`render_table`); run this file to rewrite that table.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

UNTESTED_FAMILIES = {
    "atari": "needs the Atari ROMs (AutoROM), which cannot be fetched where the tests run",
}
"""PettingZoo families left out of the sweep, and why (printed in docs/catalog.md)."""

SHORT = {"max_cycles": 5}
DRAWN = {"render_mode": "rgb_array"}
"""The butterfly image envs draw their frames only when they render: without a render mode
every row of an episode is the reset frame."""


@dataclass(frozen=True)
class CatalogRow:
    """One (env, API) of the sweep and what its datasets hold.

    Attributes:
        env_id: what ``marl-minari collect`` takes (PettingZoo registry id or ``mpe2/<module>``).
        api: ``"parallel"`` or ``"aec"``.
        observations: ``image`` (JPEG-encoded), ``vector`` (1-D Box), ``array`` (a Box of
            higher rank: boards, grids, lidar stacks) or ``discrete``; of the first agent.
        actions: ``discrete`` or ``continuous`` (Box).
        state: ``image`` (JPEG-encoded), ``vector`` or ``none`` (no ``state()``).
        action_mask: where legal actions are recorded: ``observation``, ``info`` or ``none``.
        agents_leave: some agent left (terminated or truncated while others went on) before
            the end of one of the sweep's two episodes.
        env_kwargs: the small settings the sweep records with.
    """

    env_id: str
    api: str
    observations: str
    actions: str
    state: str
    action_mask: str
    agents_leave: bool
    env_kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def family(self) -> str:
        return self.env_id.split("/")[0]

    @property
    def key(self) -> str:
        """The row's test id: ``classic/chess-v6[aec]``."""
        return f"{self.env_id}[{self.api}]"


def _both(env_id: str, **features: Any) -> list[CatalogRow]:
    return [CatalogRow(env_id, api, **features) for api in ("parallel", "aec")]


_TURNS = {"actions": "discrete", "state": "none", "action_mask": "observation",
          "agents_leave": False}
_MPE = {"observations": "vector", "actions": "discrete", "state": "vector",
        "action_mask": "none", "agents_leave": False, "env_kwargs": SHORT}

CATALOG: tuple[CatalogRow, ...] = (
    CatalogRow("classic/chess-v6", "aec", observations="array", **_TURNS),
    CatalogRow("classic/connect_four-v3", "aec", observations="array", **_TURNS),
    CatalogRow("classic/go-v5", "aec", observations="array", **_TURNS,
               env_kwargs={"board_size": 5}),
    CatalogRow("classic/hanabi-v5", "aec", observations="vector", **_TURNS,
               env_kwargs={"colors": 2, "ranks": 5, "hand_size": 2}),
    CatalogRow("classic/leduc_holdem-v4", "aec", observations="vector", **_TURNS),
    *_both("classic/rps-v2", observations="discrete", actions="discrete", state="none",
           action_mask="none", agents_leave=False),
    CatalogRow("classic/texas_holdem-v4", "aec", observations="vector", **_TURNS),
    CatalogRow("classic/texas_holdem_no_limit-v6", "aec", observations="vector", **_TURNS),
    CatalogRow("classic/tictactoe-v3", "aec", observations="array", **_TURNS),
    *_both("butterfly/cooperative_pong-v6", observations="image", actions="discrete",
           state="image", action_mask="none", agents_leave=False,
           env_kwargs={**SHORT, **DRAWN}),
    *_both("butterfly/knights_archers_zombies-v11", observations="array",
           actions="discrete", state="array", action_mask="none", agents_leave=True,
           env_kwargs={"max_cycles": 30, "line_death": True}),  # long enough for deaths
    *_both("butterfly/pistonball-v6", observations="image", actions="continuous",
           state="image", action_mask="none", agents_leave=False,
           env_kwargs={"n_pistons": 4, **SHORT, **DRAWN}),
    *_both("sisl/multiwalker-v9", observations="vector", actions="continuous",
           state="vector", action_mask="none", agents_leave=False, env_kwargs=SHORT),
    *_both("sisl/pursuit-v5", observations="array", actions="discrete", state="array",
           action_mask="none", agents_leave=False, env_kwargs=SHORT),
    *_both("mpe2/collect_treasure_v1", **_MPE),
    *_both("mpe2/simple_adversary_v3", **_MPE),
    *_both("mpe2/simple_crypto_v3", **_MPE),
    *_both("mpe2/simple_formation_v1", **_MPE),
    *_both("mpe2/simple_line_v1", **_MPE),
    *_both("mpe2/simple_push_v3", **_MPE),
    *_both("mpe2/simple_reference_v3", **_MPE),
    *_both("mpe2/simple_speaker_listener_v4", **_MPE),
    *_both("mpe2/simple_spread_v3", **_MPE),
    *_both("mpe2/simple_tag_v3", **_MPE),
    *_both("mpe2/simple_v3", **_MPE),
    *_both("mpe2/simple_world_comm_v3", **_MPE),
)


def installed_envs() -> set[tuple[str, str]]:
    """``(env_id, api)`` of every env installed here: PettingZoo's registries (families whose
    dependencies import, less ``UNTESTED_FAMILIES``) and mpe2's ``*_vN`` modules (both APIs)."""
    import gymnasium
    import pettingzoo

    found: set[tuple[str, str]] = set()
    for api, registry in (("parallel", pettingzoo.parallel_registry),
                          ("aec", pettingzoo.aec_registry)):
        for env_id, spec in registry.items():
            if env_id.split("/")[0] in UNTESTED_FAMILIES:
                continue
            module = str(spec.entry_point).split(":")[0]
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    importlib.import_module(module)
            except (ImportError, gymnasium.error.DependencyNotInstalled):
                continue  # its family's extra is not installed
            found.add((env_id, api))
    try:
        import mpe2
    except ImportError:
        return found
    for module in pkgutil.iter_modules(mpe2.__path__):
        if re.search(r"_v\d+$", module.name):
            found |= {(f"mpe2/{module.name}", "parallel"), (f"mpe2/{module.name}", "aec")}
    return found


def recorded_features(dataset: Any) -> dict[str, Any]:
    """What a recorded ``MultiAgentDataset`` holds, in :class:`CatalogRow`'s terms."""
    spec = dataset.spec
    first = spec.possible_agents[0]
    observation = spec.observation_spaces[first]
    if isinstance(observation, spaces.Dict) and "observation" in observation.spaces:
        observation = observation["observation"]
    episodes = list(dataset)
    masks = {"observation" for e in episodes for tree in e.observations.values()
             if isinstance(tree, dict) and "action_mask" in tree}
    masks |= {"info" for e in episodes for tree in (e.agent_infos or {}).values()
              if isinstance(tree, dict) and "action_mask" in tree}
    return {
        "observations": _kind(observation),
        "actions": _kind(spec.action_spaces[first]).replace("vector", "continuous"),
        "state": "none" if spec.state_space is None else _kind(spec.state_space),
        "action_mask": next((m for m in ("observation", "info") if m in masks), "none"),
        "agents_leave": any(_someone_left(e) for e in episodes),
    }


def _kind(space: spaces.Space) -> str:
    from marl_minari.format.spaces import is_image_space

    if is_image_space(space):
        return "image"
    if isinstance(space, spaces.Discrete):
        return "discrete"
    if isinstance(space, spaces.Box):
        return "vector" if len(space.shape) == 1 else "array"
    return type(space).__name__.lower()


def _someone_left(episode: Any) -> bool:
    """An agent terminated or was truncated while others went on acting (AEC's end-of-game
    turns, where everyone is done, do not count)."""
    done = np.asarray(episode.terminations, bool) | np.asarray(episode.truncations, bool)
    acted = np.asarray(episode.acted, dtype=bool)
    for column in range(done.shape[1]):
        steps = np.flatnonzero(done[:, column])
        if len(steps) and acted[steps[0] + 1:].any():
            return True
    return False


_COLUMNS = ("env", "API", "observations", "actions", "state", "action mask",
            "agents leave early (in the sweep)", "sweep settings")
_BEGIN = "<!-- catalog table: generated by tests/support/env_catalog.py -->"
_END = "<!-- end of catalog table -->"


def render_table() -> str:
    """docs/catalog.md's table, between its markers."""
    lines = [_BEGIN, "", "| " + " | ".join(_COLUMNS) + " |",
             "|" + "---|" * len(_COLUMNS)]
    for row in CATALOG:
        settings = ", ".join(f"`{k}={v}`" for k, v in row.env_kwargs.items()) or "defaults"
        lines.append("| " + " | ".join((
            f"`{row.env_id}`", row.api, row.observations, row.actions, row.state,
            row.action_mask, "yes" if row.agents_leave else "no", settings)) + " |")
    untested = "; ".join(f"`{family}`: {why}" for family, why in UNTESTED_FAMILIES.items())
    lines += ["", f"Not in the sweep: {untested}.", "", _END]
    return "\n".join(lines)


def docs_table(text: str) -> str:
    """The generated part of ``text`` (docs/catalog.md), markers included."""
    start, end = text.find(_BEGIN), text.find(_END)
    if start < 0 or end < start:
        raise ValueError(f"docs/catalog.md lacks the markers {_BEGIN!r} ... {_END!r}")
    return text[start:end + len(_END)]


if __name__ == "__main__":
    path = Path(__file__).resolve().parents[2] / "docs" / "catalog.md"
    text = path.read_text()
    path.write_text(text.replace(docs_table(text), render_table()))
    print(f"rewrote the table of {path}", file=sys.stderr)
