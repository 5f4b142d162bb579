"""Episode groups' ``total_steps`` read from their bytes is what HDF5 reads, or not read.

A whole-file check of an offset index (``registry.download``, the conformance check) compares
every episode's ``total_steps`` with the index. ``format.group_templates.resolve`` reads it
from the bytes of the episode groups it matches to a template whose own value HDF5 read
(``counted_varying``), instead of opening every group. Every count it gives must be the one
HDF5 gives on the same bytes, for any file: the differential test mutates the attribute
messages of real files and compares, and the files below hold the attributes that HDF5
reads otherwise than a naive parse would.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import partial
from pathlib import Path

import h5py
import numpy as np
import pytest
from hdf5_files import mutated_copies
from index_checks import copied_data, recorded_calls

from marl_minari.format import entry_checks, group_templates, offset_index, symbol_tables
from marl_minari.format.in_file import hard_link_address

Attributes = Callable[[h5py.Group, int], None]


def _episodes(path: Path, episodes: int, attributes: Attributes) -> Path:
    """A file of ``episodes`` episode groups, each with a dataset and ``attributes``."""
    with h5py.File(path, "w") as file:
        for episode_id in range(episodes):
            group = file.create_group(f"episode_{episode_id}")
            attributes(group, episode_id)
            group.create_dataset("rewards", data=np.arange(3, dtype=np.float32))
    return path


def _as_minari(group: h5py.Group, episode_id: int) -> None:
    """Minari's attributes: ``id``, ``total_steps`` and ``seed``, varied."""
    group.attrs["id"] = episode_id
    group.attrs["total_steps"] = 3 * episode_id + 1
    group.attrs["seed"] = 7 * episode_id


def _resolved(path: Path, episodes: int) -> group_templates.Resolved | None:
    with h5py.File(path, "r") as file:
        raw = entry_checks._local_raw(file)
        assert raw is not None
        return group_templates.resolve(
            raw.read_ranges, raw.size, list(range(episodes)), [b"rewards"] * episodes,
            partial(hard_link_address, file.id), count=partial(entry_checks._hdf5_count, file))


def _hdf5(path: Path, episodes: int) -> dict[int, int | None]:
    """HDF5's own reading of each episode's ``total_steps`` (``None``: it reads none)."""
    with h5py.File(path, "r") as file:
        return {e: entry_checks._hdf5_count(file, b"episode_%d" % e) for e in range(episodes)}


def _counts_agree(path: Path, episodes: int) -> dict[int, int]:
    """The counts read from the bytes, each checked to be HDF5's."""
    resolved = _resolved(path, episodes)
    assert resolved is not None
    expected = _hdf5(path, episodes)
    assert {e: expected[e] for e in resolved.counts} == resolved.counts
    return resolved.counts


@pytest.mark.parametrize("which", ["recorded", "minari-like"])
def test_an_intact_files_counts_are_all_read_from_its_bytes(
        which: str, recorded_file: tuple[Path, int], tmp_path: Path) -> None:
    path, episodes = (recorded_file if which == "recorded"
                      else (_episodes(tmp_path / "varied.hdf5", 40, _as_minari), 40))
    counts = _counts_agree(path, episodes)
    assert sorted(counts) == list(range(episodes))
    if which == "minari-like":
        assert len(set(counts.values())) == episodes  # every value its own


def test_without_a_count_reader_nothing_is_counted(tmp_path: Path) -> None:
    path = _episodes(tmp_path / "varied.hdf5", 5, _as_minari)
    with h5py.File(path, "r") as file:
        raw = entry_checks._local_raw(file)
        assert raw is not None
        resolved = group_templates.resolve(raw.read_ranges, raw.size, list(range(5)),
                                           [b"rewards"] * 5, partial(hard_link_address, file.id))
    assert resolved is not None and resolved.counts == {}


def _headers(path: Path, episodes: int) -> list[symbol_tables.GroupHeader]:
    """The episode groups' object headers, parsed."""
    data = path.read_bytes()

    def read(ranges: list[tuple[int, int]]) -> list[bytes]:
        return [data[at:at + length] for at, length in ranges]

    sb = symbol_tables.read_superblock(read, len(data))
    assert sb is not None
    headers = []
    with h5py.File(path, "r") as file:
        for episode_id in range(episodes):
            address = hard_link_address(file.id, b"episode_%d" % episode_id)
            assert address is not None
            header = symbol_tables.parse_header(read, address, sb)
            assert header is not None
            headers.append(header)
    return headers


def _attribute_messages(path: Path, episodes: int) -> list[tuple[int, int]]:
    """``(address, length)`` of every attribute message (with its message header) of the
    episode groups."""
    return [(header.chunks[chunk][0] + body - 8, size + 8)
            for header in _headers(path, episodes) for chunk, body, size in header.attributes]


def test_a_count_read_from_the_bytes_is_always_hdf5s(tmp_path: Path) -> None:
    """Attribute messages mutated in every part (their headers, names, datatypes,
    dataspaces and values), in the template's group and in others."""
    path = _episodes(tmp_path / "varied.hdf5", 8, _as_minari)
    messages = _attribute_messages(path, 8)
    names = [at + 16 for at, _ in messages]  # past the message's and the attribute's headers

    def flip_a_bit(data: bytearray, rng: np.random.Generator) -> str:
        at, length = messages[int(rng.integers(len(messages)))]
        where = at + int(rng.integers(length))
        data[where] ^= 1 << int(rng.integers(8))
        return f"bit flipped at {where}"

    def set_a_byte(data: bytearray, rng: np.random.Generator) -> str:
        at, length = messages[int(rng.integers(len(messages)))]
        where = at + int(rng.integers(length))
        data[where] = int(rng.choice([0, 1, 2, 3, 4, 8, 12, 16, 0x10, 0x80, 255]))
        return f"byte {where} set to {data[where]}"

    def copy_a_name(data: bytearray, rng: np.random.Generator) -> str:
        source, target = (int(n) for n in rng.choice(names, 2, replace=False))
        data[target:target + 16] = data[source:source + 16]  # e.g. two named total_steps
        return f"name at {source} copied to {target}"

    def set_a_value(data: bytearray, rng: np.random.Generator) -> str:
        at, length = messages[int(rng.integers(len(messages)))]
        value = int(rng.choice([0, 1, -1, 1 << 63, (1 << 63) - 1, 25]))
        struct.pack_into("<Q", data, at + length - 8, value % (1 << 64))
        return f"value at {at + length - 8} set to {value}"

    mutated = tmp_path / "mutated.hdf5"
    opened = counted = 0
    for _, what in mutated_copies(path.read_bytes(), [flip_a_bit, set_a_byte, copy_a_name,
                                                      set_a_value],
                                  mutated, 200, 20261127):
        try:
            expected = _hdf5(mutated, 8)
            resolved = _resolved(mutated, 8)
        except (OSError, RuntimeError):  # HDF5 cannot read it: nothing to compare
            continue
        opened += 1
        if resolved is None:
            continue
        assert {e: expected[e] for e in resolved.counts} == resolved.counts, what
        counted += len(resolved.counts)
    assert opened > 100 and counted > 0


@pytest.mark.parametrize("renamed", ["in every episode", "in episode 2 only"])
def test_a_name_held_twice_is_read_as_hdf5_reads_it(tmp_path: Path, renamed: str) -> None:
    """Two attributes named ``total_steps`` (the bytes of a ``total_stepz`` renamed): HDF5
    reads the first. In the template's group both are equal (so its own reading cannot tell
    them apart) or the first is another name; in episode 2 the first is not the second."""

    def twice(group: h5py.Group, episode_id: int) -> None:
        group.attrs["total_stepz"] = 99 if episode_id == 2 else 5
        group.attrs["total_steps"] = 5

    path = _episodes(tmp_path / "twice.hdf5", 4, twice)
    data = bytearray(path.read_bytes())
    at = [n for n in range(len(data)) if data[n:n + 12] == b"total_stepz\0"]
    for n in at if renamed == "in every episode" else at[2:3]:
        data[n:n + 12] = b"total_steps\0"
    path.write_bytes(bytes(data))
    assert _hdf5(path, 4) == {0: 5, 1: 5, 2: 99, 3: 5}
    counts = _counts_agree(path, 4)
    assert counts == ({} if renamed == "in every episode" else {0: 5, 1: 5, 3: 5})


def test_a_count_of_another_type_is_read_by_hdf5(tmp_path: Path) -> None:
    """Unsigned counts: HDF5 converts one past ``int64`` to its largest value."""

    def unsigned(group: h5py.Group, episode_id: int) -> None:
        group.attrs.create("total_steps", (1 << 63) + 5 if episode_id == 3 else 5,
                           dtype=np.uint64)

    path = _episodes(tmp_path / "unsigned.hdf5", 4, unsigned)
    assert _hdf5(path, 4)[3] == np.iinfo(np.int64).max
    assert _counts_agree(path, 4) == {}


def test_a_count_of_two_values_is_not_read(tmp_path: Path) -> None:
    """HDF5 reads no count from two values; their first 8 bytes are not one."""

    def pair(group: h5py.Group, episode_id: int) -> None:
        group.attrs["total_steps"] = np.array([episode_id, episode_id])

    path = _episodes(tmp_path / "pairs.hdf5", 4, pair)
    assert set(_hdf5(path, 4).values()) == {None}
    assert _counts_agree(path, 4) == {}


def test_groups_with_other_attributes_get_their_own_template(tmp_path: Path) -> None:
    """An attribute named otherwise (``seed`` for ``sead``), or of another type, in the same
    bytes: not the template's group, so another template reads that group's count."""

    def varied(group: h5py.Group, episode_id: int) -> None:
        _as_minari(group, episode_id)
        if episode_id == 2:
            del group.attrs["seed"]
            group.attrs["sead"] = 14
        if episode_id == 4:
            del group.attrs["seed"]
            group.attrs["seed"] = 28.0

    path = _episodes(tmp_path / "varied.hdf5", 6, varied)
    assert sorted(_counts_agree(path, 6)) == list(range(6))


def test_a_whole_file_check_reads_counts_from_the_bytes_and_finds_a_changed_one(
        recorded_file: tuple[Path, int], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    source, episodes = recorded_file
    data = tmp_path / "data"
    index, read_as = copied_data(source.parent, data)
    opened = recorded_calls(monkeypatch, entry_checks, "read_count")
    with h5py.File(data / source.name, "r") as file:
        assert offset_index.whole_file_mismatches(index, file, read_as) == []
    assert 0 < len(opened) < episodes  # the templates' own counts only
    header = _headers(data / source.name, episodes)[2]
    counted = group_templates.counted_varying(header, group_templates.COUNT_ATTRIBUTE)
    assert counted is not None
    chunk, at = counted[1]
    raw = bytearray((data / source.name).read_bytes())
    struct.pack_into("<q", raw, header.chunks[chunk][0] + at, int(index.steps[2]) + 1)
    (data / source.name).write_bytes(bytes(raw))
    with h5py.File(data / source.name, "r") as file:
        assert entry_checks._hdf5_count(file, b"episode_2") == index.steps[2] + 1
        found = offset_index.whole_file_mismatches(index, file, read_as)
    assert found == ["episode_2: total_steps differs from the index"]


def _one_attribute(body: bytes) -> symbol_tables.GroupHeader:
    """A header chunk holding one attribute message whose body is ``body``."""
    data = struct.pack("<HHB3x", 0xC, len(body), 0) + body
    return symbol_tables.GroupHeader(chunks=[(0, data)], varying=[[(8, len(data))]],
                                     attributes=[(0, 8, len(body))])


def _counted(version: int) -> bytes:
    """An attribute message body: ``total_steps``, a scalar int64 25, as ``version`` 1 lays
    it out, with the version byte ``version``."""
    return (struct.pack("<BxHHH", version, 12, 12, 8) + b"total_steps\0".ljust(16, b"\0")
            + bytes.fromhex("100800000800000000004000").ljust(16, b"\0")
            + bytes(8) + struct.pack("<q", 25))


def test_only_a_version_1_attribute_message_is_read_as_one() -> None:
    header = _one_attribute(_counted(1))
    counted = group_templates.counted_varying(header, group_templates.COUNT_ATTRIBUTE)
    assert counted is not None and counted[1] == (0, 8 + 48)  # the value, after 3 fields
    assert counted[0] == [[(8 + 48, 8 + 56)]]  # only it may vary
    for version in (0, 2, 3):  # HDF5 lays versions 2 and 3 out otherwise
        header = _one_attribute(_counted(version))
        assert group_templates.counted_varying(header, group_templates.COUNT_ATTRIBUTE) is None


def test_a_count_whose_data_lies_past_its_message_is_not_read() -> None:
    """Fields that claim more bytes than the message holds (a dataspace of 16 bytes in a body
    sized for 8): the value's place would be past the message, where HDF5 reads nothing."""
    body = bytearray(_counted(1))
    struct.pack_into("<H", body, 6, 16)
    assert group_templates.counted_varying(_one_attribute(bytes(body)),
                                           group_templates.COUNT_ATTRIBUTE) is None


def test_an_attribute_message_too_short_for_its_header_is_not_parsed() -> None:
    for body in (b"", bytes([1])):
        assert group_templates.counted_varying(_one_attribute(body),
                                               group_templates.COUNT_ATTRIBUTE) is None


def test_counts_of_a_resolution_hdf5_would_not_make_are_dropped(
        recorded_file: tuple[Path, int], monkeypatch: pytest.MonkeyPatch) -> None:
    """A first entry's header found elsewhere by HDF5 sends every comparison back to HDF5's
    own lookups: the counts read on the way are not believed either."""
    path, episodes = recorded_file
    with h5py.File(path, "r") as file:
        rewards = [file[f"episode_{e}/rewards"] for e in range(episodes)]
        leaf = entry_checks.LeafChecks(
            b"rewards", rewards[0].id.get_type(), rewards[0].shape[1:],
            np.arange(episodes), np.array([r.id.get_offset() for r in rewards]),
            np.array([r.shape[0] for r in rewards]))
        assert entry_checks._leaves_and_counts(file, [leaf], None, counted=True)[1] != {}
    real = group_templates.resolve

    def misled(*args: object, **kwargs: object) -> group_templates.Resolved | None:
        resolved = real(*args, **kwargs)  # type: ignore[arg-type]
        assert resolved is not None and resolved.counts
        resolved.addresses[0] += 8
        return resolved

    monkeypatch.setattr(group_templates, "resolve", misled)
    with h5py.File(path, "r") as file:
        (verdicts,), counts = entry_checks._leaves_and_counts(file, [leaf], None, counted=True)
    assert verdicts.all() and counts == {}


def test_a_whole_file_check_names_an_episode_missing_from_the_file(
        recorded_file: tuple[Path, int], tmp_path: Path) -> None:
    """No count from the bytes (its lookup finds nothing), none from HDF5: the episode is
    named once, and its entries are not reported besides."""
    source, _ = recorded_file
    data = tmp_path / "data"
    index, read_as = copied_data(source.parent, data)
    with h5py.File(data / source.name, "r+") as file:
        del file["episode_3"]
    with h5py.File(data / source.name, "r") as file:
        assert offset_index.whole_file_mismatches(index, file, read_as) == [
            "episode_3: missing from the file"]
