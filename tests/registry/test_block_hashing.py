"""Range digests checked on two threads: a long run's blocks hashed half beside the caller,
every verdict still the block's own, and a forked child hashing with a thread of its own."""

from __future__ import annotations

import os

import blake3
import pytest
from marl_minari.registry import blocks
from marl_minari.registry.blocks import Block, run_matches
from registry_helpers import answer_in_forked_child

from marl_minari.format.digests import BLAKE3
from marl_minari.storage.helper_thread import helper_thread

SIZE = 4096


def _run(data: bytes) -> list[Block]:
    return [Block(number, number * SIZE, SIZE, BLAKE3,
                  blake3.blake3(data[number * SIZE:(number + 1) * SIZE]).hexdigest())
            for number in range(len(data) // SIZE)]


@pytest.fixture
def long_run() -> tuple[list[Block], bytes]:
    count = 4 * blocks.SHARED_HASHING_BLOCKS + 1  # halves of unequal size
    data = os.urandom(count * SIZE)
    return _run(data), data


@pytest.mark.skipif(helper_thread() is None, reason="one CPU: hashed on one thread")
def test_each_verdict_of_a_run_hashed_on_two_threads_is_its_own_blocks(
        long_run: tuple[list[Block], bytes]) -> None:
    run, data = long_run
    assert run_matches(run, data) == [True] * len(run)
    damaged = bytearray(data)
    wrong = {1, len(run) // 2 - 1, len(run) // 2, len(run) - 1}  # both halves, both edges
    for number in wrong:
        damaged[number * SIZE + 7] ^= 0x01
    assert run_matches(run, bytes(damaged)) == [n not in wrong for n in range(len(run))]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_forked_child_hashes_with_a_thread_of_its_own(
        long_run: tuple[list[Block], bytes]) -> None:
    """The parent's helper thread does not exist in a forked child: work handed to it would
    wait forever."""
    run, data = long_run
    assert all(run_matches(run, data))  # the parent's helper now exists
    data = b"\x07" * (2 * blocks.SHARED_HASHING_BLOCKS * SIZE)
    matches = answer_in_forked_child(lambda: run_matches(_run(data), data))
    assert matches == [True] * (2 * blocks.SHARED_HASHING_BLOCKS)
