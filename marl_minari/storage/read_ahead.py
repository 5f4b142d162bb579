"""One item of an iterator produced on a background thread while the caller uses the one
before: a pass in chunks reads chunk k + 1 (``preadv`` and numpy's large copies release the
GIL) while its caller turns chunk k into rows.

The iterator is only ever advanced by one thread at a time, and the caller asks for item
k + 2 only after it is done with item k, so two reused memories taken in turn
(:class:`~marl_minari.storage.reader_state.ReadScratch` with ``slots=2``) are enough.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from marl_minari.user_warnings import called_from_here

T = TypeVar("T")

_END = object()
"""What the background thread hands back when the iterator is exhausted."""


def read_ahead(items: Iterator[T]) -> Generator[T, None, None]:
    """``items``, each produced on one background thread while the caller holds the one
    before it.

    An exception raised while producing an item is raised to the caller, the same object
    (type and message unchanged), where that item would have been yielded. When the caller
    stops early (an exception of its own, or ``close()``), the item in flight is waited for
    and ``items`` is closed if it is a generator: nothing is left running once this
    generator is finished or closed.
    """
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="marl-minari-read-ahead")
    produce = called_from_here(next)  # warnings name the line that asked for the items
    try:
        pending = pool.submit(produce, items, _END)
        while True:
            item = pending.result()
            if item is _END:
                return
            # The next item is produced while the caller uses this one.
            pending = pool.submit(produce, items, _END)
            yield item  # type: ignore[misc]
    finally:
        # Waits for the item in flight (its exception, if any, is the caller's to ignore:
        # the caller's own is on its way), then closes the source on this thread.
        pool.shutdown(wait=True)
        close = getattr(items, "close", None)
        if close is not None:
            close()
