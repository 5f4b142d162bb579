"""Command-line functions of the adapters: ``convert`` and ``vault-info``.

Plain functions with typer-annotated parameters; :func:`register` adds them to the
``marl-minari`` app (``marl-minari convert SOURCE TARGET``, ``marl-minari vault-info PATH``).
Conversions show tqdm progress bars.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from marl_minari.errors import MarlMinariError


def _fail(exc: Exception) -> typer.Exit:
    typer.echo(f"error: {exc}", err=True)
    return typer.Exit(code=1)


def convert(
    source: Annotated[str, typer.Argument(
        help="A vault folder (rel_dir/vault_name/vault_uid) or a dataset id.")],
    target: Annotated[str | None, typer.Argument(
        help="The dataset id to create (from a vault) or the vault folder to create "
             "(rel_dir/vault_name/vault_uid, from a dataset; default OG-MARL's "
             "vaults/<dataset id>.vlt/<Algorithm>).")] = None,
    chunk_steps: Annotated[int, typer.Option(
        help="Steps converted at a time; memory is proportional to it.", min=1)] = 65_536,
    compression: Annotated[str, typer.Option(
        help="Vault compressor: gzip (Flashbax's default), zstd or none.")] = "gzip",
    dones: Annotated[str, typer.Option(
        help="Vault dones: team (the episode's, copied to every agent) or agent.")] = "team",
    terminals: Annotated[str | None, typer.Option(
        help="Vault terminals: end (every episode end, truncated ones too, as OG-MARL; the "
             "default) or strict (terminated episodes only).")] = None,
    state: Annotated[str, typer.Option(
        help="Vault infos.state: auto, env, observations or none.")] = "auto",
    seeds: Annotated[bool, typer.Option(
        "--seeds/--no-seeds",
        help="Keep episodes' reset seeds and options in the vault (slower on many "
             "episodes).")] = True,
    trailing: Annotated[str, typer.Option(
        help="Steps after a vault stream's last done: truncate, drop or error.")] = "truncate",
    agents: Annotated[str | None, typer.Option(
        help="Comma-separated agent names for a vault (default agent_0..N-1).")] = None,
    restore: Annotated[bool | None, typer.Option(
        "--restore/--no-restore",
        help="Rebuild the original dataset of a vault written by marl-minari "
             "(default: when it can).")] = None,
) -> None:
    """Convert a Minari dataset into a Flashbax vault, or a vault into a dataset."""
    from marl_minari.adapters import from_vault, is_vault, to_vault, vault_path_parts

    try:
        if is_vault(source):
            if target is None:
                raise typer.BadParameter("give the dataset id to create from the vault",
                                         param_hint="TARGET")
            rel_dir, name, uid = vault_path_parts(source)
            dataset = from_vault(
                rel_dir, name, uid, target, chunk_steps=chunk_steps,
                trailing=trailing,  # type: ignore[arg-type]
                agents=None if agents is None else [a.strip() for a in agents.split(",")],
                restore=restore, progress=True)
            typer.echo(f"wrote {dataset.total_episodes} episodes, {dataset.total_steps} steps "
                       f"into {target}")
            typer.echo(f"load it with: minari.load_dataset({target!r})")
            return
        rel_dir, name_, uid_ = (Path("vaults"), None, None) if target is None \
            else _vault_target(target)
        path = to_vault(source, rel_dir, name_, uid_, chunk_steps=chunk_steps,
                        compression=_compression(compression),
                        dones=dones,  # type: ignore[arg-type]
                        terminals=terminals,  # type: ignore[arg-type]
                        state=state,  # type: ignore[arg-type]
                        seeds=seeds, progress=True)
    except (MarlMinariError, ValueError, FileNotFoundError, FileExistsError) as exc:
        raise _fail(exc) from None
    name = os.path.relpath(path.parent, Path.cwd() / rel_dir)
    typer.echo(f"wrote vault {path}")
    typer.echo(f"read it with: flashbax.vault.Vault({name!r}, rel_dir={str(rel_dir)!r}, "
               f"vault_uid={path.name!r}).read()")


def _vault_target(target: str) -> tuple[Path, str, str]:
    path = Path(target)
    if len(path.parts) < 2:
        raise typer.BadParameter(
            f"{target!r} is not a vault folder: give rel_dir/vault_name/vault_uid (or "
            "vault_name/vault_uid under the current folder)", param_hint="TARGET")
    return path.parent.parent, path.parent.name, path.name


def _compression(name: str) -> dict[str, Any] | None:
    choices: dict[str, dict[str, Any] | None] = {
        "gzip": {"id": "gzip", "level": 5}, "zstd": {"id": "zstd", "level": 3}, "none": None}
    if name not in choices:
        raise typer.BadParameter(f"compression must be gzip, zstd or none, got {name!r}",
                                 param_hint="--compression")
    return choices[name]


def vault_info(
    path: Annotated[str, typer.Argument(help="A vault folder (rel_dir/vault_name/vault_uid).")],
) -> None:
    """Arrays, streams, length and provenance of a Flashbax vault."""
    from marl_minari.adapters._store import VaultReader

    try:
        reader = VaultReader(path)
    except (MarlMinariError, ValueError) as exc:
        raise _fail(exc) from None
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
