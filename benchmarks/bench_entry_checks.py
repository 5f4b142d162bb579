"""What comparing offset-index entries with HDF5 costs, per entry, ways of doing it side by side.

Records ``--episodes`` episodes of mpe2 ``simple_spread_v3`` (15 indexed leaves each),
publishes them to a ``file://`` registry, and compares every entry of every episode with HDF5
(offset, type, shape), CPU time per entry, best and median of ``--repeats``, each way on a
freshly opened file (HDF5's metadata cache empty), over the local file and over
``RangesFile`` on the published file (every HDF5 metadata read a Python callback, blocks
already cached on disk):

* ``full path``: ``episode_<e>/<path>`` opened from the file per entry (the comparison before
  entries were batched);
* ``per group``: every entry compared by HDF5 (``entry_checks.agrees``), each episode group
  opened once, its datasets from it (``compare_entries`` before header templates);
* ``per subgroup``: the groups on the way (``infos/marl``) opened once per episode too;
* ``lookup only``: each entry's link record (``H5Lget_info``: the address of its object),
  each episode group opened once and no dataset opened: the floor of any comparison that
  asks HDF5 where an entry's object is;
* ``templates``: ``compare_entries`` as readers call it: one entry per path compared by
  HDF5, the others' object headers against its (``format.header_template``), read from the
  local file or the published file's verified blocks, each found from the file's symbol
  tables (``format.group_templates``);
* ``templates, HDF5 lookups``: the same with every path looked up by HDF5 instead
  (``H5Lget_info`` from the root: ``compare_entries`` before the symbol tables);
* ``symbol tables only``: where every entry's object header lies, resolved from the file's
  bytes and nothing compared: the floor of the ``templates`` way's lookups;
* ``remembered``: a new process's read of every entry's result from the record of a published
  file's comparisons (``comparison_record.load``), per entry.

::

    python benchmarks/bench_entry_checks.py                 # 500 episodes
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path

import h5py
import numpy as np
from bench_remote import record_spread

DATASET = "bench/entries-v0"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    root = Path(tempfile.mkdtemp(prefix="bench-entries-"))
    os.environ["MINARI_DATASETS_PATH"] = str(root / "datasets")
    os.environ["MARL_MINARI_CACHE"] = str(root / "cache" / "blocks")
    try:
        import marl_minari as mm
        from marl_minari import registry
        from marl_minari.format import (
            comparison_record,
            entry_checks,
            group_templates,
            offset_index,
        )
        from marl_minari.format.entry_checks import EntryCheck
        from marl_minari.format.in_file import hard_link_address
        from marl_minari.storage.byte_ranges import RangesFile

        record_spread(DATASET, args.episodes)
        registry.publish(DATASET, f"file://{root / 'registry'}")
        local = root / "registry" / DATASET / "data" / "main_data.hdf5"
        source = mm.open_source(f"file://{root / 'registry'}/{DATASET}", streaming=True)
        source.read(source.episode_indices)  # blocks cached, the record written
        index = offset_index.read(source.local_data_path)
        assert index is not None
        checks = []
        with h5py.File(local, "r") as file:
            for episode in range(len(index.steps)):
                for path, offsets in index.offsets.items():
                    if offsets[episode] >= 0:
                        found = h5py.h5d.open(file.id, f"episode_{episode}/{path}".encode())
                        checks.append(EntryCheck(episode, path.encode(), int(offsets[episode]),
                                                 found.get_type(), found.shape))

        def same(dataset: h5py.h5d.DatasetID, check: EntryCheck) -> bool:
            return bool(dataset.get_offset() == check.offset
                        and dataset.get_type().equal(check.expected_type)
                        and dataset.get_space().get_simple_extent_dims() == check.shape)

        def full_path(file: h5py.File) -> int:
            return sum(same(_opened(file.id, b"episode_%d/%s" % (c.episode_id, c.path)), c)
                       for c in checks)

        def per_group(file: h5py.File) -> int:
            agreed, current, group = 0, -1, None
            for check in checks:
                if check.episode_id != current:
                    current = check.episode_id
                    group = entry_checks.episode_group(file, current)
                agreed += group is not None and entry_checks.agrees(group, check)
            return agreed

        def per_subgroup(file: h5py.File) -> int:
            agreed, current = 0, -1
            parents: dict[bytes, h5py.h5g.GroupID] = {}
            for check in checks:
                if check.episode_id != current:
                    current = check.episode_id
                    parents = {b"": _opened(file.id, b"episode_%d" % current)}
                folder, _, name = check.path.rpartition(b"/")
                if folder not in parents:
                    parents[folder] = _opened(parents[b""], folder)
                agreed += same(_opened(parents[folder], name), check)
            return agreed

        def lookup_only(file: h5py.File) -> int:
            # The link record of each entry (its object's address), each episode group
            # opened once, the dataset itself never opened: the floor of any comparison
            # that asks HDF5 where an entry's object is.
            found, current, group = 0, -1, None
            for check in checks:
                if check.episode_id != current:
                    current = check.episode_id
                    group = _opened(file.id, b"episode_%d" % current)
                found += group.links.get_info(check.path).type == h5py.h5l.TYPE_HARD
            return found

        def templates(file: h5py.File) -> int:
            raw = None if file.driver == "sec2" else source.remote_file
            return sum(entry_checks.compare_entries(file, checks, raw))

        def templates_hdf5_lookups(file: h5py.File) -> int:
            resolve = group_templates.resolve
            group_templates.resolve = lambda *_: None  # type: ignore[assignment]
            try:
                return templates(file)
            finally:
                group_templates.resolve = resolve

        def symbol_tables_only(file: h5py.File) -> int:
            raw = entry_checks._local_raw(file) if file.driver == "sec2" else source.remote_file
            assert raw is not None
            resolved = group_templates.resolve(
                raw.read_ranges, raw.size, [c.episode_id for c in checks],
                [c.path for c in checks], partial(hard_link_address, file.id),
                entry_checks._rows_of(raw))
            return 0 if resolved is None else int((resolved.addresses >= 0).sum())

        ways: dict[str, Callable[[h5py.File], int]] = {
            "full path": full_path, "per group": per_group, "per subgroup": per_subgroup,
            "lookup only": lookup_only, "templates": templates,
            "templates, HDF5 lookups": templates_hdf5_lookups,
            "symbol tables only": symbol_tables_only}
        print(f"{args.episodes} episodes, {len(checks)} entries; CPU us per entry, "
              f"best / median of {args.repeats}")
        openers: dict[str, Callable[[], h5py.File]] = {
            "local file": lambda: h5py.File(local, "r"),
            "RangesFile": lambda: h5py.File(RangesFile(source.remote_file), "r")}
        for where, opener in openers.items():
            spent: dict[str, list[float]] = {name: [] for name in ways}
            for _ in range(args.repeats):
                for name, way in ways.items():
                    with opener() as file:
                        started = time.process_time()
                        agreed = way(file)
                        spent[name].append(time.process_time() - started)
                    assert agreed == len(checks), (name, agreed)
            print(f"  {where}: " + ", ".join(
                f"{name} {min(times) * 1e6 / len(checks):.1f} / "
                f"{float(np.median(times)) * 1e6 / len(checks):.1f}"
                for name, times in spent.items()))
        published = source.published_bytes
        loads = []
        for _ in range(args.repeats):
            started = time.process_time()
            remembered = comparison_record.load(published, index.content, len(index.steps))
            loads.append(time.process_time() - started)
        assert sum(int((v == 1).sum()) for v in remembered.values()) == len(checks)
        print(f"  remembered (record read by a new process): "
              f"{min(loads) * 1e6 / len(checks):.2f} us per entry")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _opened(loc: h5py.h5g.GroupID, path: bytes) -> h5py.h5d.DatasetID | h5py.h5g.GroupID:
    """An object of the file as every way opens it (``format.in_file``: an external link
    opens nothing), so the ways differ only in what they open."""
    from marl_minari.format.in_file import open_in_file

    found = open_in_file(loc, path)
    assert found is not None, path
    return found


if __name__ == "__main__":
    main()
