"""Optional dependencies: the one place that imports them for a feature and names the extra.

Every feature whose dependency lives in an extra (``jax``, ``plot``, ``torch``, ``ray``,
``s3``, ``envs``) imports it through :func:`require`, so a missing package is always the same
:class:`~marl_minari.errors.MissingExtraError`: what needs it and the install command.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Final

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
