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
LIMITS = {"default": 1.2, "1000": 1.25}
"""Peak growth over the bytes of the buffer's arrays (a second full copy makes it >= 2), by
chunking. Measured on a 2-core Linux VM (docs/benchmarks.md): by default 1.16x (dataset) and
1.14x (vault), the goal; with 1,000-step chunks 1.03x and 1.20x (a vault's windows then cut
across its 1,747-step zarr chunks, each decoded twice)."""
CASES = [(kind, chunk) for kind in ("dataset", "vault") for chunk in ("default", "1000")]
"""Each source read with the default chunking (by bytes) and with ``chunk_steps=1_000``."""

_CHILD = r"""
import jax
import marl_minari as mm
from marl_minari.adapters import make_buffer

def build(source):
    # The default chunking, or chunks of 1,000 steps (2.4 MB of observations).
    chunking = {} if chunk == "default" else {"chunk_steps": int(chunk)}
    return make_buffer([source], sample_batch_size=8, sample_sequence_length=4, **chunking)

def measure(source):
    built = {}

    def run():
        _, built["state"] = build(source)
        jax.block_until_ready(built["state"])

    growth = peak_growth(run)
    data = sum(leaf.nbytes for leaf in jax.tree.leaves(built["state"].experience))
    return {"growth": growth, "data": data, "ratio": round(growth / data, 3)}

vaults, kind, chunk = sys.argv[1], sys.argv[2], sys.argv[3]
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
            to_vault(dataset, rel_dir=vaults, vault_name=name, vault_uid="u")
        found = {}
        for kind, chunk in CASES:  # each in a fresh process
            found[f"{kind}-{chunk}"] = measure_in_child(_CHILD, str(vaults), kind, chunk)
        yield found


@pytest.mark.parametrize("case", [f"{kind}-{chunk}" for kind, chunk in CASES])
def test_peak_memory_is_about_the_buffer_itself(peak_growth: dict[str, Any],
                                                case: str) -> None:
    measured = peak_growth[case]
    assert measured["data"] > 60e6, measured  # large enough for the ratio to mean something
    limit = LIMITS[case.split("-")[1]]
    assert measured["growth"] <= limit * measured["data"], (case, peak_growth)
