"""Adapters between Minari datasets and Flashbax vaults and buffers."""
