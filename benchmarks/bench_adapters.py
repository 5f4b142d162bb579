"""Benchmark of the Minari <-> Flashbax adapters on data shaped like OG-MARL's smac_v1 3m Good.

Run by hand (not part of the test suite)::

    python benchmarks/bench_adapters.py                 # full size: ~1M steps, 43,559 episodes
    python benchmarks/bench_adapters.py --scale 0.05    # quick run
    python benchmarks/bench_adapters.py --markdown adapters-figures.md

Every measured step runs in its own subprocess so that its peak RSS is its own. Compared in
the same run:

* Minari -> Vault (:func:`to_vault`) against one ``flashbax.vault.Vault.write`` of the same
  arrays already in memory (target: at least 0.7x its throughput);
* Vault -> Minari (:func:`from_vault`, importing the plain Flashbax vault, and restoring our
  own vault) against ``minari.create_dataset_from_buffers`` writing the same episodes from
  buffers already in memory (target: at least as fast);
* :func:`make_buffer` from two sources (the dataset and the vault) and ``jit(sample)``
  throughput at batch 256 x sequence 20;
* :func:`make_buffer`'s peak memory from one source (the dataset, then the vault) against
  Flashbax's own ways of filling a buffer with the same vault: ``Vault.read()`` (what OG-MARL
  and Mava hand to ``buffer.sample``) and ``make_trajectory_buffer`` ``init`` + ``add`` of what
  it read (target: at most 1.2x the buffer's bytes). Peak memory is the growth of the peak
  resident set during the call, after a warm-up call on a small source.

The data is synthetic with 3m's shapes: 3 agents, 30-float observations, 48-float state,
9 actions with an ``action_mask`` in the agents' infos, episodes of 10-36 steps, agents dying
part-way through some episodes (zero observation, no-op-only legals in the vault).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

FULL_STEPS = 996_366
FULL_EPISODES = 43_559
AGENTS = ("agent_0", "agent_1", "agent_2")
OBS, STATE, ACTIONS = 30, 48, 9
DATASET_ID = "bench/smac_3m_like-v0"
TINY_ID = "bench/smac_3m_like-tiny-v0"
TINY_EPISODES = 20


# --------------------------------------------------------------------------- synthetic data


def episode_lengths(episodes: int, steps: int, seed: int = 0) -> np.ndarray:
    """Lengths between 10 and 36 adding up to exactly ``steps``."""
    rng = np.random.default_rng(seed)
    base = rng.integers(10, 37, size=episodes)
    lengths = np.floor(base * steps / base.sum()).astype(np.int64)
    extra = rng.choice(episodes, size=steps - int(lengths.sum()), replace=False)
    lengths[extra] += 1
    assert lengths.min() >= 1 and lengths.sum() == steps
    return lengths


def synthetic_episodes(lengths: np.ndarray, seed: int = 0) -> Any:
    """3m-shaped :class:`MultiAgentEpisode` objects, one after the other."""
    from marl_minari import MultiAgentEpisode

    rng = np.random.default_rng(seed)
    n = len(AGENTS)
    for index, steps in enumerate(lengths.tolist()):
        rows = steps + 1
        death = np.where(rng.random(n) < 0.3, rng.integers(1, rows, size=n), rows)
        active = np.arange(rows)[:, None] < death[None, :]
        obs = rng.standard_normal((rows, n, OBS)).astype(np.float32) * active[..., None]
        masks = (rng.random((rows, n, ACTIONS)) < 0.7).astype(np.int8)
        masks[..., 1] = 1
        masks *= active[..., None]
        acted = active[:-1]
        actions = rng.integers(0, ACTIONS, size=(steps, n)) * acted
        team = rng.standard_normal(steps)
        rewards = np.repeat(team[:, None], n, axis=1) * acted
        terms = np.zeros((steps, n), dtype=bool)
        terms[-1] = active[-2]
        ends = np.zeros(steps, dtype=bool)
        ends[-1] = True
        yield MultiAgentEpisode(
            possible_agents=AGENTS,
            observations={a: obs[:, i] for i, a in enumerate(AGENTS)},
            actions={a: actions[:, i].astype(np.int64) for i, a in enumerate(AGENTS)},
            rewards=rewards, terminations=terms, truncations=np.zeros((steps, n), bool),
            active=active, acted=acted, team_rewards=rewards.sum(axis=1),
            episode_terminations=ends, episode_truncations=np.zeros(steps, dtype=bool),
            state=rng.standard_normal((rows, STATE)).astype(np.float32),
            agent_infos={a: {"action_mask": masks[:, i]} for i, a in enumerate(AGENTS)},
            seed=index,
        )


def make_spec() -> Any:
    from gymnasium import spaces

    from marl_minari import MultiAgentSpec

    box = spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    return MultiAgentSpec(
        api="parallel", possible_agents=AGENTS,
        observation_spaces={a: box for a in AGENTS},
        action_spaces={a: spaces.Discrete(ACTIONS) for a in AGENTS},
        state_space=spaces.Box(-np.inf, np.inf, (STATE,), np.float32),
    )


# --------------------------------------------------------------------------- steps


class Timer:
    """Wall and CPU time (all threads of the process) of a ``with`` block."""

    def __enter__(self) -> Timer:
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._wall
        self.cpu_seconds = time.process_time() - self._cpu

    def result(self, **more: Any) -> dict[str, Any]:
        """``{"seconds": ..., "cpu_seconds": ..., **more}``."""
        return {"seconds": self.seconds, "cpu_seconds": self.cpu_seconds, **more}


def step_make(work: Path, scale: float) -> dict[str, Any]:
    from marl_minari import write_dataset

    steps = int(FULL_STEPS * scale)
    episodes = max(1, int(FULL_EPISODES * scale))
    lengths = episode_lengths(episodes, steps)
    with Timer() as timer:
        write_dataset(DATASET_ID, synthetic_episodes(lengths), make_spec(), total=episodes,
                      algorithm_name="synthetic", description="3m-shaped synthetic data")
    # Warm-up sources for the peak memory steps (imports, caches, compilations).
    from marl_minari.adapters import to_vault

    tiny = episode_lengths(TINY_EPISODES, TINY_EPISODES * 20)
    write_dataset(TINY_ID, synthetic_episodes(tiny), make_spec(), total=TINY_EPISODES,
                  algorithm_name="synthetic", description="warm-up")
    to_vault(TINY_ID, rel_dir=work / "vaults", vault_name="tiny", vault_uid="gzip")
    return timer.result(steps=steps, episodes=episodes)


def step_to_vault(work: Path, compression: str, seeds: bool = True) -> dict[str, Any]:
    from marl_minari.adapters import to_vault

    comp = {"id": "gzip", "level": 5} if compression == "gzip" else {"id": "zstd", "level": 3}
    uid = compression if seeds else f"{compression}-seedless"
    with Timer() as timer:
        to_vault(DATASET_ID, rel_dir=work / "vaults", vault_name="ours", vault_uid=uid,
                 compression=comp, seeds=seeds)
    return timer.result()


def _view_state(work: Path) -> tuple[Any, int]:
    """Our vault's OG-MARL arrays, in memory, as a Flashbax buffer state."""
    import tensorstore as ts
    from flashbax.buffers.trajectory_buffer import TrajectoryBufferState

    base = work / "vaults" / "ours" / "gzip"
    meta = json.loads((base / "metadata.json").read_text())

    def read(name: str) -> np.ndarray:
        spec = {"driver": "zarr", "kvstore": {"driver": "ocdbt", "base": f"file://{base}",
                                              "path": name}}
        store = ts.open(spec, open=True).result()
        return np.asarray(store[:, :length].read().result())

    index = ts.open({"driver": "zarr", "kvstore": {"driver": "ocdbt", "base": f"file://{base}",
                                                   "path": "vault_index"}}).result()
    length = int(np.asarray(index.read().result())[0])
    experience = {
        "observations": read("observations."), "actions": read("actions."),
        "rewards": read("rewards."), "terminals": read("terminals."),
        "truncations": read("truncations."),
        "infos": {"legals": read("infos.legals."), "state": read("infos.state.")},
    }
    del meta
    state = TrajectoryBufferState(experience=experience, current_index=np.asarray(length),
                                  is_full=np.asarray(False))
    return state, length


def step_vault_write(work: Path, compression: str) -> dict[str, Any]:
    from flashbax.vault import Vault

    state, length = _view_state(work)
    comp = {"id": "gzip", "level": 5} if compression == "gzip" else {"id": "zstd", "level": 3}
    with Timer() as timer:
        vault = Vault("flashbax", state.experience, rel_dir=str(work / "vaults"),
                      vault_uid=compression, compression=comp)
        vault.write(state, source_interval=(0, length))
    return timer.result()


def step_from_vault(work: Path, which: str) -> dict[str, Any]:
    from marl_minari.adapters import from_vault

    name, uid, dataset = (("flashbax", "gzip", "bench/imported-v0") if which == "import"
                          else ("ours", "gzip", "bench/restored-v0"))
    with Timer() as timer:
        from_vault(rel_dir=work / "vaults", vault_name=name, vault_uid=uid, dataset_id=dataset)
    return timer.result()


def step_minari_baseline(work: Path) -> dict[str, Any]:
    """``create_dataset_from_buffers`` writing the episodes of the vault."""
    from gymnasium import spaces
    from minari import create_dataset_from_buffers
    from minari.data_collector import EpisodeBuffer

    state, length = _view_state(work)
    exp = state.experience
    obs, actions, rewards = exp["observations"][0], exp["actions"][0], exp["rewards"][0]
    terms, legals, st = exp["terminals"][0], exp["infos"]["legals"][0], exp["infos"]["state"][0]
    ends = np.flatnonzero(terms.any(axis=1))
    buffers = []
    start_row = 0
    for end in ends.tolist():
        rows = slice(start_row, end + 1)
        steps = end + 1 - start_row

        def final(x: np.ndarray) -> np.ndarray:
            return np.concatenate([x, x[-1:]])

        buffers.append(EpisodeBuffer(
            observations={a: final(obs[rows, i]) for i, a in enumerate(AGENTS)},
            actions={a: actions[rows, i].astype(np.int64) for i, a in enumerate(AGENTS)},
            rewards=rewards[rows].mean(axis=1).astype(np.float64),
            terminations=np.eye(1, steps, steps - 1, dtype=bool)[0],
            truncations=np.zeros(steps, dtype=bool),
            infos={"state": final(st[rows]),
                   "legals": {a: final(legals[rows, i]) for i, a in enumerate(AGENTS)}},
        ))
        start_row = end + 1
    box = spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    with Timer() as timer:
        create_dataset_from_buffers(
            "bench/minari_baseline-v0", buffers,
            observation_space=spaces.Dict({a: box for a in AGENTS}),
            action_space=spaces.Dict({a: spaces.Discrete(ACTIONS) for a in AGENTS}),
            algorithm_name="synthetic", author="bench", author_email="bench@example.com",
            code_permalink="https://example.com", description="baseline")
    return timer.result(episodes=len(buffers))


def step_buffer(work: Path) -> dict[str, Any]:
    import jax
    from marl_minari.adapters import make_buffer

    with Timer() as timer:
        buffer, state = make_buffer([DATASET_ID, str(work / "vaults" / "flashbax" / "gzip")],
                                    sample_batch_size=256, sample_sequence_length=20)
        jax.block_until_ready(state)
    sample = jax.jit(buffer.sample)
    key = jax.random.PRNGKey(0)
    start = time.perf_counter()
    jax.block_until_ready(sample(state, key))
    compile_seconds = time.perf_counter() - start
    calls = 200
    keys = jax.random.split(key, calls)
    start = time.perf_counter()
    for k in keys:
        out = sample(state, k)
    jax.block_until_ready(out)
    per_call = (time.perf_counter() - start) / calls
    return timer.result(compile_seconds=compile_seconds, sample_ms=per_call * 1e3,
                        steps=int(state.current_index), device=str(jax.devices()[0]))


def _peak_growth(run: Any) -> tuple[int, dict[str, Any]]:
    """Bytes the peak resident set grew by while ``run()`` ran, and its timing (Linux:
    ``/proc/self/clear_refs`` restarts the peak from the current resident set)."""
    def status(field: str) -> int:
        with open("/proc/self/status") as handle:
            line = next(x for x in handle if x.startswith(field + ":"))
        return int(line.split()[1]) * 1024

    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")
    before = status("VmRSS")
    with Timer() as timer:
        run()
    return status("VmHWM") - before, timer.result()


def _state_bytes(state: Any) -> int:
    import jax

    return sum(int(leaf.nbytes) for leaf in jax.tree.leaves(state.experience))


def step_buffer_memory(work: Path, which: str) -> dict[str, Any]:
    import jax
    from marl_minari.adapters import make_buffer

    big, tiny = ((DATASET_ID, TINY_ID) if which == "dataset" else
                 (str(work / "vaults" / "flashbax" / "gzip"),
                  str(work / "vaults" / "tiny" / "gzip")))
    jax.block_until_ready(make_buffer([tiny], sample_batch_size=256,
                                      sample_sequence_length=20)[1])
    built: dict[str, Any] = {}

    def run() -> None:
        built["state"] = make_buffer([big], sample_batch_size=256, sample_sequence_length=20)[1]
        jax.block_until_ready(built["state"])

    growth, timing = _peak_growth(run)
    data = _state_bytes(built["state"])
    return {**timing, "growth_mb": growth / 2**20, "data_mb": data / 2**20,
            "ratio": growth / data}


def step_flashbax_fill(work: Path, add: bool) -> dict[str, Any]:
    """Flashbax's own ways: ``Vault.read()`` alone, or followed by ``make_trajectory_buffer``'s
    ``init`` and ``add`` (jitted with the state donated, as Flashbax's examples do; compiled
    before the measurement)."""
    import flashbax as fbx
    import jax
    from flashbax.vault import Vault

    def vault(name: str) -> Any:
        return Vault(name, rel_dir=str(work / "vaults"), vault_uid="gzip")

    jax.block_until_ready(vault("tiny").read())
    length = vault("flashbax").vault_index
    one = vault("flashbax").read(timesteps=1).experience
    buffer = fbx.make_trajectory_buffer(
        add_batch_size=1, sample_batch_size=256, sample_sequence_length=20, period=1,
        min_length_time_axis=20, max_length_time_axis=length)
    timestep = jax.tree.map(lambda x: x[0, 0], one)
    init = jax.jit(buffer.init).lower(timestep).compile()
    batch = jax.tree.map(lambda x: jax.ShapeDtypeStruct((1, length, *x.shape[2:]), x.dtype),
                         one)
    adder = jax.jit(buffer.add, donate_argnums=0).lower(
        jax.eval_shape(buffer.init, timestep), batch).compile()
    built: dict[str, Any] = {}

    def run() -> None:
        read = vault("flashbax").read()
        if add:
            built["state"] = adder(init(timestep), read.experience)
            del read
        else:
            built["state"] = read
        jax.block_until_ready(built["state"])

    growth, timing = _peak_growth(run)
    data = _state_bytes(built["state"])
    return {**timing, "growth_mb": growth / 2**20, "data_mb": data / 2**20,
            "ratio": growth / data}


STEPS = {
    "make": lambda w, a: step_make(w, a.scale),
    "to_vault": lambda w, a: step_to_vault(w, "gzip"),
    "to_vault_zstd": lambda w, a: step_to_vault(w, "zstd"),
    "to_vault_seedless": lambda w, a: step_to_vault(w, "gzip", seeds=False),
    "vault_write": lambda w, a: step_vault_write(w, "gzip"),
    "vault_write_zstd": lambda w, a: step_vault_write(w, "zstd"),
    "from_vault_import": lambda w, a: step_from_vault(w, "import"),
    "from_vault_restore": lambda w, a: step_from_vault(w, "restore"),
    "minari_baseline": lambda w, a: step_minari_baseline(w),
    "buffer": lambda w, a: step_buffer(w),
    "buffer_memory_dataset": lambda w, a: step_buffer_memory(w, "dataset"),
    "buffer_memory_vault": lambda w, a: step_buffer_memory(w, "vault"),
    "fbx_vault_read": lambda w, a: step_flashbax_fill(w, add=False),
    "fbx_fill": lambda w, a: step_flashbax_fill(w, add=True),
}


def run_step(name: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Run one step in a fresh interpreter; return its result with ``peak_rss_mb``."""
    command = [sys.executable, __file__, "--work", str(work), "--scale", str(args.scale),
               "--step", name]
    done = subprocess.run(command, capture_output=True, text=True, check=False,
                          env={**os.environ, "MINARI_DATASETS_PATH": str(work / "datasets")})
    if done.returncode != 0:
        raise RuntimeError(f"step {name} failed:\n{done.stdout}\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=1.0,
                        help="fraction of 3m Good's size (1.0: 996,366 steps)")
    parser.add_argument("--work", type=Path, default=None, help="scratch folder")
    parser.add_argument("--step", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--markdown", type=Path, default=None,
                        help="also write the results as a markdown table here")
    args = parser.parse_args()
    if args.step is not None:
        warnings.simplefilter("ignore")
        os.environ["MINARI_DATASETS_PATH"] = str(args.work / "datasets")
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence library prints
        result = STEPS[args.step](args.work, args)
        result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        sys.stdout = sys.__stdout__
        print(json.dumps(result))
        return
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-adapters-"))
    shutil.rmtree(work / "datasets", ignore_errors=True)
    shutil.rmtree(work / "vaults", ignore_errors=True)
    results = {}
    for name in STEPS:
        results[name] = run_step(name, work, args)
        print(f"{name:20s} {json.dumps(results[name])}", flush=True)
    report = render(results, args.scale)
    print(report)
    if args.markdown is not None:
        args.markdown.write_text(report)
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)


def render(results: dict[str, dict[str, Any]], scale: float) -> str:
    """The results as markdown."""
    made = results["make"]
    steps, episodes = made["steps"], made["episodes"]

    def row(label: str, name: str) -> str:
        r = results[name]
        return (f"| {label} | {r['seconds']:.1f} s | {r['cpu_seconds']:.1f} s | "
                f"{steps / r['seconds'] / 1e3:,.0f}k | {r['peak_rss_mb']:,.0f} MB |")

    def ratio(baseline: str, ours: str) -> str:
        wall = results[baseline]["seconds"] / results[ours]["seconds"]
        cpu = results[baseline]["cpu_seconds"] / results[ours]["cpu_seconds"]
        return f"**{wall:.2f}x** wall ({cpu:.2f}x CPU)"

    buf = results["buffer"]
    lines = [
        f"Data: {steps:,} steps, {episodes:,} episodes (scale {scale}), 3 agents, 30-float "
        "observations, 48-float state, 9 actions.",
        "",
        "| step | wall | CPU (all threads) | steps/s | peak RSS |",
        "|---|---|---|---|---|",
        row("write the source dataset with the writer (setup)", "make"),
        row("Minari -> Vault, `to_vault`, gzip-5", "to_vault"),
        row("baseline: one `Vault.write` of the same arrays, gzip-5", "vault_write"),
        row("Minari -> Vault, `to_vault`, gzip-5, `seeds=False`", "to_vault_seedless"),
        row("Minari -> Vault, `to_vault`, zstd-3", "to_vault_zstd"),
        row("baseline: one `Vault.write` of the same arrays, zstd-3", "vault_write_zstd"),
        row("Vault -> Minari, `from_vault` import of the Flashbax vault", "from_vault_import"),
        row("Vault -> Minari, `from_vault` restore of our vault", "from_vault_restore"),
        row("baseline: `create_dataset_from_buffers`, same episodes", "minari_baseline"),
        row("`make_buffer` from the dataset + the vault", "buffer"),
        "",
        "Throughput relative to the baseline (higher is better):",
        "",
        f"- Minari -> Vault vs `Vault.write`: gzip {ratio('vault_write', 'to_vault')}, zstd "
        f"{ratio('vault_write_zstd', 'to_vault_zstd')} (target >= 0.7x); gzip without the "
        f"per-episode seed/options reads {ratio('vault_write', 'to_vault_seedless')}.",
        f"- Vault -> Minari vs `create_dataset_from_buffers`: import "
        f"{ratio('minari_baseline', 'from_vault_import')}, restore "
        f"{ratio('minari_baseline', 'from_vault_restore')} (target >= 1x).",
        f"- `make_buffer`: {buf['steps']:,} steps on {buf['device']}; `jit(sample)` at batch "
        f"256 x sequence 20: compile {buf['compile_seconds']:.2f} s, "
        f"**{buf['sample_ms']:.2f} ms per call** "
        f"({256 * 20 / buf['sample_ms'] / 1e3:,.1f}M steps/s).",
        "",
        "Peak memory of filling a buffer from one source: growth of the peak resident set "
        "over the buffer's bytes (lower is better; a second full copy makes it >= 2):",
        "",
        "| way | buffer | peak growth | ratio | wall |",
        "|---|---|---|---|---|",
        *(f"| {label} | {results[name]['data_mb']:,.1f} MB | "
          f"{results[name]['growth_mb']:,.1f} MB | **{results[name]['ratio']:.2f}x** | "
          f"{results[name]['seconds']:.2f} s |"
          for label, name in (
              ("`make_buffer` from the dataset", "buffer_memory_dataset"),
              ("`make_buffer` from the Flashbax vault", "buffer_memory_vault"),
              ("Flashbax: `Vault.read()`", "fbx_vault_read"),
              ("Flashbax: `Vault.read()` + `make_trajectory_buffer` `init` + `add`",
               "fbx_fill"))),
        "",
        f"(target: `make_buffer` <= 1.2x; Flashbax's fill "
        f"{results['fbx_fill']['ratio']:.2f}x.)",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
