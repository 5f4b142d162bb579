"""A vault's index and actions are checked before anything is imported or buffered."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts
from adapter_helpers import write_vault
from gymnasium import spaces
from marl_minari.adapters import from_vault, make_buffer, to_vault

from marl_minari.errors import CorruptedDataError, StepDataError


def _spec(vault: Path, name: str) -> dict:
    return {"driver": "zarr", "kvstore": {"driver": "ocdbt", "base": f"file://{vault}",
                                          "path": name}}


def _set_index(vault: Path, value: int) -> None:
    store = ts.open(_spec(vault, "vault_index"), open=True).result()
    store.write(np.asarray([value], dtype=store.dtype.numpy_dtype)).result()


@pytest.mark.parametrize("index", [10**6, -5, 0])
def test_vault_index_outside_the_stored_steps_is_refused(vaults: Path, index: int) -> None:
    write_vault(vaults, "spread", "u", steps=60, max_cycles=7)
    _set_index(vaults / "spread" / "u", index)
    with pytest.raises(CorruptedDataError,
                       match=f"vault_index is {index}, but its arrays hold fewer"):
        from_vault(rel_dir=vaults, vault_name="spread", vault_uid="u", dataset_id="og/index-v0",
                   restore=False)
    with pytest.raises(CorruptedDataError, match=f"vault_index is {index}"):
        make_buffer([vaults / "spread" / "u"], sample_batch_size=2, sample_sequence_length=2)


def test_vault_index_of_a_converted_dataset_is_checked_too(vaults: Path,
                                                           record_parallel: object) -> None:
    dataset, _ = record_parallel(  # type: ignore[operator]
        "mpe2/simple_spread_v3", 2, dataset_id="og/src-v0", max_cycles=5)
    path = to_vault(dataset, rel_dir=vaults, vault_name="mine", vault_uid="u")
    _set_index(path, 10**9)
    with pytest.raises(CorruptedDataError, match="vault_index is 1000000000"):
        from_vault(rel_dir=vaults, vault_name="mine", vault_uid="u", dataset_id="og/back-v0")


def test_actions_outside_their_space_are_refused(vaults: Path) -> None:
    write_vault(vaults, "spread", "u", steps=14, max_cycles=7)
    store = ts.open(_spec(vaults / "spread" / "u", "actions."), open=True).result()
    store[0, 3, 1].write(np.asarray(99, dtype=store.dtype.numpy_dtype)).result()
    agents = ("agent_0", "agent_1", "agent_2")
    with pytest.raises(StepDataError, match=r"action of 'agent_1' at step 3 of episode 0 is "
                                            r"99, outside its action space Discrete\(5\)"):
        from_vault(rel_dir=vaults, vault_name="spread", vault_uid="u", dataset_id="og/actions-v0",
                   action_spaces={a: spaces.Discrete(5) for a in agents})
    with pytest.raises(StepDataError, match="outside its action space Discrete"):
        from_vault(rel_dir=vaults, vault_name="spread", vault_uid="u",
                   dataset_id="og/actions-v1")  # width from the legal-action masks


def test_actions_stored_as_floats_are_imported_whole_or_refused(vaults: Path) -> None:
    """A vault may keep discrete actions as float32: whole numbers become the space's int64,
    a fraction is refused by agent and value (it was stored truncated)."""
    import marl_minari as mm

    write_vault(vaults, "spread", "u", steps=14, max_cycles=7, action_dtype=np.float32)
    agents = ("agent_0", "agent_1", "agent_2")
    discrete = {a: spaces.Discrete(5) for a in agents}
    from_vault(rel_dir=vaults, vault_name="spread", vault_uid="u", dataset_id="og/whole-v0",
               action_spaces=discrete)
    actions = mm.load_dataset("og/whole-v0").episode(0).actions["agent_1"]
    assert actions.dtype == np.int64
    store = ts.open(_spec(vaults / "spread" / "u", "actions."), open=True).result()
    store[0, 3, 1].write(np.asarray(2.5, dtype=np.float32)).result()
    with pytest.raises(StepDataError, match=r"actions of 'agent_1', row 3: float32 value 2\.5 "
                                            r"does not fit the space's int64"):
        from_vault(rel_dir=vaults, vault_name="spread", vault_uid="u",
                   dataset_id="og/fraction-v0", action_spaces=discrete)
    # the observations (positions and velocities) declared as whole numbers they are not
    whole_numbers = {a: spaces.Box(-100, 100, (18,), dtype=np.int16) for a in agents}
    with pytest.raises(StepDataError, match=r"observations of 'agent_0', row 0: float32 "
                                            r"value -?\d\.\d+ does not fit the space's int16"):
        from_vault(rel_dir=vaults, vault_name="spread", vault_uid="u",
                   dataset_id="og/rounded-v0", observation_spaces=whole_numbers)


@pytest.mark.parametrize("index", [600, 3])
def test_vault_index_inside_the_last_chunk_of_our_vault_is_refused(
        vaults: Path, record_parallel: object, index: int) -> None:
    # 600 over the 10 written steps lies inside the last written zarr chunk, where unwritten
    # steps read as zeros: only the stream lengths our vault records can tell.
    dataset, _ = record_parallel(  # type: ignore[operator]
        "mpe2/simple_spread_v3", 2, dataset_id="og/chunk-v0", max_cycles=5)
    path = to_vault(dataset, rel_dir=vaults, vault_name="mine", vault_uid="u")
    _set_index(path, index)
    for restore in (True, False):
        with pytest.raises(CorruptedDataError, match=f"vault_index is {index}, but the vault "
                                                     "was written with 10 steps"):
            from_vault(rel_dir=vaults, vault_name="mine", vault_uid="u",
                       dataset_id="og/chunk-back-v0", restore=restore)
    with pytest.raises(CorruptedDataError, match=f"vault_index is {index}"):
        make_buffer([path], sample_batch_size=2, sample_sequence_length=2)
