"""An independent writer of the multi-agent layout, built from ``docs/format.md`` alone.

It uses h5py, numpy and json only (``test_conformance`` checks its imports): no marl-minari,
no Minari, no Gymnasium. It turns a *script* (what a parallel env handed out, what the
policy passed, and ``env.agents`` before every step) into a dataset folder, following the
spec's words:

* row 0 is the reset; row ``k`` what step ``k - 1`` returned;
* ``active[k]``: the agent has an observation at row ``k``;
* an agent acts at step ``t`` only if it is in ``env.agents`` before the step and active at
  row ``t``; other actions are ignored (fill value, ``acted`` false);
* rewards and flags are recorded for every agent in their dicts, present or not; the team
  reward is their sum in ``possible_agents`` order;
* ``agent_infos/<agent>`` exists from the first episode where the agent handed out an info;
* the offset index is a ``.npz`` of JSON header bytes, ``steps`` and ``o<i>`` offsets, bound
  to the file by its BLAKE3 and sealed by a root attribute (the one import beyond h5py, numpy
  and json: ``blake3``, for the digests the spec names).

Spaces are described by small dicts: ``{"type": "Box", "dtype": ..., "shape": [...], "low":
..., "high": ...}``, ``{"type": "Discrete", "n": ...}`` or ``{"type": "Dict", "subspaces":
{...}}`` (Minari's serialisation).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import blake3
import h5py
import numpy as np

INDEX_NAME = "marl_minari_index.npz"


# --- spaces ------------------------------------------------------------------------------------


def leaf_specs(space: dict[str, Any], prefix: str) -> list[tuple[str, np.dtype, tuple[int, ...]]]:
    """``(path, dtype, row shape)`` of every leaf; Dict keys sorted, as Gymnasium's Dict."""
    if space["type"] == "Dict":
        out = []
        for key in sorted(space["subspaces"]):
            out += leaf_specs(space["subspaces"][key], f"{prefix}/{key}")
        return out
    if space["type"] == "Discrete":
        return [(prefix, np.dtype(np.int64), ())]  # Discrete is stored as int64
    return [(prefix, np.dtype(space["dtype"]), tuple(space["shape"]))]


def leaf_value(value: Any, path: str) -> Any:
    """The part of a (nested dict) value a leaf path ``a/b`` points to."""
    for key in [p for p in path.split("/") if p]:
        value = value[key]
    return value


def column(values: list[Any], dtype: np.dtype, shape: tuple[int, ...], sub: str) -> np.ndarray:
    """Stack per-row values (``None``: the fill value, zeros of the dtype)."""
    out = np.zeros((len(values), *shape), dtype=dtype)
    for row, value in enumerate(values):
        if value is not None:
            out[row] = np.asarray(leaf_value(value, sub), dtype=dtype)
    return out


# --- one episode -------------------------------------------------------------------------------


def episode_datasets(script: dict[str, Any], agents: list[str], obs_spaces: dict[str, Any],
                     act_spaces: dict[str, Any], info_structure: dict[str, dict[str, Any]],
                     has_state: bool) -> dict[str, np.ndarray]:
    """Every dataset of one episode group, by path, per the spec's tables."""
    rows, steps = script["rows"], script["steps"]
    n, big_t = len(agents), len(steps)
    out: dict[str, np.ndarray] = {}
    present = [[agent in row["observations"] for agent in agents] for row in rows]
    acts = [[agent in step["agents_before"] and present[t][i] and agent in step["actions"]
             for i, agent in enumerate(agents)] for t, step in enumerate(steps)]
    for i, agent in enumerate(agents):
        for path, dtype, shape in leaf_specs(obs_spaces[agent], f"observations/{agent}"):
            sub = path[len(f"observations/{agent}"):]
            out[path] = column([row["observations"].get(agent) for row in rows], dtype, shape,
                               sub)
        for path, dtype, shape in leaf_specs(act_spaces[agent], f"actions/{agent}"):
            sub = path[len(f"actions/{agent}"):]
            out[path] = column([step["actions"][agent] if acts[t][i] else None
                                for t, step in enumerate(steps)], dtype, shape, sub)
    team = []
    for step in steps:
        total = 0.0
        for agent in agents:  # the team reward: a sum in possible_agents order
            if agent in step["rewards"]:
                total += float(step["rewards"][agent])
        team.append(total)
    out["rewards"] = np.asarray(team, dtype=np.float64)
    last = steps[-1]
    truncated = script.get("cut", False) or any(bool(v) for v in last["truncations"].values())
    ends = np.zeros(big_t, dtype=bool)
    ends[-1] = True
    out["terminations"] = ends & (not truncated)
    out["truncations"] = ends & truncated

    def per_agent(key: str, dtype: Any) -> np.ndarray:
        table = np.zeros((big_t + 1, n), dtype=dtype)  # row 0: nothing happened yet
        for t, step in enumerate(steps):
            for i, agent in enumerate(agents):
                table[t + 1, i] = step[key].get(agent, 0)
        return table

    out["infos/marl/rewards"] = per_agent("rewards", np.float64)
    out["infos/marl/terminations"] = per_agent("terminations", bool)
    out["infos/marl/truncations"] = per_agent("truncations", bool)
    out["infos/marl/active"] = np.asarray(present, dtype=bool)
    acted = np.zeros((big_t + 1, n), dtype=bool)
    acted[:-1] = np.asarray(acts, dtype=bool)
    out["infos/marl/acted"] = acted
    if has_state:
        out["infos/marl/state"] = np.stack([np.asarray(row["state"]) for row in rows])
    for agent in agents:
        infos = [row["infos"].get(agent) or None for row in rows]
        first = next((info for info in infos if info), None)
        if first is not None and agent not in info_structure:
            info_structure[agent] = first  # the agent's info columns exist from now on
        if agent in info_structure:
            for key, value in info_structure[agent].items():
                value = np.asarray(value)
                out[f"infos/marl/agent_infos/{agent}/{key}"] = column(
                    [None if info is None else info[key] for info in infos], value.dtype,
                    value.shape, "")
    return out


# --- the dataset -------------------------------------------------------------------------------


def write(folder: Path, *, dataset_id: str, agents: list[str], obs_spaces: dict[str, Any],
          act_spaces: dict[str, Any], state_space: dict[str, Any] | None,
          descriptor: dict[str, Any] | None, episodes: list[dict[str, Any]],
          record_infos: bool, extra_marl: dict[str, Any] | None = None,
          index: bool = True) -> dict[str, dict[str, np.ndarray]]:
    """Write ``folder/data/{main_data.hdf5, metadata.json, marl_minari_index.npz}``.

    Returns the datasets written, ``{"episode_i": {path: array}}``.
    """
    data = folder / "data"
    data.mkdir(parents=True)
    written: dict[str, dict[str, np.ndarray]] = {}
    info_structure: dict[str, dict[str, Any]] = {}
    offsets: dict[str, list[int]] = {}
    total_steps = 0
    with h5py.File(data / "main_data.hdf5", "w") as file:
        for e, script in enumerate(episodes):
            group = file.create_group(f"episode_{e}")
            steps = len(script["steps"])
            group.attrs["id"] = np.int64(e)
            group.attrs["total_steps"] = np.int64(steps)
            if script.get("seed") is not None:  # int64, or uint64 for seeds >= 2**63
                seed = int(script["seed"])
                group.attrs["seed"] = np.uint64(seed) if seed >= 2**63 else np.int64(seed)
            datasets = episode_datasets(script, agents, obs_spaces, act_spaces, info_structure,
                                        state_space is not None)
            for path, array in datasets.items():
                # Contiguous, unfiltered: what the offset index describes.
                group.create_dataset(path, data=array)
            written[f"episode_{e}"] = datasets
            total_steps += steps
        if index:
            paths = sorted({p for d in written.values() for p in d})
            for path in paths:
                offsets[path] = []
                for e in range(len(episodes)):
                    dataset = file[f"episode_{e}"].get(path)
                    offset = None if dataset is None else dataset.id.get_offset()
                    offsets[path].append(-1 if offset is None else int(offset))
            # The seal: BLAKE3 of the JSON of the sorted paths, then steps and every o<i> as
            # little-endian int64, stored as a root attribute before the file is closed.
            seal = blake3.blake3(json.dumps(paths).encode())
            seal.update(np.asarray([len(s["steps"]) for s in episodes], dtype="<i8").tobytes())
            for path in paths:
                seal.update(np.asarray(offsets[path], dtype="<i8").tobytes())
            file.attrs["marl_minari_index_blake3"] = seal.hexdigest()
    if index:
        paths = sorted(offsets)
        main = data / "main_data.hdf5"
        header = {"version": 2, "file_size": main.stat().st_size,
                  "blake3": blake3.blake3(main.read_bytes()).hexdigest(), "paths": paths}
        np.savez(data / INDEX_NAME,
                 header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8),
                 steps=np.asarray([len(s["steps"]) for s in episodes], dtype=np.int64),
                 **{f"o{i}": np.asarray(offsets[p], dtype=np.int64)
                    for i, p in enumerate(paths)})

    def joint(by_agent: dict[str, Any]) -> str:
        return json.dumps({"type": "Dict",
                           "subspaces": {a: by_agent[a] for a in sorted(by_agent)}})

    marl: dict[str, Any] = {
        "layout_version": 1, "library_version": "spec-writer", "api": "parallel",
        "possible_agents": agents, "env": descriptor, "reward_aggregation": "sum",
        "state_space": None if state_space is None else json.dumps(state_space),
        "record_infos": record_infos, "state_encoding": "raw", **(extra_marl or {}),
    }
    metadata: dict[str, Any] = {
        "dataset_id": dataset_id, "total_episodes": len(episodes), "total_steps": total_steps,
        "data_format": "hdf5", "jpeg_encoding": False,
        "observation_space": joint(obs_spaces), "action_space": joint(act_spaces),
        "minari_version": "0.5.4", "marl_minari": marl,
    }
    if descriptor is not None and (descriptor.get("env_id") or descriptor.get("entry_point")):
        name = "".join(c if c.isalnum() or c == "_" else "_"
                       for c in descriptor.get("env_id") or descriptor["entry_point"])
        metadata["env_spec"] = json.dumps({
            "id": f"marl_minari/{name}-v0", "entry_point": "marl_minari.joint:JointEnv",
            "reward_threshold": None, "nondeterministic": False, "max_episode_steps": None,
            "order_enforce": False, "disable_env_checker": True,
            "kwargs": {"descriptor": descriptor, "possible_agents": agents,
                       "reward_aggregation": "sum"},
            "additional_wrappers": [], "vector_entry_point": None,
        })
    (data / "metadata.json").write_text(json.dumps(metadata))
    # Every namespace level has a namespace_metadata.json.
    level = folder.parent
    for _ in dataset_id.split("/")[:-1]:
        (level / "namespace_metadata.json").write_text("{}")
        level = level.parent
    return written
