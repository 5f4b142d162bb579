"""Warnings are attributed to the line that called into the package, however deep they are
made and whatever other library lies between (``marl_minari.user_warnings``)."""

from __future__ import annotations

import copy
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest
from marl_minari.registry import stream_warnings

import marl_minari
from marl_minari.user_warnings import called_from_here, warn


def test_a_warning_made_here_names_this_line() -> None:
    with pytest.warns(UserWarning, match="said here") as said:
        line = sys._getframe().f_lineno + 1
        warn("said here")
    assert [(w.filename, w.lineno) for w in said] == [(__file__, line)]


def test_a_mapped_folder_is_the_package_too() -> None:
    """``registry/`` lies beside ``marl_minari/`` in a checkout: its frames are ours too."""
    with pytest.warns(stream_warnings.StreamingWarning) as said:
        stream_warnings.warn_whole_download("data/main_data.hdf5", "http://mirror", 10, True)
    assert [w.filename for w in said] == [__file__]


def _own_code(source: str) -> dict[str, Any]:
    """``source`` run as if it were a module of the package (its frames count as ours)."""
    filename = str(Path(marl_minari.__file__).parent / "_not_a_module.py")
    namespace: dict[str, Any] = {"warn": warn, "copy": copy, "threading": threading,
                                 "called_from_here": called_from_here}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102
    return namespace


def test_another_librarys_frames_between_ours_are_passed_over() -> None:
    """Package code -> another library (here ``copy``, calling back as h5py calls the
    streaming reader from inside HDF5) -> package code that warns: the warning names the line
    that called the package, not the library's."""
    own = _own_code(
        "class Calls:\n"
        "    def __deepcopy__(self, memo):\n"
        "        warn('from a callback')\n"
        "        return self\n"
        "def entry():\n"
        "    return copy.deepcopy(Calls())\n")
    with pytest.warns(UserWarning, match="from a callback") as said:
        own["entry"]()
    assert [w.filename for w in said] == [__file__]


def test_the_filter_by_module_sees_the_users_module() -> None:
    """``-W error::UserWarning:<module>`` style filters match the module the warning is
    attributed to: the caller's."""
    own = _own_code("def entry():\n    warn('filtered')\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.filterwarnings("error", category=UserWarning, module=__name__)
        with pytest.raises(UserWarning, match="filtered"):
            own["entry"]()


def test_work_on_a_thread_of_ours_names_the_line_that_handed_it_over() -> None:
    """A thread of the package has no caller of its own: what it warns of names the line
    that called into the package where the work was handed to it."""
    own = _own_code(
        "def entry(carry):\n"
        "    work = lambda: warn('from a thread')\n"
        "    thread = threading.Thread(target=called_from_here(work) if carry else work)\n"
        "    thread.start()\n"
        "    thread.join()\n")
    for carry in (True, False):
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            line = sys._getframe().f_lineno + 1
            own["entry"](carry)
        where = [(w.filename, w.lineno) for w in said]
        if carry:
            assert where == [(__file__, line)]
        else:  # uncarried, the thread's start is all it knows
            assert where == [(threading.__file__, where[0][1])]


def test_carried_work_run_on_the_callers_thread_leaves_no_place_behind() -> None:
    """Carried work may run on the thread that wrapped it (the first of several fetches
    does): afterwards, warnings name their own lines again."""
    own = _own_code("def carry():\n    return called_from_here(lambda: warn('carried'))\n"
                    "def entry():\n    warn('later')\n")
    work = own["carry"]()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        work()
        line = sys._getframe().f_lineno + 1
        own["entry"]()
    assert [(str(w.message), w.lineno) for w in said][1:] == [("later", line)]
