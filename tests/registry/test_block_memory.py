"""The verified blocks a remote file keeps in memory: rows are gathered from the buffers the
blocks arrived in only where those buffers hold the rows' bytes in file order, and a dropped
block's buffer is let go once no kept block uses it."""

from __future__ import annotations

import gc
import weakref

import numpy as np
from marl_minari.registry.block_memory import BlockMemory

SIZE = 64
"""Bytes of a block in these tests."""


def _file(blocks: int) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, blocks * SIZE, dtype=np.uint8)


def _put_run(memory: BlockMemory, data: np.ndarray, first: int, count: int) -> np.ndarray:
    """Blocks ``first..first+count-1`` of ``data``, kept as views of one new buffer."""
    run = data[first * SIZE:(first + count) * SIZE].copy()
    view = memoryview(run)
    for index in range(count):
        memory.put(first + index, view[index * SIZE:(index + 1) * SIZE])
    return run


def test_rows_in_one_buffer_are_gathered_and_others_left() -> None:
    data = _file(6)
    memory = BlockMemory(6, 1 << 20)
    _put_run(memory, data, 0, 3)  # blocks 0-2 in one buffer
    _put_run(memory, data, 3, 2)  # blocks 3-4 in another; block 5 absent
    addresses = np.array([0, 5, SIZE - 4, 2 * SIZE + 1, 3 * SIZE - 4, 4 * SIZE + 60, 5 * SIZE])
    rows, filled = memory.gather(addresses, 8, SIZE)
    # over blocks 2-3 (two buffers), over blocks 4-5 and in block 5 (absent): left
    assert filled.tolist() == [True, True, True, True, False, False, False]
    expected = data[addresses[filled][:, None] + np.arange(8)]
    assert (rows[filled] == expected).all()


def test_blocks_of_one_buffer_out_of_file_order_are_not_gathered_across() -> None:
    data = _file(2)
    memory = BlockMemory(2, 1 << 20)
    swapped = np.concatenate([data[SIZE:], data[:SIZE]])  # block 1's bytes, then block 0's
    view = memoryview(swapped)
    memory.put(1, view[:SIZE])
    memory.put(0, view[SIZE:])
    rows, filled = memory.gather(np.array([4, SIZE - 4, SIZE + 4]), 8, SIZE)
    assert filled.tolist() == [True, False, True]
    assert (rows[[0, 2]] == data[[[4 + c for c in range(8)], [SIZE + 4 + c for c in range(8)]]]
            ).all()


def test_a_dropped_blocks_buffer_is_let_go_and_its_rows_left() -> None:
    data = _file(4)
    memory = BlockMemory(4, 2 * SIZE)
    first = weakref.ref(_put_run(memory, data, 0, 1))
    second = weakref.ref(_put_run(memory, data, 1, 1))
    _put_run(memory, data, 2, 1)  # over budget: block 0 dropped
    gc.collect()
    assert first() is None and second() is not None
    assert memory.get(0) is None
    rows, filled = memory.gather(np.array([3, SIZE + 3]), 4, SIZE)
    assert filled.tolist() == [False, True]
    assert (rows[1] == data[SIZE + 3:SIZE + 7]).all()
    assert memory.absent(np.array([0, 1, 2, 3])).tolist() == [0, 3]


def test_a_gather_makes_its_blocks_recently_used() -> None:
    data = _file(3)
    memory = BlockMemory(3, 2 * SIZE)
    _put_run(memory, data, 0, 1)
    _put_run(memory, data, 1, 1)
    memory.gather(np.array([0]), 4, SIZE)  # block 0 used after block 1
    _put_run(memory, data, 2, 1)
    assert memory.get(0) is not None and memory.get(1) is None


def test_rows_over_two_buffers_are_left_even_where_their_offsets_line_up() -> None:
    """Block 0 at the start of one buffer, block 1 one block into another (a run read back
    with a damaged block before it): the row over both is not copied from either."""
    data = _file(2)
    memory = BlockMemory(2, 1 << 20)
    first = np.concatenate([data[:SIZE], np.zeros(SIZE, dtype=np.uint8)])
    second = np.concatenate([np.zeros(SIZE, dtype=np.uint8), data[SIZE:]])
    memory.put(0, memoryview(first)[:SIZE])
    memory.put(1, memoryview(second)[SIZE:])
    rows, filled = memory.gather(np.array([4, SIZE - 4, SIZE + 4]), 8, SIZE)
    assert filled.tolist() == [True, False, True]
    assert (rows[0] == data[4:12]).all() and (rows[2] == data[SIZE + 4:SIZE + 12]).all()


def test_a_block_put_twice_is_kept_once() -> None:
    """Two threads may fetch one block: the second copy is not kept nor counted."""
    data = _file(2)
    memory = BlockMemory(2, 2 * SIZE)
    _put_run(memory, data, 0, 1)
    again = weakref.ref(_put_run(memory, data, 0, 1))
    _put_run(memory, data, 1, 1)
    gc.collect()
    assert again() is None
    assert memory.get(0) is not None and memory.get(1) is not None
