"""Typed errors raised by marl-minari.

Every error says what is wrong and how to fix it. All of them derive from
:class:`MarlMinariError`, so ``except MarlMinariError`` catches anything this library raises on
purpose; most also derive from the built-in exception a caller would expect (``ValueError`` for
bad input, ``FileExistsError`` for refusing to overwrite), so existing handlers keep working.
"""

from __future__ import annotations


class MarlMinariError(Exception):
    """Base class of every error raised on purpose by marl-minari."""


class InvalidOptionError(MarlMinariError, ValueError):
    """An argument or option has a value the function does not accept."""


class InvalidDatasetIdError(MarlMinariError, ValueError):
    """A dataset id does not follow Minari's ``(namespace/)name-vN`` form."""


class EnvApiError(MarlMinariError, TypeError):
    """An environment of one PettingZoo API was given where the other one is needed."""

class EpisodeIndexError(MarlMinariError, IndexError):
    """An episode index or id outside the dataset."""


class DatasetExistsError(MarlMinariError, FileExistsError):
    """A dataset (or a published version of it) already exists and will not be overwritten."""


class DatasetNotFoundError(MarlMinariError, FileNotFoundError):
    """No dataset with that id or path exists."""


class EmptyDatasetError(MarlMinariError, ValueError):
    """Work that needs episodes was given a dataset that holds none (``compare``, a subset):
    the data's state, not a wrong argument (exit code 1 at the command line)."""


class UnsupportedSpaceError(MarlMinariError, TypeError):
    """A Gymnasium space that Minari's HDF5 format cannot store."""


class InfoStructureError(MarlMinariError, ValueError):
    """An info dict changed its structure (keys, shapes or dtypes) during an episode."""


class StepDataError(MarlMinariError, ValueError):
    """Data handed out by an environment (or to it) does not fit the recorded spaces."""


class LayoutError(MarlMinariError, ValueError):
    """A dataset does not follow the multi-agent layout of ``docs/format.md``."""


class CorruptedDataError(MarlMinariError, ValueError):
    """Stored data is damaged (truncated, tampered with or inconsistent)."""


class ForeignStorageError(CorruptedDataError):
    """An HDF5 file refers to data outside itself (external storage, link or virtual source)."""


class EnvDescriptorError(MarlMinariError, ValueError):
    """An environment descriptor cannot be resolved into a working environment."""


class IncompatibleSourcesError(MarlMinariError, ValueError):
    """Datasets or vaults that cannot be combined (agents, spaces or dtypes differ)."""


class RemoteError(MarlMinariError, RuntimeError):
    """A registry remote failed or refused an operation."""


class UnknownAgentError(MarlMinariError, KeyError):
    """An agent name that the dataset or environment does not have."""

    def __str__(self) -> str:
        # KeyError quotes its message; show it as written, like the other errors.
        return str(self.args[0]) if self.args else ""


class LockedError(MarlMinariError, TimeoutError):
    """A dataset or recording is held by another live writer (see ``docs/recording.md``)."""


ConfigurationError = InvalidOptionError
"""An option or environment variable has a value the library cannot use (same class as
:class:`InvalidOptionError`: one error for bad option values, wherever they come from)."""

class NotADatasetError(MarlMinariError, TypeError):
    """Something given where a dataset (id, folder, ``MinariDataset``...) was expected."""


class IncompleteTrajectoryError(MarlMinariError, ValueError):
    """A batch given to a pattern holds only part of an agent's trajectory."""


class VaultVersionError(MarlMinariError, ValueError):
    """A Flashbax vault written in a format version this library does not read."""


class EmptyVaultError(MarlMinariError, ValueError):
    """A Flashbax vault that holds no time step (created, never written to)."""


class BufferOverrunError(MarlMinariError, RuntimeError):
    """A Flashbax buffer wrapped past timesteps not written yet: write more often."""


class ReadOnlyBufferError(MarlMinariError, NotImplementedError):
    """A change was asked of a buffer built from offline data, which is read-only."""


class MissingExtraError(MarlMinariError, ImportError):
    """A feature needs an optional dependency that is not installed; the message names the
    extra that brings it (``pip install "marl-minari[jax]"``)."""


class StorageFullError(MarlMinariError, OSError):
    """No room to write: the disk is full, a quota is spent, or a file would pass the
    process's file-size limit. Nothing already durable is lost; the message says what to do."""


class NotWritableError(MarlMinariError, PermissionError):
    """A dataset's folder or files, or the datasets root, cannot be written (another user's
    files, a read-only mount, an immutable file). Nothing already written is changed; the
    message says where the data is and what to do."""


class DependencyVersionError(MarlMinariError, RuntimeError):
    """An installed dependency has a version this library does not support; the message says
    which versions it supports."""


class RLlibOfflineError(MarlMinariError, NotImplementedError):
    """A dataset or an RLlib config that RLlib's offline API cannot train from (see
    ``docs/ray.md``, *Multi-agent offline training*)."""
