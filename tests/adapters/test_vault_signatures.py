"""Vault functions name vaults as Flashbax's ``Vault`` does, and a call in the order of
earlier versions (``rel_dir`` first) is refused, never read the other way round."""

from __future__ import annotations

import inspect
from pathlib import Path

import minari
import pytest
from adapter_helpers import write_vault
from flashbax.vault import Vault
from marl_minari.adapters import from_vault, to_vault


def test_vault_arguments_are_flashbaxs_names_in_flashbaxs_order() -> None:
    flashbax = list(inspect.signature(Vault).parameters)
    ours = inspect.signature(from_vault).parameters
    assert flashbax[0] == next(iter(ours)) == "vault_name"
    for name in ("rel_dir", "vault_uid"):
        assert name in flashbax and ours[name].kind is inspect.Parameter.KEYWORD_ONLY
    written = inspect.signature(to_vault).parameters
    for name in ("vault_name", "rel_dir", "vault_uid"):
        assert written[name].kind is inspect.Parameter.KEYWORD_ONLY
    assert ours["rel_dir"].default == written["rel_dir"].default == "vaults"


def test_old_positional_order_is_an_error_not_a_swap(vaults: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    write_vault(vaults, "my_vault", "u", steps=8, max_cycles=4)
    # Both readings of the folder parts exist: a swap would silently read the other vault.
    write_vault(vaults.parent / "my_vault", "vaults", "u", steps=6, max_cycles=3)
    monkeypatch.chdir(vaults.parent)
    with pytest.raises(TypeError):
        from_vault("vaults", "my_vault", "u", "xx/swapped-v0")  # type: ignore[misc]
    with pytest.raises(TypeError):
        from_vault("my_vault", "vaults", "u", "xx/swapped-v0")  # type: ignore[misc]
    assert "xx/swapped-v0" not in minari.list_local_datasets()
    dataset = from_vault("my_vault", vault_uid="u", dataset_id="xx/flashbax-order-v0")
    assert dataset.total_steps == 8
    with pytest.raises(TypeError):
        to_vault(dataset, "vaults", "again", "u")  # type: ignore[misc]
    assert not (vaults / "again").exists()
    path = to_vault(dataset, vault_name="again", vault_uid="u")
    assert Path(path).resolve() == (vaults / "again" / "u").resolve()
    assert Vault("again", rel_dir="vaults", vault_uid="u").read().experience[
        "observations"].shape[1] == 8
