"""Flashbax vaults on disk, driven through tensorstore directly.

A Flashbax vault (``flashbax.vault.Vault``, version 1.2) is a folder
``rel_dir/vault_name/vault_uid`` holding ``metadata.json`` and one OCDBT key-value store
(``manifest.ocdbt`` + ``d/``). Every leaf of the experience tree is a zarr v2 array in that
store, named by its tree path joined with ``"."`` plus a trailing ``"."`` (``infos.legals.``),
of shape ``(B, 10**13, ...)``; the number of time steps written is the int32 array
``vault_index``. This module writes and reads exactly that, in chunk-aligned windows, so a
vault written here reads back bit-exact through ``Vault``, and any vault Flashbax wrote reads
here.

Arrays that are not listed in ``metadata.json["structure_shape"]`` (our exact-restoration
arrays, ``marl_minari.<i>.``) live in the same store; ``Vault`` never opens them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from marl_minari.errors import (
    CorruptedDataError,
    DatasetExistsError,
    DatasetNotFoundError,
    EmptyVaultError,
    InvalidDatasetIdError,
    InvalidOptionError,
    VaultVersionError,
)
from marl_minari.extras import require
from marl_minari.format.ids import parse_dataset_id
from marl_minari.storage.durable import sync_folder, sync_tree
from marl_minari.storage.locking import remove_stale_staging, staging_folder

from .structure import LeafInfo, claimed_leaves

if TYPE_CHECKING:
    import tensorstore as ts


def tensorstore() -> Any:
    """The ``tensorstore`` module (the ``jax`` extra), imported on first use so that the base
    install imports this package."""
    return require("tensorstore", "jax", "reading and writing Flashbax vaults")


VAULT_VERSION = 1.2
"""The Flashbax vault format version written (``flashbax.vault.vault.VERSION``)."""
TIME_AXIS_LENGTH = 10**13
"""Flashbax's fixed length of the time axis of every vault array."""
METADATA_FILE = "metadata.json"
VAULT_METADATA_KEY: Final = "marl_minari"
"""Key of this library's record in a vault's ``metadata.json`` (a vault written by
``to_vault``)."""
INDEX_NAME = "vault_index"
DEFAULT_COMPRESSION: dict[str, Any] = {"id": "gzip", "level": 5}
"""Flashbax's default zarr compressor."""
RESTORATION_COMPRESSION: dict[str, Any] = {"id": "zstd", "level": 1}
"""Compressor of the restoration arrays (only marl-minari reads them: fast beats small)."""
TARGET_CHUNK_BYTES = 1 << 22
"""Uncompressed bytes per zarr chunk of the widest array (tensorstore's own default, 4 MiB)."""
CACHE_BYTES = 1 << 22
"""Tensorstore's cache for a vault being read: one target chunk. Reads go forward through the
streams, so a larger pool only keeps chunks already passed (64 MiB made restoring a 58 MB
vault grow by 80 MB; 4 MiB took the same time, see tests/adapters/test_streaming.py)."""
READ_CONCURRENCY = 1
"""Tensorstore threads reading (file I/O) and decoding (data copy) a vault at a time. Each
thread that allocates decoded chunks keeps what it frees in its own malloc arena, so more
threads hold more freed chunks: reading a 64 MB vault into make_buffer's arrays peaked at
1.37x the data with tensorstore's defaults, 1.19x with one of each (docs/benchmarks.md). Reads
go window by window, every leaf at once, so one thread of each is as fast here."""
ZARR_COMPRESSORS: Final = ("blosc", "bz2", "gzip", "zlib", "zstd")
"""The compressors of zarr v2 arrays that tensorstore writes (and Flashbax reads)."""


def vault_dir(rel_dir: str | os.PathLike[str], vault_name: str, vault_uid: str) -> Path:
    """``rel_dir/vault_name/vault_uid`` resolved as Flashbax does (relative to the cwd).

    Raises:
        InvalidOptionError: ``vault_name`` or ``vault_uid`` would lead out of ``rel_dir``
            (an absolute path, a ``..`` part) or ``vault_uid`` is not one folder name.
    """
    for argument, value in (("vault_name", vault_name), ("vault_uid", vault_uid)):
        parts = str(value).replace("\\", "/").split("/")
        if (not str(value) or str(value).startswith("/") or ".." in parts
                or (argument == "vault_uid" and len(parts) > 1)):
            raise InvalidOptionError(
                f"{argument}={value!r}: a vault lives at rel_dir/vault_name/vault_uid, "
                f"{'the uid one folder name' if argument == 'vault_uid' else 'the name folders'}"
                " under rel_dir, without '..' or a leading '/'; put the folder in rel_dir")
    return Path(os.path.normpath(Path.cwd() / rel_dir / vault_name / vault_uid))


def default_uid() -> str:
    """Flashbax's default vault uid: the current time as ``%Y%m%d%H%M%S``."""
    return datetime.now().strftime("%Y%m%d%H%M%S")


VAULT_SUFFIX: Final = ".vlt"
"""Suffix of vault names in OG-MARL's loaders (``Vault("og_marl/smac_v1/3m.vlt", ...)``)."""

_UID_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def default_vault_name(dataset_id: str) -> str:
    """OG-MARL's vault name for a dataset: its id as folders, the last part with ``.vlt``.

    ``"mpe2/simple_spread/random-v0"`` -> ``"mpe2/simple_spread/random-v0.vlt"``, so that with
    ``rel_dir="vaults"`` the vault is ``vaults/mpe2/simple_spread/random-v0.vlt/<uid>``.

    Raises:
        InvalidDatasetIdError: the id (from a dataset's metadata: untrusted) is no dataset id,
            so it cannot name folders under ``rel_dir``; pass ``vault_name``.
    """
    try:
        parse_dataset_id(dataset_id)
    except InvalidDatasetIdError as exc:
        raise InvalidDatasetIdError(f"{exc} It cannot name the vault: pass vault_name=...") \
            from None
    return dataset_id + VAULT_SUFFIX


def default_vault_uid(algorithm_name: object) -> str:
    """A dataset's vault uid, named for the policy that made it as OG-MARL's uids are
    (``Random``, ``Expert``...): its ``algorithm_name`` with the first letter upper-cased
    when that is one path-safe word, else Flashbax's default (the current time)."""
    if isinstance(algorithm_name, str) and _UID_WORD.fullmatch(algorithm_name):
        return algorithm_name[0].upper() + algorithm_name[1:]
    return default_uid()


def _spec(base: Path, name: str) -> dict[str, Any]:
    return {"driver": "zarr",
            "kvstore": {"driver": "ocdbt", "base": f"file://{base}", "path": name}}


def check_version(version: Any, where: Path) -> None:
    """Refuse a vault whose major format version is not :data:`VAULT_VERSION`'s (the rule
    Flashbax's ``Vault`` applies: minor versions may differ).

    Raises:
        VaultVersionError: naming the file and both versions.
    """
    if (isinstance(version, bool) or not isinstance(version, (int, float))
            or version // 1 != VAULT_VERSION // 1):
        raise VaultVersionError(
            f"{where}: vault format version {version!r} is not supported (this library reads "
            f"version {int(VAULT_VERSION // 1)}.x, as flashbax>=0.1.3,<0.2 writes); convert "
            "the vault with a matching Flashbax release first")


def time_chunk(row_bytes: int, target: int = TARGET_CHUNK_BYTES) -> int:
    """Rows per zarr chunk so that a chunk of rows of ``row_bytes`` is about ``target``."""
    return max(1, target // max(1, row_bytes))


class VaultReader:
    """Read access to a vault folder: its metadata, leaves and time windows.

    Args:
        path: the vault folder (``rel_dir/vault_name/vault_uid``).

    Raises:
        DatasetNotFoundError: no vault there.
        CorruptedDataError: its metadata is unreadable or lists no leaves.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).resolve()
        meta_path = self.path / METADATA_FILE
        if not meta_path.is_file():
            raise DatasetNotFoundError(
                f"no vault at {self.path}: expected {METADATA_FILE} there (a vault folder is "
                "rel_dir/vault_name/vault_uid)")
        try:
            metadata = json.loads(meta_path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise CorruptedDataError(f"{meta_path} is not a Flashbax vault's metadata: {exc}") \
                from exc
        if not isinstance(metadata, dict):
            raise CorruptedDataError(f"{meta_path} is not a Flashbax vault's metadata: a JSON "
                                     f"object was expected, not {type(metadata).__name__}")
        self.metadata: dict[str, Any] = metadata
        self.leaves = claimed_leaves(meta_path, metadata)
        check_version(self.metadata.get("version"), meta_path)
        self._context = tensorstore().Context({
            "cache_pool": {"total_bytes_limit": CACHE_BYTES},
            "data_copy_concurrency": {"limit": READ_CONCURRENCY},
            "file_io_concurrency": {"limit": READ_CONCURRENCY}})
        self._stores: dict[str, ts.TensorStore] = {}
        self._check_stores(meta_path)
        self.length = self._checked_length()
        self.num_streams = self.leaves[0].shape[0]

    def _check_stores(self, meta_path: Path) -> None:
        """Every claimed leaf is a store of that dtype whose dimensions are the claimed ones
        (all but the time axis, which Flashbax preallocates): checked before any read is sized
        by the claims."""
        for leaf in self.leaves:
            store = self._open(leaf.name)
            real = tuple(int(size) for size in store.shape)
            dtype = store.dtype.numpy_dtype
            if len(real) != len(leaf.shape) or (real[0], *real[2:]) != (
                    leaf.shape[0], *leaf.shape[2:]) or dtype != np.dtype(leaf.dtype):
                raise CorruptedDataError(
                    f"{meta_path}: structure_shape/structure_dtype {'.'.join(leaf.path)!r} "
                    f"claim {leaf.shape} {leaf.dtype}, but the array {leaf.name!r} is "
                    f"{real} {dtype}: the metadata does not describe the vault (restore it from "
                    "a copy)")

    def _checked_length(self) -> int:
        """``vault_index``, checked against the arrays: reading past what is stored would
        make up zero steps."""
        index = np.asarray(self._open(INDEX_NAME).read().result()).reshape(-1)
        if index.size != 1 or index.dtype.kind not in "iu":
            raise CorruptedDataError(f"vault {self.path}: {INDEX_NAME} is not one integer "
                                     f"(shape {index.shape}, dtype {index.dtype})")
        length = int(index[0])
        if length == 0 and all(  # never written, not an index reset over written steps
                store[:, 0].storage_statistics(query_not_stored=True).result().not_stored
                for store in (self._open(leaf.name) for leaf in self.leaves)):
            raise EmptyVaultError(
                f"vault {self.path} holds no time steps ({INDEX_NAME} is 0): it was created but "
                "nothing was written to it; call vault.write(buffer_state) after adding "
                "timesteps to the buffer, then convert it")
        stores = [self._open(leaf.name) for leaf in self.leaves]
        stored = min(store.shape[1] for store in stores)
        # Flashbax preallocates a huge time axis, so also ask whether the last indexed step
        # lies in a chunk that was ever written (inside the last written chunk, unwritten steps
        # cannot be told from written zeros: the format keeps no other record).
        if 0 < length <= stored and any(
                store[:, length - 1].storage_statistics(query_not_stored=True).result().not_stored
                for store in stores):
            stored = length - 1
        if not 0 < length <= stored:
            raise CorruptedDataError(
                f"vault {self.path}: {INDEX_NAME} is {length}, but its arrays hold fewer steps "
                f"(at most {stored}); it must count the written steps: the vault is damaged.")
        # A vault written here records its streams' lengths: an index past them (even inside
        # the last written chunk, where zeros cannot be told from data) is caught.
        ours = self.metadata.get("marl_minari")
        recorded = ours.get("stream_lengths") if isinstance(ours, dict) else None
        if (isinstance(recorded, list) and recorded
                and all(isinstance(n, int) and not isinstance(n, bool) for n in recorded)
                and length != max(recorded)):
            raise CorruptedDataError(
                f"vault {self.path}: {INDEX_NAME} is {length}, but the vault was written with "
                f"{max(recorded)} steps per stream (metadata.json marl_minari.stream_lengths); "
                "the vault is damaged: restore it from a copy or convert the dataset again.")
        return length

    def leaf(self, path: tuple[str, ...]) -> LeafInfo | None:
        """The leaf at ``path``, or ``None``."""
        return next((leaf for leaf in self.leaves if leaf.path == path), None)

    def _open(self, name: str) -> ts.TensorStore:
        if name not in self._stores:
            try:
                self._stores[name] = tensorstore().open(_spec(self.path, name), open=True,
                                                        context=self._context).result()
            except ValueError as exc:
                raise CorruptedDataError(f"vault {self.path}: cannot open array {name!r}: {exc}") \
                    from exc
        return self._stores[name]

    def store(self, name: str) -> ts.TensorStore:
        """The tensorstore of the array named ``name`` (opened once)."""
        return self._open(name)

    def read_async(self, name: str, index: tuple[Any, ...]) -> Any:
        """Start reading ``store[index]``; ``.result()`` gives the numpy array."""
        return self._open(name)[index].read()

    @property
    def step_bytes(self) -> int:
        """Bytes of one time step of one stream, every leaf together."""
        return sum(leaf.row_bytes for leaf in self.leaves)

    def time_chunk_rows(self) -> int:
        """Time steps per zarr chunk of the widest leaf (the unit tensorstore decodes)."""
        widest = max(self.leaves, key=lambda leaf: leaf.row_bytes)
        shape = self._open(widest.name).chunk_layout.read_chunk.shape
        rows = shape[1] if shape is not None and len(shape) > 1 else None
        return int(rows) if rows else 1

    def read_into(self, name: str, index: tuple[Any, ...], target: np.ndarray) -> Any:
        """Start reading ``store[index]`` straight into ``target`` (a writable numpy array or
        view of the same shape and dtype): no array of the block is made on the way.
        ``.result()`` waits for it."""
        return tensorstore().array(target, copy=False, write=True).write(
            self._open(name)[index])


VAULT_STAGING_FOLDER = ".marl_minari_staging"
"""Hidden folder beside the vault-name folder (``<rel_dir>/.marl_minari_staging`` for
``<rel_dir>/<vault_name>/<vault_uid>``) where a vault is written before it is renamed into
place; removed again once empty. Not inside the vault-name folder, whose every subfolder
OG-MARL's ``get_available_uids`` takes for a uid."""


class VaultWriter:
    """Creates a vault with the names and metadata Flashbax uses; data goes in chunk-aligned.

    The vault is built in a hidden sibling folder and renamed into place by :meth:`commit`, so
    an interrupted conversion never leaves a partial vault at the target path.

    Args:
        path: the final vault folder; it must not exist.
        compression: zarr compressor dict (``{"id": "gzip", "level": 5}``, Flashbax's default;
            ``{"id": "zstd", "level": 3}``...), or ``None`` for none.

    Raises:
        DatasetExistsError: ``path`` exists.
    """

    def __init__(self, path: Path, compression: dict[str, Any] | None) -> None:
        self.path = Path(path)
        if self.path.exists():
            raise DatasetExistsError(
                f"a vault already exists at {self.path}; vaults are not overwritten here: pick "
                "another vault_uid or delete it")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Staged near the target (same file system: one rename commits it), in a locked
        # folder, so the next conversion there removes what a killed one left behind.
        self._staging = self.path.parent.parent / VAULT_STAGING_FOLDER
        remove_stale_staging(self._staging)
        self._cleanup = contextlib.ExitStack()
        self.work = self._cleanup.enter_context(staging_folder(self._staging, "vault"))
        self._compression = compression
        # Files are synced once, in commit(), before the vault is moved into place.
        self._context = tensorstore().Context({"file_io_sync": False})
        self._stores: list[ts.TensorStore] = []

    def create(self, name: str, shape: tuple[int, ...], dtype: np.dtype | str,
               chunks: tuple[int, ...], compression: dict[str, Any] | None | str = "vault"
               ) -> ts.TensorStore:
        """Create a zarr array ``name`` in the vault's OCDBT store (with the vault's
        compressor unless ``compression`` is given)."""
        spec = _spec(self.work, name)
        spec["metadata"] = {"compressor": self._compression if compression == "vault"
                            else compression, "chunks": list(chunks)}
        module = tensorstore()
        store = module.open(spec, shape=shape, dtype=module.dtype(np.dtype(dtype).name),
                            create=True, context=self._context).result()
        self._stores.append(store)
        return store

    def commit(self, length: int, metadata: dict[str, Any]) -> Path:
        """Write ``vault_index`` and ``metadata.json``, close, and move the vault into place."""
        module = tensorstore()
        index = module.open(_spec(self.work, INDEX_NAME), dtype=module.int32, shape=(1,),
                            create=True, context=self._context).result()
        index.write(np.asarray([length], dtype=np.int32)).result()
        del index
        self._stores.clear()
        temporary = self.work / (METADATA_FILE + ".tmp")
        temporary.write_text(json.dumps(metadata, default=_json_default))
        os.replace(temporary, self.work / METADATA_FILE)
        self._context = tensorstore().Context()
        sync_tree(self.work)  # tensorstore wrote the files unsynced
        try:
            os.rename(self.work, self.path)
        except OSError as exc:
            if self.path.exists():
                raise DatasetExistsError(f"a vault appeared at {self.path} while writing") \
                    from exc
            raise
        finally:
            self._close_staging()
        sync_folder(self.path.parent)
        return self.path

    def abort(self) -> None:
        """Remove the partial vault."""
        self._stores.clear()
        self._close_staging()

    def _close_staging(self) -> None:
        self._cleanup.close()
        with contextlib.suppress(OSError):  # other conversions may still be staging there
            self._staging.rmdir()


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    return str(value)


class Appender:
    """Appends rows along one axis of a zarr array, writing whole chunks only.

    Rows are buffered until a full chunk (``chunk`` rows) is there; :meth:`close` writes the
    last partial chunk. With ``streams`` set, the array is ``(B, T, ...)`` and rows arrive as
    ``(B, n, ...)`` blocks; otherwise it is ``(R, ...)`` and rows arrive as ``(n, ...)``.

    Args:
        store: the array.
        chunk: rows per zarr chunk along the appended axis.
        streams: ``True`` for a vault leaf (time axis 1), ``False`` for a row array (axis 0).
        start: the first row to write (rows before it are left unwritten: they read as 0).
    """

    def __init__(self, store: ts.TensorStore, chunk: int, streams: bool, start: int = 0) -> None:
        self._store = store
        self._chunk = chunk
        self._axis = 1 if streams else 0
        self._pending: list[np.ndarray] = []
        self._pending_rows = start % chunk
        self._pending = [] if not self._pending_rows else [np.zeros(
            (self._pending_rows, *store.shape[1:]), dtype=store.dtype.numpy_dtype)]
        self.written = start - self._pending_rows

    def append(self, rows: np.ndarray) -> list[Any]:
        """Buffer ``rows``; return the write futures of the full chunks now written.

        Full chunks are written straight from ``rows`` (no copy for one stream); only the
        rows that complete a buffered partial chunk and the rows left over are copied.
        """
        count = rows.shape[self._axis]
        futures: list[Any] = []
        start = 0
        if self._pending_rows:
            need = self._chunk - self._pending_rows
            if count < need:
                self._pending.append(rows.copy())
                self._pending_rows += count
                return []
            block = np.concatenate([*self._pending, self._rows(rows, 0, need)], axis=self._axis)
            futures.append(self._write(block))
            self._pending, self._pending_rows, start = [], 0, need
        full = ((count - start) // self._chunk) * self._chunk
        if full:
            futures.append(self._write(self._rows(rows, start, start + full)))
        if start + full < count:
            self._pending = [self._rows(rows, start + full, count).copy()]
            self._pending_rows = count - start - full
        return futures

    def close(self) -> list[Any]:
        """Write what is buffered (the last, partial chunk)."""
        if self._pending_rows == 0:
            return []
        block = np.concatenate(self._pending, axis=self._axis)
        self._pending, self._pending_rows = [], 0
        return [self._write(block)]

    def _rows(self, rows: np.ndarray, start: int, stop: int) -> np.ndarray:
        return rows[:, start:stop] if self._axis == 1 else rows[start:stop]

    def _write(self, block: np.ndarray) -> Any:
        start, stop = self.written, self.written + block.shape[self._axis]
        self.written = stop
        index = (slice(None), slice(start, stop)) if self._axis == 1 else (slice(start, stop),)
        return self._store[index].write(np.ascontiguousarray(block))


def wait(futures: list[Any]) -> None:
    """Block until every write future in ``futures`` is committed."""
    for future in futures:
        future.result()
