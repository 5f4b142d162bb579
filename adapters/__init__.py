"""Adapters between Minari datasets and Flashbax vaults and device-resident buffers.

* :func:`to_vault`: a Minari dataset (multi-agent, or plain single-agent as ``agent_0``) to a
  Flashbax vault in OG-MARL's conventions, with everything needed to rebuild it exactly.
* :func:`from_vault`: any vault in OG-MARL's conventions to a multi-agent Minari dataset (or,
  for a vault written by :func:`to_vault`, the original dataset back).
* :func:`make_buffer`: datasets and vaults combined into one Flashbax trajectory buffer on the
  default JAX device.
* :func:`to_tensordict`, :func:`make_torchrl_buffer`: datasets as TorchRL TensorDicts and
  replay buffers (the ``torch`` extra).

Names are imported on first use, so ``import marl_minari.adapters`` (and the command line)
does not import JAX. See ``docs/adapters.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from marl_minari.extras import lazy_exports

if TYPE_CHECKING:
    from marl_minari.sources import DEFAULT_CHUNK_STEPS, SINGLE_AGENT, is_vault, vault_path_parts
    from marl_minari.vaults.layout import EXTRA_PREFIX
    from marl_minari.vaults.view_plan import PAD_VALUE

    from .buffer import SOURCE_KEY, make_buffer
    from .minari_to_vault import to_vault
    from .sampling import SamplingTable, sampling_table
    from .tensordicts import make_torchrl_buffer, to_tensordict
    from .vault_to_minari import from_vault

_EXPORTS = {
    "DEFAULT_CHUNK_STEPS": "marl_minari.sources",
    "EXTRA_PREFIX": "marl_minari.vaults.layout",
    "PAD_VALUE": "marl_minari.vaults.view_plan",
    "SINGLE_AGENT": "marl_minari.sources",
    "SOURCE_KEY": f"{__name__}.buffer",
    "SamplingTable": f"{__name__}.sampling",
    "sampling_table": f"{__name__}.sampling",
    "from_vault": f"{__name__}.vault_to_minari",
    "is_vault": "marl_minari.sources",
    "make_buffer": f"{__name__}.buffer",
    "make_torchrl_buffer": f"{__name__}.tensordicts",
    "to_tensordict": f"{__name__}.tensordicts",
    "to_vault": f"{__name__}.minari_to_vault",
    "vault_path_parts": "marl_minari.sources",
}

__all__ = [
    "DEFAULT_CHUNK_STEPS",
    "EXTRA_PREFIX",
    "PAD_VALUE",
    "SINGLE_AGENT",
    "SOURCE_KEY",
    "SamplingTable",
    "from_vault",
    "is_vault",
    "make_buffer",
    "make_torchrl_buffer",
    "sampling_table",
    "to_tensordict",
    "to_vault",
    "vault_path_parts",
]


__getattr__ = lazy_exports(__name__, _EXPORTS)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
