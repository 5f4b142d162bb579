"""Range digests at publish: the BLAKE3 of every block of a published file, in its manifest
entry (docs/registry.md, "Range digests")."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import blake3
import pytest
from marl_minari.registry.blocks import MIN_BLOCK_SIZE, block_size_for
from marl_minari.registry.manifest import Manifest
from registry_helpers import drop_range_digests, entry_of, manifest_document

from marl_minari import registry
from marl_minari.errors import CorruptedDataError
from marl_minari.format.ids import dataset_dir

DATASET = "mpe2/spread/streamed-v0"
MAIN = "data/main_data.hdf5"


# ---------------------------------------------------------------------- range digests
def test_publish_records_a_digest_per_block(streamable: Path, registry_dir: Path) -> None:
    document = manifest_document(registry_dir, DATASET)
    main = entry_of(document, MAIN)
    data = streamable.read_bytes()
    assert main["block_size"] == block_size_for(len(data)) == MIN_BLOCK_SIZE
    assert main["block_blake3"] == [
        blake3.blake3(data[start:start + MIN_BLOCK_SIZE]).hexdigest()
        for start in range(0, len(data), MIN_BLOCK_SIZE)]
    assert main["open_blocks"][0] == 0  # the superblock first, then what opening reads
    assert len(main["open_blocks"]) == len(set(main["open_blocks"])) > 1
    small = entry_of(document, "data/metadata.json")
    assert "block_size" not in small and "block_blake3" not in small
    assert "open_blocks" not in small
    parsed = Manifest.from_json((registry_dir / DATASET / "manifest.json").read_bytes(),
                                DATASET, "test")
    assert parsed.to_json() == (registry_dir / DATASET / "manifest.json").read_bytes()


def test_block_size_keeps_the_digest_list_short() -> None:
    assert block_size_for(0) == MIN_BLOCK_SIZE
    assert block_size_for(4096 * MIN_BLOCK_SIZE) == MIN_BLOCK_SIZE
    assert block_size_for(4096 * MIN_BLOCK_SIZE + 1) == 2 * MIN_BLOCK_SIZE
    assert block_size_for(10 << 30) == 4 << 20


@pytest.mark.parametrize(("change", "named"), [
    (lambda e: e.pop("block_blake3"), "only one of block_size and block_blake3"),
    (lambda e: e.update(block_size=MIN_BLOCK_SIZE + 1), "files[0].block_size"),
    (lambda e: e.update(block_size=MIN_BLOCK_SIZE // 2), "files[0].block_size"),
    (lambda e: e["block_blake3"].pop(), "lists 4 digests"),
    (lambda e: e["block_blake3"].__setitem__(2, "x" * 64), "block_blake3[2]"),
    (lambda e: e["block_blake3"].__setitem__(1, 7), "block_blake3[1]"),
    (lambda e: e.update(block_blake3="abc"), "files[0].block_blake3"),
    (lambda e: e.update(open_blocks=[0, 5]), "files[0].open_blocks"),
    (lambda e: e.update(open_blocks=[True]), "files[0].open_blocks"),
    (lambda e: e.update(open_blocks=list(range(5)) * 13), "files[0].open_blocks"),
])
def test_malformed_range_digests_are_refused(streamable: Path, registry_dir: Path,
                                             change: Callable[[dict[str, Any]], Any],
                                             named: str) -> None:
    document = manifest_document(registry_dir, DATASET)
    document["files"].sort(key=lambda e: e["path"] != MAIN)
    change(document["files"][0])
    with pytest.raises(CorruptedDataError, match=named.replace("[", r"\[").replace("]", r"\]")):
        Manifest.from_json(json.dumps(document).encode(), DATASET, "test")


def test_a_manifest_without_range_digests_still_downloads(streamable: Path,
                                                          registry_dir: Path) -> None:
    drop_range_digests(registry_dir, DATASET)
    local = streamable.read_bytes()
    registry.download(DATASET, force=True)
    assert (dataset_dir(DATASET) / MAIN).read_bytes() == local
