"""Conversions stream: peak memory stays flat as the dataset grows past the chunk size."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from adapter_helpers import assert_same_episodes, synthetic_dataset
from marl_minari.adapters import from_vault, to_vault

CHUNK = 250  # steps per chunk; a step of these datasets is about 2.6 KB


def _peaks(vaults: Path, name: str, episodes: int) -> tuple[int, int, int]:
    """tracemalloc peaks of to_vault, from_vault (restore) and from_vault (import)."""
    dataset = synthetic_dataset(f"mem/{name}-v0", episodes)
    tracemalloc.start()
    try:
        to_vault(dataset, vaults, name, "u", chunk_steps=CHUNK)
        first = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        restored = from_vault(vaults, name, "u", f"mem/{name}-back-v0", chunk_steps=CHUNK)
        second = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        from_vault(vaults, name, "u", f"mem/{name}-import-v0", chunk_steps=CHUNK,
                   restore=False)
        third = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert_same_episodes(dataset, restored)
    return first, second, third


def test_peak_memory_does_not_grow_with_the_dataset(vaults: Path) -> None:
    small = _peaks(vaults, "small", episodes=40)  # 1,000 steps: 4 chunks, ~2.6 MB
    large = _peaks(vaults, "large", episodes=240)  # 6,000 steps: 24 chunks, ~16 MB
    large_bytes = 6_000 * 3 * 200 * 4
    for label, a, b in zip(("to_vault", "restore", "import"), small, large, strict=True):
        assert b < 1.5 * a + 300_000, (label, a, b)  # flat, not 6x
        assert b < large_bytes / 2, (label, b, large_bytes)
