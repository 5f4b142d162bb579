"""Header templates never say yes where HDF5 would say no.

``entry_checks.compare_entries`` compares one entry per path with HDF5 and the others' object
headers against its (``format.header_template``). The verdicts it gives must be HDF5's own,
entry by entry, for any file: the differential tests below mutate real files (a recording of a
real env, and a file of every storage HDF5 offers) in their object headers, their superblock
and their indexes' claims, and compare both verdicts on each.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from hdf5_files import Mutation, dataset_names, mutated_copies
from index_checks import copied_data, recorded_calls

from marl_minari.format import entry_checks, group_templates, header_template, layout, offset_index
from marl_minari.format.entry_checks import EntryCheck
from marl_minari.format.in_file import hard_link_address

SPREAD = "mpe2/simple_spread_v3"


def _hdf5_verdicts(path: Path, checks: list[EntryCheck]) -> list[bool]:
    """Every entry compared by HDF5 itself, on a freshly opened file (the reference)."""
    with h5py.File(path, "r") as file:
        verdicts, current, group = [], -1, None
        for check in checks:
            if check.episode_id != current:
                current = check.episode_id
                group = entry_checks.episode_group(file, current)
            verdicts.append(group is not None and entry_checks.agrees(group, check))
        return verdicts


def _compared(path: Path, checks: list[EntryCheck]) -> list[bool]:
    with h5py.File(path, "r") as file:
        return entry_checks.compare_entries(file, checks)


def _compared_by_hdf5(monkeypatch: pytest.MonkeyPatch) -> list[EntryCheck]:
    """The entries HDF5 compares itself from now on (``entry_checks.agrees``), in order."""
    compared: list[EntryCheck] = []
    real = entry_checks.agrees

    def counting(group: Any, check: EntryCheck) -> bool:
        compared.append(check)
        return real(group, check)

    monkeypatch.setattr(entry_checks, "agrees", counting)
    return compared


def _checks_as_stored(path: Path, episodes: int) -> list[EntryCheck]:
    """Every dataset of every episode, with the type and shape HDF5 gives it, one type
    object per path (as readers share one per leaf); offset ``0`` where it has none."""
    types: dict[str, Any] = {}
    checks = []
    with h5py.File(path, "r") as file:
        for episode_id in range(episodes):
            for name in dataset_names(file[f"episode_{episode_id}"]):
                dataset = file[f"episode_{episode_id}/{name}"].id
                expected = types.setdefault(name, dataset.get_type())
                checks.append(EntryCheck(episode_id, name.encode(),
                                         dataset.get_offset() or 0, expected, dataset.shape))
    return checks


def _synthetic(path: Path, episodes: int = 5) -> None:
    """Episodes of every storage and header shape HDF5 writes: contiguous with and without
    times, fill values, attributes on some episodes only, big-endian, chunked, compact. Every
    dataset is made before any is written, so that the data lie after all the metadata
    (an end of allocation moved into them leaves every header readable)."""
    with h5py.File(path, "w") as file:
        made = []
        for episode_id in range(episodes):
            steps = 3 + episode_id
            group = file.create_group(f"episode_{episode_id}")
            group.attrs["total_steps"] = steps
            made += [group.create_dataset("observations/agent_0", (steps + 1, 3), np.float32),
                     group.create_dataset("timed", (steps,), np.int64, track_times=True),
                     group.create_dataset("filled", (steps + 1,), np.float32, fillvalue=7.0),
                     group.create_dataset("marked", (steps,), np.int16),
                     group.create_dataset("big_endian", (steps,), ">f8"),
                     group.create_dataset("chunked", (steps, 2), np.float64, chunks=(1, 2))]
            if episode_id % 2:
                group["marked"].attrs["note"] = "odd"
            plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            plist.set_layout(h5py.h5d.COMPACT)
            space = h5py.h5s.create_simple((steps,))
            h5py.h5d.create(group.id, b"compact", h5py.h5t.STD_U8LE, space, dcpl=plist)
        for number, dataset in enumerate(made):
            dataset[...] = number % 7 + 1


@pytest.fixture(scope="module")
def synthetic_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    path = tmp_path_factory.mktemp("synthetic") / "main_data.hdf5"
    _synthetic(path)
    return path, 5


def _headers(path: Path, checks: list[EntryCheck]) -> list[tuple[int, int]]:
    """``(address, length)`` of every entry's object header (``(-1, 0)``: none)."""
    found = []
    with h5py.File(path, "r") as file:
        for check in checks:
            group = entry_checks.episode_group(file, check.episode_id)
            address = None if group is None else hard_link_address(group, check.path)
            if address is None:
                found.append((-1, 0))
                continue
            with open(path, "rb") as handle:
                handle.seek(address)
                length = header_template.header_length(handle.read(16))
            found.append((address, length or 16))
    return found


def _fields(header: bytes) -> dict[str, int]:
    """Where the fields a template lets vary lie in a version-1 header (absolute in it)."""
    places: dict[str, int] = {}
    at = 16
    while at + 8 <= len(header):
        kind, size = struct.unpack_from("<HH", header, at)
        body = at + 8
        if kind == 0x1:
            rows_at = body + (8 if header[body] == 1 else 4)
            places["rows"] = rows_at
            if header[body + 2] & 1:
                places["max_rows"] = rows_at + 8 * header[body + 1]
        elif kind == 0x8 and header[body:body + 2] == b"\x03\x01":
            places["address"], places["size"] = body + 2, body + 10
        elif kind == 0x12:
            places["time"] = body + 4
        at = body + size
    return places


def _mutations(checks: list[EntryCheck], headers: list[tuple[int, int]],
               original: bytes) -> list[Mutation]:
    later = [n for n, check in enumerate(checks) if check.episode_id > 0 and headers[n][0] >= 0]

    def flip_in_a_header(data: bytearray, rng: np.random.Generator) -> str:
        address, length = headers[int(rng.choice(later))]
        at = address + int(rng.integers(length))
        data[at] ^= 1 << int(rng.integers(8))
        return f"bit flipped at {at}"

    def set_a_field(data: bytearray, rng: np.random.Generator) -> str:
        entry = int(rng.choice(later))
        address, length = headers[entry]
        places = _fields(original[address:address + length])
        if not places:
            return "no field"
        name = str(rng.choice(sorted(places)))
        at = address + places[name]
        value = struct.unpack_from("<Q", data, at)[0]
        value = int(rng.choice([value + 1, value - 1, value + 8, value - 8, value * 2, 0,
                                header_template.UNDEFINED, len(data), len(data) - 1,
                                int(rng.integers(1 << 62))])) % (1 << 64)
        struct.pack_into("<Q", data, at, value)
        return f"{name} of entry {entry} set to {value}"

    def move_the_end_of_allocation(data: bytearray, rng: np.random.Generator) -> str:
        entry = checks[int(rng.choice(later))]  # into, or just past, its bytes
        stored = entry.expected_type.get_size() * int(np.prod(entry.shape))
        end = entry.offset + int(rng.choice([0, 1, stored // 2, stored - 1, stored,
                                              stored + 1]))
        struct.pack_into("<Q", data, 40, min(end, len(data)))
        return f"end of allocation {end}"

    def change_a_header_byte(data: bytearray, rng: np.random.Generator) -> str:
        address, length = headers[int(rng.choice(later))]
        at = address + int(rng.integers(length))
        data[at] = int(rng.integers(256))
        return f"byte {at} set"

    return [flip_in_a_header, set_a_field, move_the_end_of_allocation, change_a_header_byte]


def _lies(checks: list[EntryCheck], rng: np.random.Generator) -> list[EntryCheck]:
    """The index's claims, some of them false: offsets and rows off by a little, another
    type."""
    other = h5py.h5t.py_create(np.dtype(np.float64))
    told = []
    for check in checks:
        roll = rng.random()
        if roll < 0.05:
            check = check._replace(offset=check.offset + int(rng.choice([-8, -1, 1, 8])))
        elif roll < 0.1:
            check = check._replace(shape=(check.shape[0] + int(rng.choice([-1, 1])),
                                          *check.shape[1:]))
        elif roll < 0.12:
            check = check._replace(expected_type=other)
        told.append(check)
    return told


@pytest.mark.parametrize("which", ["recorded_file", "synthetic_file"])
def test_a_template_agrees_exactly_where_hdf5_does(
        which: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    path, episodes = request.getfixturevalue(which)
    checks = _checks_as_stored(path, episodes)
    headers = _headers(path, checks)
    original = path.read_bytes()
    mutations = _mutations(checks, headers, original)
    rng = np.random.default_rng(20261126)
    mutated = tmp_path / "mutated.hdf5"
    compared = opened = 0
    for round_number, what in mutated_copies(original, mutations, mutated, 240, 20261127):
        told = _lies(checks, rng) if round_number % 3 == 0 else checks
        try:
            expected = _hdf5_verdicts(mutated, told)
        except OSError:  # HDF5 cannot open the file at all: nothing to compare
            continue
        opened += 1
        assert _compared(mutated, told) == expected, what
        compared += sum(expected)
    assert opened > 150 and compared > 0


@pytest.mark.parametrize("which", ["recorded_file", "synthetic_file"])
def test_an_intact_file_is_compared_by_hdf5_once_per_path(
        which: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    path, episodes = request.getfixturevalue(which)
    checks = _checks_as_stored(path, episodes)
    expected = _hdf5_verdicts(path, checks)
    compared = _compared_by_hdf5(monkeypatch)
    assert _compared(path, checks) == expected
    by_hdf5 = [check.path for check in compared]
    paths = {check.path for check in checks}
    templated = {b"observations/agent_0", b"timed", b"filled", b"big_endian"} & paths
    if which == "recorded_file":
        templated = {path for path in paths if not path.startswith(b"infos/")} | templated
    for name in templated:
        assert by_hdf5.count(name) == 1, name
    for name in ({b"chunked", b"compact"} & paths):
        assert by_hdf5.count(name) == episodes, name  # no template: HDF5 for each
    if which == "synthetic_file":  # the template, then each episode with an attribute
        assert by_hdf5.count(b"marked") == 1 + episodes // 2


def test_a_header_that_differs_outside_its_fields_is_compared_by_hdf5(
        synthetic_file: tuple[Path, int], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    path, episodes = synthetic_file
    checks = [check for check in _checks_as_stored(path, episodes)
              if check.path == b"observations/agent_0"]
    (address, length), = _headers(path, checks[3:4])
    places = _fields(path.read_bytes()[address:address + length])
    by_hdf5 = _compared_by_hdf5(monkeypatch)
    for name, change in (("size", 12), ("rows", 1), ("address", 4)):
        data = bytearray(path.read_bytes())
        at = address + places[name]
        struct.pack_into("<Q", data, at, struct.unpack_from("<Q", data, at)[0] + change)
        mutated = tmp_path / f"{name}.hdf5"
        mutated.write_bytes(bytes(data))
        expected = _hdf5_verdicts(mutated, checks)
        by_hdf5.clear()
        assert _compared(mutated, checks) == expected
        assert 3 in [check.episode_id for check in by_hdf5], name  # no template vouched


def test_no_template_is_made_of_a_file_whose_addresses_are_not_offsets(
        tmp_path: Path, synthetic_file: tuple[Path, int]) -> None:
    source, episodes = synthetic_file
    shifted = tmp_path / "userblock.hdf5"
    with h5py.File(shifted, "w", userblock_size=512) as file, \
            h5py.File(source, "r") as original:
        for name in original:
            original.copy(name, file)
    with h5py.File(shifted, "r") as file:
        raw = entry_checks._local_raw(file)
        assert raw is not None
        assert header_template.end_of_allocation(raw.read_ranges, raw.size) is None
    checks = _checks_as_stored(shifted, episodes)
    assert _compared(shifted, checks) == _hdf5_verdicts(shifted, checks)


def test_an_index_check_of_a_whole_file_finds_a_moved_leaf(
        recorded_file: tuple[Path, int], tmp_path: Path) -> None:
    path, _ = recorded_file
    data = tmp_path / "data"
    index, read_as = copied_data(path.parent, data)
    with h5py.File(data / layout.MAIN_FILE_NAME, "r") as file:
        assert offset_index.whole_file_mismatches(index, file, read_as) == []
        leaf = next(iter(index.offsets))
        index.offsets[leaf][3] += 8
        found = offset_index.whole_file_mismatches(index, file, read_as)
        stored = file[f"episode_3/{leaf}"]
        held = (f"the file holds {stored.shape} of {stored.dtype}, "
                f"at offset {stored.id.get_offset()}")
    assert len(found) == 1 and found[0].startswith(f"episode_3/{leaf}: index says offset")
    assert found[0].endswith(held)


def test_no_template_is_made_of_a_file_with_other_address_sizes(tmp_path: Path) -> None:
    narrow = tmp_path / "narrow.hdf5"
    plist = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    plist.set_sizes(4, 4)
    with h5py.File(h5py.h5f.create(str(narrow).encode(), fcpl=plist)) as file:
        for episode_id in range(3):
            file.create_dataset(f"episode_{episode_id}/rewards", data=np.ones(4 + episode_id))
    with h5py.File(narrow, "r") as file:
        raw = entry_checks._local_raw(file)
        assert raw is not None
        assert header_template.end_of_allocation(raw.read_ranges, raw.size) is None
    checks = _checks_as_stored(narrow, 3)
    assert _compared(narrow, checks) == _hdf5_verdicts(narrow, checks) == [True] * 3


def _observations_template(path: Path) -> header_template.HeaderTemplate:
    (check,) = [c for c in _checks_as_stored(path, 1) if c.path == b"observations/agent_0"]
    ((address, length),) = _headers(path, [check])
    template = header_template.make_template(path.read_bytes()[address:address + length],
                                             check.offset, check.shape[0], 12)
    assert template is not None
    return template


def _with_fields(template: header_template.HeaderTemplate, address: int, size: int,
                 rows: int) -> np.ndarray:
    header = template.header.copy()
    for at, value in ((template.address_at, address), (template.size_at, size),
                      (template.rows_at, rows), (template.max_rows_at, rows)):
        header[at:at + 8] = np.frombuffer(struct.pack("<Q", value), dtype=np.uint8)
    return header[None, :]


def test_a_template_matches_no_entry_whose_bytes_overflow_or_lie_past_the_end(
        synthetic_file: tuple[Path, int]) -> None:
    template = _observations_template(synthetic_file[0])
    end = 10_000

    def matched(address: int, size: int, rows: int) -> bool:
        return bool(header_template.matches(
            template, _with_fields(template, address, size, rows),
            np.array([address]), np.array([rows]), end)[0])

    assert matched(4_000, 120, 10) and matched(end - 120, 120, 10)
    assert not matched(end - 119, 120, 10)  # its last byte past the end
    assert not matched(end + 8, 0, 0)  # nothing to read, still past the end
    assert not matched(4_000, 0, 1 << 62)  # 12 x 2**62 bytes wrap to 0


def _header_of(path: Path, episode_id: int, leaf: bytes) -> tuple[EntryCheck, bytes]:
    (check,) = [c for c in _checks_as_stored(path, episode_id + 1)
                if c.episode_id == episode_id and c.path == leaf]
    ((address, length),) = _headers(path, [check])
    return check, path.read_bytes()[address:address + length]


def _message_at(header: bytes, kind: int) -> int:
    at = 16
    while struct.unpack_from("<H", header, at)[0] != kind:
        at += 8 + struct.unpack_from("<H", header, at + 2)[0]
    return at


def test_only_a_plain_contiguous_header_becomes_a_template(
        synthetic_file: tuple[Path, int]) -> None:
    path, _ = synthetic_file
    check, plain = _header_of(path, 0, b"observations/agent_0")

    def template_of(header: bytes, leaf_check: EntryCheck = check) -> object:
        row_bytes = leaf_check.expected_type.get_size() * int(np.prod(leaf_check.shape[1:]))
        return header_template.make_template(header, leaf_check.offset, leaf_check.shape[0],
                                             row_bytes)

    assert template_of(plain) is not None
    for episode_id, leaf in ((1, b"marked"), (0, b"chunked"), (0, b"compact")):
        other_check, other = _header_of(path, episode_id, leaf)
        assert template_of(other, other_check) is None, leaf  # an attribute, not contiguous
    shared = bytearray(plain)
    shared[_message_at(plain, 0x3) + 4] |= 0x02  # the datatype: a shared message
    renamed = bytearray(plain)
    struct.pack_into("<H", renamed, _message_at(plain, 0x0), 0xC)  # nil -> an attribute
    miscounted = bytearray(plain)
    miscounted[2] += 1
    overlong = bytearray(plain)
    struct.pack_into("<H", overlong, _message_at(plain, 0x0) + 2, 0xFFF0)
    changes = [shared, renamed, miscounted, overlong]
    for at, value in ((0, 4), (1, 2)):  # the layout: another version, chunked
        changes.append(bytearray(plain))
        changes[-1][_message_at(plain, 0x8) + 8 + at] = value
    twice = bytearray(plain)  # the nil message made a second layout, the same
    layout_at, nil_at = _message_at(plain, 0x8), _message_at(plain, 0x0)
    struct.pack_into("<H", twice, nil_at, 0x8)
    twice[nil_at + 8:nil_at + 32] = plain[layout_at + 8:layout_at + 32]
    changes.append(twice)
    space_at = _message_at(plain, 0x1) + 8
    changes.append(bytearray(plain))  # a maximum neither the rows nor unlimited
    struct.pack_into("<Q", changes[-1], space_at + 8 + 8 * 2, check.shape[0] + 5)
    for changed in changes:
        assert template_of(bytes(changed)) is None
    assert template_of(plain[:-8]) is None
    timed_check, timed = _header_of(path, 0, b"timed")
    assert template_of(timed, timed_check) is not None
    other_time = bytearray(timed)
    other_time[_message_at(timed, 0x12) + 8] = 2  # a modification time of another version
    assert template_of(bytes(other_time), timed_check) is None
    for offset, rows, row_bytes in ((1, 0, 0), (0, 1, 0), (0, 0, 1)):
        assert header_template.make_template(plain, check.offset + offset,
                                             check.shape[0] + rows, 12 + row_bytes) is None


def test_an_entry_whose_header_lies_past_the_end_is_compared_by_hdf5(
        synthetic_file: tuple[Path, int], tmp_path: Path) -> None:
    path, episodes = synthetic_file
    first, last = [check for check in _checks_as_stored(path, episodes)
                   if check.path == b"timed"][::episodes - 1]
    ((address, length),) = _headers(path, [last])
    data = bytearray(path.read_bytes())
    moved_to = len(data)  # a copy of its header past the end, its link pointing there
    header = bytearray(data[address:address + length])
    struct.pack_into("<Q", header, _fields(bytes(header))["address"], 96)  # bytes before it
    data += header
    (link,) = [at for at in range(0, moved_to - 8, 8)  # its symbol-table entry's address
               if data[at:at + 8] == struct.pack("<Q", address)]
    struct.pack_into("<Q", data, link, moved_to)
    struct.pack_into("<Q", data, 40, moved_to)
    mutated = tmp_path / "header-past-end.hdf5"
    mutated.write_bytes(bytes(data))
    told = [first, last._replace(offset=96)]
    with h5py.File(mutated, "r") as file:
        group = entry_checks.episode_group(file, last.episode_id)
        assert group is not None and hard_link_address(group, b"timed") == moved_to
    assert _hdf5_verdicts(mutated, told) == [True, False]
    assert _compared(mutated, told) == [True, False]


@pytest.mark.parametrize(("at", "value"), [
    (0, b"\x88"),  # not the signature
    (13, b"\x04"),  # 4-byte addresses
    (24, struct.pack("<Q", 512)),  # a base address: addresses are not file offsets
    (40, struct.pack("<Q", 1 << 40)),  # an end of allocation past the file
    (48, struct.pack("<Q", 96)),  # a driver-information block
])
def test_a_superblock_that_is_not_plain_gives_no_end_of_allocation(
        synthetic_file: tuple[Path, int], at: int, value: bytes) -> None:
    data = bytearray(synthetic_file[0].read_bytes())

    def read(ranges: Any) -> list[bytes]:
        return [bytes(data[offset:offset + length]) for offset, length in ranges]

    assert header_template.end_of_allocation(read, len(data)) == struct.unpack_from(
        "<Q", data, 40)[0]
    data[at:at + len(value)] = value
    assert header_template.end_of_allocation(read, len(data)) is None


def test_a_malformed_header_or_superblock_is_refused_not_raised(
        synthetic_file: tuple[Path, int]) -> None:
    path, _ = synthetic_file
    check, plain = _header_of(path, 0, b"observations/agent_0")
    row_bytes = 12
    too_wide = bytearray(plain)
    too_wide[_message_at(plain, 0x1) + 9] = 200  # a rank past the message's end
    ragged = bytearray(plain) + bytes(4)  # 4 bytes left: less than a message header
    struct.pack_into("<I", ragged, 8, struct.unpack_from("<I", plain, 8)[0] + 4)
    for changed in (too_wide, ragged):
        assert header_template.make_template(bytes(changed), check.offset, check.shape[0],
                                             row_bytes) is None
    version_2 = bytearray(plain)
    version_2[0] = 2
    huge = bytearray(plain)
    struct.pack_into("<I", huge, 8, 1 << 30)  # read for every entry: refused
    assert header_template.header_length(plain) == len(plain)
    for prefix in (version_2, huge, plain[:15]):
        assert header_template.header_length(bytes(prefix)) is None

    superblock = path.read_bytes()[:50]
    assert header_template.end_of_allocation(
        lambda ranges: [superblock[offset:offset + length] for offset, length in ranges],
        len(superblock)) is None


def _three_episodes(path: Path, leaf: str) -> Path:
    with h5py.File(path, "w") as file:
        for episode_id in range(3):
            file.create_dataset(f"episode_{episode_id}/{leaf}", data=np.ones(4 + episode_id))
    return path


def test_entries_reached_by_a_soft_link_or_missing_are_compared_by_hdf5(
        tmp_path: Path) -> None:
    path = _three_episodes(tmp_path / "links.hdf5", "kept")
    with h5py.File(path, "r+") as file:
        file["episode_1/rewards"] = h5py.SoftLink("/episode_1/kept")
        file["episode_0/rewards"] = h5py.SoftLink("/episode_0/kept")
    kept = _checks_as_stored(path, 3)
    told = [check._replace(path=b"rewards") for check in kept]  # 2 by soft link, 1 missing
    assert _hdf5_verdicts(path, told) == [True, True, False]
    assert _compared(path, told) == [True, True, False]


def test_a_soft_link_is_never_taken_for_the_header_its_length_points_at(
        tmp_path: Path) -> None:
    path = _three_episodes(tmp_path / "dangling.hdf5", "rewards")
    checks = _checks_as_stored(path, 3)
    ((address, _),) = _headers(path, checks[2:])
    with h5py.File(path, "r+") as file:  # its link value as long as that header's address
        file["episode_3/rewards"] = h5py.SoftLink("/" + "x" * (address - 2))
        file["episode_3"].attrs["total_steps"] = 6
    told = [*checks, checks[2]._replace(episode_id=3)]
    with h5py.File(path, "r") as file:
        group = entry_checks.episode_group(file, 3)
        assert group is not None and group.links.get_info(b"rewards").u == address
    assert _hdf5_verdicts(path, told) == [True, True, True, False]
    assert _compared(path, told) == [True, True, True, False]


def test_a_path_with_one_entry_is_compared_by_hdf5_and_nothing_looked_up(
        synthetic_file: tuple[Path, int], monkeypatch: pytest.MonkeyPatch) -> None:
    path, episodes = synthetic_file
    one_episode = [check for check in _checks_as_stored(path, episodes)
                   if check.episode_id == 2]  # a read of one episode: one entry per path
    looked_up = recorded_calls(monkeypatch, entry_checks, "hard_link_address")
    resolved = recorded_calls(monkeypatch, group_templates, "resolve")
    superblocks = recorded_calls(monkeypatch, header_template, "end_of_allocation")
    assert _compared(path, one_episode) == _hdf5_verdicts(path, one_episode)
    # nothing read beside HDF5's comparisons
    assert looked_up == [] and resolved == [] and superblocks == []
    two = [*one_episode, one_episode[0]._replace(episode_id=3)]
    assert _compared(path, two) == _hdf5_verdicts(path, two)
    assert [(episode_ids, paths) for _, _, episode_ids, paths, *_ in resolved] == [
        ([2, 3], [one_episode[0].path] * 2)]  # a path with two entries: both looked up
