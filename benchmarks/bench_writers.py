"""Every writer of short episodes against the floor of the layout, in the same run.

Run by hand (not part of the test suite)::

    python benchmarks/bench_writers.py                  # 2,000 episodes of 10-36 steps
    python benchmarks/bench_writers.py --episodes 500   # quick run

The episodes are 3m-shaped (``bench_adapters.py``'s synthetic data: 3 agents, 30-float
observations, a 48-float state, action masks, agents dying part-way through). Each writer
produces a dataset, and the floor is a bare loop of h5py's low-level API creating exactly the
groups, attributes and datasets of that dataset's file from arrays already in memory
(``h5_floor.py``; the high-level API's loop is printed beside it). The writers:

* ``write_dataset``: episodes in memory to a dataset (what ``create_dataset`` of the
  recorders ends with);
* ``recover_recording``: the journal of a recording that was never saved (as after a kill)
  to a dataset;
* ``from_vault``: a Flashbax vault written by ``Vault.write`` (import) and our own vault of the
  same episodes (restore) to a dataset.

Each writer and its floor run ``--repeat`` times, interleaved; the ratio (floor time / writer
time: 1.0 is as fast as the floor) is the median of the runs' own ratios. Goal: >= 0.8x.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

warnings.simplefilter("ignore")

from bench_adapters import (  # noqa: E402
    _view_state,
    episode_lengths,
    make_spec,
    synthetic_episodes,
)
from h5_floor import h5_contents, high_level_floor, low_level_floor  # noqa: E402

SOURCE_ID = "bench/writers-source-v0"


def _timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def _data_file(dataset_id: str) -> Path:
    from marl_minari.format import layout
    from marl_minari.format.ids import dataset_dir

    return dataset_dir(dataset_id) / "data" / layout.MAIN_FILE_NAME


def _writers(work: Path, episodes: list, run: int) -> dict[str, Callable[[], str]]:
    """Each writer as a function writing a new dataset and returning its id."""
    from marl_minari.adapters import from_vault

    import marl_minari as mm
    from marl_minari.storage.recording import Recording

    spec = make_spec()

    def write() -> str:
        dataset_id = f"bench/written-{run}-v0"
        mm.write_dataset(dataset_id, iter(episodes), spec, total=len(episodes),
                         algorithm_name="synthetic", description="bench")
        return dataset_id

    recording_path = work / f"recording-{run}"
    recording = Recording(spec, path=recording_path, durability="none")
    for episode in episodes:
        recording.append(episode)
    recording.close(keep=True)  # as a killed recorder leaves it: journal kept, not saved

    def recover() -> str:
        dataset_id = f"bench/recovered-{run}-v0"
        mm.recover_recording(recording_path, dataset_id, description="bench")
        return dataset_id

    def imported() -> str:
        dataset_id = f"bench/imported-{run}-v0"
        from_vault(rel_dir=work / "vaults", vault_name="flashbax", vault_uid="gzip",
                   dataset_id=dataset_id)
        return dataset_id

    def restored() -> str:
        dataset_id = f"bench/restored-{run}-v0"
        from_vault(rel_dir=work / "vaults", vault_name="ours", vault_uid="gzip",
                   dataset_id=dataset_id)
        return dataset_id

    return {"write_dataset": write, "recover_recording": recover,
            "from_vault (import)": imported, "from_vault (restore)": restored}


def _make_vaults(work: Path) -> None:
    """Our vault of the source dataset (``to_vault``), and a plain Flashbax vault of the same
    arrays (``Vault.write``, as OG-MARL's and Mava's are made)."""
    from flashbax.vault import Vault
    from marl_minari.adapters import to_vault

    to_vault(SOURCE_ID, rel_dir=work / "vaults", vault_name="ours", vault_uid="gzip")
    state, length = _view_state(work)
    vault = Vault("flashbax", state.experience, rel_dir=str(work / "vaults"), vault_uid="gzip")
    vault.write(state, source_interval=(0, length))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each writer and its floor, interleaved")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-writers-"))
    os.environ["MINARI_DATASETS_PATH"] = str(work / "datasets")
    try:
        import marl_minari as mm

        lengths = episode_lengths(args.episodes, args.episodes * 23)
        episodes = list(synthetic_episodes(lengths))
        mm.write_dataset(SOURCE_ID, iter(episodes), make_spec(), total=len(episodes),
                         algorithm_name="synthetic", description="bench source")
        _make_vaults(work)
        steps = int(lengths.sum())
        print(f"{args.episodes:,} episodes of 10-36 steps, {steps:,} steps; "
              f"{args.repeat} interleaved runs, medians")
        times: dict[str, list[tuple[float, float, float]]] = {}
        for run in range(args.repeat):
            for name, writer in _writers(work, episodes, run).items():
                start = time.perf_counter()
                dataset_id = writer()
                seconds = time.perf_counter() - start
                contents = h5_contents(_data_file(dataset_id))
                assert len(contents) == args.episodes, (name, len(contents))
                low = _timed(lambda c=contents: low_level_floor(c, work / "low.hdf5"))
                high = _timed(lambda c=contents: high_level_floor(c, work / "high.hdf5"))
                times.setdefault(name, []).append((seconds, low, high))
        print(f"{'writer':24s} {'writer':>9s} {'low-level':>10s} {'high-level':>11s}  "
              "floor / writer (goal >= 0.8x)")
        for name, runs in times.items():
            seconds, low, high = (statistics.median(r[i] for r in runs) for i in range(3))
            ratio = statistics.median(r[1] / r[0] for r in runs)
            print(f"{name:24s} {seconds:8.2f}s {low:9.2f}s {high:10.2f}s  **{ratio:.2f}x** "
                  f"(runs: {', '.join(f'{r[1] / r[0]:.2f}' for r in runs)})")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
