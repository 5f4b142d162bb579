"""Warnings that point at the user's line.

A warning's ``stacklevel`` counted by hand breaks whenever the path to it changes, and one
warning is often reached by several paths (``load_dataset``, ``describe``, ``subsample`` all
reach the streaming reader's). :func:`warn` finds the place instead: the line that called
into this package, so ``python -W error``, warning filters by module and the printed
location all show the user's code. Work this package hands to a thread of its own is wrapped
in :func:`called_from_here`, so that its warnings name the line that asked for it.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from collections.abc import Callable
from types import FrameType
from typing import Any, NamedTuple, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

_PACKAGES = ("marl_minari", "marl_minari.adapters", "marl_minari.collectors",
             "marl_minari.registry")
"""Packages whose files are ours: the core and the folders mapped as its subpackages (they
lie outside ``marl_minari/`` in a source checkout, inside it in the wheel)."""


class _Place(NamedTuple):
    filename: str
    lineno: int
    module_globals: dict[str, Any]


_CARRIED = threading.local()
"""``place``: where a thread of ours attributes its warnings (:func:`called_from_here`)."""


def _own_folders() -> tuple[str, ...]:
    """The folders of this package's loaded parts (a part not loaded yet has no frame)."""
    folders = []
    for name in _PACKAGES:
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None)
        if file is not None:
            folders.append(os.path.dirname(os.path.abspath(file)) + os.sep)
    return tuple(folders)


_OWN_FILES: dict[str, bool] = {}
"""Whether each code file seen on a stack is this package's: a file is first looked at while
its code runs, so its package is loaded by then and the answer holds."""


def _is_own(filename: str) -> bool:
    own = _OWN_FILES.get(filename)
    if own is None:
        own = _OWN_FILES[filename] = os.path.abspath(filename).startswith(_own_folders())
    return own


def _caller_of_package() -> _Place:
    """The line that called into this package: the caller of its outermost frame on this
    thread's stack. Frames of other libraries between ours are ours to answer for (h5py
    calls the streaming reader back from inside HDF5); a thread of ours has no caller, and
    answers with the place :func:`called_from_here` gave it, else its outermost frame's."""
    carried = getattr(_CARRIED, "place", None)
    if carried is not None:
        return carried
    frame: FrameType | None = sys._getframe(1)
    outermost = caller = frame
    while frame is not None:
        if _is_own(frame.f_code.co_filename):
            outermost, caller = frame, frame.f_back
        frame = frame.f_back
    chosen = caller if caller is not None else outermost
    assert chosen is not None  # this module's own frame is on the stack
    return _Place(chosen.f_code.co_filename, chosen.f_lineno, chosen.f_globals)


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn(message, category)``, attributed to the line that called into this
    package (on a thread of ours, to the line that handed it the work)."""
    place = _caller_of_package()
    module = place.module_globals.get("__name__", "<string>")
    registry = place.module_globals.setdefault("__warningregistry__", {})
    # As warnings.warn does, without module_globals: they are only there to find the line's
    # source through the module's loader, which a `python -c` script's cannot give.
    warnings.warn_explicit(message, category, place.filename, place.lineno, module, registry)


def called_from_here(function: Callable[P, R]) -> Callable[P, R]:
    """``function``, to be run on a thread of ours: the warnings it gives there name the
    line that called into this package on the thread that wraps it, now."""
    place = _caller_of_package()

    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        before = getattr(_CARRIED, "place", None)
        _CARRIED.place = place
        try:
            return function(*args, **kwargs)
        finally:
            _CARRIED.place = before

    return run
