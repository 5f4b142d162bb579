"""Sampling speed of offline data mixed with online data through Flashbax's ``make_mixer``.

Run by hand (not part of the test suite)::

    python benchmarks/bench_mixer.py                    # 200,000 offline steps
    python benchmarks/bench_mixer.py --steps 20000      # quick run

Compared in the same run, on the default JAX device, each ``jax.jit(mixer.sample)``:

* **ours**: ``make_mixer([make_buffer([vault]), online])``: the offline buffer draws only
  sequences inside one episode, from its table of valid starts;
* **flashbax**: ``make_mixer([offline, online])`` where ``offline`` is a plain
  ``make_trajectory_buffer`` holding the very same arrays (its state built directly from
  them, full), which samples sequences anywhere, across episode boundaries.

``online`` is the same live ``make_trajectory_buffer`` in both, filled with ``--online``
steps of the same structure. The offline data is synthetic, written as a Flashbax vault in
OG-MARL's keys: 3 agents, 30-float observations, 48-float state, 9 actions, episodes of
25 steps. Timing: after a compiled warm-up call, ``--calls`` calls per repeat, the two mixers
alternating repeat by repeat (so both see the same machine load); the median repeat is
reported, per call, with the compile time of the first call.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

AGENTS, OBS, STATE, ACTIONS, EPISODE = 3, 30, 48, 9, 25


def write_vault(folder: Path, steps: int) -> Path:
    """A vault of ``steps`` synthetic steps in OG-MARL's keys; returns its path."""
    import jax.numpy as jnp
    from flashbax.buffers.trajectory_buffer import TrajectoryBufferState
    from flashbax.vault import Vault

    rng = np.random.default_rng(0)
    done = np.zeros((1, steps, AGENTS), np.float32)
    done[:, EPISODE - 1::EPISODE] = 1.0
    legals = np.ones((1, steps, AGENTS, ACTIONS), np.float32)
    experience = {
        "observations": jnp.asarray(rng.normal(size=(1, steps, AGENTS, OBS)), jnp.float32),
        "actions": jnp.asarray(rng.integers(0, ACTIONS, (1, steps, AGENTS)), jnp.int32),
        "rewards": jnp.asarray(rng.normal(size=(1, steps, AGENTS)), jnp.float32),
        "terminals": jnp.asarray(done),
        "truncations": jnp.zeros((1, steps, AGENTS), jnp.float32),
        "infos": {"legals": jnp.asarray(legals),
                  "state": jnp.asarray(rng.normal(size=(1, steps, STATE)), jnp.float32)},
    }
    state = TrajectoryBufferState(experience=experience,
                                  current_index=jnp.asarray(0, jnp.int32),
                                  is_full=jnp.asarray(True))
    vault = Vault(vault_name="synthetic.vlt", experience_structure=experience,
                  rel_dir=str(folder), vault_uid="Bench")
    vault.write(state, source_interval=(0, steps))
    return folder / "synthetic.vlt" / "Bench"


def build(steps: int, online_steps: int, batch: int, length: int) -> dict[str, Any]:
    """Both mixers and their states, over the same offline arrays and online buffer."""
    import flashbax as fbx
    import jax
    import jax.numpy as jnp
    from flashbax.buffers.trajectory_buffer import TrajectoryBufferState
    from marl_minari.adapters import make_buffer

    folder = Path(tempfile.mkdtemp(prefix="bench_mixer_"))
    path = write_vault(folder, steps)
    ours, ours_state = make_buffer([str(path)], sample_batch_size=batch,
                                   sample_sequence_length=length)
    total = ours_state.experience["observations"].shape[1]
    plain = fbx.make_trajectory_buffer(add_batch_size=1, sample_batch_size=batch,
                                       sample_sequence_length=length, period=1,
                                       min_length_time_axis=length,
                                       max_length_time_axis=total)
    plain_state = TrajectoryBufferState(experience=ours_state.experience,
                                        current_index=jnp.asarray(0, jnp.int32),
                                        is_full=jnp.asarray(True))
    timestep = jax.tree.map(lambda x: x[0, 0], ours_state.experience)
    online = fbx.make_trajectory_buffer(add_batch_size=1, sample_batch_size=batch,
                                        sample_sequence_length=length, period=1,
                                        min_length_time_axis=length,
                                        max_length_time_axis=online_steps)
    online_state = online.init(timestep)
    steps_in = jax.tree.map(lambda x: jnp.ones((1, online_steps, *x.shape), x.dtype), timestep)
    online_state = jax.jit(online.add)(online_state, steps_in)
    return {
        "ours": (fbx.make_mixer([ours, online], batch, [0.5, 0.5]), [ours_state, online_state]),
        "flashbax": (fbx.make_mixer([plain, online], batch, [0.5, 0.5]),
                     [plain_state, online_state]),
    }


def measure(mixers: dict[str, Any], calls: int, repeats: int) -> dict[str, dict[str, float]]:
    """Per-call median seconds and first-call (compile) seconds of each mixer."""
    import jax

    sample = {name: jax.jit(mixer.sample) for name, (mixer, _) in mixers.items()}
    out: dict[str, dict[str, float]] = {}
    for name, (_, states) in mixers.items():
        start = time.perf_counter()
        jax.block_until_ready(sample[name](states, jax.random.PRNGKey(0)))
        out[name] = {"compile_s": time.perf_counter() - start}
    per_call: dict[str, list[float]] = {name: [] for name in mixers}
    keys = jax.random.split(jax.random.PRNGKey(1), calls)
    for _ in range(repeats):
        for name, (_, states) in mixers.items():
            start = time.perf_counter()
            for key in keys:
                result = sample[name](states, key)
            jax.block_until_ready(result)
            per_call[name].append((time.perf_counter() - start) / calls)
    for name, values in per_call.items():
        out[name]["per_call_s"] = statistics.median(values)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=200_000, help="offline steps")
    parser.add_argument("--online", type=int, default=20_000, help="online buffer steps")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--length", type=int, default=20)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import jax

    mixers = build(args.steps, args.online, args.batch, args.length)
    figures = measure(mixers, args.calls, args.repeats)
    print(f"device {jax.devices()[0]}, offline {args.steps:,} steps, online {args.online:,}, "
          f"batch {args.batch} x {args.length}, proportions 0.5/0.5, {args.calls} calls x "
          f"{args.repeats} repeats")
    print("| mixer | per call | samples/s | first call (compile) |")
    print("|---|---|---|---|")
    for name, figure in figures.items():
        per_call = figure["per_call_s"]
        print(f"| {name} | {per_call * 1e3:.3f} ms | {args.batch / per_call:,.0f} | "
              f"{figure['compile_s']:.2f} s |")
    ratio = figures["ours"]["per_call_s"] / figures["flashbax"]["per_call_s"]
    print(f"ours / flashbax per call: {ratio:.2f}x")


if __name__ == "__main__":
    main()
