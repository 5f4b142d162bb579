"""make_buffer holds the buffer's arrays once: peak memory stays near the data's own size.

Peak memory is the growth of the peak resident set (``VmHWM``) of a fresh Python process,
restarted before each call through ``/proc/self/clear_refs`` (``tests/support/peak_memory.py``).
On a CPU device the buffer's arrays live in host memory, so the growth counts them once; a
buffer filled on the host and then copied to the device counts them twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from adapter_helpers import synthetic_dataset
from marl_minari.adapters import to_vault
from peak_memory import measure_in_child, require_peak_reset

EPISODES, STEPS = 100, 250  # 25,000 steps: about 64 MB of buffer arrays
LIMITS = {
    "dataset": 1.3,
    # Reading a vault leaves freed blocks in the allocator's per-thread arenas of the
    # reader's threads (1.5x measured; 1.2x with MALLOC_ARENA_MAX=1): not a second copy.
    "vault": 1.8,
}
"""Peak growth over the bytes of the buffer's arrays (a second full copy makes it >= 2)."""

_CHILD = r"""
import jax
import marl_minari as mm
from marl_minari.adapters import make_buffer

def build(source):
    # Chunks of 1,000 steps (2.4 MB of observations): what is measured is the buffer.
    return make_buffer([source], sample_batch_size=8, sample_sequence_length=4,
                       chunk_steps=1_000)

def measure(source):
    built = {}

    def run():
        _, built["state"] = build(source)
        jax.block_until_ready(built["state"])

    growth = peak_growth(run)
    data = sum(leaf.nbytes for leaf in jax.tree.leaves(built["state"].experience))
    return {"growth": growth, "data": data, "ratio": round(growth / data, 3)}

vaults, kind = sys.argv[1], sys.argv[2]
# Once on a small source first, so imports, caches and compilations are not counted.
if kind == "vault":
    build(f"{vaults}/warm/u")
    print(json.dumps(measure(f"{vaults}/large/u")))
else:
    build(mm.load_dataset("mem/buffer-warm-v0"))
    print(json.dumps(measure(mm.load_dataset("mem/buffer-large-v0"))))
"""


@pytest.fixture(scope="module")
def peak_growth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Peak resident set growth of make_buffer from a 25,000-step dataset and its vault."""
    require_peak_reset()
    root = tmp_path_factory.mktemp("buffer-memory")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINARI_DATASETS_PATH", str(root / "datasets"))
        patch.setenv("JAX_PLATFORMS", "cpu")  # the device's memory is the process's memory
        vaults = root / "vaults"
        for name, episodes in (("warm", 4), ("large", EPISODES)):
            dataset = synthetic_dataset(f"mem/buffer-{name}-v0", episodes, steps=STEPS)
            to_vault(dataset, vaults, name, "u")
        found = {}
        for kind in ("dataset", "vault"):  # each in a fresh process
            found[kind] = measure_in_child(_CHILD, str(vaults), kind)
        yield found


@pytest.mark.parametrize("source", ["dataset", "vault"])
def test_peak_memory_is_about_the_buffer_itself(peak_growth: dict[str, Any],
                                                source: str) -> None:
    measured = peak_growth[source]
    assert measured["data"] > 60e6, measured  # large enough for the ratio to mean something
    assert measured["growth"] <= LIMITS[source] * measured["data"], (source, peak_growth)
