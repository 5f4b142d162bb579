"""``to_vault`` refuses option values outside its choices before it writes anything."""

from __future__ import annotations

from pathlib import Path

import pytest
from marl_minari.adapters import to_vault

from marl_minari.errors import InvalidOptionError


@pytest.mark.parametrize(("option", "value", "allowed"), [
    ("dones", "teams", "'team', 'agent'"),
    ("state", "foo", "'auto', 'env', 'observations', 'none'"),
])
def test_to_vault_refuses_values_outside_the_choices(recorded, vaults: Path, option: str,
                                                     value: str, allowed: str) -> None:
    dataset = recorded("mpe2/simple_spread_v3", episodes=1, max_cycles=3)
    with pytest.raises(InvalidOptionError, match=f"{option} must be one of .*{allowed}"):
        to_vault(dataset, rel_dir=vaults, vault_name="spread", vault_uid="u", **{option: value})
    assert not (vaults / "spread").exists()
