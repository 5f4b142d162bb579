"""The ``convert`` and ``vault-info`` commands."""

from __future__ import annotations

from pathlib import Path

import typer
from adapter_helpers import assert_same_episodes, rename_leaves, write_vault
from typer.testing import CliRunner

import marl_minari as mm
from marl_minari.cli.errors import CommandGroup
from marl_minari.cli.vaults import register


def _app() -> typer.Typer:
    app = typer.Typer(cls=CommandGroup)
    register(app)
    return app


def test_convert_both_ways_and_vault_info(recorded, vaults: Path) -> None:
    dataset = recorded("mpe2/simple_spread_v3", episodes=2, max_cycles=5)
    runner = CliRunner()
    target = vaults / "spread" / "Good"
    done = runner.invoke(_app(), ["convert", "tests/recorded-v0", str(target),
                                  "--compression", "zstd", "--chunk-steps", "4"])
    assert done.exit_code == 0, done.output
    assert f"wrote vault {target}" in done.output

    info = runner.invoke(_app(), ["vault-info", str(target)])
    assert info.exit_code == 0, info.output
    assert "streams (B)    1" in info.output
    assert f"steps (T)      {dataset.total_steps} per stream" in info.output
    assert "infos.legals" in info.output and '"zstd"' in info.output
    assert "from dataset 'tests/recorded-v0'" in info.output

    back = runner.invoke(_app(), ["convert", str(target), "tests/back-v0"])
    assert back.exit_code == 0, back.output
    assert_same_episodes(dataset, mm.load_dataset("tests/back-v0"))


def test_foreign_vault_and_errors(vaults: Path) -> None:
    write_vault(vaults, "og", "u", steps=10, max_cycles=4)
    runner = CliRunner()
    info = runner.invoke(_app(), ["vault-info", str(vaults / "og" / "u")])
    assert info.exit_code == 0 and "not marl-minari" in info.output
    done = runner.invoke(_app(), ["convert", str(vaults / "og" / "u"), "og/spread-v0",
                                  "--agents", "a, b, c", "--trailing", "drop"])
    assert done.exit_code == 0, done.output
    assert mm.load_dataset("og/spread-v0").possible_agents == ("a", "b", "c")
    failed = runner.invoke(_app(), ["convert", str(vaults / "og" / "u"), "og/spread-v1",
                                    "--trailing", "error"])
    assert failed.exit_code == 1 and "unfinished episode" in failed.output
    bad = runner.invoke(_app(), ["convert", "og/spread-v0", "flat"])
    assert bad.exit_code == 2 and "not a vault folder" in bad.output
    missing = runner.invoke(_app(), ["vault-info", str(vaults / "nothing")])
    assert missing.exit_code == 1 and "no vault" in missing.output


def test_the_suggested_key_map_converts_a_renamed_vault_whole(vaults: Path) -> None:
    """OG-MARL's leaves renamed: the error's suggested map, passed as --keys, keeps the
    truncations and the legal action masks (a map without them lost both)."""
    import re
    import shutil

    write_vault(vaults, "og", "u", streams=2, steps=30, max_cycles=6)
    shutil.copytree(vaults / "og" / "u", vaults / "odd" / "u")
    rename_leaves(vaults / "odd" / "u", {"observations": "obs_all", "actions": "act_taken",
                                   "rewards": "rew_team", "terminals": "term_flag",
                                   "truncations": "trunc_flag"})
    runner = CliRunner()
    failed = runner.invoke(_app(), ["convert", str(vaults / "odd" / "u"), "odd/x-v0"])
    assert failed.exit_code == 1, failed.output
    suggested = re.search(r"--keys (\S+);", " ".join(failed.output.split()))
    assert suggested is not None, failed.output
    assert "truncations=trunc_flag" in suggested[1] and "legals=infos.legals" in suggested[1]
    done = runner.invoke(_app(), ["convert", str(vaults / "odd" / "u"), "odd/x-v0",
                                  "--keys", suggested[1]])
    assert done.exit_code == 0, done.output
    plain = runner.invoke(_app(), ["convert", str(vaults / "og" / "u"), "og/x-v0"])
    assert plain.exit_code == 0, plain.output
    assert_same_episodes(mm.load_dataset("og/x-v0"), mm.load_dataset("odd/x-v0"))
    bad = runner.invoke(_app(), ["convert", str(vaults / "odd" / "u"), "odd/y-v0",
                                 "--keys", "observations"])
    assert bad.exit_code == 2 and "ROLE=KEY" in bad.output
