"""A recorder in a child process: appends, creates or recovers, optionally killed at a point.

Run as ``python durability_child.py MODE DATASET_ID RECORDING_PATH SEED [KILL_AT]``:

- ``append``: 10 rounds of recording 5 episodes and adding them to DATASET_ID.
- ``create``: record 5 episodes and create DATASET_ID.
- ``add-once``: record 5 episodes and add them to DATASET_ID once.
- ``chase``: record 5 episodes, add them to DATASET_ID, retrying until it exists.
- ``recover``: recover the recording at RECORDING_PATH into DATASET_ID.
- ``hold-lock``: hold DATASET_ID's lock until killed.
- ``hold-staging``: hold a staging folder under the staging root until killed.

Seeds are SEED, SEED + 1, ... so the parent can check every episode is stored exactly once.
KILL_AT names a commit point where the process SIGKILLs itself:

- ``append-data``: the appended data file is in place, its metadata.json is not.
- ``stored``: the dataset holds the episodes, the journal still does too.
- ``create-rename``: the created dataset is complete in staging, not yet renamed into place.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import warnings

warnings.simplefilter("ignore")

import marl_minari as mm  # noqa: E402
from marl_minari.errors import DatasetNotFoundError  # noqa: E402
from marl_minari.storage import recording as recording_module  # noqa: E402
from marl_minari.storage import writer as writer_module  # noqa: E402
from marl_minari.storage.locking import dataset_lock, staging_folder, staging_root  # noqa: E402


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def install_kill(point: str) -> None:
    if point == "append-data":
        real_replace = os.replace

        def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
            if os.fspath(dst).endswith("data/metadata.json") and "append-" in os.fspath(src):
                die()
            real_replace(src, dst)

        writer_module.os.replace = replace  # type: ignore[assignment]
    elif point == "stored":
        recording_module.Recording._drop_stored = lambda self: die()  # type: ignore
    elif point == "create-rename":
        writer_module._move_into_place = lambda *args: die()  # type: ignore


def record(path: str, seed: int, episodes: int = 5) -> mm.ParallelDataCollector:
    collector = mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", max_cycles=3),
                                         recording_path=path,
                                         episode_metadata_callback=lambda e: {"seed": e.seed})
    for i in range(episodes):
        collector.reset(seed=seed + i)
        while collector.agents:
            collector.step({a: 0 for a in collector.agents})
    return collector


def main() -> None:
    mode, dataset_id, path, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if len(sys.argv) > 5:
        install_kill(sys.argv[5])
    if mode == "append":
        collector = record(path, seed, 0)
        for round_ in range(10):
            for i in range(5):
                collector.reset(seed=seed + 5 * round_ + i)
                while collector.agents:
                    collector.step({a: 0 for a in collector.agents})
            collector.add_to_dataset(dataset_id)
        collector.close()
    elif mode == "create":
        record(path, seed).create_dataset(dataset_id)
    elif mode == "add-once":
        record(path, seed).add_to_dataset(dataset_id)
    elif mode == "chase":
        collector = record(path, seed)
        while True:
            try:
                collector.add_to_dataset(dataset_id)
                break
            except DatasetNotFoundError:
                time.sleep(0.01)
        collector.close()
    elif mode == "recover":
        mm.recover_recording(path, dataset_id)
    elif mode == "hold-lock":
        with dataset_lock(dataset_id):
            print("holding", flush=True)
            time.sleep(600)
    elif mode == "hold-staging":
        with staging_folder(staging_root(), "dataset") as work:
            print(work, flush=True)
            time.sleep(600)
    print("done", flush=True)


if __name__ == "__main__":
    main()
