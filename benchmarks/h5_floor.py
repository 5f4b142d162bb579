"""The floor of Minari's one-group-per-episode layout, for the writer benchmarks: a bare h5py
loop creating the same groups, attributes and datasets as a file some writer produced, from
arrays already in memory (high-level API, and the low-level API our writer uses)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np


def h5_contents(path: Path) -> list[tuple[str, dict[str, Any], list[tuple[str, Any, dict]]]]:
    """Every episode group of a file: (name, attrs, [(dataset path, data, create kwargs)])."""
    out = []
    with h5py.File(path, "r") as file:
        for name, group in file.items():
            items: list[tuple[str, Any, dict]] = []

            def visit(sub: str, obj: Any, items: list = items) -> None:
                if isinstance(obj, h5py.Dataset):
                    items.append((sub, obj[()], {"compression": obj.compression,
                                                 "compression_opts": obj.compression_opts,
                                                 "chunks": obj.chunks}))

            group.visititems(visit)
            out.append((name, dict(group.attrs), items))
    return out


def high_level_floor(contents: list, target: Path) -> None:
    """The same groups, attributes and datasets through h5py's high-level API."""
    with h5py.File(target, "w") as file:
        for name, attrs, items in contents:
            group = file.create_group(name)
            for key, value in attrs.items():
                group.attrs[key] = value
            for sub, data, kwargs in items:
                group.create_dataset(sub, data=data, **kwargs)


def low_level_floor(contents: list, target: Path) -> None:
    """The same groups, attributes and (contiguous) datasets through h5py's low-level API:
    the floor of the one-group-per-episode layout."""
    with h5py.File(target, "w") as file:
        types: dict[Any, Any] = {}
        for name, attrs, items in contents:
            root = h5py.h5g.create(file.id, name.encode())
            for key, value in attrs.items():
                file[name].attrs[key] = value
            groups: dict[str, Any] = {"": root}
            for sub, data, _ in items:
                parent_path, _, leaf = sub.rpartition("/")
                parent = groups.get(parent_path)
                if parent is None:
                    parent = root
                    built = ""
                    for part in parent_path.split("/"):
                        built = f"{built}/{part}" if built else part
                        if built not in groups:
                            groups[built] = h5py.h5g.create(parent, part.encode())
                        parent = groups[built]
                array = np.ascontiguousarray(data)
                type_id = types.get(array.dtype)
                if type_id is None:
                    type_id = types[array.dtype] = h5py.h5t.py_create(array.dtype, logical=True)
                dataset = h5py.h5d.create(parent, leaf.encode(), type_id,
                                          h5py.h5s.create_simple(array.shape))
                dataset.write(h5py.h5s.ALL, h5py.h5s.ALL, array)
