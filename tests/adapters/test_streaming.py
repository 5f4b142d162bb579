"""Conversions stream: peak memory stays well below the size of the dataset.

Peak memory is the growth of the peak resident set (``VmHWM``) of a fresh Python process: it
counts what HDF5, tensorstore and numpy allocate natively, which ``tracemalloc`` cannot see.
``/proc/self/clear_refs`` restarts the peak before each conversion. The dataset is several
times the buffers a streaming conversion may hold (a chunk of steps, a zarr chunk per array),
so a conversion that holds the dataset fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from adapter_helpers import assert_same_episodes, synthetic_dataset

import marl_minari as mm

CHUNK = 250  # steps per chunk
EPISODES, STEPS = 96, 250  # 24,000 steps
DATA_BYTES = EPISODES * STEPS * 3 * 200 * 4  # the observations alone: 57.6 MB

_CHILD = r"""
import json, re, sys
import marl_minari as mm
from marl_minari.adapters import from_vault, to_vault

def status(field):
    with open("/proc/self/status") as handle:
        return int(re.search(field + r":\s+(\d+) kB", handle.read()).group(1)) * 1024

def peak_growth(convert):
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")  # the peak resident set restarts from the current one
    before = status("VmRSS")
    convert()
    return status("VmHWM") - before

vaults, chunk = sys.argv[1], int(sys.argv[2])

def convert(name, measure):
    dataset = mm.load_dataset(f"mem/{name}-v0")
    return {
        "to_vault": measure(lambda: to_vault(dataset, vaults, name, "u", chunk_steps=chunk)),
        "restore": measure(lambda: from_vault(vaults, name, "u", f"mem/{name}-back-v0",
                                              chunk_steps=chunk)),
        "import": measure(lambda: from_vault(vaults, name, "u", f"mem/{name}-import-v0",
                                             chunk_steps=chunk, restore=False)),
    }

# Once on a small dataset first, so imports, caches and compilations are not counted.
convert("warm", lambda run: run())
print(json.dumps(convert("large", peak_growth)))
"""


@pytest.fixture(scope="module")
def peak_growth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, int]]:
    """Peak resident set growth (bytes) of each conversion of a 24,000-step dataset."""
    if not os.access("/proc/self/clear_refs", os.W_OK):
        pytest.skip("needs Linux /proc/self/clear_refs to restart the peak resident set")
    root = tmp_path_factory.mktemp("streaming")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINARI_DATASETS_PATH", str(root / "datasets"))
        synthetic_dataset("mem/warm-v0", 4)
        dataset = synthetic_dataset("mem/large-v0", EPISODES, steps=STEPS)
        done = subprocess.run([sys.executable, "-c", _CHILD, str(root / "vaults"), str(CHUNK)],
                              capture_output=True, text=True, timeout=600,
                              env=dict(os.environ))
        assert done.returncode == 0, done.stderr[-3000:]
        assert_same_episodes(dataset, mm.load_dataset("mem/large-back-v0"))
        yield json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("conversion", ["to_vault", "restore", "import"])
def test_peak_memory_stays_below_the_dataset(peak_growth: dict[str, int],
                                             conversion: str) -> None:
    assert peak_growth[conversion] < DATA_BYTES / 3, (conversion, peak_growth, DATA_BYTES)
