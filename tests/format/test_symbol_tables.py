"""Paths resolved from a file's bytes lead where HDF5's own lookup leads, or nowhere.

``format.group_templates.resolve`` finds the object header each ``episode_<e>/<path>`` names
without asking HDF5 (``format.symbol_tables`` parses the symbol tables): every address it
gives must be the one HDF5's ``H5Lget_info`` gives on the same bytes, for any file. The
differential tests below mutate real files (a recording of a real env, a file of many
episodes whose root B-tree has two levels, and a file of odd groups: soft and external links,
a group of many links, attributes on some groups only) in every structure the resolver reads,
and compare its answers with HDF5's on each.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from hdf5_files import Mutation, dataset_names, mutated_copies
from index_checks import recorded_calls

from marl_minari.format import entry_checks, group_templates, header_template, symbol_tables
from marl_minari.format.in_file import hard_link_address

SPREAD = "mpe2/simple_spread_v3"
Lookups = tuple[list[int], list[bytes]]


def _leaves(path: Path, episodes: int) -> Lookups:
    """Every dataset path under every episode of the intact file, as ``(episode ids,
    paths)``, and a few that are not there."""
    found: Lookups = ([], [])
    with h5py.File(path, "r") as file:
        for episode_id in range(episodes):
            names = dataset_names(file[f"episode_{episode_id}"])
            for name in [*names, "missing", "observations/missing"]:
                found[0].append(episode_id)
                found[1].append(name.encode())
            for link in ("linked", "outside", "soft_group/agent_0", "alias"):
                if link.split("/")[0] in file[f"episode_{episode_id}"]:
                    found[0].append(episode_id)
                    found[1].append(link.encode())
    return found


def _hdf5(path: Path, lookups: Lookups) -> np.ndarray:
    """HDF5's own answer for each path, on a freshly opened file (``-1``: no hard link)."""
    with h5py.File(path, "r") as file:
        found = [hard_link_address(file.id, b"episode_%d/%s" % (episode_id, leaf))
                 for episode_id, leaf in zip(*lookups, strict=True)]
    # -2: a hard link to an address past any file (HDF5's undefined address among them)
    return np.array([-1 if address is None else -2 if address >= 1 << 62 else address
                     for address in found], dtype=np.int64)


def _resolved(path: Path, lookups: Lookups) -> group_templates.Resolved | None:
    with h5py.File(path, "r") as file:
        raw = entry_checks._local_raw(file)
        assert raw is not None
        return group_templates.resolve(raw.read_ranges, raw.size, *lookups,
                                       partial(hard_link_address, file.id))


def _addresses(path: Path, lookups: Lookups) -> np.ndarray:
    resolved = _resolved(path, lookups)
    return np.full(len(lookups[0]), -1) if resolved is None else resolved.addresses


def _many_episodes(path: Path, episodes: int = 300) -> None:
    """Enough episodes for the root's B-tree to have two levels, and a group like theirs that
    is not one."""
    with h5py.File(path, "w") as file:
        for episode_id in [*range(episodes), -1]:
            group = file.create_group(f"episode_{episode_id}" if episode_id >= 0 else "another")
            group.attrs["total_steps"] = episode_id
            group.create_dataset("rewards", data=np.arange(3, dtype=np.float32))
            group.create_dataset("observations/agent_0", data=np.zeros((4, 2), np.float32))


def _odd_groups(path: Path, episodes: int = 6) -> None:
    """Groups the resolver must leave to HDF5 beside ones it resolves."""
    with h5py.File(path, "w") as file:
        for episode_id in range(episodes):
            group = file.create_group(f"episode_{episode_id}")
            group.create_dataset("rewards", data=np.arange(3, dtype=np.float32))
            group.create_dataset("observations/agent_0", data=np.zeros((4, 2), np.float32))
            for number in range(10):  # two symbol-table nodes
                group.create_dataset(f"wide/leaf_{number}", data=np.zeros(1))
            if episode_id % 2:
                group["observations"].attrs["note"] = "odd"
                group.attrs["seed"] = episode_id
            if episode_id == 2:
                group["linked"] = h5py.SoftLink("/episode_1/rewards")
                group["outside"] = h5py.ExternalLink("elsewhere.hdf5", "/rewards")
            if episode_id == 4:  # a B-tree of two levels: left to HDF5
                for number in range(300):
                    group.create_dataset(f"many/leaf_{number}", data=np.zeros(1))
        file["episode_5/soft_group"] = h5py.SoftLink("/episode_4/observations")
        file["episode_3/alias"] = h5py.SoftLink("/episode_3/rewards")
        file["episode_6"] = h5py.SoftLink("/episode_1")


@pytest.fixture(scope="module")
def many_episodes_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    path = tmp_path_factory.mktemp("many") / "main_data.hdf5"
    _many_episodes(path)
    return path, 300


@pytest.fixture(scope="module")
def odd_groups_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    path = tmp_path_factory.mktemp("odd") / "main_data.hdf5"
    _odd_groups(path)
    return path, 6


FILES = ["recorded_file", "many_episodes_file", "odd_groups_file"]


def _structures(path: Path, lookups: Lookups) -> list[tuple[int, int]]:
    """``(address, length)`` of every structure the resolver reads in the intact file."""
    resolved = _resolved(path, lookups)
    assert resolved is not None
    return [(int(address), length) for addresses, length in resolved.spans
            for address in addresses.tolist()]


def _mutations(structures: list[tuple[int, int]], snods: list[int]) -> list[Mutation]:
    addresses = [address for address, _ in structures]

    def flip_a_bit(data: bytearray, rng: np.random.Generator) -> str:
        address, length = structures[int(rng.integers(len(structures)))]
        at = address + int(rng.integers(length))
        data[at] ^= 1 << int(rng.integers(8))
        return f"bit flipped at {at}"

    def set_a_word(data: bytearray, rng: np.random.Generator) -> str:
        address, length = structures[int(rng.integers(len(structures)))]
        at = address + 8 * int(rng.integers(max(1, length // 8)))
        value = struct.unpack_from("<Q", data, at)[0]
        value = int(rng.choice([value + 1, value - 1, value + 8, value - 8, value + 40, 0, 1,
                                header_template.UNDEFINED, len(data), len(data) - 8,
                                int(rng.choice(addresses)), int(rng.integers(1 << 16))]))
        struct.pack_into("<Q", data, at, value % (1 << 64))
        return f"word at {at} set to {value}"

    def set_a_small_field(data: bytearray, rng: np.random.Generator) -> str:
        address, length = structures[int(rng.integers(len(structures)))]
        at = address + int(rng.integers(min(length, 16)))  # counts, levels, versions
        data[at] = int(rng.choice([0, 1, 2, 3, 8, 16, 32, 33, 255, data[at] + 1])) % 256
        return f"byte {at} set"

    def unsort_a_node(data: bytearray, rng: np.random.Generator) -> str:
        address = int(rng.choice(snods))
        count = struct.unpack_from("<H", data, address + 6)[0]
        if count < 2:
            return "one entry"
        first, second = (int(n) for n in rng.choice(count, 2, replace=False))
        a = address + 8 + 40 * first
        b = address + 8 + 40 * second
        if rng.random() < 0.5:  # swap the entries: names out of order
            data[a:a + 40], data[b:b + 40] = data[b:b + 40], data[a:a + 40]
            return f"entries {first} and {second} of {address} swapped"
        data[a:a + 8] = data[b:b + 8]  # one name twice
        return f"entry {first} of {address} named as {second}"

    return [flip_a_bit, set_a_word, set_a_small_field, unsort_a_node]


@pytest.mark.parametrize("which", ["recorded_file", "many_episodes_file"])
def test_an_intact_file_resolves_as_hdf5_looks_up(which: str,
                                                 request: pytest.FixtureRequest) -> None:
    path, episodes = request.getfixturevalue(which)
    lookups = _leaves(path, episodes)
    expected = _hdf5(path, lookups)
    found = _addresses(path, lookups)
    assert (found == expected).all()
    missing = np.array([leaf.endswith(b"missing") for leaf in lookups[1]])
    assert (found[missing] == -1).all() and (found[~missing] >= 0).all()


def _only(lookups: Lookups, keep: Callable[[int, bytes], bool]) -> Lookups:
    return ([e for e, leaf in zip(*lookups, strict=True) if keep(e, leaf)],
            [leaf for e, leaf in zip(*lookups, strict=True) if keep(e, leaf)])


def _plain(path: Path, episodes: int) -> Lookups:
    """The paths of the odd file through plain groups only: all but episode 2's, the links
    and the group of many links."""
    return _only(_leaves(path, episodes), lambda episode_id, leaf: episode_id != 2
                 and not leaf.startswith((b"many", b"soft", b"linked", b"outside", b"alias")))


def _lookups(which: str, path: Path, episodes: int) -> Lookups:
    return _plain(path, episodes) if which == "odd_groups_file" else _leaves(path, episodes)


@pytest.mark.parametrize(("episode_id", "leaf"), [
    (2, b"rewards"),  # a group with an external link: HDF5 keeps its links in its header
    (2, b"linked"),  # a soft link
    (5, b"soft_group/agent_0"),  # through a soft link
    (3, b"alias"),  # a soft link in a group of the original format
    (6, b"rewards"),  # an episode that is a soft link
    (4, b"many/leaf_7")])  # a group whose B-tree has two levels
def test_a_path_through_a_group_not_vouched_for_leaves_every_path_to_hdf5(
        odd_groups_file: tuple[Path, int], episode_id: int, leaf: bytes) -> None:
    path, episodes = odd_groups_file
    plain = _plain(path, episodes)
    found = _addresses(path, plain)
    present = [not leaf.endswith(b"missing") for leaf in plain[1]]
    assert (found == _hdf5(path, plain)).all() and ((found >= 0) == present).all()
    assert _resolved(path, (plain[0] + [episode_id], plain[1] + [leaf])) is None


@pytest.mark.parametrize("which", FILES)
def test_a_resolved_address_is_always_hdf5s(
        which: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    path, episodes = request.getfixturevalue(which)
    lookups = _lookups(which, path, episodes)
    structures = _structures(path, lookups)
    with h5py.File(path, "r") as file:
        raw = entry_checks._local_raw(file)
        assert raw is not None
        sb = symbol_tables.read_superblock(raw.read_ranges, raw.size)
    assert sb is not None
    snods = [address for address, length in structures if length == sb.snod_length]
    mutations = _mutations(structures, snods)
    mutated = tmp_path / "mutated.hdf5"
    opened = agreed = 0
    for _, what in mutated_copies(path.read_bytes(), mutations, mutated, 160, 20261128):
        try:
            expected = _hdf5(mutated, lookups)
        except OSError:  # HDF5 cannot open the file at all: nothing to compare
            continue
        opened += 1
        resolved = _resolved(mutated, lookups)
        if resolved is None:  # all left to HDF5
            continue
        # every path resolved as HDF5 finds it, or absent where HDF5 finds nothing
        assert (resolved.addresses == expected).all(), what
        agreed += int((resolved.addresses >= 0).sum())
    assert opened > 100 and agreed > 0


def test_groups_of_a_second_layout_get_their_own_template(
        many_episodes_file: tuple[Path, int], monkeypatch: pytest.MonkeyPatch) -> None:
    path, episodes = many_episodes_file
    lookups = _leaves(path, episodes)
    made: list[bytes] = []
    real = group_templates._confirmed_template

    def counting(*args: Any) -> Any:
        made.append(args[2])
        return real(*args)

    monkeypatch.setattr(group_templates, "_confirmed_template", counting)
    found = _addresses(path, lookups)
    assert (found == _hdf5(path, lookups)).sum() == len(found)
    assert 1 <= made.count(b"") <= 8 and made.count(b"observations") >= 1


@pytest.mark.parametrize("moved", [b"actions/agent_0", b"episode_0/actions", b"episode_0"])
def test_a_link_hdf5_finds_elsewhere_resolves_nothing(
        recorded_file: tuple[Path, int], moved: bytes) -> None:
    path, episodes = recorded_file
    lookups = _leaves(path, episodes)
    with h5py.File(path, "r") as file:
        raw = entry_checks._local_raw(file)
        assert raw is not None

        def lying(leaf: bytes) -> int | None:  # HDF5 finding one link elsewhere
            found = hard_link_address(file.id, leaf)
            return found + 8 if found is not None and leaf.endswith(moved) else found

        assert group_templates.resolve(raw.read_ranges, raw.size, *lookups, lying) is None
        others = _only(lookups, lambda _, leaf: not leaf.startswith(b"actions/"))
        if moved == b"actions/agent_0":  # paths not through that group's template
            resolved = group_templates.resolve(raw.read_ranges, raw.size, *others, lying)
            assert resolved is not None and (resolved.addresses >= 0).sum() > len(others[0]) // 2


def test_structures_sharing_bytes_resolve_nothing(odd_groups_file: tuple[Path, int],
                                                  tmp_path: Path) -> None:
    path, episodes = odd_groups_file
    lookups = _plain(path, episodes)
    with h5py.File(path, "r") as file:
        second = hard_link_address(file.id, b"episode_3/observations")
        first = hard_link_address(file.id, b"episode_1/observations")
    assert first is not None and second is not None
    data = bytearray(path.read_bytes())
    # episode_3's observations group made to share episode_1's B-tree and heap: HDF5 reads
    # the same links for both, but no two structures may share bytes
    source, target = _symbol_table_message(data, first), _symbol_table_message(data, second)
    data[target:target + 16] = data[source:source + 16]
    shared = tmp_path / "shared.hdf5"
    shared.write_bytes(bytes(data))
    assert _hdf5(shared, lookups).tolist() == [
        reads_first if (episode_id, leaf) == (3, b"observations/agent_0") else address
        for episode_id, leaf, address, reads_first in zip(
            *lookups, _hdf5(path, lookups), _hdf5(path, ([1] * len(lookups[0]), lookups[1])),
            strict=True)]
    assert _resolved(shared, lookups) is None
    assert _resolved(path, lookups) is not None


def _symbol_table_message(data: bytes | bytearray, header: int) -> int:
    """Where the body of the symbol table message of the group header at ``header`` lies
    (its chunks followed)."""
    chunks = [(header + 16, struct.unpack_from("<I", data, header + 8)[0])]
    while chunks:
        at, length = chunks.pop(0)
        end = at + length
        while at < end:
            kind, size = struct.unpack_from("<HH", data, at)
            if kind == 0x11:
                return at + 8
            if kind == 0x10:
                chunks.append(struct.unpack_from("<QQ", data, at + 8))
            at += 8 + size
    raise AssertionError("no symbol table message")


def test_new_style_groups_are_left_to_hdf5(tmp_path: Path) -> None:
    path = tmp_path / "latest.hdf5"
    with h5py.File(path, "w", libver="latest") as file:
        for episode_id in range(3):
            file.create_dataset(f"episode_{episode_id}/rewards", data=np.zeros(2))
    lookups = _leaves(path, 3)
    assert (_addresses(path, lookups) == -1).all()
    data = path.read_bytes()
    assert data[8] == 3 and symbol_tables.read_superblock(_Bytes(data), len(data)) is None


def test_a_free_list_that_never_ends_is_refused() -> None:
    sb = symbol_tables.Superblock(end=4096, leaf_k=4, internal_k=16, root=0, length=96)
    data = bytearray(64)
    struct.pack_into("<QQ", data, 16, 32, 16)  # a free block at 16 pointing to 32
    struct.pack_into("<QQ", data, 32, 16, 16)  # ... and back
    heap = b"HEAP\0\0\0\0" + struct.pack("<3Q", 64, 16, 1000)
    file = bytearray(4096)
    file[200:232] = heap
    file[1000:1064] = data

    def read(ranges: Any) -> list[bytes]:
        return [bytes(file[offset:offset + length]) for offset, length in ranges]

    assert symbol_tables.parse_heap(read, 200, sb) is None
    struct.pack_into("<Q", file, 1032, 1)  # the list ends: a heap
    parsed = symbol_tables.parse_heap(read, 200, sb)
    assert parsed is not None and parsed.strings([0]) == [b""]


class _Bytes:
    """A file's bytes, read as the resolver reads them: a range past the end is refused, as
    every byte supplier refuses it."""

    def __init__(self, data: bytes | bytearray) -> None:
        self.data = bytes(data)

    def __call__(self, ranges: Any) -> list[bytes]:
        for offset, length in ranges:
            if offset < 0 or offset + length > len(self.data):
                raise ValueError(f"range {offset}+{length} past {len(self.data)} bytes")
        return [self.data[offset:offset + length] for offset, length in ranges]


@pytest.fixture(scope="module")
def small_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, dict[str, int]]:
    """A file of two episodes, and where its structures lie."""
    path = tmp_path_factory.mktemp("small") / "main_data.hdf5"
    with h5py.File(path, "w") as file:
        for episode_id in range(2):
            group = file.create_group(f"episode_{episode_id}")
            group.attrs["seed"] = episode_id
            group.create_dataset("rewards", data=np.zeros(3))
            group.create_dataset("observations/agent_0", data=np.zeros((4, 2)))
    data = path.read_bytes()
    with h5py.File(path, "r") as file:
        group = hard_link_address(file.id, b"episode_0")
    assert group is not None
    sb = symbol_tables.read_superblock(_Bytes(data), len(data))
    assert sb is not None
    header = symbol_tables.parse_header(_Bytes(data), group, sb)
    assert header is not None
    chunk, at = header.symbol_table
    btree, heap = struct.unpack_from("<QQ", header.chunks[chunk][1], at)
    data_at = struct.unpack_from("<Q", data, heap + 24)[0]
    node = symbol_tables.parse_node(_Bytes(data), btree, sb)
    assert node is not None
    return data, {"group": group, "table": header.chunks[chunk][0] + at, "btree": btree,
                  "heap": heap, "heap_data": data_at, "snod": node.children[0],
                  "root_entry": sb.length - symbol_tables.ENTRY_BYTES}


def _changed(data: bytes, at: int, value: bytes) -> _Bytes:
    changed = bytearray(data)
    changed[at:at + len(value)] = value
    return _Bytes(changed)


@pytest.mark.parametrize(("at", "value"), [
    (0, b"\x88"), (8, b"\x02"), (13, b"\x04"), (14, b"\x04"), (16, b"\0\0"), (18, b"\0\0"),
    (24, b"\x01"), (40, struct.pack("<Q", 1 << 40)), (48, b"\0"), (72, b"\x02")])
def test_a_superblock_of_another_shape_is_not_parsed(
        small_file: tuple[bytes, dict[str, int]], at: int, value: bytes) -> None:
    data, _ = small_file
    assert symbol_tables.read_superblock(_Bytes(data), len(data)) is not None
    assert symbol_tables.read_superblock(_changed(data, at, value), len(data)) is None
    assert symbol_tables.read_superblock(_Bytes(data[:60]), 60) is None


def test_a_version_1_superblock_is_read_and_no_other_as_one() -> None:
    # version 1 puts the indexed-storage K (and 2 reserved bytes) before the base address
    block = (b"\x89HDF\r\n\x1a\n" + bytes([1, 0, 0, 0, 0, 8, 8, 0])
             + struct.pack("<HHI", 4, 16, 0) + struct.pack("<HH", 32, 0)
             + struct.pack("<4Q", 0, header_template.UNDEFINED, 4096, header_template.UNDEFINED)
             + struct.pack("<QQI4x16x", 0, 100, 0))
    data = block + bytes(4096 - len(block))
    sb = symbol_tables.read_superblock(_Bytes(data), len(data))
    assert sb == symbol_tables.Superblock(end=4096, leaf_k=4, internal_k=16, root=100,
                                          length=100)
    assert symbol_tables.read_superblock(_changed(data, 8, b"\x02"), len(data)) is None


def _sb(data: bytes) -> symbol_tables.Superblock:
    sb = symbol_tables.read_superblock(_Bytes(data), len(data))
    assert sb is not None
    return sb


def _messages(data: bytes, group: int) -> list[tuple[int, int, int]]:
    """``(where, type, size)`` of each message of the group header at ``group``."""
    found, chunks = [], [(group + 16, struct.unpack_from("<I", data, group + 8)[0])]
    while chunks:
        at, length = chunks.pop(0)
        end = at + length
        while at < end:
            kind, size = struct.unpack_from("<HH", data, at)
            found.append((at, kind, size))
            if kind == 0x10:
                chunks.append(struct.unpack_from("<QQ", data, at + 8))
            at += 8 + size
    return found


@pytest.mark.parametrize("change", [
    "version", "message count", "a flag", "an odd size", "a size past the chunk",
    "a link message", "two symbol tables", "no symbol table", "a short symbol table",
    "a continuation past the end", "an empty continuation", "a long continuation",
    "a chunk of a partial message", "an address past the end"])
def test_a_group_header_of_another_shape_is_not_parsed(
        small_file: tuple[bytes, dict[str, int]], change: str) -> None:
    data, at = small_file
    group, sb = at["group"], _sb(data)
    assert symbol_tables.parse_header(_Bytes(data), group, sb) is not None
    messages = _messages(data, group)
    table = next(where for where, kind, _ in messages if kind == 0x11)
    other = next(where for where, kind, _ in messages if kind not in (0x11, 0x10))
    continuation = next(where for where, kind, _ in messages if kind == 0x10)
    read = {
        "version": lambda: _changed(data, group, b"\x02"),
        "message count": lambda: _changed(data, group + 2, b"\x09"),
        "a flag": lambda: _changed(data, other + 4, b"\x01"),
        "an odd size": lambda: _changed(data, other + 2, struct.pack(
            "<H", struct.unpack_from("<H", data, other + 2)[0] - 4)),
        "a size past the chunk": lambda: _changed(data, other + 2, b"\xf0\x0f"),
        "a link message": lambda: _changed(data, other, b"\x06\0"),
        "two symbol tables": lambda: _changed(data, other, b"\x11\0"),
        "no symbol table": lambda: _changed(data, table, b"\0\0"),
        "a short symbol table": lambda: _changed(data, table + 2, b"\x08\0"),
        "a continuation past the end": lambda: _changed(
            data, continuation + 8, struct.pack("<Q", len(data))),
        "an empty continuation": lambda: _changed(data, continuation + 16, bytes(8)),
        "a long continuation": lambda: _changed(data, continuation + 16,
                                                struct.pack("<Q", 8192)),
        "a chunk of a partial message": lambda: _changed(
            data, continuation + 16, struct.pack("<Q", struct.unpack_from(
                "<Q", data, continuation + 16)[0] - 4)),
        "an address past the end": lambda: _Bytes(data),
    }[change]()
    address = len(data) - 8 if change == "an address past the end" else group
    assert symbol_tables.parse_header(read, address, sb) is None


def _free_list(data: bytes, heap: int, heap_data: int, *blocks: tuple[int, int, int],
               first: int) -> _Bytes:
    changed = bytearray(data)
    struct.pack_into("<Q", changed, heap + 16, first)
    for at, following, size in blocks:
        struct.pack_into("<QQ", changed, heap_data + at, following, size)
    return _Bytes(changed)


def test_a_local_heap_is_parsed_only_as_hdf5_decodes_it(
        small_file: tuple[bytes, dict[str, int]]) -> None:
    data, at = small_file
    sb, heap, heap_data = _sb(data), at["heap"], at["heap_data"]
    parsed = symbol_tables.parse_heap(_Bytes(data), heap, sb)
    assert parsed is not None and parsed.strings([0]) == [b""]
    size = len(parsed.data)
    unterminated = symbol_tables.parse_heap(_changed(data, heap_data + size - 1, b"x"), heap, sb)
    assert unterminated is not None and parsed.strings([size - 1]) == [b""]
    assert unterminated.strings([size - 1]) is None and parsed.strings([size]) is None
    for refused in (
            _changed(data, heap, b"HEAX"),  # signature
            _changed(data, heap + 4, b"\x01"),  # version
            _changed(data, heap + 8, bytes(8)),  # no data
            _changed(data, heap + 8, struct.pack("<Q", 1 << 40)),  # past the end
            _changed(data, heap + 24, struct.pack("<Q", len(data) - 8)),  # data past it
            _free_list(data, heap, heap_data, first=size - 8),  # a block past the data
            # a next block at 0 (HDF5's error), though a block there would end the list
            _free_list(data, heap, heap_data, (size - 16, 0, 8), (0, 1, 8), first=size - 16),
            _free_list(data, heap, heap_data, (size - 16, 1, 32), first=size - 16),  # long
            _free_list(data, heap, heap_data, (size - 32, size - 16, 8), (size - 16, size - 32,
                                                                          8), first=size - 32)):
        assert symbol_tables.parse_heap(refused, heap, sb) is None
    ends = _free_list(data, heap, heap_data, (size - 32, size - 16, 8), (size - 16, 1, 8),
                      first=size - 32)
    assert symbol_tables.parse_heap(ends, heap, sb) is not None
    assert symbol_tables.parse_heap(_Bytes(data), len(data) - 8, sb) is None
    empty = bytearray(data)
    struct.pack_into("<QQ", empty, heap + 8, 0, 1)  # no bytes, no free list
    assert symbol_tables.parse_heap(_Bytes(empty), heap, sb) is None


def test_a_local_heap_larger_than_any_group_needs_is_not_read() -> None:
    size = 65 << 20
    prefix = b"HEAP\0\0\0\0" + struct.pack("<3Q", size, 1, 64)
    read = _Bytes(prefix + bytes(64 + size - len(prefix)))
    sb = symbol_tables.Superblock(end=64 + size, leaf_k=4, internal_k=16, root=0, length=96)
    assert symbol_tables.parse_heap(read, 0, sb) is None
    smaller = _Bytes(b"HEAP\0\0\0\0" + struct.pack("<3Q", 64, 1, 64) + bytes(96))
    assert symbol_tables.parse_heap(smaller, 0, sb) is not None


def test_nodes_are_parsed_only_as_hdf5_decodes_them(
        small_file: tuple[bytes, dict[str, int]]) -> None:
    data, at = small_file
    sb, btree, snod = _sb(data), at["btree"], at["snod"]
    assert symbol_tables.parse_node(_Bytes(data), btree, sb) is not None
    assert symbol_tables.parse_snod(_Bytes(data), snod, sb) is not None
    for refused in (_changed(data, btree, b"TREX"), _changed(data, btree + 4, b"\x01"),
                    _changed(data, btree + 6, bytes(2)),
                    _changed(data, btree + 6, struct.pack("<H", 2 * sb.internal_k + 1))):
        assert symbol_tables.parse_node(refused, btree, sb) is None
    assert symbol_tables.parse_node(_Bytes(data), len(data) - 100, sb) is None
    for refused in (_changed(data, snod, b"SNOX"), _changed(data, snod + 4, b"\x02"),
                    _changed(data, snod + 6, bytes(2)),
                    _changed(data, snod + 6, struct.pack("<H", 2 * sb.leaf_k + 1)),
                    _changed(data, snod + 8 + 16, b"\x03")):  # an unknown cache type
        assert symbol_tables.parse_snod(refused, snod, sb) is None
    assert symbol_tables.parse_snod(_Bytes(data), len(data) - 100, sb) is None


Message = tuple[int, bytes]
_TABLE: Message = (0x11, struct.pack("<QQ", 800, 900))
_CHUNK_AT = 4096


def _crafted(*chunks: list[Message], count: int | None = None,
             lengths: dict[int, int] | None = None) -> tuple[_Bytes, symbol_tables.Superblock]:
    """A version-1 object header at address 0: chunk ``i`` holds ``chunks[i]``' messages (type,
    body) and, but for the last, a continuation to the next, at ``4096 * (i + 1)``;
    ``count``: the messages it says it holds (all, by default); ``lengths``: a chunk's length
    as its continuation (or prefix) says, where not its messages' length."""
    lengths = lengths or {}
    bodies = []
    for index, messages in enumerate(chunks):
        if index + 1 < len(chunks):
            following = chunks[index + 1]
            size = lengths.get(index + 1, sum(8 + len(body) for _, body in following) + 24
                               * (index + 2 < len(chunks)))
            messages = [*messages, (0x10, struct.pack("<QQ", _CHUNK_AT * (index + 1), size))]
        bodies.append(b"".join(struct.pack("<HHB3x", kind, len(body), 0) + body
                               for kind, body in messages))
    total = count if count is not None else sum(len(m) for m in chunks) + len(chunks) - 1
    first = struct.pack("<BBHII4x", 1, 0, total, 1, lengths.get(0, len(bodies[0])))
    image = bytearray(_CHUNK_AT * (len(chunks) + 1))
    image[:16 + len(bodies[0])] = first + bodies[0]
    for index, body in enumerate(bodies[1:], start=1):
        image[_CHUNK_AT * index:_CHUNK_AT * index + len(body)] = body
    return _Bytes(image), symbol_tables.Superblock(len(image), 4, 16, 0, 96)


def _parsed(read_sb: tuple[_Bytes, symbol_tables.Superblock]) -> bool:
    read, sb = read_sb
    return symbol_tables.parse_header(read, 0, sb) is not None


def test_a_crafted_header_is_parsed_exactly_when_hdf5_would_decode_it_as_a_group() -> None:
    attribute: Message = (0xC, bytes(48))
    assert _parsed(_crafted([_TABLE, attribute]))
    assert _parsed(_crafted([attribute], [_TABLE], [attribute]))
    assert _parsed(_crafted(*([[attribute]] * 7), [_TABLE]))  # 8 chunks
    assert not _parsed(_crafted(*([[attribute]] * 8), [_TABLE]))  # 9
    assert _parsed(_crafted([_TABLE], [(0xC, bytes(4088))]))  # 4,096 bytes
    assert not _parsed(_crafted([_TABLE], [(0xC, bytes(4096))]))
    assert not _parsed(_crafted([_TABLE, (0xC, bytes(4096))]))
    assert not _parsed(_crafted([_TABLE], [], count=2))  # a continuation to nothing
    assert not _parsed(_crafted([_TABLE], [attribute], lengths={1: 60}))  # part of a message
    assert not _parsed(_crafted([_TABLE, (0xC, bytes(44))]))  # a size HDF5 calls unaligned
    assert not _parsed(_crafted([_TABLE, (0x10, bytes(8))]))  # a continuation cut short
    assert not _parsed(_crafted([(0x11, bytes(8))]))  # a symbol table cut short
    assert not _parsed(_crafted([_TABLE], [_TABLE]))  # two
    assert not _parsed(_crafted([attribute]))  # none
    assert not _parsed(_crafted([_TABLE, attribute], count=3))


def test_a_template_whose_node_does_not_parse_resolves_nothing(
        odd_groups_file: tuple[Path, int], tmp_path: Path) -> None:
    path, episodes = odd_groups_file
    lookups = _plain(path, episodes)
    assert b"wide/leaf_9" in lookups[1]
    data = bytearray(path.read_bytes())
    node = _group_node(bytes(data), _header_of(path, b"episode_0/wide"))
    assert len(node.children) == 2
    data[node.children[1]:node.children[1] + 4] = b"SNOX"  # the template's second node
    broken = tmp_path / "broken.hdf5"
    broken.write_bytes(bytes(data))
    assert _resolved(broken, lookups) is None
    assert _resolved(path, lookups) is not None


def test_more_layouts_than_tried_resolve_nothing(
        many_episodes_file: tuple[Path, int], monkeypatch: pytest.MonkeyPatch) -> None:
    path, episodes = many_episodes_file
    lookups = _leaves(path, episodes)
    assert _resolved(path, lookups) is not None
    monkeypatch.setattr(group_templates, "_MOST_TEMPLATES", 1)  # the file has several
    assert _resolved(path, lookups) is None


def test_a_link_to_no_address_is_not_taken_for_a_missing_name(
        odd_groups_file: tuple[Path, int], tmp_path: Path) -> None:
    path, episodes = odd_groups_file
    lookups = _plain(path, episodes)
    data = bytearray(path.read_bytes())
    rewards = _header_of(path, b"episode_3/rewards")
    node = _group_node(bytes(data), _header_of(path, b"episode_3"))
    snod = symbol_tables.parse_snod(_Bytes(data), node.children[0], _sb(bytes(data)))
    assert snod is not None
    position = snod.entries["header"].tolist().index(rewards)
    struct.pack_into("<Q", data, snod.address + 8 + 40 * position + 8, header_template.UNDEFINED)
    undefined = tmp_path / "undefined.hdf5"
    undefined.write_bytes(bytes(data))
    assert _hdf5(undefined, ([3], [b"rewards"])).tolist() == [-2]  # a hard link, nowhere
    assert _resolved(undefined, lookups) is None


def _checks(path: Path, lookups: Lookups) -> list[entry_checks.EntryCheck]:
    """Each dataset of ``lookups`` as the index would claim it (where HDF5 says it lies)."""
    checks = []
    with h5py.File(path, "r") as file:
        for episode_id, leaf in zip(*lookups, strict=True):
            found = file.get(f"episode_{episode_id}/{leaf.decode()}")
            if isinstance(found, h5py.Dataset):
                checks.append(entry_checks.EntryCheck(
                    episode_id, leaf, found.id.get_offset(), found.id.get_type(), found.shape))
    return checks


@pytest.mark.parametrize("wrong", ["a first header elsewhere", "a header on a group's bytes"])
def test_a_resolution_hdf5_would_not_make_is_compared_again_with_its_lookups(
        recorded_file: tuple[Path, int], monkeypatch: pytest.MonkeyPatch, wrong: str) -> None:
    path, episodes = recorded_file
    checks = _checks(path, _leaves(path, episodes))
    with h5py.File(path, "r") as file:
        expected = [entry_checks.agrees(entry_checks.episode_group(file, c.episode_id), c)
                    for c in checks]
    real = group_templates.resolve

    def misled(*args: Any) -> group_templates.Resolved | None:
        resolved = real(*args)
        assert resolved is not None
        if wrong == "a first header elsewhere":
            resolved.addresses[0] += 8
        else:  # a dataset's header inside a structure of the groups
            resolved.spans.append((np.array([resolved.addresses[1]], dtype=np.uint64), 1))
        return resolved

    monkeypatch.setattr(group_templates, "resolve", misled)
    looked_up = 0
    lookup = entry_checks._header_address

    def counting(*args: Any) -> int:
        nonlocal looked_up
        looked_up += 1
        return lookup(*args)

    monkeypatch.setattr(entry_checks, "_header_address", counting)
    with h5py.File(path, "r") as file:
        assert entry_checks.compare_entries(file, checks) == expected
    assert looked_up >= len(checks)  # every entry's path looked up by HDF5 again


def test_an_intact_file_has_hdf5_look_up_the_first_entry_of_each_path_only(
        recorded_file: tuple[Path, int], monkeypatch: pytest.MonkeyPatch) -> None:
    path, episodes = recorded_file
    checks = _checks(path, _leaves(path, episodes))
    paths = Counter(check.path for check in checks)
    looked_up = recorded_calls(monkeypatch, entry_checks, "_header_address")
    with h5py.File(path, "r") as file:
        assert all(entry_checks.compare_entries(file, checks))
    assert len(looked_up) == sum(1 for count in paths.values() if count > 1)


def test_a_comparison_redone_by_hdf5_keeps_no_verdict_of_the_resolution(
        recorded_file: tuple[Path, int], monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry whose index claims another episode's offset, resolved to that episode's
    header: it matches there, but two entries sharing a header send the comparison back to
    HDF5, which finds its own header and says it disagrees."""
    path, episodes = recorded_file
    checks = _checks(path, _leaves(path, episodes))
    leaf = checks[0].path
    same = [n for n, check in enumerate(checks) if check.path == leaf]
    claimed, other = same[2], same[1]
    checks[claimed] = checks[claimed]._replace(offset=checks[other].offset)
    real = group_templates.resolve

    def misled(read: Any, size: int, episode_ids: list[int], paths: list[bytes],
               *rest: Any) -> group_templates.Resolved | None:
        resolved = real(read, size, episode_ids, paths, *rest)
        assert resolved is not None
        at = {(episode, name): n
              for n, (episode, name) in enumerate(zip(episode_ids, paths, strict=True))}
        resolved.addresses[at[checks[claimed].episode_id, leaf]] = resolved.addresses[
            at[checks[other].episode_id, leaf]]
        return resolved

    monkeypatch.setattr(group_templates, "resolve", misled)
    with h5py.File(path, "r") as file:
        got = entry_checks.compare_entries(file, checks)
    assert got == [n != claimed for n in range(len(checks))]


def test_entries_left_to_hdf5_open_each_episode_group_once(
        recorded_file: tuple[Path, int], monkeypatch: pytest.MonkeyPatch) -> None:
    """A file HDF5 holds in memory (no descriptor to read headers from): every entry is
    compared by HDF5, episode by episode, whatever the order of the leaves."""
    path, episodes = recorded_file
    checks = _checks(path, _leaves(path, episodes))
    checks.sort(key=lambda check: check.path)  # leaf by leaf
    calls = recorded_calls(monkeypatch, entry_checks, "episode_group")
    with h5py.File(path, "r", driver="core") as file:
        assert all(entry_checks.compare_entries(file, checks))
    opened = [episode_id for _, episode_id in calls]
    assert opened == sorted(set(opened)) and len(opened) == episodes


def _header_of(path: Path, name: bytes) -> int:
    """Where HDF5 finds the object ``name`` of the intact file."""
    with h5py.File(path, "r") as file:
        address = hard_link_address(file.id, name)
    assert address is not None
    return address


def _group_node(data: bytes, header: int) -> symbol_tables.Node:
    """The node the B-tree of the group whose object header is at ``header`` starts at."""
    btree = struct.unpack_from("<Q", data, _symbol_table_message(data, header))[0]
    node = symbol_tables.parse_node(_Bytes(data), btree, _sb(data))
    assert node is not None
    return node


def _root_node(data: bytes) -> symbol_tables.Node:
    return _group_node(data, _sb(data).root)


@pytest.mark.parametrize("change", [
    "a node leading back to itself", "a node that does not parse",
    "a symbol-table node that does not parse", "a soft link with a header address"])
def test_a_root_search_hdf5_would_not_end_the_same_way_resolves_nothing(
        many_episodes_file: tuple[Path, int], tmp_path: Path, change: str) -> None:
    path, episodes = many_episodes_file
    lookups = _leaves(path, episodes)
    data = bytearray(path.read_bytes())
    root = _root_node(bytes(data))
    assert root.level == 1
    if change == "a node leading back to itself":
        struct.pack_into("<Q", data, root.address + 32, root.address)  # its first child
    elif change == "a node that does not parse":
        data[root.children[0]:root.children[0] + 4] = b"TREX"
    elif change == "a symbol-table node that does not parse":
        first_leaf = symbol_tables.parse_node(_Bytes(data), root.children[0], _sb(bytes(data)))
        assert first_leaf is not None and first_leaf.level == 0
        data[first_leaf.children[0] + 4] = 2  # its version
    else:  # episode_5 a soft link (to episode_1) whose entry holds another group's header
        with h5py.File(path, "r") as file:
            fifth, other = (hard_link_address(file.id, name)
                            for name in (b"episode_5", b"another"))
        sb = _sb(bytes(data))
        table = symbol_tables.open_group(_Bytes(data), sb.root, sb)
        assert table is not None
        entry = table[1].find(b"episode_5")
        assert not isinstance(entry, symbol_tables.Search)
        snod, position = entry
        assert int(snod.entries["header"][position]) == fifth
        at = snod.address + 8 + 40 * position
        link = table[1].heap.data.index(b"episode_1\0")
        struct.pack_into("<QIIQ", data, at + 8, other, 2, 0, link)
    changed = tmp_path / "changed.hdf5"
    changed.write_bytes(bytes(data))
    assert _resolved(changed, lookups) is None


def test_an_episode_not_in_the_file_is_absent_as_for_hdf5(
        many_episodes_file: tuple[Path, int]) -> None:
    path, episodes = many_episodes_file
    lookups = _leaves(path, 3)
    lookups = (lookups[0] + [300, 999], lookups[1] + [b"rewards", b"rewards"])
    # episode_300 sorts among the others (its node holds no such name), episode_999 after
    # every key of the root's node
    found = _addresses(path, lookups)
    assert (found == _hdf5(path, lookups)).all() and found[-2:].tolist() == [-1, -1]
    assert (found[:-2] >= 0).sum() == 2 * 3


def test_a_template_whose_node_says_its_children_are_nodes_resolves_nothing(
        recorded_file: tuple[Path, int], tmp_path: Path) -> None:
    path, episodes = recorded_file
    lookups = _leaves(path, episodes)
    data = bytearray(path.read_bytes())
    btree = _group_node(bytes(data), _header_of(path, b"episode_0/observations")).address
    assert data[btree + 5] == 0
    data[btree + 5] = 1  # its level: HDF5 reads its symbol-table nodes as B-tree nodes
    changed = tmp_path / "changed.hdf5"
    changed.write_bytes(bytes(data))
    assert _hdf5(changed, ([0], [b"observations/agent_0"])).tolist() == [-1]
    assert _resolved(changed, lookups) is None
