"""How the offset index is trusted: per entry read, never by a pass over the whole file, and
kept by appends."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from clock import after_last_change
from forged_index import swap_episodes_and_forge_index
from gymnasium import spaces
from index_checks import count_entry_checks
from marl_strategies import assert_episode_equal, random_episode

import marl_minari as mm
from marl_minari.format import index_trust, layout, offset_index
from marl_minari.format.digests import remember_digests
from marl_minari.format.ids import dataset_dir
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.storage.episode_reader import EpisodeReader
from marl_minari.storage.writer import append_to_dataset, write_dataset

AGENTS = ["p", "q"]
WIDE = {a: spaces.Box(-1, 1, (2048,), dtype=np.float32) for a in AGENTS}
SMALL = {a: spaces.Box(-3, 3, (3,), dtype=np.float32) for a in AGENTS}
ACT = {a: spaces.Discrete(4) for a in AGENTS}
REWARDS = "infos/marl/rewards"


def _spec(obs: dict[str, spaces.Space]) -> MultiAgentSpec:
    return MultiAgentSpec(api="parallel", possible_agents=tuple(AGENTS),
                          observation_spaces=obs, action_spaces=ACT)


def _episodes(obs: dict[str, spaces.Space], lengths: list[int], first_seed: int = 0) -> list:
    return [random_episode(AGENTS, obs, ACT, steps, seed)
            for seed, steps in enumerate(lengths, start=first_seed)]


def _bytes_read() -> int:
    """Bytes this process has read with read()-like calls (``rchar``, page cache included)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def _all_trusted(dataset: Any, episode_ids: list[int]) -> bool:
    """Whether every indexed entry of ``episode_ids`` passes the reader's trust check."""
    trusted = _trusted_paths(dataset, episode_ids)
    return trusted is not None and all(trusted.values())


def _trusted_paths(dataset: Any, episode_ids: list[int], *,
                   sample: bool = True) -> dict[str, bool] | None:
    """For each indexed path, whether its entries of ``episode_ids`` pass the reader's trust
    check (every one of them compared); ``None`` when the index is not loaded at all."""
    meta = dataset.metadata
    with h5py.File(dataset.data_path / layout.MAIN_FILE_NAME, "r") as file:
        index = offset_index.load(dataset.data_path, file, int(meta["total_episodes"]),
                                  int(meta["total_steps"]), sample=sample)
        if index is None:
            return None
        ids = np.asarray(episode_ids)
        trusted = {}
        for path, offsets in index.offsets.items():
            having = ids[offsets[ids] >= 0]
            if not having.size:
                continue
            probe = h5py.h5d.open(file.id, f"episode_{int(having[0])}/{path}".encode())
            rows = index.steps[having] + (probe.shape[0] - index.steps[having[0]])
            trusted[path] = bool(index_trust.trusted(index, file, path, having, probe.dtype,
                                                     probe.shape[1:], rows).all())
    return trusted


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux /proc/self/io")
def test_first_read_of_a_copied_dataset_reads_a_fraction_of_the_file() -> None:
    episodes = _episodes(WIDE, [100] * 8)
    write_dataset("trust/wide-v0", episodes, _spec(WIDE))
    # A copy (new inodes, new times): the digests the writer remembered no longer apply, so
    # only the index's own checks can make its entries usable.
    shutil.copytree(dataset_dir("trust/wide-v0"), dataset_dir("trust/copy-v0"))
    copy = mm.load_dataset("trust/copy-v0")
    size = (copy.data_path / layout.MAIN_FILE_NAME).stat().st_size
    before = _bytes_read()
    arrays = copy.to_arrays([5])
    read = _bytes_read() - before
    assert_episode_equal(arrays.episode(0), episodes[5])
    episode_bytes = 101 * 2048 * 4 * len(AGENTS)
    assert size > 6 * episode_bytes
    assert read < size / 4, f"read {read} bytes of a {size}-byte file for one episode"
    assert _all_trusted(copy, [5])


@pytest.mark.parametrize("remembered", [False, True])
def test_an_entry_that_no_longer_matches_the_file_is_not_used(
        monkeypatch: pytest.MonkeyPatch, remembered: bool) -> None:
    # Episodes 1 and 2 get each other's rewards behind the index's back: same shapes, same
    # seal, same episodes 0, 3 and 5 (the ones every load compares), only the entries moved.
    episodes = _episodes(SMALL, [4] * 6)
    write_dataset("trust/swap-v0", episodes, _spec(SMALL))
    dataset = mm.load_dataset("trust/swap-v0")
    main = dataset.data_path / layout.MAIN_FILE_NAME
    with h5py.File(main, "r+") as file:
        file.move(f"episode_1/{REWARDS}", "episode_1/kept")
        file.move(f"episode_2/{REWARDS}", f"episode_1/{REWARDS}")
        file.move("episode_1/kept", f"episode_2/{REWARDS}")
    _set_index_file_size(dataset.data_path, main.stat().st_size)  # as if it had not grown
    if remembered:  # the edited file's digest is known: it is not the index's
        after_last_change(main)
        remember_digests(main.parent.parent, [f"data/{layout.MAIN_FILE_NAME}"])
        monkeypatch.setattr(index_trust, "_BINDINGS", {})
    reloaded = mm.load_dataset("trust/swap-v0")
    assert not _all_trusted(reloaded, [1]) and _all_trusted(reloaded, [0, 3, 5])
    arrays = reloaded.to_arrays()
    np.testing.assert_array_equal(arrays.episode(1).rewards, episodes[2].rewards)
    np.testing.assert_array_equal(arrays.episode(2).rewards, episodes[1].rewards)
    np.testing.assert_array_equal(reloaded.to_arrays([1]).episode(0).rewards,
                                  episodes[2].rewards)


def _set_index_file_size(data_path: Path, size: int) -> None:
    path = data_path / layout.INDEX_FILE_NAME
    with np.load(path) as stored:
        arrays = {key: stored[key].copy() for key in stored.files}
    header = json.loads(arrays["header"].tobytes())
    header["file_size"] = size
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)


def _header(data_path: Path) -> dict[str, Any]:
    with np.load(data_path / layout.INDEX_FILE_NAME) as stored:
        return dict(json.loads(stored["header"].tobytes()))


def test_append_extends_the_index_without_hashing_the_file() -> None:
    first, second, third = (_episodes(SMALL, lengths, seed) for lengths, seed in
                            (([3, 5, 2], 0), ([4, 1], 10), ([2], 20)))
    write_dataset("trust/grow-v0", first, _spec(SMALL))
    append_to_dataset("trust/grow-v0", second, _spec(SMALL))
    append_to_dataset("trust/grow-v0", third, _spec(SMALL))
    dataset = mm.load_dataset("trust/grow-v0")
    header = _header(dataset.data_path)
    assert header["blake3"] is None  # the append did not hash the data file for the index
    index = offset_index.read(dataset.data_path)
    assert index is not None and index.steps.tolist() == [3, 5, 2, 4, 1, 2]
    assert _all_trusted(dataset, list(range(6)))
    arrays = dataset.to_arrays()
    for position, expected in enumerate(first + second + third):
        assert_episode_equal(arrays.episode(position), expected)
    assert mm.check_dataset("trust/grow-v0") is not None


def test_append_to_a_dataset_without_an_index_leaves_none() -> None:
    write_dataset("trust/plain-v0", _episodes(SMALL, [2, 3]), _spec(SMALL))
    data_path = mm.load_dataset("trust/plain-v0").data_path
    (data_path / layout.INDEX_FILE_NAME).unlink()
    added = _episodes(SMALL, [4], 30)
    append_to_dataset("trust/plain-v0", added, _spec(SMALL))
    assert not (data_path / layout.INDEX_FILE_NAME).exists()
    assert_episode_equal(mm.load_dataset("trust/plain-v0").to_arrays([2]).episode(0), added[0])


def test_append_after_a_foreign_write_keeps_reads_right() -> None:
    # Another tool rewrites episode 1's rewards (new storage) after the index was written;
    # the append carries the outdated entry forward, and readers still never use it.
    episodes = _episodes(SMALL, [3, 3, 3])
    write_dataset("trust/foreign-v0", episodes, _spec(SMALL))
    data_path = mm.load_dataset("trust/foreign-v0").data_path
    replacement = np.arange(8, dtype=np.float64).reshape(4, 2)  # one row per observation
    with h5py.File(data_path / layout.MAIN_FILE_NAME, "r+") as file:
        del file[f"episode_1/{REWARDS}"]
        file.create_dataset(f"episode_1/{REWARDS}", data=replacement, chunks=(2, 2))
    append_to_dataset("trust/foreign-v0", _episodes(SMALL, [2], 40), _spec(SMALL))
    dataset = mm.load_dataset("trust/foreign-v0")
    assert offset_index.read(dataset.data_path) is not None
    assert not _all_trusted(dataset, [1]) and _all_trusted(dataset, [0, 2, 3])
    np.testing.assert_array_equal(dataset.to_arrays([1]).episode(0).rewards, replacement[1:])


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux /proc/self/io")
@pytest.mark.parametrize("touched", [False, True])
def test_a_file_whose_writer_remembered_its_digest_needs_no_entry_checks(
        monkeypatch: pytest.MonkeyPatch, touched: bool) -> None:
    """Read in a fresh process (nothing hashed or bound yet): the digest the writer remembered
    still describes the file, so no entry is compared with HDF5 and the file is not read;
    once the file's times change, the remembered digest no longer applies and entries are
    compared again (the data read is the same either way)."""
    episodes = _episodes(WIDE, [40] * 6)
    write_dataset("trust/remembered-v0", episodes, _spec(WIDE))
    dataset = mm.load_dataset("trust/remembered-v0")
    main = dataset.data_path / layout.MAIN_FILE_NAME
    # Remembered again once the clock has moved past the last write (a digest taken in the
    # same tick is never trusted, and the writer may have been that quick).
    after_last_change(main)
    remember_digests(main.parent.parent, [f"data/{layout.MAIN_FILE_NAME}"])
    if touched:
        stat = main.stat()
        os.utime(main, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    monkeypatch.setattr(offset_index, "_FINGERPRINTS", {})
    monkeypatch.setattr(index_trust, "_BINDINGS", {})
    compared = count_entry_checks(monkeypatch)
    before = _bytes_read()
    arrays = mm.load_dataset("trust/remembered-v0").to_arrays([2, 4])
    read = _bytes_read() - before
    for position, expected in enumerate([2, 4]):
        assert_episode_equal(arrays.episode(position), episodes[expected])
    assert read < main.stat().st_size / 2
    assert bool(compared) == touched


@pytest.mark.parametrize("shape", ["many small episodes", "few wide episodes"])
def test_a_pass_in_chunks_over_a_copy_compares_each_entry_once(
        monkeypatch: pytest.MonkeyPatch, shape: str) -> None:
    """A copied dataset (no digest a local writer remembered for it) read in small chunks:
    however many entries there are, each is compared with HDF5 once, never trusted because
    the file's digest matches the index's header."""
    from marl_minari.sources import open_source

    small = shape == "many small episodes"
    obs, lengths = (SMALL, [4] * 40) if small else (WIDE, [100] * 8)
    episodes = _episodes(obs, lengths)
    write_dataset("trust/pass-v0", episodes, _spec(obs))
    shutil.copytree(dataset_dir("trust/pass-v0"), dataset_dir("trust/pass-copy-v0"))
    compared = count_entry_checks(monkeypatch)
    chunks = list(open_source("trust/pass-copy-v0").chunks(chunk_steps=8 if small else 100))
    assert len(chunks) == (20 if small else 8)
    position = 0
    for arrays in chunks:
        for index in range(len(arrays.episode_lengths)):
            assert_episode_equal(arrays.episode(index), episodes[position])
            position += 1
    assert position == len(episodes)
    index = offset_index.read(dataset_dir("trust/pass-copy-v0") / "data")
    assert index is not None
    entries = sum(int((offsets >= 0).sum()) for offsets in index.offsets.values())
    assert len(compared) == len(set(compared)) == entries


@pytest.mark.parametrize("hashed_before", [False, True])
def test_a_forged_index_header_does_not_make_swapped_episodes_trusted(
        monkeypatch: pytest.MonkeyPatch, hashed_before: bool) -> None:
    """Episodes 1 and 2 swapped with h5py, the index rewritten with the same arrays (so the
    seal still matches) and a header claiming the modified file's size and digest: read as in
    a fresh process, every episode is what h5py and plain Minari read."""
    episodes = _episodes(SMALL, [4] * 6)
    write_dataset("trust/forged-v0", episodes, _spec(SMALL))
    data_path = dataset_dir("trust/forged-v0") / "data"
    swap_episodes_and_forge_index(data_path)
    monkeypatch.setattr(offset_index, "_FINGERPRINTS", {})
    monkeypatch.setattr(index_trust, "_BINDINGS", {})
    if hashed_before:  # this process knows the file's digest: still not the index's word
        offset_index.fingerprint(data_path / layout.MAIN_FILE_NAME)
    dataset = mm.load_dataset("trust/forged-v0")
    arrays = dataset.to_arrays()
    for position, expected in enumerate([0, 2, 1, 3, 4, 5]):
        assert_episode_equal(arrays.episode(position), episodes[expected])
    assert not _all_trusted(dataset, [1, 2])


def test_a_rewritten_digests_sidecar_of_a_file_written_since_is_ignored(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The sidecar the writer left names the file's old state: after the swap it no longer
    describes the file, so nothing in it vouches for the forged index."""
    episodes = _episodes(SMALL, [4] * 6)
    write_dataset("trust/sidecar-v0", episodes, _spec(SMALL))
    data_path = dataset_dir("trust/sidecar-v0") / "data"
    sidecar = data_path.parent / layout.DIGESTS_FILE_NAME
    document = json.loads(sidecar.read_text())
    swap_episodes_and_forge_index(data_path)
    main = data_path / layout.MAIN_FILE_NAME
    entry = document["files"][f"data/{layout.MAIN_FILE_NAME}"]
    entry["blake3"] = offset_index.fingerprint(main)  # the new digest, the old stat key
    sidecar.write_text(json.dumps(document))
    monkeypatch.setattr(offset_index, "_FINGERPRINTS", {})
    monkeypatch.setattr(index_trust, "_BINDINGS", {})
    dataset = mm.load_dataset("trust/sidecar-v0")
    assert not _all_trusted(dataset, [1, 2])
    assert_episode_equal(dataset.to_arrays([1]).episode(0), episodes[2])


def test_a_forged_index_header_in_a_fresh_process_reads_what_h5py_reads() -> None:
    """The reproduction as reported: forge, then read in a new process."""
    import subprocess
    import sys

    episodes = _episodes(SMALL, [4] * 6)
    write_dataset("trust/fresh-v0", episodes, _spec(SMALL))
    data_path = dataset_dir("trust/fresh-v0") / "data"
    swap_episodes_and_forge_index(data_path)
    script = (
        "import sys, h5py, numpy as np, marl_minari as mm\n"
        "arrays = mm.load_dataset('trust/fresh-v0').to_arrays()\n"
        "with h5py.File(sys.argv[1]) as f:\n"
        "    same = [np.array_equal(arrays.episode(e).team_rewards, f[f'episode_{e}/rewards'][()])"
        " for e in range(6)]\n"
        "print(same)\n")
    done = subprocess.run([sys.executable, "-c", script, str(data_path / layout.MAIN_FILE_NAME)],
                          capture_output=True, text=True, timeout=120, env=os.environ.copy())
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str([True] * 6)


def test_a_sealed_index_with_a_negative_length_is_not_loaded() -> None:
    # Episodes 1 and 3 lie outside the sampled ones (0, 2, 4) and the lengths still sum to
    # total_steps: only the sign tells the forgery, and a reader planning by these lengths
    # (a streamed dataset's, read without the sample) would plan a negative episode.
    write_dataset("trust/negative-v0", _episodes(SMALL, [3, 4, 5, 6, 7]), _spec(SMALL))
    dataset = mm.load_dataset("trust/negative-v0")
    main = dataset.data_path / layout.MAIN_FILE_NAME
    index = offset_index.read(dataset.data_path)
    assert index is not None
    steps = index.steps.copy()
    steps[3] += steps[1] + 1
    steps[1] = -1
    with h5py.File(main, "r+") as file:
        offset_index.seal(file, index.offsets, steps)
    offset_index.write(main, index.offsets, steps)
    with h5py.File(main, "r") as file:
        for sample in (True, False):
            assert offset_index.load(dataset.data_path, file, 5, 25, sample=sample) is None

def test_an_entry_compared_for_one_row_count_is_not_taken_as_compared_for_another(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What is remembered of an entry is keyed by the rows it was compared for: a leaf asked
    for with the wrong row count disagrees, and that answer is not reused for the right one."""
    episodes = _episodes(SMALL, [4, 6])
    write_dataset("trust/rows-v0", episodes, _spec(SMALL))
    shutil.copytree(dataset_dir("trust/rows-v0"), dataset_dir("trust/rows-copy-v0"))
    copy = mm.load_dataset("trust/rows-copy-v0")
    monkeypatch.setattr(index_trust, "_BINDINGS", {})
    with h5py.File(copy.data_path / layout.MAIN_FILE_NAME, "r") as file:
        index = offset_index.read(copy.data_path)
        assert index is not None
        ids = np.arange(2)
        path = "observations/p"  # T + 1 rows per episode
        wrong = index_trust.trusted(index, file, path, ids, np.float32, (3,), index.steps[ids])
        right = index_trust.trusted(index, file, path, ids, np.float32, (3,),
                                    index.steps[ids] + 1)
    assert not wrong.any() and right.all()


def _reader_sample(data_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[bool, int]:
    """``(whether a new reader of data_path uses its index, how many times the sampled
    episodes were compared with HDF5 to decide)``."""
    compared: list[list[int]] = []
    real = index_trust.mismatches

    def counting(index: Any, file: Any, episode_ids: Any) -> list[str]:
        compared.append(list(episode_ids))
        return real(index, file, episode_ids)

    monkeypatch.setattr(index_trust, "mismatches", counting)
    dataset = mm.load_dataset(_dataset_id(data_path))
    with EpisodeReader(data_path, dataset.spec, dataset.metadata) as reader:
        used = reader.indexed
    monkeypatch.setattr(index_trust, "mismatches", real)
    return used, len(compared)


def _dataset_id(data_path: Path) -> str:
    root = Path(os.environ["MINARI_DATASETS_PATH"]).resolve()
    return str(data_path.resolve().parent.relative_to(root))


def test_the_sample_is_answered_from_what_was_compared_and_agreed_else_compared(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader uses an index only once the sampled episodes' entries agree with HDF5
    (``docs/format.md``): compared now, unless this process compared every one of them for
    the same file state and each agreed, or the writer's own file is trusted whole."""
    write_dataset("trust/sample-v0", _episodes(SMALL, [3, 4, 5, 6, 7]), _spec(SMALL))
    original = mm.load_dataset("trust/sample-v0").data_path
    shutil.copytree(dataset_dir("trust/sample-v0"), dataset_dir("trust/sample-copy-v0"))
    copy = mm.load_dataset("trust/sample-copy-v0")
    monkeypatch.setattr(index_trust, "_BINDINGS", {})
    assert _reader_sample(original, monkeypatch) == (True, 0)  # the writer's file: whole
    assert _reader_sample(copy.data_path, monkeypatch) == (True, 1)
    copy.to_arrays([1])  # entries of episode 1 only: the sampled 0, 2 and 4 are not known
    assert _reader_sample(copy.data_path, monkeypatch) == (True, 1)
    with EpisodeReader(copy.data_path, copy.spec, copy.metadata) as reader:
        reader.read(np.arange(5), observations=False)  # every episode, no observation leaf
    assert _reader_sample(copy.data_path, monkeypatch) == (True, 1)
    copy.to_arrays()  # every entry compared, each agreed
    assert _reader_sample(copy.data_path, monkeypatch) == (True, 0)

    swap_episodes_and_forge_index(copy.data_path, 0, 1)  # episode 0 sampled, now wrong
    monkeypatch.setattr(index_trust, "_BINDINGS", {})
    assert _reader_sample(copy.data_path, monkeypatch) == (False, 1)


def test_a_sampled_entry_remembered_as_disagreeing_is_compared_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What an earlier comparison found wrong never answers the sample as agreeing."""
    write_dataset("trust/sample-swap-v0", _episodes(SMALL, [4] * 5), _spec(SMALL))
    dataset = mm.load_dataset("trust/sample-swap-v0")
    main = dataset.data_path / layout.MAIN_FILE_NAME
    with h5py.File(main, "r+") as file:  # episodes 0 and 1 swap rewards behind the index
        file.move(f"episode_0/{REWARDS}", "episode_0/kept")
        file.move(f"episode_1/{REWARDS}", f"episode_0/{REWARDS}")
        file.move("episode_0/kept", f"episode_1/{REWARDS}")
    _set_index_file_size(dataset.data_path, main.stat().st_size)
    monkeypatch.setattr(index_trust, "_BINDINGS", {})
    trusted = _trusted_paths(mm.load_dataset("trust/sample-swap-v0"), [0, 2, 4], sample=False)
    assert trusted is not None and [p for p, agreed in trusted.items() if not agreed] == [REWARDS]
    assert _reader_sample(dataset.data_path, monkeypatch) == (False, 1)


def _stored_otherwise(episodes: list[Any]) -> list[Any]:
    """Episode 1 with its observations of agent p as float64 (the space says float32), its
    actions of q as int32 (int64 for a Discrete space) and an extra column as int32 where
    the other episodes have int64. The episodes go to the writer as leaves, as a recording
    journal hands them over: an episode object's leaves would be cast to the spaces' types
    (as a dataset written by another writer, or by an older release, may not be)."""
    from dataclasses import replace

    from marl_minari.storage.episode_writer import LeafEpisode, episode_leaves

    out = []
    for number, episode in enumerate(episodes):
        extra = np.arange(episode.total_steps + 1) + 100 * number
        if number != 1:
            out.append(replace(episode, extras={"x": extra.astype(np.int64)}))
            continue
        out.append(replace(
            episode, extras={"x": extra.astype(np.int32)},
            observations={**episode.observations,
                          "p": episode.observations["p"].astype(np.float64)},
            actions={**episode.actions, "q": episode.actions["q"].astype(np.int32)}))
    return [LeafEpisode(list(episode_leaves(e)), e.total_steps, e.seed, e.options)
            for e in out]


@pytest.mark.parametrize("first", [0, 1], ids=["from-episode-0", "from-the-odd-episode"])
def test_episodes_stored_otherwise_than_readers_read_them_are_read_as_h5py_reads_them(
        first: int) -> None:
    """The writer's own file is trusted whole, so each entry it indexes must be stored as
    every reader reads it: the spec's type for the spec's leaves, the path's first entry's
    for the others. Episode 1's columns stored otherwise are read through HDF5, also by a
    read that starts at episode 1 (whose own column then does not decide the type)."""
    episodes = _stored_otherwise(_episodes(SMALL, [4, 5, 6]))
    write_dataset("trust/otherwise-v0", episodes, _spec(SMALL))
    main = dataset_dir("trust/otherwise-v0") / "data" / layout.MAIN_FILE_NAME
    arrays = mm.load_dataset("trust/otherwise-v0").to_arrays(list(range(first, 3)))
    with h5py.File(main, "r") as file:
        for position, episode_id in enumerate(range(first, 3)):
            read = arrays.episode(position)
            group = file[f"episode_{episode_id}"]
            np.testing.assert_array_equal(read.extras["x"], group["infos/marl/extras/x"][()])
            np.testing.assert_array_equal(read.observations["p"],
                                          group["observations/p"][()].astype(np.float32))
            np.testing.assert_array_equal(read.actions["q"], group["actions/q"][()])
    assert arrays.extras["x"].dtype == np.int64
