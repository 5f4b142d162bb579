"""Coverage of a dataset whose episodes mix having a global state and not (as appending
episodes recorded with another ``record_state`` made before such appends were refused): the
dataset's metadata decides, whatever the chunks."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import h5py
import pytest

from marl_minari.describe import describe
from marl_minari.errors import CorruptedDataError
from marl_minari.format import layout
from marl_minari.format.ids import dataset_dir

Recorder = Callable[..., tuple[Any, list[dict[str, Any]]]]


def mixed(record_parallel: Recorder, dataset_id: str, state_first: bool) -> None:
    """``dataset_id``: two episodes recorded with ``record_state=state_first``, then two
    recorded with the other setting, their groups copied in as an older append left them (no
    offset index: an append without one leaves none)."""
    record_parallel("mpe2/simple_spread_v3", episodes=2, dataset_id=dataset_id, max_cycles=5,
                    collector_record_state=state_first)
    record_parallel("mpe2/simple_spread_v3", episodes=2, dataset_id="tests/other-v0",
                    max_cycles=5, collector_record_state=not state_first)
    data = dataset_dir(dataset_id) / "data"
    with h5py.File(data / layout.MAIN_FILE_NAME, "a") as target, h5py.File(
            dataset_dir("tests/other-v0") / "data" / layout.MAIN_FILE_NAME, "r") as source:
        for k in range(2):
            source.copy(source[f"episode_{k}"], target, name=f"episode_{2 + k}")
            target[f"episode_{2 + k}"].attrs["id"] = 2 + k
    (data / layout.INDEX_FILE_NAME).unlink()
    metadata = json.loads((data / layout.METADATA_FILE_NAME).read_text())
    metadata.update(total_episodes=4, total_steps=20)
    (data / layout.METADATA_FILE_NAME).write_text(json.dumps(metadata))


@pytest.mark.parametrize("chunk_steps", [1, 5, 10_000])
def test_episodes_without_the_recorded_state_are_named(record_parallel: Recorder,
                                                       chunk_steps: int) -> None:
    """The metadata records a state that episodes 2 and 3 lack: SACo cannot be measured;
    a typed error names the first such episode, however the episodes are chunked."""
    mixed(record_parallel, "tests/mixed-v0", state_first=True)
    with pytest.raises(CorruptedDataError, match=r"episode[ _]2 lacks"):
        describe("tests/mixed-v0", coverage=True, chunk_steps=chunk_steps)


def test_states_the_metadata_does_not_record_are_left_out(record_parallel: Recorder) -> None:
    """The metadata records no state; episodes 2 and 3 hold one: the joint observation stands
    for the state in every episode, the same coverage whatever the chunks."""
    mixed(record_parallel, "tests/mixed-v0", state_first=False)
    results = [describe("tests/mixed-v0", coverage=True, chunk_steps=steps).coverage
               for steps in (1, 5, 10_000)]
    assert {c.state_source for c in results if c is not None} == {"joint_observation"}
    assert len({(c.saco, c.oaco, c.state_pairs) for c in results if c is not None}) == 1
    assert results[0] is not None and results[0].transitions == 20
