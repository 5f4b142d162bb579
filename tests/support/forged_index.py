"""A dataset whose episodes were swapped behind its offset index, the index's header forged to
match: what an index author can write without touching the seal in the data file."""

from __future__ import annotations

import json
from pathlib import Path

import blake3
import h5py
import numpy as np

from marl_minari.format import layout, offset_index


def swap_episodes_and_forge_index(data_path: Path, first: int = 1, second: int = 2) -> None:
    """Swap two episode groups with h5py, then rewrite the index with the same arrays and a
    header claiming the modified file's size and BLAKE3."""
    main = data_path / layout.MAIN_FILE_NAME
    with h5py.File(main, "r+") as file:
        file.move(f"episode_{first}", "episode_kept")
        file.move(f"episode_{second}", f"episode_{first}")
        file.move("episode_kept", f"episode_{second}")
    index_path = data_path / layout.INDEX_FILE_NAME
    with np.load(index_path) as stored:
        arrays = {key: stored[key].copy() for key in stored.files}
    header = json.loads(arrays["header"].tobytes())
    header["file_size"] = main.stat().st_size
    header["blake3"] = blake3.blake3(main.read_bytes()).hexdigest()
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    with open(index_path, "wb") as handle:
        np.savez(handle, **arrays)


def episode_leaves(main: Path, episode_id: int) -> dict[str, np.ndarray]:
    """Every dataset of ``episode_<episode_id>`` as h5py reads it, by path."""
    leaves: dict[str, np.ndarray] = {}
    with h5py.File(main, "r") as file:
        file[f"episode_{episode_id}"].visititems(
            lambda name, node: leaves.__setitem__(name, node[()])
            if isinstance(node, h5py.Dataset) else None)
    return leaves


def store_differently_and_reseal(data_path: Path, episode_id: int, path: str,
                                 array: np.ndarray) -> None:
    """Store ``episode_<episode_id>/<path>`` again as ``array`` (another type or shape) at a
    new place, then point the index's entry at it and seal the file with the new index, as
    anyone who writes the dataset can: every entry's offset agrees with HDF5's, and the
    index's digest with the file's seal and header."""
    main = data_path / layout.MAIN_FILE_NAME
    with np.load(data_path / layout.INDEX_FILE_NAME) as stored:
        arrays = {key: stored[key].copy() for key in stored.files}
    header = json.loads(arrays["header"].tobytes())
    with h5py.File(main, "r+") as file:
        del file[f"episode_{episode_id}/{path}"]
        dataset = file.create_dataset(f"episode_{episode_id}/{path}", data=array)
        arrays[f"o{header['paths'].index(path)}"][episode_id] = dataset.id.get_offset()
        offsets = {p: arrays[f"o{i}"] for i, p in enumerate(header["paths"])}
        offset_index.seal(file, offsets, arrays["steps"])
    offset_index.write(main, offsets, arrays["steps"])
