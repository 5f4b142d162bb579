"""HDF5 files for differential tests against HDF5: the datasets under a group, and copies
of a file with one mutation each."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import h5py
import numpy as np

Mutation = Callable[[bytearray, np.random.Generator], str]
"""Changes the bytes in place; says what it changed."""


def mutated_copies(original: bytes, mutations: Sequence[Mutation], into: Path, rounds: int,
                   seed: int) -> Iterator[tuple[int, str]]:
    """Write ``rounds`` copies of ``original`` to ``into`` in turn, each with one mutation
    (taking turns, drawn from ``seed``): ``(round, what the mutation says it did)``, yielded
    once the copy is written."""
    rng = np.random.default_rng(seed)
    for round_number in range(rounds):
        data = bytearray(original)
        mutation = mutations[round_number % len(mutations)]
        what = mutation(data, rng)
        into.write_bytes(bytes(data))
        yield round_number, f"{mutation.__name__}: {what}"


def dataset_names(group: h5py.Group) -> list[str]:
    """The paths of every dataset under ``group``, relative to it, sorted."""
    names: list[str] = []
    group.visititems(lambda name, node: names.append(name)
                     if isinstance(node, h5py.Dataset) else None)
    return sorted(names)
