"""make_buffer reads chunk k + 1 on a background thread while the rows of chunk k are built.

An error of a read there reaches the caller unchanged (the same type and message as the same
read raises on the caller's thread), and nothing is left running once make_buffer returns or
raises: neither the background thread nor the source's pass.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator

import h5py
import jax
import numpy as np
import pytest
from adapter_helpers import synthetic_dataset
from marl_minari.adapters import buffer as buffer_module
from marl_minari.adapters import make_buffer

import marl_minari as mm
from marl_minari.errors import CorruptedDataError, StepDataError
from marl_minari.format import layout
from marl_minari.sources import open_source
from marl_minari.sources.folders import FolderSource
from marl_minari.storage.reader_state import ReadScratch

EPISODES, STEPS = 6, 7


def _read_ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("marl-minari-read-ahead")]


def _build(source: object, read_ahead: bool | None = True) -> tuple[object, object]:
    # One episode a chunk: the pass reads six chunks, the fourth on the background thread.
    return make_buffer([source], sample_batch_size=2, sample_sequence_length=2,
                       chunk_steps=STEPS, read_ahead=read_ahead)


@pytest.mark.parametrize("chunk_steps", [STEPS, None])
def test_reading_ahead_builds_the_same_buffer(chunk_steps: int | None) -> None:
    dataset = synthetic_dataset(f"ahead/same-{chunk_steps}-v0", EPISODES, steps=STEPS,
                                obs_dim=4)
    built = {ahead: make_buffer([dataset], sample_batch_size=2, sample_sequence_length=2,
                                chunk_steps=chunk_steps, read_ahead=ahead)[1]
             for ahead in (False, True)}
    plain, ahead = (jax.tree.leaves(built[flag].experience) for flag in (False, True))
    assert len(plain) == len(ahead) > 0
    for one, other in zip(plain, ahead, strict=True):
        np.testing.assert_array_equal(np.asarray(one), np.asarray(other))
    assert not _read_ahead_threads()


def test_without_reading_ahead_no_thread_reads() -> None:
    dataset = synthetic_dataset("ahead/plain-v0", EPISODES, steps=STEPS, obs_dim=4)
    source = FailingSource(None, dataset.data_path)
    with pytest.raises(CorruptedDataError):
        _build(source, read_ahead=False)
    assert source.read_on == {threading.current_thread().name}
    assert source.pass_closed


@pytest.mark.parametrize(("cpus", "expected"), [(1, False), (2, False), (3, False),
                                                 (4, True), (16, True)])
def test_by_default_it_reads_ahead_only_with_cores_to_spare(
        monkeypatch: pytest.MonkeyPatch, cpus: int, expected: bool) -> None:
    monkeypatch.setattr(buffer_module.os, "sched_getaffinity", lambda _: set(range(cpus)))
    assert buffer_module._reads_ahead(None) is expected
    assert buffer_module._reads_ahead(True) is True
    assert buffer_module._reads_ahead(False) is False


def test_a_file_damaged_mid_pass_raises_the_readers_own_error() -> None:
    dataset = synthetic_dataset("ahead/damaged-v0", EPISODES, steps=STEPS, obs_dim=4)
    with h5py.File(dataset.data_path / layout.MAIN_FILE_NAME, "r+") as file:
        name = "episode_3/observations/a1"
        rows = file[name][()]
        del file[name]
        file.create_dataset(name, data=rows[:5])  # the index says 8 rows
    damaged = mm.load_dataset("ahead/damaged-v0")
    with pytest.raises(CorruptedDataError) as on_the_callers_thread:
        list(open_source(damaged).chunks(STEPS))
    with pytest.raises(CorruptedDataError) as in_make_buffer:
        _build(damaged)
    assert "episode_3/observations/a1 has shape (5, 4)" in str(in_make_buffer.value)
    assert str(in_make_buffer.value) == str(on_the_callers_thread.value)
    assert not _read_ahead_threads()


class FailingSource(FolderSource):
    """A dataset whose third chunk cannot be read; it records whether its pass was closed."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.pass_closed = False
        self.read_on: set[str] = set()

    def read_batches(self, batches: Iterable[np.ndarray], *, observations: bool = True,
                     reuse_arrays: bool = False,
                     scratch: ReadScratch | None = None) -> Iterator[mm.MultiAgentArrays]:
        try:
            for n, arrays in enumerate(super().read_batches(
                    batches, observations=observations, scratch=scratch)):
                self.read_on.add(threading.current_thread().name)
                if n == 2:
                    raise CorruptedDataError("chunk 2 of the test source is damaged")
                yield arrays
        finally:
            self.pass_closed = True


def test_a_source_whose_chunk_raises_gives_its_error_unchanged() -> None:
    dataset = synthetic_dataset("ahead/failing-v0", EPISODES, steps=STEPS, obs_dim=4)
    source = FailingSource(None, dataset.data_path)
    with pytest.raises(CorruptedDataError,
                       match="^chunk 2 of the test source is damaged$") as error:
        _build(source)
    assert type(error.value) is CorruptedDataError
    assert source.read_on and all(name.startswith("marl-minari-read-ahead")
                                  for name in source.read_on)
    assert source.pass_closed
    assert not _read_ahead_threads()


def test_a_row_that_fails_closes_the_pass_in_flight() -> None:
    # Discrete actions beyond int32 are refused while the rows are built: the error of the
    # caller's thread, with the next chunk read (or being read) on the background thread.
    dataset = synthetic_dataset("ahead/rows-v0", EPISODES, steps=STEPS, obs_dim=4)
    with h5py.File(dataset.data_path / layout.MAIN_FILE_NAME, "r+") as file:
        file["episode_1/actions/a0"][0] = 2**40
    damaged = mm.load_dataset("ahead/rows-v0")
    source = FailingSource(None, damaged.data_path)
    try:
        _build(source)
    except StepDataError as error:
        assert "actions of 'a0' do not fit" in str(error)
        # Closed by the time the error leaves make_buffer, while its frames are still alive
        # (held by the traceback), not later by the garbage collector.
        assert source.pass_closed
    else:
        pytest.fail("make_buffer accepted actions beyond int32")
    assert source.read_on  # the chunk after it was read ahead: the pass was still open
    assert not _read_ahead_threads()
