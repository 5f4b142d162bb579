"""Optional dependencies: the one place that imports them for a feature and names the extra.

Every feature whose dependency lives in an extra (``jax``, ``plot``, ``torch``, ``ray``,
``s3``, ``envs``) imports it through :func:`require`, so a missing package is always the same
:class:`~marl_minari.errors.MissingExtraError`: what needs it and the install command.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any, Final

from marl_minari.errors import MissingExtraError

EXTRAS: Final = {
    "jax": "JAX and Flashbax",
    "plot": "matplotlib",
    "torch": "PyTorch, TensorDict and TorchRL",
    "ray": "Ray Data and RLlib",
    "s3": "boto3",
    "envs": "PettingZoo's environment families and mpe2",
}
"""Each extra of the ``marl-minari`` distribution and what it brings."""

EXTRA_OF_PACKAGE: Final = {
    "jax": "jax", "jaxlib": "jax", "flashbax": "jax", "tensorstore": "jax", "chex": "jax",
    "matplotlib": "plot",
    "torch": "torch", "torchrl": "torch", "tensordict": "torch",
    "ray": "ray", "pyarrow": "ray",
    "boto3": "s3", "botocore": "s3",
    "mpe2": "envs", "pygame": "envs", "pymunk": "envs", "chess": "envs", "rlcard": "envs",
    "pyspiel": "envs", "shimmy": "envs", "scipy": "envs",
}
"""Top-level packages our modules import that only an extra installs, and that extra."""


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Import ``module`` for ``feature``, or say which extra brings it.

    Args:
        module: the module to import (``"flashbax"``, ``"matplotlib.figure"``...).
        extra: the extra that installs it, one of :data:`EXTRAS`.
        feature: what needs it, for the message (``"to_vault"``).

    Raises:
        MissingExtraError: ``module`` (or a package it imports) is not installed.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{feature} needs {EXTRAS[extra]}, which is not installed (no module "
            f"{exc.name or module!r}): pip install \"marl-minari[{extra}]\"") from exc


def import_feature(module: str, feature: str, extra: str | None = None) -> ModuleType:
    """Import one of our modules whose own imports need an extra.

    Args:
        module: our module (``"marl_minari.ray.rllib_offline"``).
        feature: what the user asked for, for the message.
        extra: the extra to name whatever package of :data:`EXTRA_OF_PACKAGE` is missing
            (for a feature whose extra brings several, as ``ray`` brings torch); by default
            the missing package's own extra.

    Raises:
        MissingExtraError: a package an extra installs is missing.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        own = EXTRA_OF_PACKAGE.get(missing.split(".")[0])
        if own is None:
            raise  # not an extra's package: our bug or a broken install, shown as it is
        require(missing, extra or own, feature)
        raise  # require raised, unless the package was installed meanwhile


def lazy_exports(package: str, home_of: Mapping[str, str],
                 extra: str | None = None) -> Callable[[str], Any]:
    """A package's module ``__getattr__`` that loads each public name from its home module on
    first use, so importing the package imports no extra.

    Args:
        package: the package (``__name__``).
        home_of: each public name and the module it lives in.
        extra: as for :func:`import_feature`.
    """

    def load(name: str) -> Any:
        home = home_of.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_feature(home, f"{package}.{name}", extra), name)
        setattr(sys.modules[package], name, value)
        return value

    return load
