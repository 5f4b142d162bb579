"""The one thread a read hands work to that runs without the GIL (BLAKE3 hashing, mapping
memory), so that it overlaps what the reading thread does meanwhile.

One thread for the whole process, made on first use: work queued behind other work waits for
it, never for a second thread. ``None`` where the process may use one CPU only (the work is
then done by the caller). A forked child makes a thread of its own: the parent's is not there.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

_HELPER: ThreadPoolExecutor | bool | None = None
"""``None`` until decided; ``False`` on one CPU."""
_LOCK = threading.Lock()


def helper_thread() -> ThreadPoolExecutor | None:
    """The process's helper thread, or ``None`` where it would have no CPU of its own."""
    global _HELPER
    if _HELPER is None:
        with _LOCK:
            if _HELPER is None:
                usable = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                          else os.cpu_count() or 1)
                _HELPER = (ThreadPoolExecutor(1, thread_name_prefix="marl-minari-helper")
                           if usable > 1 else False)
    return _HELPER if isinstance(_HELPER, ThreadPoolExecutor) else None


def _forget() -> None:
    global _HELPER, _LOCK
    _HELPER, _LOCK = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)
