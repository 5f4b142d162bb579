"""Hugging Face style dataset cards (Markdown with YAML front matter)."""

from __future__ import annotations

import html
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

from marl_minari.describe import checks
from marl_minari.describe._format import env_name, num
from marl_minari.describe.coverage_results import CountFrequencies
from marl_minari.describe.plots import plot_descriptions
from marl_minari.describe.results import DatasetDescription, Summary
from marl_minari.errors import MissingExtraError
from marl_minari.extras import require
from marl_minari.user_warnings import warn

CARD_PLOT_NAME: Final = "statistics.png"
"""File name of the plot :func:`dataset_card` writes next to the card by default."""
_SIZE_CATEGORIES: Final = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
                           (1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M"),
                           (100_000_000, "10M<n<100M"), (1_000_000_000, "100M<n<1B"),
                           (10_000_000_000, "1B<n<10B"))


def size_category(steps: int) -> str:
    """The Hugging Face ``size_categories`` value for ``steps`` examples (steps)."""
    for bound, name in _SIZE_CATEGORIES:
        if steps < bound:
            return name
    return "n>10B"


def dataset_card(description: DatasetDescription, path: str | os.PathLike[str], *,
                 plot: bool | str | os.PathLike[str] | None = None, license: str | None = None,
                 tags: Sequence[str] = ()) -> Path:
    """Write a Hugging Face style dataset card (Markdown with YAML front matter).

    The card holds the metadata (env descriptor, agents, spaces, author, algorithm, code
    permalink, layout version), the statistics and, with ``plot``, the plot of
    :func:`plot_descriptions` linked by a relative path. Written as ``README.md`` into the
    dataset's folder (``dataset_dir(id) / "README.md"``), it is published with
    the dataset (the plot too, when it lies in that folder).

    Args:
        description: what :func:`describe` returned.
        path: the Markdown file to write (missing parent folders are created).
        plot: ``True`` writes ``statistics.png`` next to the card; a path writes the plot
            there; ``False`` writes no plot (:func:`card_plot_path` says where it goes).
            ``None`` (default): ``True`` when matplotlib (the ``plot`` extra) is installed,
            else ``False`` with a warning saying how to add the figure; ``False`` for a
            metadata-only description (``describe(..., statistics=False)``), whose card
            holds the metadata, the counts and the episode lengths.
        license: the ``license`` front-matter value (default: the dataset metadata's
            ``license``, else ``unknown``).
        tags: extra tags.

    Returns:
        ``path``.

    Raises:
        InvalidOptionError: ``description`` is not what :func:`describe` returned, or
            ``path`` (or the ``plot`` path) is a folder or lies below a file.
        MissingExtraError: ``plot`` asks for a figure and matplotlib is not installed.
    """
    checks.description(description, "dataset_card", "description")
    # checked before the figure is drawn, so a wrong card path costs no drawing
    target = checks.output_file(path, "dataset_card: path", "README.md")
    if plot is None and not description.statistics:
        plot = False  # a metadata-only description has nothing to plot
    image = card_plot_path(target, plot)
    if image is not None:
        checks.output_file(image, "dataset_card: plot", CARD_PLOT_NAME)
    target.parent.mkdir(parents=True, exist_ok=True)
    if image is not None:
        plot_descriptions([description], image)
    link = None if image is None else Path(
        os.path.relpath(image.resolve(), target.parent.resolve())).as_posix()
    target.write_text(_card_text(description, link, license, tags), encoding="utf-8")
    return target


def card_plot_path(card: str | os.PathLike[str],
                   plot: bool | str | os.PathLike[str] | None = None) -> Path | None:
    """Where :func:`dataset_card` writes its plot: ``statistics.png`` next to the card for
    ``plot=True``, the given path, or ``None`` for ``plot=False``; ``plot=None`` is ``True``
    where matplotlib is installed."""
    if plot is None:
        try:
            require("matplotlib", "plot", "the dataset card's figure")
            plot = True
        except MissingExtraError:
            plot = False
            warn(f"the dataset card {card} gets no statistics figure: figures need matplotlib, "
                 'pip install "marl-minari[plot]"')
    if plot is True:
        return Path(card).parent / CARD_PLOT_NAME
    if plot is False:
        return None
    return Path(plot)


def _card_text(d: DatasetDescription, image: str | None, license: str | None,
               extra_tags: Sequence[str]) -> str:
    meta = d.metadata
    env = meta.get("env") if isinstance(meta.get("env"), dict) else None
    tag_list = ["reinforcement-learning", "offline-reinforcement-learning", "minari"]
    if d.kind != "single_agent":
        tag_list += ["multi-agent-reinforcement-learning", "marl-minari"]
    if env is not None and env.get("env_id"):
        tag_list.append(str(env["env_id"]).replace("/", "-"))
    if d.kind == "vault":
        tag_list.append("flashbax")
    tag_list += [str(t) for t in extra_tags]
    tag_list = list(dict.fromkeys(tag_list))
    front = [
        "---",
        f"license: {_yaml(license or meta.get('license') or 'unknown')}",
        f"pretty_name: {_yaml(d.name)}",
        "task_categories:",
        "- reinforcement-learning",
        "tags:",
        *[f"- {_yaml(t)}" for t in tag_list],
        "size_categories:",
        f"- {_yaml(size_category(d.total_steps))}",
        "---",
    ]
    body = [f"# {_text(d.name)}", ""]
    if meta.get("description"):
        body += [_text(meta["description"], cell=False), ""]
    body += ["## Dataset summary", "", "| | |", "|---|---|"]
    rows = [
        ("Dataset id" if d.kind != "vault" else "Vault", _code(d.name)),
        ("Kind", {"multi_agent": "multi-agent (marl-minari layout)",
                  "single_agent": "single-agent Minari dataset",
                  "vault": "Flashbax vault"}[d.kind]),
        ("Environment", env_name(meta)),
        ("Agents", _Markdown(", ".join(_code(a) for a in d.possible_agents))),
        ("Episodes", f"{d.total_episodes:,}"),
        ("Steps", f"{d.total_steps:,}"),
        ("Algorithm", meta.get("algorithm_name")),
        ("Author", _join(meta.get("author"))),
        ("Author email", _join(meta.get("author_email"))),
        ("Code permalink", meta.get("code_permalink")),
        ("Layout version", meta.get("layout_version")),
        ("marl-minari version", meta.get("library_version")),
        ("Minari version", meta.get("minari_version")),
        ("Reward aggregation", meta.get("reward_aggregation")),
        ("Size (MB)", meta.get("dataset_size")),
    ]
    body += [f"| {k} | {_cell(v)} |" for k, v in rows if v not in (None, "", [])]
    body += ["", "## Usage", "", "```python"]
    if d.kind == "multi_agent":
        body += ["import marl_minari", "", f"dataset = marl_minari.load_dataset({d.name!r})",
                 "arrays = dataset.to_arrays()   # per-agent rewards, actions, masks",
                 "", "import minari", "", f"plain = minari.load_dataset({d.name!r})"]
    elif d.kind == "single_agent":
        body += ["import minari", "", f"dataset = minari.load_dataset({d.name!r})"]
    else:
        body += ["from flashbax.vault import Vault", "",
                 f"# the vault folder: {_one_line(d.name)}", "vault = Vault(vault_name=..., "
                 "rel_dir=..., vault_uid=...)", "experience = vault.read().experience"]
    body += ["```", "", "## Agents and spaces", "",
             "| agent | observation space | action space |", "|---|---|---|"]
    for name, observation_space, action_space in d.agent_spaces():
        body.append(f"| {_code(name)} | {_code(observation_space)} | {_code(action_space)} |")
    if meta.get("state_space"):
        body += ["", f"Global state: {_code(meta['state_space'], cell=False)}"]
    if env is not None:
        body += ["", "## Environment", "", "```json", json.dumps(env, indent=2, sort_keys=True),
                 "```"]
        if d.kind == "multi_agent":
            body += ["", "`marl_minari.load_dataset(id).recover_environment()` re-creates it."]
    body += ["", "## Statistics", "", "### Episodes", "",
             "| | count | mean | std | min | 25% | median | 75% | max |",
             "|---|---|---|---|---|---|---|---|---|",
             _summary_row("length (steps)", d.episode_lengths)]
    if not d.statistics:
        body += ["", "Returns, actions and agents were not read: this card was made from the "
                 "metadata and the offset index alone (`describe(..., statistics=False)`).", ""]
        return "\n".join(front) + "\n\n" + "\n".join(body)
    body += ["", f"Terminated: {d.terminated_episodes:,}; truncated: {d.truncated_episodes:,}; "
             f"unfinished: {d.unfinished_episodes:,}.", "",
             "### Returns", ""]
    if d.team_return_always_zero:
        body += ["Undiscounted return per episode. A zero-sum game: the agents' returns add up "
                 "to zero in every episode, so the team return is always 0 (see *Outcomes*).",
                 "", "| | count | mean | std | min | 25% | median | 75% | max |",
                 "|---|---|---|---|---|---|---|---|---|"]
    else:
        body += ["Undiscounted return per episode (team: the sum of the team reward column).",
                 "", "| | count | mean | std | min | 25% | median | 75% | max |",
                 "|---|---|---|---|---|---|---|---|---|", _summary_row("team", d.team_returns)]
        if d.normalized_team_returns is not None:
            body.append(_summary_row("team, normalised", d.normalized_team_returns))
    body += [_summary_row(_code(a.name), a.returns) for a in d.agents]
    body += _outcome_lines(d)
    body += ["", "### Agents", "",
             f"Inactive agent-steps (agent absent): {d.inactive_share:.2%} overall.", "",
             "| agent | active steps | acted steps | inactive | terminations | truncations |",
             "|---|---|---|---|---|---|"]
    body += [f"| {_code(a.name)} | {a.active_steps:,} | {a.acted_steps:,} | "
             f"{a.inactive_share:.2%} | {a.terminations:,} | {a.truncations:,} |"
             for a in d.agents]
    body += _coverage_lines(d)
    body += ["", "### Actions", ""]
    for agent in d.agents:
        for action in agent.actions:
            where = _code(agent.name, cell=False) + (
                f" {_code(action.path, cell=False)}" if action.path else "")
            body.append(f"- {where} ({action.kind}, {action.samples:,} actions"
                        + (f", {action.out_of_space:,} outside the space"
                           if action.out_of_space else "")
                        + f"): {_text(action.text(top=12), cell=False)}")
    if image is not None:
        alt = _text(d.name).replace("[", "\\[").replace("]", "\\]")
        body += ["", "## Plots", "", f"![Statistics of {alt}]({quote(image)})"]
    body.append("")
    return "\n".join(front) + "\n\n" + "\n".join(body)


def _coverage_lines(d: DatasetDescription) -> list[str]:
    """The *Coverage* section (nothing unless described with ``coverage=True``)."""
    c = d.coverage
    if c is None:
        return []
    state = ("the global state" if c.state_source == "state" else
             "the joint observation (the dataset records no global state)")
    lines = ["", "### Coverage", "",
             f"As OG-MARL measures it, over {c.transitions:,} transitions: SACo "
             f"{c.saco:.4f} ({c.state_pairs:,} distinct pairs of {state} rounded to "
             f"{c.decimals} decimals and the joint action); average OACo {c.oaco:.4f}."
             + _repeats(c.state_frequencies), "",
             "| agent | distinct (observation, action) pairs | OACo | occur once | most repeated |",
             "|---|---|---|---|---|"]
    for name, share in c.agents.items():
        counted = c.agent_frequencies[name]
        lines.append(f"| {_code(name)} | {c.agent_pairs[name]:,} | {share:.4f} | "
                     f"{counted.once:,} | {counted.most:,} times |")
    return lines


def _repeats(counted: CountFrequencies) -> str:
    """How much the (state, joint action) pairs repeat, in a sentence (nothing without
    pairs)."""
    if not counted.distinct:
        return ""
    return (f" Of the distinct (state, joint action) pairs, "
            f"{counted.once / counted.distinct:.0%} occur once; the most repeated occurs "
            f"{counted.most:,} times.")


def _outcome_lines(d: DatasetDescription) -> list[str]:
    """The *Outcomes* section of a turn-based game (nothing for other datasets)."""
    rows = [(a.name, a.outcome) for a in d.agents if a.outcome is not None]
    if not rows:
        return []
    games = max(outcome.games for _, outcome in rows)
    lines = ["", "### Outcomes", "",
             f"{games:,} terminated games, read from the final rewards (the last rewarded "
             "step): positive is a win, negative a loss, zero a draw.", "",
             "| agent | wins | draws | losses |", "|---|---|---|---|"]
    lines += [f"| {_code(name)} | {o.wins:,} ({o.share(o.wins):.1%}) | "
              f"{o.draws:,} ({o.share(o.draws):.1%}) | {o.losses:,} ({o.share(o.losses):.1%}) |"
              for name, o in rows]
    return lines


def _summary_row(label: str, s: Summary) -> str:
    cells = [s.mean, s.std, s.min, s.q25, s.median, s.q75, s.max]
    return f"| {label} | {s.count:,} | " + " | ".join(num(c) for c in cells) + " |"


def _yaml(value: str) -> str:
    """A YAML scalar: JSON's double-quoted strings are valid YAML."""
    return json.dumps(str(value), ensure_ascii=False)


def _join(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        parts = [str(v) for v in value if v]
        return ", ".join(parts) or None
    return str(value)


class _Markdown(str):
    """Text already written as Markdown (code spans), put into the card as it is."""


def _one_line(value: Any) -> str:
    return " ".join(str(value).splitlines())


def _text(value: Any, *, cell: bool = True) -> str:
    """Untrusted metadata as Markdown text: HTML special characters escaped, so it shows as
    written and is never markup (``view`` puts the same strings on its page as text); in a
    table cell also ``|`` escaped and line breaks as spaces, so it stays one cell."""
    text = html.escape(str(value), quote=False)
    return _one_line(text.replace("|", "\\|")) if cell else text


def _code(value: Any, *, cell: bool = True) -> _Markdown:
    """A code span of ``value`` that its own backticks cannot close (CommonMark: a longer
    fence), on one line; in a table cell with ``|`` escaped (GFM unescapes it there)."""
    text = _one_line(value)
    if cell:
        text = text.replace("|", "\\|")
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return _Markdown(f"{fence}{pad}{text}{pad}{fence}")


def _cell(value: Any) -> str:
    return value if isinstance(value, _Markdown) else _text(value)
