"""The entry point that datasets' ``env_spec`` names (``marl_minari.joint:JointEnv``).

``docs/format.md`` fixes this module path: Minari's ``recover_environment`` imports it from
the metadata of every dataset this library ever wrote. The class lives in
:mod:`marl_minari.envs.joint`.
"""

from marl_minari.envs.joint import JointEnv

__all__ = ["JointEnv"]
