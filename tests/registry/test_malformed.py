"""Damaged registry files give typed errors naming the file and the key.

Whatever a manifest, an index, a downloaded ``metadata.json`` or a download's origin file
holds (not JSON, nested past the parser's stack, an integer longer than Python converts, a
key of the wrong type or missing, a path leaving its folder), reading it raises
``CorruptedDataError`` naming the file and the key, never ``KeyError``, ``TypeError``,
``ValueError``, ``JSONDecodeError``, ``RecursionError`` or ``AttributeError``.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from registry_helpers import no_partial_dataset, replace_published_file

from marl_minari import registry
from marl_minari.errors import CorruptedDataError
from marl_minari.format.ids import dataset_dir
from marl_minari.sources.remote import fetch_remote_source, origin_path

DEEP = b"[" * 200_000
"""Deeper than Python's JSON parser can recurse."""
LONG_INTEGER = b'{"format_version": ' + b"1" * 5000 + b"}"
"""An integer longer than Python converts from text (a ValueError, not a JSONDecodeError)."""


def _edit(path: Path, change: Callable[[Any], Any]) -> None:
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def change(document: dict[str, Any]) -> dict[str, Any]:
        document[key] = value
        return document

    return change


def _set_entry(key: str, value: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def change(document: dict[str, Any]) -> dict[str, Any]:
        document["files"][0][key] = value
        return document

    return change


def _drop_entry(key: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def change(document: dict[str, Any]) -> dict[str, Any]:
        del document["files"][0][key]
        return document

    return change


def _escape(document: dict[str, Any]) -> dict[str, Any]:
    document["files"].append({"path": "data/../../../outside.txt", "size": 4,
                              "sha256": "0" * 64})
    return document


MANIFESTS: dict[str, tuple[bytes | Callable[[Any], Any], str]] = {
    "not JSON": (b"{not json", "not valid JSON"),
    "nested too deeply": (DEEP, "nests deeper than a JSON parser follows"),
    "integer too long": (LONG_INTEGER, "an integer of more digits than a reader converts"),
    "a list": (b"[]", "does not hold a JSON object"),
    "format_version a string": (_set("format_version", "1"), "'format_version' must be"),
    "files an object": (_set("files", {}), "'files' must be a list"),
    "files missing": (_set("files", None), "'files' is missing"),
    "an entry a string": (_set("files", ["data/metadata.json"]), "files[0] must be an object"),
    "path a number": (_set_entry("path", 5), "files[0].path must be a string"),
    "path missing": (_drop_entry("path"), "files[0].path is missing"),
    "size a string": (_set_entry("size", "10"), "files[0].size must be an integer"),
    "size missing": (_drop_entry("size"), "files[0].size is missing"),
    "created a number": (_set("created", 5), "'created' must be a string"),
    "a path leaving the folder": (_escape, "files[3].path names an unsafe path"),
}


@pytest.mark.parametrize("case", sorted(MANIFESTS))
def test_malformed_manifest_names_file_and_key(published: str, registry_dir: Path,
                                               case: str) -> None:
    damage, expected = MANIFESTS[case]
    manifest = registry_dir / published / "manifest.json"
    if isinstance(damage, bytes):
        manifest.write_bytes(damage)
    else:
        _edit(manifest, damage)
    with pytest.raises(CorruptedDataError, match=re.escape(expected)) as caught:
        registry.download(published)
    assert f"{published}/manifest.json" in str(caught.value)
    no_partial_dataset(published)


INDEXES: dict[str, tuple[bytes | Callable[[Any], Any], str]] = {
    "nested too deeply": (DEEP, "nests deeper than a JSON parser follows"),
    "integer too long": (LONG_INTEGER, "an integer of more digits than a reader converts"),
    "datasets a list": (_set("datasets", []), "'datasets' must be an object"),
    "datasets missing": (_set("datasets", None), "'datasets' is missing"),
    "namespaces a number": (_set("namespaces", 5), "'namespaces' must be an object"),
    "a namespace a string": (lambda d: {**d, "namespaces": {"mpe2": "x"}},
                             "namespaces['mpe2'] must be an object"),
    "format_version a string": (_set("format_version", "1"), "'format_version' must be"),
    "an entry a string": (lambda d: {**d, "datasets": {k: "x" for k in d["datasets"]}},
                          "datasets['mpe2/spread/random-v0'] must be an object"),
    "metadata a list": (lambda d: {**d, "datasets": {k: {**v, "metadata": []}
                                                     for k, v in d["datasets"].items()}},
                        "datasets['mpe2/spread/random-v0'].metadata must be an object"),
    "total_size a string": (lambda d: {**d, "datasets": {k: {**v, "total_size": "big"}
                                                         for k, v in d["datasets"].items()}},
                            ".total_size must be an integer"),
}


@pytest.mark.parametrize("case", sorted(INDEXES))
def test_malformed_index_names_file_and_key(published: str, registry_dir: Path,
                                            case: str) -> None:
    damage, expected = INDEXES[case]
    index = registry_dir / "_index.json"
    if isinstance(damage, bytes):
        index.write_bytes(damage)
    else:
        _edit(index, damage)
    for read in (registry.list_datasets,
                 lambda: registry.open_remote().get_dataset_metadata(published)):
        with pytest.raises(CorruptedDataError, match=re.escape(expected)) as caught:
            read()
        assert "_index.json" in str(caught.value)
        assert "reindex" in str(caught.value)
    assert registry.reindex() == 1  # the fix the message names
    assert [d.dataset_id for d in registry.list_datasets()] == [published]


def test_malformed_combined_datasets_name_the_key(published: str, registry_dir: Path) -> None:
    metadata_path = registry_dir / published / "data" / "metadata.json"
    metadata = json.loads(metadata_path.read_text())
    for value, expected in ((5, "'combined_datasets' must be a list"),
                            ([7], "combined_datasets[0] must be a string"),
                            (["../../x-v0"], "combined_datasets[0] is a malformed id")):
        replace_published_file(registry_dir, published, "data/metadata.json",
                               json.dumps({**metadata, "combined_datasets": value}).encode())
        with pytest.raises(CorruptedDataError, match=re.escape(expected)) as caught:
            registry.download(published)
        assert f"{published}/data/metadata.json" in str(caught.value)
        no_partial_dataset(published)


def test_minari_version_of_any_type_is_only_a_warning(published: str,
                                                      registry_dir: Path) -> None:
    metadata_path = registry_dir / published / "data" / "metadata.json"
    metadata = json.loads(metadata_path.read_text())
    replace_published_file(registry_dir, published, "data/metadata.json",
                           json.dumps({**metadata, "minari_version": ["0.5.4"]}).encode())
    with pytest.warns(UserWarning, match=re.escape("written for Minari ['0.5.4']")):
        assert registry.download(published) == dataset_dir(published)


ORIGINS: dict[str, tuple[bytes | Callable[[Any], Any], str]] = {
    "not JSON": (b"{", "not valid JSON"),
    "nested too deeply": (DEEP, "nests deeper than a JSON parser follows"),
    "another dataset's": (_set("dataset_id", "../../elsewhere/x-v0"), "'dataset_id' is"),
    "dataset_id missing": (_set("dataset_id", None), "'dataset_id' is missing"),
    "remote a number": (_set("remote", 5), "'remote' must be a string"),
    "digest not a digest": (_set("metadata_blake3", "../x"), "'metadata_blake3' is not"),
}


@pytest.mark.parametrize("case", sorted(ORIGINS))
def test_malformed_origin_file_names_file_and_key(published: str, registry_dir: Path,
                                                  case: str) -> None:
    url = f"file://{registry_dir}/{published}"
    fetch_remote_source(url)  # downloads it and records its origin
    origin = origin_path(published)
    damage, expected = ORIGINS[case]
    if isinstance(damage, bytes):
        origin.write_bytes(damage)
    else:
        _edit(origin, damage)
    with pytest.raises(CorruptedDataError, match=re.escape(expected)) as caught:
        fetch_remote_source(url)
    assert str(origin) in str(caught.value) and "delete it" in str(caught.value)
    origin.unlink()  # the fix the message names: compared with the published files again
    assert fetch_remote_source(url) == (dataset_dir(published) / "data").resolve()
    assert json.loads(origin.read_text())["dataset_id"] == published
    shutil.rmtree(dataset_dir(published))
