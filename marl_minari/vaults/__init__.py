"""Flashbax vaults on disk: the store, its key layouts (OG-MARL's, Mava's, a given map), and
the vault's streams cut into episodes on their done flags.

Below :mod:`marl_minari.sources` (whose ``VaultSource`` serves a vault's episodes from here)
and the adapters (``to_vault``, ``from_vault``, ``make_buffer``) and collectors above it.
tensorstore is imported on first use (the ``jax`` extra), so the base install imports this
package.
"""
