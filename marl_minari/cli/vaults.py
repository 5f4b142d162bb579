"""Command-line functions of the adapters: ``convert`` and ``vault-info``.

Plain functions with typer-annotated parameters; :func:`register` adds them to the
``marl-minari`` app (``marl-minari convert SOURCE TARGET``, ``marl-minari vault-info VAULT``).
Conversions show tqdm progress bars.
"""

from __future__ import annotations

import json
import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from marl_minari.cli import checks
from marl_minari.errors import DatasetNotFoundError, InvalidDatasetIdError, InvalidOptionError
from marl_minari.format.ids import parse_dataset_id


class Compression(StrEnum):
    """Vault compressors."""

    gzip = "gzip"
    zstd = "zstd"
    none = "none"


class DonesChoice(StrEnum):
    """Vault done flags (see :func:`~marl_minari.adapters.to_vault`)."""

    team = "team"
    agent = "agent"


class TerminalsChoice(StrEnum):
    """Vault terminals (see :func:`~marl_minari.adapters.to_vault`)."""

    end = "end"
    strict = "strict"


class StateChoice(StrEnum):
    """Sources of a vault's ``infos.state``."""

    auto = "auto"
    env = "env"
    observations = "observations"
    none = "none"


class TrailingChoice(StrEnum):
    """What happens to steps after a vault stream's last done."""

    truncate = "truncate"
    drop = "drop"
    error = "error"


COMPRESSORS: dict[Compression, dict[str, Any] | None] = {
    Compression.gzip: {"id": "gzip", "level": 5},
    Compression.zstd: {"id": "zstd", "level": 3},
    Compression.none: None,
}


def convert(
    source: Annotated[str, typer.Argument(
        metavar="SOURCE", callback=checks.named,
        help="A vault folder (rel_dir/vault_name/vault_uid) or a local dataset id.")],
    target: Annotated[str | None, typer.Argument(
        metavar="TARGET", callback=checks.named,
        help="The dataset id to create (from a vault) or the vault folder to create "
             "(rel_dir/vault_name/vault_uid, from a dataset; default OG-MARL's "
             "vaults/<dataset id>.vlt/<Algorithm>).")] = None,
    download: Annotated[bool, typer.Option(
        "--download",
        help="Fetch SOURCE from Minari's remote when it is not a local dataset.")] = False,
    chunk_steps: Annotated[int | None, typer.Option(
        help="Steps converted at a time; memory is proportional to it (default: as many as "
             "fit 32 MiB, at most 65,536).", min=1)] = None,
    compression: Annotated[Compression, typer.Option(
        help="Vault compressor (gzip is Flashbax's default).")] = Compression.gzip,
    dones: Annotated[DonesChoice, typer.Option(
        help="Vault dones: team (the episode's, copied to every agent) or agent.")
    ] = DonesChoice.team,
    terminals: Annotated[TerminalsChoice | None, typer.Option(
        help="Vault terminals: end (every episode end, truncated ones too, as OG-MARL; the "
             "default) or strict (terminated episodes only).")] = None,
    state: Annotated[StateChoice, typer.Option(
        help="Vault infos.state: auto, the env's state, all agents' observations, or none.")
    ] = StateChoice.auto,
    seeds: Annotated[bool, typer.Option(
        "--seeds/--no-seeds",
        help="Keep episodes' reset seeds and options in the vault (slower on many "
             "episodes).")] = True,
    trailing: Annotated[TrailingChoice, typer.Option(
        help="Steps after a vault stream's last done: truncate, drop or error.")
    ] = TrailingChoice.truncate,
    agents: Annotated[str | None, typer.Option(
        help="Comma-separated agent names for a vault (default agent_0..N-1).")] = None,
    keys: Annotated[str | None, typer.Option(
        "--keys", metavar="ROLE=KEY,...",
        help="Which vault leaf plays which role, for leaves named neither as OG-MARL nor as "
             "Mava name them, e.g. observations=obs,actions=act,rewards=rew,dones=done,"
             "truncations=trunc,legals=legal_mask (nested leaves as infos.legals).")] = None,
    restore: Annotated[bool | None, typer.Option(
        "--restore/--no-restore",
        help="Rebuild the original dataset of a vault written by marl-minari "
             "(default: when it can).")] = None,
) -> None:
    """Convert a Minari dataset into a Flashbax vault, or a vault into a dataset."""
    from marl_minari.adapters import from_vault, is_vault, to_vault, vault_path_parts

    if is_vault(source):
        if target is None:
            raise typer.BadParameter("give the dataset id to create from the vault",
                                     param_hint="TARGET")
        parse_dataset_id(target)
        rel_dir, name, uid = vault_path_parts(source)
        dataset = from_vault(
            name, rel_dir=rel_dir, vault_uid=uid, dataset_id=target, chunk_steps=chunk_steps,
            trailing=trailing.value,
            agents=None if agents is None else [a.strip() for a in agents.split(",")],
            keys=None if keys is None else _key_map(keys), restore=restore, progress=True)
        typer.echo(f"wrote {dataset.total_episodes} episodes, {dataset.total_steps} steps "
                   f"into {target}")
        typer.echo(f"load it with: minari.load_dataset({target!r})")
        return
    rel_dir, vault_name, vault_uid = ((Path("vaults"), None, None) if target is None
                                      else _vault_target(target))
    _require_dataset(source, download=download)
    path = to_vault(source, rel_dir=rel_dir, vault_name=vault_name, vault_uid=vault_uid,
                    chunk_steps=chunk_steps,
                    compression=COMPRESSORS[compression], dones=dones.value,
                    terminals=None if terminals is None else terminals.value,
                    state=state.value, seeds=seeds, progress=True)
    name = os.path.relpath(path.parent, Path.cwd() / rel_dir)
    typer.echo(f"wrote vault {path}")
    typer.echo(f"read it with: flashbax.vault.Vault({name!r}, rel_dir={str(rel_dir)!r}, "
               f"vault_uid={path.name!r}).read()")


def _key_map(text: str) -> dict[str, str]:
    """``--keys observations=obs,actions=act`` -> ``{"observations": "obs", ...}``.

    Raises:
        InvalidOptionError: a part is not ``ROLE=KEY``.
    """
    found: dict[str, str] = {}
    for part in text.split(","):
        role, equals, key = part.partition("=")
        if not (equals and role.strip() and key.strip()):
            raise InvalidOptionError(
                f"--keys takes ROLE=KEY pairs separated by commas (e.g. observations=obs,"
                f"actions=act,rewards=rew,dones=done), got {part!r} in {text!r}")
        found[role.strip()] = key.strip()
    return found


def _require_dataset(source: str, *, download: bool) -> None:
    """``source`` is a local dataset id (or fetched with ``download``); a path that is no vault
    gets "no vault at", with what its nearest existing folder holds."""
    try:
        parse_dataset_id(source)
    except InvalidDatasetIdError:
        raise DatasetNotFoundError(
            f"no vault at {source}: {checks.nearby(Path(source), checks.VAULT_LAYOUT)}"
        ) from None
    checks.require_local_dataset(source, download=download)


def _vault_target(target: str) -> tuple[Path, str, str]:
    path = Path(target)
    if len(path.parts) < 2:
        raise typer.BadParameter(
            f"{target!r} is not a vault folder: give rel_dir/vault_name/vault_uid (or "
            "vault_name/vault_uid under the current folder)", param_hint="TARGET")
    return path.parent.parent, path.parent.name, path.name


def vault_info(
    path: Annotated[str, typer.Argument(
        metavar="VAULT", callback=checks.named,
        help="A vault folder (rel_dir/vault_name/vault_uid).")],
) -> None:
    """Arrays, streams, length and provenance of a Flashbax vault."""
    from marl_minari.vaults.store import VaultReader

    reader = VaultReader(path)
    typer.echo(f"vault          {reader.path}")
    typer.echo(f"version        {reader.metadata.get('version')}")
    typer.echo(f"streams (B)    {reader.num_streams}")
    typer.echo(f"steps (T)      {reader.length} per stream")
    typer.echo(f"{'array':<24} {'shape (B, T, ...)':<24} {'dtype':<9} compressor")
    for leaf in reader.leaves:
        shape = (reader.num_streams, reader.length, *leaf.row_shape)
        spec = reader.store(leaf.name).spec().to_json()
        compressor = spec.get("metadata", {}).get("compressor")
        typer.echo(f"{leaf.name[:-1]:<24} {str(shape):<24} {leaf.dtype:<9} "
                   f"{json.dumps(compressor)}")
    ours = reader.metadata.get("marl_minari")
    if isinstance(ours, dict) and "view" in ours:
        typer.echo(f"written by     marl-minari {ours.get('library_version')} from dataset "
                   f"{ours.get('dataset_id')!r}")
        typer.echo(f"episodes       {ours.get('episodes')}")
        typer.echo(f"agents         {', '.join(ours['view']['agents'])}")
        typer.echo(f"restoration    {len(ours.get('exact', []))} arrays (from_vault rebuilds the "
                   "dataset exactly)")
    else:
        user = sorted(k for k in reader.metadata
                      if k not in ("version", "structure_shape", "structure_dtype"))
        typer.echo(f"metadata keys  {', '.join(user) or '(none)'}")
        typer.echo("written by     not marl-minari: from_vault imports it (episodes cut at done "
                   "flags)")


def register(app: typer.Typer) -> None:
    """Add ``convert`` and ``vault-info`` to a typer app."""
    app.command("convert")(convert)
    app.command("vault-info")(vault_info)
