"""Each extra's features, with the extra's packages made unimportable: one typed error naming
the extra, and the base install's features (recording, reading, describing, cards) still work."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BLOCK = textwrap.dedent("""
    import importlib.abc, sys
    BLOCKED = {blocked!r}

    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, Refuse())
""")


def run_without(blocked: set[str], code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh Python in which the ``blocked`` packages cannot be imported."""
    script = BLOCK.format(blocked=sorted(blocked)) + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def test_import_brings_no_extra(tmp_path: Path) -> None:
    done = run_without(set(), """
        import sys
        import marl_minari, marl_minari.sources, marl_minari.describe, marl_minari.adapters
        heavy = {"jax", "flashbax", "tensorstore", "matplotlib", "torch", "torchrl", "ray",
                 "boto3", "mpe2", "pygame"}
        print(sorted(heavy & {name.split(".")[0] for name in sys.modules}))
    """, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_plots_name_the_plot_extra_and_cards_work_without_it(tmp_path: Path) -> None:
    done = run_without({"matplotlib"}, """
        import warnings
        import marl_minari as mm
        from marl_minari.errors import MissingExtraError
        from marl_minari.describe import DatasetDescription

        env = mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", max_cycles=3))
        env.reset(seed=0)
        while env.agents:
            env.step({a: env.action_space(a).sample() for a in env.agents})
        env.create_dataset("extras/plot-v0", algorithm_name="random", author="t",
                           author_email="t@example.com", code_permalink="https://example.com",
                           description="one episode")
        env.close()
        summary = mm.describe("extras/plot-v0")
        try:
            mm.plot_descriptions([summary], "figure.png")
        except MissingExtraError as exc:
            print("ERROR", exc)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            card = mm.dataset_card(summary, "card/README.md")
        print("CARD", card.exists(), "statistics.png" in card.read_text())
        print("WARNED", any("marl-minari[plot]" in str(w.message) for w in caught))
    """, tmp_path)
    assert done.returncode == 0, done.stderr
    assert 'pip install "marl-minari[plot]"' in done.stdout
    assert "plot_descriptions needs matplotlib" in done.stdout
    assert "CARD True False" in done.stdout and "WARNED True" in done.stdout


@pytest.mark.parametrize(("blocked", "env_id"), [({"mpe2"}, "mpe2/simple_spread_v3"),
                                                 ({"chess"}, "classic/chess-v6")])
def test_envs_name_the_envs_extra(tmp_path: Path, blocked: set[str], env_id: str) -> None:
    done = run_without(blocked, f"""
        import marl_minari as mm
        from marl_minari.errors import MissingExtraError
        try:
            mm.make_env({env_id!r})
        except MissingExtraError as exc:
            print("ERROR", exc)
    """, tmp_path)
    assert done.returncode == 0, done.stderr
    assert 'pip install "marl-minari[envs]"' in done.stdout, done.stdout


@pytest.mark.parametrize(("blocked", "call", "extra"), [
    ({"jax", "flashbax", "tensorstore", "chex"},
     "from marl_minari.adapters import to_vault; to_vault('extras/base-v0')", "jax"),
    ({"jax", "flashbax", "tensorstore", "chex"},
     "import marl_minari.adapters as A; A.make_buffer(['extras/base-v0'])", "jax"),
    ({"torch", "torchrl", "tensordict"},
     "from marl_minari.adapters import make_torchrl_buffer; "
     "make_torchrl_buffer('extras/base-v0', 4)",
     "torch"),
    ({"ray"}, "from marl_minari.ray import read_dataset; read_dataset('extras/base-v0')", "ray"),
    ({"ray"}, "from marl_minari.ray import multi_agent_offline", "ray"),
    ({"boto3", "botocore"},
     "from marl_minari.registry import list_datasets; list_datasets('s3://bucket/prefix')",
     "s3"),
])
def test_each_extra_is_named_when_missing(tmp_path: Path, blocked: set[str], call: str,
                                          extra: str) -> None:
    done = run_without(blocked, f"""
        import marl_minari as mm
        from marl_minari.errors import MissingExtraError

        env = mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", max_cycles=3))
        env.reset(seed=0)
        while env.agents:
            env.step({{a: env.action_space(a).sample() for a in env.agents}})
        env.create_dataset("extras/base-v0", algorithm_name="random", author="t",
                           author_email="t@example.com", code_permalink="https://example.com",
                           description="one episode")
        env.close()
        try:
            {call}
        except MissingExtraError as exc:
            print("ERROR", exc)
    """, tmp_path)
    assert done.returncode == 0, done.stderr
    assert f'pip install "marl-minari[{extra}]"' in done.stdout, done.stdout
