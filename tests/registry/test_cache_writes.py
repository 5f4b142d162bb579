"""The cache writer: verified blocks written to the disk cache on a thread of their own, in
order, each file's writes waited for by whoever reads its packs, the hand-over bounded, a
failure raised where the writes are waited for, and a forked child with none pending."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from marl_minari.registry.cache_writes import CACHE_WRITES, BackgroundWrites
from registry_helpers import answer_in_forked_child


def _gated(gate: threading.Event, done: list[str], name: str) -> Any:
    def write() -> None:
        assert gate.wait(60), "the test never opened the gate"
        done.append(name)
    return write


def test_writes_run_in_order_and_settle_waits_for_a_files_writes() -> None:
    writes = BackgroundWrites()
    gate, done = threading.Event(), []
    writes.submit("a", 1, _gated(gate, done, "a1"))
    writes.submit("b", 1, lambda: done.append("b1"))
    writes.submit("a", 1, lambda: done.append("a2"))
    assert (writes.pending("a"), writes.pending("b")) == (2, 1)
    gate.set()
    writes.settle("a")
    assert writes.pending("a") == 0
    assert done == ["a1", "b1", "a2"]


def test_a_failing_write_is_raised_once_where_its_file_is_settled() -> None:
    writes = BackgroundWrites()

    def broken() -> None:
        raise ValueError("a bug in a write")

    writes.submit("a", 1, broken)
    writes.submit("b", 1, lambda: None)
    writes.settle("b")  # another file's writes do not raise it
    with pytest.raises(ValueError, match="a bug in a write"):
        writes.settle("a")
    writes.settle("a")


def test_a_hand_over_past_the_pending_bytes_waits_for_the_writer() -> None:
    writes = BackgroundWrites(max_pending_bytes=10)
    gate, done = threading.Event(), []
    writes.submit("a", 10, _gated(gate, done, "first"))
    second = threading.Thread(target=writes.submit, args=("a", 5, lambda: done.append("next")))
    second.start()
    second.join(0.5)
    assert second.is_alive(), "handed over past the bound"
    assert writes.pending("a") == 1
    gate.set()
    second.join(60)
    writes.settle("a")
    assert done == ["first", "next"]


def test_a_forked_child_starts_with_no_writes_pending() -> None:
    gate, done = threading.Event(), []
    CACHE_WRITES.submit("forked", 1, _gated(gate, done, "parent's"))

    def pending_in_child() -> int:
        CACHE_WRITES.settle("forked")  # the parent's write is not waited for here
        return CACHE_WRITES.pending("forked")

    try:
        assert answer_in_forked_child(pending_in_child) == 0
        assert CACHE_WRITES.pending("forked") == 1
    finally:
        gate.set()
        CACHE_WRITES.settle("forked")
    assert done == ["parent's"]
