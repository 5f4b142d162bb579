"""Offset-index comparisons of a published file read in place: compared once, remembered for
the bytes the manifest pins (in this process and in a record on disk), never taken from a
record this library did not make for those bytes and that index."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from foreign_storage import OpenedFifo
from forged_index import episode_leaves, swap_episodes_and_forge_index
from index_checks import count_entry_checks
from marl_minari.registry.blocks import MIN_BLOCK_SIZE, block_digests
from marl_minari.registry.remote_file import (
    RemoteFile,
    StreamSettings,
    open_remote_file,
)
from marl_minari.registry.stream_warnings import StreamingWarning

import marl_minari as mm
from marl_minari.errors import CorruptedDataError, ForeignStorageError
from marl_minari.format import (
    comparison_record,
    entry_checks,
    index_trust,
    layout,
    offset_index,
)
from marl_minari.sources.streaming import StreamingSource
from marl_minari.storage.arrays import MultiAgentArrays

DATASET = "mpe2/spread/streamed-v0"


@pytest.fixture(autouse=True)
def forget_comparisons(block_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default block cache in the test's folder, and nothing this process remembers of
    earlier tests (which published the same bytes)."""
    count_entry_checks(monkeypatch, forget=True)


def manifest_block_size(manifest: dict[str, Any]) -> int:
    (entry,) = [e for e in manifest["files"] if e["path"] == f"data/{layout.MAIN_FILE_NAME}"]
    return int(entry["block_size"])


def _stream(url: str) -> StreamingSource:
    source = mm.open_source(url, streaming=True)
    assert isinstance(source, StreamingSource)
    return source


def _entries(source: StreamingSource) -> int:
    index = offset_index.read(source.local_data_path)
    assert index is not None
    return sum(int((offsets >= 0).sum()) for offsets in index.offsets.values())


def _assert_same(got: MultiAgentArrays, expected: MultiAgentArrays) -> None:
    np.testing.assert_array_equal(got.episode_lengths, expected.episode_lengths)
    np.testing.assert_array_equal(got.team_rewards, expected.team_rewards)
    for agent in expected.possible_agents:
        np.testing.assert_array_equal(got.observations[agent], expected.observations[agent])
        np.testing.assert_array_equal(got.actions[agent], expected.actions[agent])
    np.testing.assert_array_equal(got.rewards, expected.rewards)
    np.testing.assert_array_equal(got.acted, expected.acted)


def test_each_entry_is_compared_once_for_the_published_bytes(
        streamable: Path, registry_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = mm.load_dataset(DATASET).to_arrays()
    url = f"file://{registry_dir}/{DATASET}"
    compared = count_entry_checks(monkeypatch, forget=True)
    source = _stream(url)
    _assert_same(source.read(source.episode_indices), expected)
    assert len(compared) == len(set(compared)) == _entries(source)
    compared.clear()
    again = _stream(url)  # another source of the same published file, this process
    _assert_same(again.read(again.episode_indices), expected)
    assert compared == []
    fresh = count_entry_checks(monkeypatch, forget=True)  # as a new process: the record
    _assert_same(_stream(url).read(source.episode_indices), expected)
    assert fresh == []
    record = source.published_bytes.record
    assert record.parent.name == source.manifest_digest[:32]
    assert json.loads(record.read_text())["body"]["bytes"] == \
        source.remote_file.pinned_digest


def test_a_streamed_pass_has_hdf5_open_one_dataset_per_leaf(
        streamable: Path, registry_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The others are compared against its object header, read from the verified blocks
    (``docs/format.md``, *Agreement by header template*)."""
    expected = mm.load_dataset(DATASET).to_arrays()
    by_hdf5: list[bytes] = []
    real = entry_checks.agrees

    def counting(group: Any, check: entry_checks.EntryCheck) -> bool:
        by_hdf5.append(check.path)
        return real(group, check)

    monkeypatch.setattr(entry_checks, "agrees", counting)
    source = _stream(f"file://{registry_dir}/{DATASET}")
    _assert_same(source.read(source.episode_indices), expected)
    index = offset_index.read(source.local_data_path)
    assert index is not None
    assert _entries(source) > 2 * len(index.offsets)
    assert sorted(by_hdf5) == sorted(path.encode() for path in index.offsets)


def test_a_pass_that_remembers_every_entry_reads_no_object_header(
        streamable: Path, registry_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first pass prefetches the blocks HDF5 reads to compare its entries and compares
    the sampled episodes; a process that remembers every entry does neither: its sample is
    answered from the record and nothing is fetched ahead of the read."""
    url = f"file://{registry_dir}/{DATASET}"
    prefetched: list[int] = []
    sampled: list[list[int]] = []
    real_prefetch, real_mismatches = RemoteFile.prefetch_ranges, index_trust.mismatches

    def prefetch(remote: RemoteFile, ranges: Any) -> Any:
        prefetched.append(len(ranges))
        return real_prefetch(remote, ranges)

    def mismatches(index: Any, file: Any, ids: Any) -> Any:
        sampled.append(list(ids))
        return real_mismatches(index, file, ids)

    monkeypatch.setattr(RemoteFile, "prefetch_ranges", prefetch)
    monkeypatch.setattr(index_trust, "mismatches", mismatches)
    expected = mm.load_dataset(DATASET).to_arrays()
    source = _stream(url)
    _assert_same(source.read(source.episode_indices), expected)
    assert prefetched and len(sampled) == 1
    prefetched.clear()
    sampled.clear()
    count_entry_checks(monkeypatch, forget=True)  # as a new process: the record
    again = _stream(url)
    _assert_same(again.read(again.episode_indices), expected)
    assert prefetched == [] and sampled == []


_CHILD = """
import json, sys
import numpy as np
import marl_minari as mm
from marl_minari.format import entry_checks
compared = []
real = entry_checks.compare_leaves
def counting(file, leaves, *args):
    compared.extend(leaf.path.decode() for leaf in leaves for _ in leaf.episode_ids)
    return real(file, leaves, *args)
entry_checks.compare_leaves = counting
source = mm.open_source(sys.argv[1], streaming=True)
arrays = source.read(source.episode_indices)
print(json.dumps({"compared": len(compared),
                  "rewards": float(np.asarray(arrays.team_rewards).sum()),
                  "observations": float(np.asarray(arrays.observations["agent_0"]).sum())}))
"""


def _child_read(url: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", _CHILD, url], capture_output=True,
                          text=True, env=dict(os.environ), timeout=300, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_another_process_on_the_machine_compares_nothing(
        streamable: Path, registry_dir: Path) -> None:
    expected = mm.load_dataset(DATASET).to_arrays()
    url = f"file://{registry_dir}/{DATASET}"
    first = _child_read(url)
    second = _child_read(url)
    assert first["compared"] == _entries(_stream(url)) > 0
    assert second["compared"] == 0
    for read in (first, second):
        assert read["rewards"] == pytest.approx(float(expected.team_rewards.sum()))
        assert read["observations"] == pytest.approx(
            float(expected.observations["agent_0"].sum()))


def _edit_a_value(record: Path) -> None:
    document = json.loads(record.read_text())
    path, signature, _ = document["body"]["entries"][0]
    values = np.zeros(document["body"]["episodes"], dtype=np.int8)  # "not compared"
    import base64

    document["body"]["entries"][0] = [path, signature, base64.b64encode(values.tobytes()).decode()]
    record.write_text(json.dumps(document))


def _sign_with_another_key(record: Path) -> None:
    import blake3

    document = json.loads(record.read_text())
    body = json.dumps(document["body"], sort_keys=True, separators=(",", ":")).encode()
    document["mac"] = blake3.blake3(body, key=os.urandom(32)).hexdigest()
    record.write_text(json.dumps(document))


@pytest.mark.parametrize("damage", ["edited by hand", "signed with another key", "not JSON",
                                    "nested deeper than the parser goes", "a FIFO",
                                    "for another index", "key readable by others",
                                    "key is a FIFO"])
def test_a_record_this_library_did_not_make_is_not_believed(
        streamable: Path, registry_dir: Path, monkeypatch: pytest.MonkeyPatch,
        damage: str) -> None:
    expected = mm.load_dataset(DATASET).to_arrays()
    url = f"file://{registry_dir}/{DATASET}"
    source = _stream(url)
    source.read(source.episode_indices)
    published = source.published_bytes
    record = published.record
    if damage == "edited by hand":
        _edit_a_value(record)
    elif damage == "signed with another key":
        _sign_with_another_key(record)
    elif damage == "not JSON":
        record.write_bytes(record.read_bytes()[:-20])
    elif damage == "nested deeper than the parser goes":
        record.write_bytes(b"[" * 200_000 + b"]" * 200_000)
    elif damage in ("a FIFO", "key is a FIFO"):  # never waited on
        target = record if damage == "a FIFO" else published.key
        target.unlink()
        os.mkfifo(target)
    elif damage == "for another index":
        index = offset_index.read(source.local_data_path)
        assert index is not None
        assert comparison_record.load(published, index.content, len(index.steps))
        assert not comparison_record.load(published, "0" * 64, len(index.steps))
    else:
        published.key.chmod(0o644)
    if damage != "for another index":
        compared = count_entry_checks(monkeypatch, forget=True)
        _assert_same(_stream(url).read(source.episode_indices), expected)
        assert len(compared) == _entries(source)  # every entry compared again
    if damage in ("edited by hand", "signed with another key", "not JSON",
                  "nested deeper than the parser goes", "a FIFO"):
        # the comparisons made again were remembered in a record of ours
        compared = count_entry_checks(monkeypatch, forget=True)
        _stream(url).read(source.episode_indices)
        assert compared == []


def _republish_data_file(registry_dir: Path, dataset_id: str) -> None:
    """Re-sign every digest of the published data file and index, range digests included, as
    a publisher of the modified files would have."""
    manifest_path = registry_dir / dataset_id / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    for entry in manifest["files"]:
        if entry["path"] not in (f"data/{layout.MAIN_FILE_NAME}",
                                 f"data/{layout.INDEX_FILE_NAME}"):
            continue
        path = registry_dir / dataset_id / entry["path"]
        data = path.read_bytes()
        entry.update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
        if "block_size" in entry:
            _, whole, blocks = block_digests(path, entry["block_size"])
            entry.update(blake3=whole, block_blake3=list(blocks))
        else:
            import blake3

            entry["blake3"] = blake3.blake3(data).hexdigest()
    manifest_path.write_text(json.dumps(manifest))


def test_a_forged_index_still_fails_with_an_honest_record_beside_it(
        streamable: Path, registry_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Episodes 1 and 2 swapped behind a published index, the index's header and every
    manifest digest forged to match; the record of the honest version's comparisons copied
    into the forged version's folder: the swapped entries are compared, disagree, and are
    read through HDF5, as without records."""
    url = f"file://{registry_dir}/{DATASET}"
    honest = _stream(url)
    honest.read(honest.episode_indices)
    swap_episodes_and_forge_index(registry_dir / DATASET / "data")
    _republish_data_file(registry_dir, DATASET)
    compared = count_entry_checks(monkeypatch, forget=True)
    forged = _stream(url)
    assert forged.manifest_digest != honest.manifest_digest
    forged.published_bytes.record.parent.mkdir(parents=True, exist_ok=True)
    forged.published_bytes.record.write_bytes(honest.published_bytes.record.read_bytes())
    arrays = forged.read(forged.episode_indices)
    stored = registry_dir / DATASET / "data" / layout.MAIN_FILE_NAME
    for episode_id in range(3):  # what h5py and plain Minari read
        np.testing.assert_array_equal(arrays.episode(episode_id).team_rewards,
                                      episode_leaves(stored, episode_id)["rewards"])
    assert len(compared) == _entries(forged)


def test_whole_file_and_range_digests_must_describe_the_same_file(
        streamable: Path, registry_dir: Path, http_server: Callable[[Path], str],
        tmp_path: Path) -> None:
    """A server that ignores Range makes the reader verify the whole file; a manifest whose
    whole-file digest names other bytes than its range digests is refused there, so both
    ways of reading serve the bytes that :attr:`pinned_digest` names. (A request for the
    whole file at once is answered as asked, and its blocks checked against the range
    digests.)"""
    import blake3

    main = registry_dir / DATASET / "data" / layout.MAIN_FILE_NAME
    data = bytearray(main.read_bytes())
    data[-1] ^= 0xFF  # the whole-file digests re-signed, the range digests left as they were
    main.write_bytes(bytes(data))
    manifest_path = registry_dir / DATASET / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    for entry in manifest["files"]:
        if entry["path"] == f"data/{layout.MAIN_FILE_NAME}":
            entry.update(sha256=hashlib.sha256(data).hexdigest(),
                         blake3=blake3.blake3(data).hexdigest())
    manifest_path.write_text(json.dumps(manifest))
    url = http_server(registry_dir)  # python -m http.server: 200 with the whole body
    source = open_remote_file(url, DATASET, settings=StreamSettings(cache_dir=tmp_path / "c"))
    with pytest.warns(StreamingWarning), pytest.raises(
            CorruptedDataError, match="range digests and whole-file digest describe different"):
        source.read_ranges([(MIN_BLOCK_SIZE, 10)])
    last = (len(data) - 1) // manifest_block_size(manifest)  # the block of the byte changed
    with pytest.raises(CorruptedDataError, match=rf"\(block {last}\).*BLAKE3 differs"):
        _stream(f"{url}/{DATASET}")  # the open asks for every block of this small file


def test_an_external_link_in_a_streamed_file_never_opens_the_file_it_names(
        streamable: Path, registry_dir: Path, tmp_path: Path) -> None:
    """A publisher links episode 1's rewards to a path on the reader's machine (a FIFO,
    which blocks whoever opens it), keeps the index entry and re-signs every digest: reading
    in place refuses the link by name, opens nothing it names, and reads the other episodes.
    (Besides the lookups' own link access list, HDF5 resolves a link of a streamed file
    through that file's own driver, which opens no path either.)"""
    import h5py

    fifo = OpenedFifo(tmp_path / "fifo")
    data = registry_dir / DATASET / "data"
    main = data / layout.MAIN_FILE_NAME
    index = offset_index.read(data)
    assert index is not None
    with h5py.File(main, "r+") as file:
        del file["episode_1/rewards"]
        file["episode_1/rewards"] = h5py.ExternalLink(str(fifo.path), "/episode_1/rewards")
        offset_index.seal(file, index.offsets, index.steps)
    offset_index.write(main, index.offsets, index.steps)
    _republish_data_file(registry_dir, DATASET)
    source = _stream(f"file://{registry_dir}/{DATASET}")
    try:
        with pytest.raises(ForeignStorageError, match="episode_1/rewards"):
            source.read([1])
        source.read([0])
    finally:
        assert fifo.end() == 0, "the FIFO an external link names was opened"
