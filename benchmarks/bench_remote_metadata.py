"""What a dataset read in place moves when only its metadata is wanted, and what the driver of
a Ray read of a bare registry URL moves.

Records ``--episodes`` episodes of mpe2 ``simple_spread_v3`` (25 steps each, the dataset of
``bench_remote.py``), publishes them to a ``file://`` registry and serves it over HTTP on
127.0.0.1 from a thread that honours ``Range`` and counts every request and byte
(``bench_remote.CountingRangeHandler``). Then, each with an empty block cache:

1. ``describe(open_source(url, streaming=True), statistics=False)``: every byte served, and
   the data file's share of it, against the published size;
2. ``marl_minari.ray.make_datasource(url)``: what the driver of ``read_dataset(url)`` moves to
   open the dataset and plan the read tasks (Ray is not started: the tasks fetch the rest on
   their nodes);
3. the full ``describe`` of the same source (the statistics pass reads every episode), same
   run, for contrast.

Minari's ``load_dataset(download=True)`` and ``describe --no-statistics`` without
``--streaming`` move 100% of the files first::

    python benchmarks/bench_remote_metadata.py                  # 2,000 episodes
    python benchmarks/bench_remote_metadata.py --episodes 500
"""

from __future__ import annotations

import argparse
import time
import warnings
from contextlib import ExitStack

from bench_remote import (
    DATASET,
    data_file_size,
    fresh_cache,
    moved,
    publish_and_serve,
    record_spread,
    scratch_root,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=2000)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    with scratch_root("bench-remote-metadata-") as root, ExitStack() as served:
        import marl_minari as mm
        import marl_minari.ray as R

        record_spread(DATASET, args.episodes)
        url, manifest = served.enter_context(publish_and_serve(root, DATASET))
        total = manifest.total_size
        data = data_file_size(manifest)
        print(f"{args.episodes} episodes; published {total} bytes (data file {data})")

        fresh_cache(root, "metadata")
        started = time.perf_counter()
        source = mm.open_source(url, streaming=True)
        opened = moved()
        description = mm.describe(source, statistics=False)
        seconds = time.perf_counter() - started
        requests, everything, of_data = moved()
        print(f"describe(statistics=False): {everything} bytes in {requests} requests = "
              f"{100 * everything / total:.2f}% of the published files; data file "
              f"{of_data} bytes ({100 * of_data / data:.2f}%), of which after opening "
              f"{of_data - opened[2]}; {seconds:.2f} s; "
              f"{description.total_episodes} episodes, {description.total_steps} steps")

        fresh_cache(root, "ray-driver")
        started = time.perf_counter()
        R.make_datasource(url, "steps")
        seconds = time.perf_counter() - started
        requests, everything, of_data = moved()
        print(f"Ray driver, make_datasource(url): {everything} bytes in {requests} requests = "
              f"{100 * everything / total:.2f}%; data file {100 * of_data / data:.2f}%; "
              f"{seconds:.2f} s")

        fresh_cache(root, "statistics")
        started = time.perf_counter()
        mm.describe(mm.open_source(url, streaming=True))
        seconds = time.perf_counter() - started
        requests, everything, of_data = moved()
        print(f"describe() (statistics): {everything} bytes = {100 * everything / total:.1f}%; "
              f"{seconds:.2f} s")


if __name__ == "__main__":
    main()
