"""read_ahead produces each item on one background thread while the caller holds the one
before: the items in order, at most one ahead, the producer's errors unchanged, nothing left
running; and ReadScratch's two slots keep a chunk's arrays valid while the next is read."""

from __future__ import annotations

import sys
import threading
import warnings
from collections.abc import Iterator

import numpy as np
import pytest

from marl_minari.storage.read_ahead import read_ahead
from marl_minari.storage.reader_state import ReadScratch
from marl_minari.user_warnings import warn


def _read_ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("marl-minari-read-ahead")]


class Counted:
    """A generator's record: items started, whether it was closed, on which threads."""

    def __init__(self) -> None:
        self.started = 0
        self.closed = False
        self.threads: set[str] = set()

    def items(self, count: int, fail_at: int | None = None) -> Iterator[int]:
        try:
            for n in range(count):
                self.started += 1
                self.threads.add(threading.current_thread().name)
                if n == fail_at:
                    raise ValueError(f"item {n} is damaged")
                yield n
        finally:
            self.closed = True


def test_items_come_in_order_each_made_on_the_background_thread() -> None:
    record = Counted()
    got = []
    for n in read_ahead(record.items(5)):
        # The caller holds item n: item n + 1 may be in the making, item n + 2 not yet.
        assert record.started <= n + 2
        got.append(n)
    assert got == [0, 1, 2, 3, 4]
    assert record.closed
    assert all(name.startswith("marl-minari-read-ahead") for name in record.threads)
    assert not _read_ahead_threads()


def test_an_error_of_the_producer_reaches_the_caller_unchanged() -> None:
    record = Counted()
    got = []
    with pytest.raises(ValueError, match="^item 2 is damaged$") as error:
        for n in read_ahead(record.items(5, fail_at=2)):
            got.append(n)
    assert type(error.value) is ValueError
    assert got == [0, 1]  # where the damaged item would have been
    assert not _read_ahead_threads()


def test_a_caller_that_stops_leaves_nothing_running() -> None:
    record = Counted()
    source = record.items(100)  # held here: only read_ahead's close() can close it
    ahead = read_ahead(source)
    with pytest.raises(RuntimeError, match="the caller's own"):
        for n in ahead:
            if n == 1:
                ahead.close()  # what closing() does as the caller's error leaves
                raise RuntimeError("the caller's own")
    assert record.closed
    assert record.started <= 3
    assert not _read_ahead_threads()


def test_an_empty_source_gives_nothing() -> None:
    assert list(read_ahead(iter([]))) == []
    assert not _read_ahead_threads()


def test_two_slots_keep_a_read_valid_while_the_next_is_read() -> None:
    scratch = ReadScratch(slots=2)
    shape, dtype = (10, 3), np.dtype(np.float32)
    first = scratch.array("observations/a0", shape, dtype)
    scratch.advance(10, frozenset())
    second = scratch.array("observations/a0", shape, dtype)
    scratch.advance(10, frozenset())
    third = scratch.array("observations/a0", shape, dtype)
    assert not np.shares_memory(first, second)
    # The read after next takes the first's memory again (allocated once per slot).
    assert np.shares_memory(first, third)


def test_one_slot_reuses_its_memory_every_read() -> None:
    scratch = ReadScratch()
    first = scratch.array("observations/a0", (10, 3), np.dtype(np.float32))
    scratch.advance(10, frozenset())
    assert np.shares_memory(first, scratch.array("observations/a0", (10, 3),
                                                 np.dtype(np.float32)))


def test_no_slot_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one slot"):
        ReadScratch(slots=0)


def test_a_warning_given_while_an_item_is_produced_names_the_line_that_asked() -> None:
    """The producer's thread has no caller of its own: what the package warns of while it
    produces an item names the line that asked for the items."""
    def items() -> Iterator[int]:
        for n in range(3):
            warn(f"item {n}")
            yield n

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        assert list(read_ahead(items())) == [0, 1, 2]
    assert [(str(w.message), w.filename, w.lineno) for w in said] == [
        (f"item {n}", __file__, line) for n in range(3)]
