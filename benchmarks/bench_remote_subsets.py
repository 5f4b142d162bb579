"""What choosing episodes by their returns moves from a dataset read in place, and what one
episode of a plain single-agent Minari dataset moves.

Records ``--episodes`` episodes of mpe2 ``simple_spread_v3`` of ``--steps`` steps each,
publishes them to a ``file://`` registry and serves it over HTTP on 127.0.0.1 (the counting
server of ``bench_remote.py``). Then, each with an empty block cache:

1. bytes moved by ``subsample(source, profile=..., max_steps=1% of the steps)`` (two
   episodes' steps at least): every
   episode's return (the reward column alone, with the HDF5 object headers that bind its
   offset-index entries), then the chosen episodes;
2. bytes moved by reading the returns alone (``source.team_returns()``);
3. a plain CartPole dataset recorded by Minari's ``DataCollector`` (``--plain-episodes``),
   published the same way: bytes moved to open it with ``streaming=True`` and read one
   episode (HDF5 over verified ranges; plain datasets have no offset index).

All against the published data file's size::

    python benchmarks/bench_remote_subsets.py                        # 2,000 x 25 steps
    python benchmarks/bench_remote_subsets.py --episodes 40 --steps 1000
"""

from __future__ import annotations

import argparse
import shutil
import sys
import warnings
from contextlib import ExitStack
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from bench_remote import (  # noqa: E402
    data_file_size,
    fresh_cache,
    moved,
    record_spread,
    scratch_root,
    serve_counting,
)
from random_play import play_random_episodes  # noqa: E402  (tests/support)

DATASET = "bench/choose-v0"
PLAIN = "bench/plain-cartpole-v0"


def _record_plain(episodes: int) -> None:
    import gymnasium as gym
    import minari

    env = minari.DataCollector(gym.make("CartPole-v1"))
    play_random_episodes(env, episodes)
    env.create_dataset(PLAIN, algorithm_name="random")
    env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--plain-episodes", type=int, default=2000)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    with scratch_root("bench-choose-") as root, ExitStack() as served:
        import marl_minari as mm
        from marl_minari import registry

        registry_dir = root / "registry"
        record_spread(DATASET, args.episodes, args.steps)
        returns = mm.open_source(DATASET).team_returns()
        manifest = registry.publish(DATASET, f"file://{registry_dir}").manifest
        data_size = data_file_size(manifest)
        total_steps = int(mm.load_dataset(DATASET).total_steps)
        _record_plain(args.plain_episodes)
        plain = registry.publish(PLAIN, f"file://{registry_dir}", allow_single_agent=True)
        plain_size = data_file_size(plain.manifest)
        shutil.rmtree(root / "datasets")
        base = served.enter_context(serve_counting(registry_dir))
        print(f"{args.episodes} episodes x {args.steps} steps; data file {data_size} bytes, "
              f"{data_size / args.episodes / 1024:.0f} KiB per episode")

        fresh_cache(root, "returns")
        source = mm.open_source(f"{base}/{DATASET}", streaming=True)
        opened = moved(clear=True)[1]
        source.team_returns()
        only_returns = moved(clear=True)[1]
        print(f"open: {opened} bytes = {100 * opened / data_size:.1f}%; the returns alone "
              f"after that: {only_returns} bytes = {100 * only_returns / data_size:.1f}% of "
              "the data file")

        fresh_cache(root, "profile")
        cap = max(total_steps // 100, 2 * args.steps)  # 1%, and one episode per bin at least
        edges = [float(returns.min()), float(np.median(returns)), float(returns.max())]
        mm.subsample(mm.open_source(f"{base}/{DATASET}", streaming=True),
                     "bench/choose-subset-v0", profile=(edges, [1.0, 1.0]),
                     max_steps=cap, seed=0)
        served = moved(clear=True)[1]
        print(f"subsample(profile=2 bins, max_steps={cap}): {served} bytes = "
              f"{100 * served / data_size:.1f}% of the data file (opening included)")

        fresh_cache(root, "plain")
        plain_source = mm.open_source(f"{base}/{PLAIN}", streaming=True)
        opened = moved(clear=True)[1]
        plain_source.read([args.plain_episodes // 2])
        one = moved(clear=True)[1]
        print(f"plain CartPole, {args.plain_episodes} episodes, data file {plain_size} bytes: "
              f"open {opened} bytes ({100 * opened / plain_size:.2f}%), one episode {one} "
              f"bytes more ({100 * one / plain_size:.2f}%), "
              f"{100 * (opened + one) / plain_size:.2f}% in all")


if __name__ == "__main__":
    main()
