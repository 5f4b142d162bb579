"""Wrong arguments of compare, the figures and the cards are refused as ``InvalidOptionError``s
that name the argument and the fix; output files go to existing folders at the command line;
untrusted metadata shows as text in a card, never as markup."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from synthetic import write_episodes
from typer.testing import CliRunner

from marl_minari.cli import app
from marl_minari.cli.errors import EXIT_FAILURE, EXIT_USAGE
from marl_minari.describe import (
    DatasetDescription,
    compare,
    dataset_card,
    describe,
    draw_descriptions,
    plot_comparison,
    plot_coverage,
    plot_descriptions,
)
from marl_minari.errors import EmptyDatasetError, InvalidOptionError, MarlMinariError


@pytest.fixture
def few() -> DatasetDescription:
    write_episodes("tests/few-v0", [4, 5, 6], [1.0, 2.0, 3.0])
    return describe("tests/few-v0", coverage=True)


def error_line(result: Any) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


# ---------------------------------------------------------------- compare: an empty dataset
@pytest.mark.parametrize("empty_first", [False, True])
def test_compare_refuses_a_dataset_without_episodes(few: DatasetDescription,
                                                    empty_first: bool) -> None:
    write_episodes("tests/empty-v0", [], [])
    sources = ["tests/empty-v0", "tests/few-v0"] if empty_first else ["tests/few-v0",
                                                                      "tests/empty-v0"]
    with pytest.raises(EmptyDatasetError, match=r"dataset 'tests/empty-v0' holds no "
                                              "episodes.*leave it out of the comparison"
                       ) as caught:
        compare(sources, coverage=False)
    assert isinstance(caught.value, MarlMinariError)
    # the data's state, not a wrong command line: exit 1, as subset of an empty dataset
    result = CliRunner().invoke(app, ["compare", *sources, "--no-coverage"])
    assert result.exit_code == EXIT_FAILURE and result.stdout == ""
    assert "dataset 'tests/empty-v0' holds no episodes" in error_line(result)


# ---------------------------------------------------------------- the figures' arguments
@pytest.mark.parametrize(("bad", "named"), [
    ({"bins": 2.5}, "bins=2.5"), ({"bins": float("nan")}, "bins=nan"),
    ({"bins": True}, "bins=True"), ({"bins": [1, 2, 3]}, "bins=[1, 2, 3]"),
    ({"dpi": 0}, "dpi=0"), ({"dpi": -5}, "dpi=-5"), ({"dpi": float("inf")}, "dpi=inf"),
    ({"dpi": "100"}, "dpi='100'"), ({"labels": "ab"}, "labels='ab'")])
def test_figure_arguments_are_named(few: DatasetDescription, tmp_path: Path,
                                    bad: dict[str, Any], named: str) -> None:
    pytest.importorskip("matplotlib")
    with pytest.raises(InvalidOptionError) as caught:
        plot_descriptions([few, few], tmp_path / "p.png", **bad)
    assert str(caught.value).startswith(named)
    assert not (tmp_path / "p.png").exists()


def test_numpy_integers_are_a_number_of_bins(few: DatasetDescription) -> None:
    np = pytest.importorskip("numpy")
    pytest.importorskip("matplotlib")
    # two bins, where a rule would give the lengths 4, 5, 6 one bin each
    figure = draw_descriptions([few], bins=np.int64(2), dpi=50.0)
    lengths = figure.axes[0]
    assert len(lengths.patches) == 2


@pytest.mark.parametrize("function", ["plot_comparison", "plot_coverage"])
def test_comparison_and_coverage_figures_check_dpi(few: DatasetDescription, tmp_path: Path,
                                                   function: str) -> None:
    pytest.importorskip("matplotlib")
    with pytest.raises(InvalidOptionError, match="dpi=0: give a positive number"):
        if function == "plot_comparison":
            plot_comparison(compare([few, few]), tmp_path / "c.png", dpi=0)
        else:
            plot_coverage(few, tmp_path / "c.png", dpi=0)


def test_one_description_or_an_id_where_the_list_goes(few: DatasetDescription,
                                                      tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    out.mkdir()
    target = out / "p.png"
    with pytest.raises(InvalidOptionError, match=r"takes a list of descriptions, not one "
                                                 r"DatasetDescription: e\.g\. plot_desc"):
        plot_descriptions(few, target)  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="not one str"):
        plot_descriptions("tests/few-v0", target)  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match=r"descriptions\[1\] is a str "
                                                 r"\('tests/few-v0'\).*describe\('tests/few-v0'\)"):
        plot_descriptions([few, "tests/few-v0"], target)  # type: ignore[list-item]
    with pytest.raises(InvalidOptionError, match="dataset_card: description is a str"):
        dataset_card("tests/few-v0", out / "README.md")  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="plot_comparison takes what compare"):
        plot_comparison([few, few], target)  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="plot_coverage takes a description"):
        plot_coverage("tests/few-v0", target)  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="plot_coverage: item 1 is a str"):
        plot_coverage([few, "tests/few-v0"], target)  # type: ignore[list-item]
    assert list(out.iterdir()) == []


def test_a_folder_or_a_path_below_a_file_is_refused_before_drawing(
        few: DatasetDescription, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    out.mkdir()
    calls = {"plot_descriptions": (lambda p: plot_descriptions([few], p), "figure.png"),
             "plot_comparison": (lambda p: plot_comparison(compare([few, few]), p),
                                 "compare.png"),
             "plot_coverage": (lambda p: plot_coverage(few, p), "pairs.png"),
             "dataset_card": (lambda p: dataset_card(few, p), "README.md")}
    (out / "file.txt").write_text("")
    for name, (call, example) in calls.items():
        with pytest.raises(InvalidOptionError) as caught:
            call(out)
        assert str(caught.value) == (f"{name}: path {out} is a folder; name the file "
                                     f"to write, e.g. {out / example}")
        with pytest.raises(InvalidOptionError, match="file.txt is a file, not a folder"):
            call(out / "file.txt" / "deeper" / "out")
    with pytest.raises(InvalidOptionError, match=r"dataset_card: plot .* is a folder.*"
                                                 r"statistics\.png"):
        dataset_card(few, out / "README.md", plot=out)
    assert sorted(p.name for p in out.iterdir()) == ["file.txt"]
    # the library still makes the folders it is asked to write into
    assert plot_descriptions([few], out / "new" / "p.png").is_file()


# ---------------------------------------------------------------- the command line's files
@pytest.mark.parametrize(("command", "option"), [
    (["describe", "tests/few-v0", "--plot"], "--plot"),
    (["describe", "tests/few-v0", "--card"], "--card"),
    (["describe", "tests/few-v0", "--coverage-plot"], "--coverage-plot"),
    (["compare", "tests/few-v0", "tests/few-v0", "--plot"], "--plot")])
def test_output_folders_must_exist_at_the_command_line(
        few: DatasetDescription, tmp_path: Path, command: list[str], option: str) -> None:
    missing = tmp_path / "missing" / "dir"
    result = CliRunner().invoke(app, [*command, str(missing / "out.png")])
    assert result.exit_code == EXIT_USAGE and result.stdout == ""
    assert error_line(result) == (
        f"error: {option} {missing / 'out.png'}: the folder {missing} does not exist; create "
        f"it first (mkdir -p {missing}) or name a file in an existing folder")
    assert not (tmp_path / "missing").exists()
    (tmp_path / "file.txt").write_text("")
    result = CliRunner().invoke(app, [*command, str(tmp_path / "file.txt" / "out.png")])
    assert result.exit_code == EXIT_USAGE
    assert "file.txt is a file, not a folder" in error_line(result)


@pytest.mark.parametrize(("option", "example"), [("--card", "README.md"),
                                                 ("--plot", "figure.png"),
                                                 ("--coverage-plot", "pairs.png")])
def test_a_folder_given_for_a_file_gets_a_name_that_fits(few: DatasetDescription,
                                                         tmp_path: Path, option: str,
                                                         example: str) -> None:
    result = CliRunner().invoke(app, ["describe", "tests/few-v0", option, str(tmp_path)])
    assert result.exit_code == EXIT_USAGE
    assert error_line(result).endswith(f"is a folder; name the file to write, e.g. "
                                       f"{tmp_path / example}")


# ---------------------------------------------------------------- cards: metadata as text
SCRIPT = "<script>alert(1)</script>"


def cells(row: str) -> list[str]:
    """A GFM table row's cells: split on the pipes no backslash escapes."""
    return re.split(r"(?<!\\)\|", row.strip())[1:-1]


def test_card_shows_untrusted_metadata_as_text(few: DatasetDescription, tmp_path: Path) -> None:
    odd = "a`<b>|c"
    agents = (odd, *few.possible_agents[1:])
    metadata = {**few.metadata, "author": SCRIPT, "algorithm_name": f"x | y\n{SCRIPT}",
                "code_permalink": "<img src=x onerror=alert(1)>",
                "description": f"Line one & **bold**\n\n{SCRIPT}",
                "observation_spaces": {odd: f"Box({SCRIPT}|`)"}}
    evil = dataclasses.replace(
        few, name="tests/<i>few</i>-v0", possible_agents=agents, metadata=metadata,
        agents=(dataclasses.replace(few.agents[0], name=odd), *few.agents[1:]))
    text = dataset_card(evil, tmp_path / "README.md", plot=False).read_text()
    body = text.split("---\n", 2)[2]
    # inside code blocks and code spans, HTML is shown as it is written
    prose = re.sub(r"^```.*?^```$", "", body, flags=re.MULTILINE | re.DOTALL)
    prose = re.sub(r"(?<!`)(`+)(?!`).*?(?<!`)\1(?!`)", "", prose)
    assert "<script" not in prose and "<img" not in prose and "<i>" not in prose
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "# tests/&lt;i&gt;few&lt;/i&gt;-v0" in body
    assert "Line one &amp; **bold**\n\n&lt;script&gt;" in body  # Markdown kept, HTML shown
    rows = [line for line in body.splitlines() if line.startswith("|")]
    summary = [r for r in rows if r.startswith("| Algorithm ")]
    assert summary == ["| Algorithm | x \\| y &lt;script&gt;alert(1)&lt;/script&gt; |"]
    # every row of a table has as many cells as its header: no value splits or ends one
    tables: list[list[str]] = []
    for line in body.splitlines():
        if line.startswith("|"):
            tables[-1].append(line) if tables and tables[-1] else tables.append([line])
        elif tables and tables[-1]:
            tables.append([])
    for table in filter(None, tables):
        assert {len(cells(r)) for r in table} == {len(cells(table[0]))}, table
    # an agent name with a backtick stays inside its code span (a longer fence)
    spaces = next(r for r in rows if "Box(" in r)
    assert cells(spaces)[0].strip() == "``a`<b>\\|c``"
    assert f"``Box({SCRIPT}\\|`)``" in spaces
