"""Per-episode HDF5 cost of short episodes: the high-level h5py API versus the low-level one.

Writes the same episodes (10-36 steps, an smac-3m-like set of leaves: about 20 small datasets
in 4 groups per episode) four ways into fresh files and reports steps/s and file size:

- ``high-level``: ``group.create_dataset(name, data=...)`` (contiguous, as our writer's layout);
- ``high-level chunked``: with ``chunks=True, maxshape=(None, ...)``, as Minari writes;
- ``low-level``: ``h5py.h5d.create`` with cached type ids and the default property lists
  (what ``marl_minari.storage.writer`` does);
- ``low-level tuned``: property lists made once and reused, object timestamps off for
  groups and datasets, and compact layout (data inside the object header) for arrays under
  ``--compact-below`` bytes.

    python benchmarks/bench_short_episodes.py [--episodes 2000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

import h5py
import numpy as np

Episode = list[tuple[str, np.ndarray]]


def make_episodes(count: int, seed: int = 0) -> list[Episode]:
    rng = np.random.default_rng(seed)
    episodes = []
    for _ in range(count):
        steps = int(rng.integers(10, 37))
        leaves: Episode = []
        for agent in range(3):
            leaves.append((f"observations/agent_{agent}", rng.random((steps + 1, 30), np.float32)))
            leaves.append((f"actions/agent_{agent}", rng.integers(0, 9, steps, dtype=np.int64)))
            leaves.append((f"infos/marl/agent_infos/agent_{agent}/action_mask",
                           np.ones((steps + 1, 9), dtype=np.int8)))
        leaves += [("rewards", rng.random(steps)), ("terminations", np.zeros(steps, bool)),
                   ("truncations", np.zeros(steps, bool))]
        for name in ("rewards", "terminations", "truncations", "active", "acted"):
            leaves.append((f"infos/marl/{name}", np.zeros((steps + 1, 3), np.float64)))
        leaves.append(("infos/marl/state", rng.random((steps + 1, 48), np.float32)))
        episodes.append(leaves)
    return episodes


def _groups(root: Any, path: str, cache: dict[str, Any], create: Callable[[Any, str], Any]
            ) -> Any:
    if path in cache:
        return cache[path]
    parent_path, _, name = path.rpartition("/")
    parent = _groups(root, parent_path, cache, create) if parent_path else root
    cache[path] = group = create(parent, name)
    return group


def write_high(path: str, episodes: list[Episode], chunked: bool) -> None:
    with h5py.File(path, "w") as file:
        for index, leaves in enumerate(episodes):
            group = file.create_group(f"episode_{index}")
            group.attrs["id"] = index
            cache: dict[str, Any] = {}
            for leaf_path, array in leaves:
                parent_path, _, name = leaf_path.rpartition("/")
                parent = _groups(group, parent_path, cache, lambda p, n: p.create_group(n)) \
                    if parent_path else group
                if chunked:
                    parent.create_dataset(name, data=array, chunks=True,
                                          maxshape=(None, *array.shape[1:]))
                else:
                    parent.create_dataset(name, data=array)


def write_low(path: str, episodes: list[Episode], tuned: bool, compact_below: int) -> None:
    with h5py.File(path, "w") as file:
        types: dict[np.dtype, Any] = {}
        gcpl = dcpl_compact = dcpl = None
        if tuned:
            gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
            gcpl.set_obj_track_times(False)
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_obj_track_times(False)
            dcpl_compact = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl_compact.set_obj_track_times(False)
            dcpl_compact.set_layout(h5py.h5d.COMPACT)

        def group(parent: Any, name: str) -> Any:
            return h5py.h5g.create(parent, name.encode(), gcpl=gcpl)

        for index, leaves in enumerate(episodes):
            root = group(file.id, f"episode_{index}")
            cache: dict[str, Any] = {}
            for leaf_path, array in leaves:
                parent_path, _, name = leaf_path.rpartition("/")
                parent = _groups(root, parent_path, cache, group) if parent_path else root
                type_id = types.get(array.dtype)
                if type_id is None:
                    type_id = types[array.dtype] = h5py.h5t.py_create(array.dtype, logical=True)
                plist = dcpl_compact if tuned and array.nbytes < compact_below else dcpl
                dataset = h5py.h5d.create(parent, name.encode(), type_id,
                                          h5py.h5s.create_simple(array.shape), dcpl=plist)
                dataset.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(array))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compact-below", type=int, default=16_000,
                        help="bytes; HDF5 caps compact data at 64 KiB per dataset")
    args = parser.parse_args()
    episodes = make_episodes(args.episodes)
    steps = sum(len(leaves[1][1]) for leaves in episodes)
    datasets = sum(len(leaves) for leaves in episodes)
    data_mb = sum(a.nbytes for leaves in episodes for _, a in leaves) / 1e6
    folder = tempfile.mkdtemp(prefix="bench-short-")
    ways: dict[str, Callable[[str], None]] = {
        "high-level": lambda p: write_high(p, episodes, chunked=False),
        "high-level chunked (Minari)": lambda p: write_high(p, episodes, chunked=True),
        "low-level (our writer)": lambda p: write_low(p, episodes, False, args.compact_below),
        "low-level tuned": lambda p: write_low(p, episodes, True, args.compact_below),
    }
    print(f"{args.episodes} episodes, {steps} steps, {datasets} datasets, {data_mb:.1f} MB "
          f"of data; best of {args.repeats}")
    for label, write in ways.items():
        best = np.inf
        path = os.path.join(folder, "out.hdf5")
        for _ in range(args.repeats):
            start = time.perf_counter()
            write(path)
            best = min(best, time.perf_counter() - start)
        size = os.path.getsize(path) / 1e6
        print(f"{label:30}{steps / best:10.0f} steps/s{best / datasets * 1e6:8.1f} us/dataset"
              f"{size:8.1f} MB")
        os.remove(path)


if __name__ == "__main__":
    main()
