"""Dataset ids: Minari's ``(namespace/)name-vN`` form, stricter where Minari misbehaves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from marl_minari.errors import InvalidDatasetIdError
from marl_minari.format import ids
from marl_minari.format.ids import dataset_dir, parse_dataset_id


@pytest.mark.parametrize(
    ("dataset_id", "expected"),
    [
        ("x-v0", (None, "x", 0)),
        ("a.b_c-d-v12", (None, "a.b_c-d", 12)),
        ("mpe2/simple_spread/random-v0", ("mpe2/simple_spread", "random", 0)),
        ("ns/name-v0-v3", ("ns", "name-v0", 3)),
        ("_x-v1", (None, "_x", 1)),
    ],
)
def test_well_formed_ids_parse(dataset_id: str, expected: tuple) -> None:
    assert parse_dataset_id(dataset_id) == expected


@pytest.mark.parametrize(
    "dataset_id",
    [
        "t/x-v0",  # one-character namespace: Minari refuses it later
        "../x-v0",
        "ns/../x-v0",
        "ns/./x-v0",
        "x",  # no version
        "x-v",
        "ns/x",
        "/abs-v0",
        "ns//x-v0",
        "x-v0/",
        "ns\\x-v0",
        "x y-v0",
        "x-V0",
        "x-v0\n",  # '$' would accept a trailing newline
        ".hidden-v0",  # a hidden folder: Minari would never list it
        "ns/.x-v0",
        "..-v0",
        "",
    ],
)
def test_malformed_ids_are_refused_with_the_expected_form(dataset_id: str) -> None:
    with pytest.raises(InvalidDatasetIdError, match="malformed dataset id"):
        parse_dataset_id(dataset_id)


def test_non_string_id_is_refused() -> None:
    with pytest.raises(InvalidDatasetIdError, match="must be a str"):
        parse_dataset_id(3)  # type: ignore[arg-type]


def test_dataset_dir_is_under_the_datasets_root(datasets_root: Path) -> None:
    assert ids.datasets_root() == datasets_root
    assert dataset_dir("aa/bb/x-v2") == datasets_root / "aa" / "bb" / "x-v2"
    with pytest.raises(InvalidDatasetIdError):
        dataset_dir("../escape-v0")


def test_a_datasets_root_override_stays_in_its_thread(datasets_root: Path, tmp_path: Path,
                                                      record_parallel: Any) -> None:
    import os
    import threading

    import marl_minari as mm

    other = tmp_path / "other-root"
    seen_elsewhere: list[Path] = []
    with ids.using_datasets_root(other) as root:
        assert root == other and ids.datasets_root() == other
        assert os.environ["MINARI_DATASETS_PATH"] == str(datasets_root)
        thread = threading.Thread(target=lambda: seen_elsewhere.append(ids.datasets_root()))
        thread.start()
        thread.join()
        record_parallel("mpe2/simple_spread_v3", 1, max_cycles=5, dataset_id="over/ride-v0")
        assert mm.load_dataset("over/ride-v0").total_episodes == 1
    assert seen_elsewhere == [datasets_root]
    assert ids.datasets_root() == datasets_root
    assert (other / "over" / "ride-v0" / "data" / "main_data.hdf5").exists()
    assert not (datasets_root / "over").exists()


@pytest.mark.parametrize("dataset_id", ["ns/" + "x" * 300 + "-v0", "x" * 300 + "-v0",
                                        "/".join(["ns" + "y" * 60] * 4) + "/n-v0"])
def test_overlong_ids_are_refused_before_touching_the_file_system(dataset_id: str) -> None:
    with pytest.raises(InvalidDatasetIdError, match="longer than"):
        dataset_dir(dataset_id)


def test_overlong_id_is_typed_at_every_entry_point() -> None:
    import marl_minari as mm
    from marl_minari import registry

    dataset_id = "ns/" + "n" * 296 + "-v0"
    calls = [lambda: mm.load_dataset(dataset_id), lambda: mm.describe(dataset_id),
             lambda: registry.publish(dataset_id, "/tmp/nowhere-registry"),
             lambda: mm.load_dataset(dataset_id, download=True)]
    for call in calls:
        # describe also takes vault folders, so it says "neither an id nor a vault".
        with pytest.raises(mm.MarlMinariError, match="dataset id"):
            call()
