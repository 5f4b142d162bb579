"""What the page is given, without a browser: the summary and episode payloads, the local
server's answers, identical episodes, the written file's bounds, and the command line."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from marl_minari import open_source
from marl_minari.errors import InvalidOptionError
from marl_minari.view import (
    dataset_summary,
    episode_payload,
    identical_episodes,
    serve,
    write_page,
)
from marl_minari.view.page import render_page, script_json
from marl_minari.view.summary import agent_deaths

SPREAD = "mpe2/simple_spread_v3"


def _get(url: str | urllib.request.Request) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_the_summary_counts_every_episode_and_agent(recorded: Callable[..., Any]) -> None:
    dataset = recorded(SPREAD, 3, max_cycles=5)
    with open_source(dataset) as source:
        summary = dataset_summary(source)
    assert summary["agents"] == ["agent_0", "agent_1", "agent_2"]
    assert summary["episodes"]["id"] == [0, 1, 2]
    assert summary["episodes"]["length"] == [5, 5, 5]
    assert summary["episodes"]["end"] == ["truncated"] * 3
    with open_source(dataset) as source:
        stored = source.read([0, 1, 2]).returns()
    np.testing.assert_allclose(np.array(summary["episodes"]["returns"]).T, stored)
    assert [sum(c) for c in summary["histograms"]["returns"]["counts"]] == [3, 3, 3]
    assert summary["card"]["dataset_id"] == "tests/recorded-v0"


def test_agent_deaths_count_agents_that_left_while_others_played() -> None:
    acted = np.ones((10, 3), dtype=bool)
    terminations = np.zeros((10, 3), dtype=bool)
    assert agent_deaths(terminations, acted) == 0
    terminations[3, 1] = True  # agent 1 ends at step 3, the others play on
    acted[4:, 1] = False
    assert agent_deaths(terminations, acted) == 1
    # a turn-based game's last move ends both players; the dead steps that follow act not
    game_acted = np.zeros((7, 2), dtype=bool)
    game_acted[:5, 0], game_acted[:5, 1] = [1, 0, 1, 0, 1], [0, 1, 0, 1, 0]
    game_ends = np.zeros((7, 2), dtype=bool)
    game_ends[4:] = True
    assert agent_deaths(game_ends, game_acted) == 0


def test_an_episode_payload_holds_each_agent_on_the_step_axis(
        recorded: Callable[..., Any]) -> None:
    dataset = recorded(SPREAD, 2, max_cycles=4)
    with open_source(dataset) as source:
        payload = episode_payload(source, 1)
        arrays = source.read([1])
    assert payload["steps"] == 4 and payload["turns"] is None
    for column, agent in enumerate(payload["agents"]):
        assert agent["reward"] == arrays.rewards[:, column].tolist()
        assert agent["return"] == pytest.approx(np.cumsum(arrays.rewards[:, column]).tolist())
        assert agent["action"]["kind"] == "discrete" and agent["action"]["labels"] == 5
        assert agent["action"]["values"] == arrays.actions[agent["name"]].tolist()
        assert len(agent["active"]) == 5 and agent["truncated"] == [3]
    assert payload["state"]["kind"] == "heatmap" and len(payload["state"]["rows"]) == 5


def test_an_unknown_episode_is_refused_by_name(recorded: Callable[..., Any]) -> None:
    dataset = recorded(SPREAD, 2, max_cycles=4)
    with open_source(dataset) as source, pytest.raises(InvalidOptionError,
                                                       match="episode 7 is not in"):
        episode_payload(source, 7)


def test_the_server_answers_episodes_on_loopback_only(recorded: Callable[..., Any]) -> None:
    dataset = recorded(SPREAD, 2, max_cycles=4)
    with serve(dataset) as server:
        assert server.url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(server.url, timeout=60) as response:
            page = response.read().decode()
        assert '"mode":"server"' in page and "<script src" not in page
        status, body = _get(server.url + "api/episode/1")
        assert status == 200 and body["id"] == 1 and body["steps"] == 4
        status, body = _get(server.url + "api/episode/5")
        assert status == 404 and "episode 5 is not in" in body["error"]
        status, body = _get(server.url + "etc/passwd")
        assert status == 404 and "nothing at /etc/passwd" in body["error"]
        # another name pointed at 127.0.0.1 (DNS rebinding) gets nothing
        status, body = _get(urllib.request.Request(
            server.url + "api/episode/1", headers={"Host": f"evil.example:{server.port}"}))
        assert status == 403 and "answers only requests for 127.0.0.1" in body["error"]
        status, _ = _get(f"http://localhost:{server.port}/api/episode/1")
        assert status == 200


def test_connections_opened_at_once_wait_in_the_queue(recorded: Callable[..., Any]) -> None:
    """A browser opens several connections at once; before the server accepts them they wait
    in the listening socket's queue. One the queue has no room for is dropped, and the kernel
    retries it a second later (the standard library's queue holds 5)."""
    dataset = recorded(SPREAD, 1, max_cycles=3)
    with serve(dataset) as server:
        server._server.shutdown()  # the accept loop stops; the socket keeps listening
        waiting = []
        try:
            for _ in range(32):
                # dropped, a connection would wait for the kernel's retries until this timeout
                waiting.append(socket.create_connection(("127.0.0.1", server.port), timeout=60))
        finally:
            for connection in waiting:
                connection.close()
        assert len(waiting) == 32


def test_a_taken_port_is_a_typed_error(recorded: Callable[..., Any]) -> None:
    dataset = recorded(SPREAD, 1, max_cycles=3)
    with serve(dataset) as first, pytest.raises(InvalidOptionError, match="pick another"):
        serve(dataset, port=first.port)


def test_identical_episodes_are_found_and_different_ones_are_not(
        recorded: Callable[..., Any], datasets_root: Path) -> None:
    first = recorded(SPREAD, 3, max_cycles=4, dataset_id="tests/first-v0")
    other = recorded(SPREAD, 2, max_cycles=5, dataset_id="tests/other-v0")
    with open_source(first) as a, open_source(first) as b:
        assert identical_episodes(a, b) == [(0, 0), (1, 1), (2, 2)]
    with open_source(first) as a, open_source(other) as b:
        assert identical_episodes(a, b) == []


def test_the_written_file_is_self_contained_and_bounded(
        recorded: Callable[..., Any], tmp_path: Path) -> None:
    dataset = recorded(SPREAD, 6, max_cycles=4)
    out = write_page(dataset, tmp_path / "page.html", sample_episodes=3)
    text = out.read_text()
    assert "<script src" not in text and "<link rel=\"stylesheet\"" not in text
    assert "holds 3 of the 6 episodes" in text
    data = json.loads(text.split('type="application/json">', 1)[1].split("</script>", 1)[0])
    assert len(data["sample"]) == 3
    # a budget smaller than one episode keeps one, without frames
    tight = write_page(dataset, tmp_path / "tight.html", sample_bytes=10)
    assert "holds 1 of the 6 episodes" in tight.read_text()


def test_out_must_name_a_file_in_an_existing_folder(recorded: Callable[..., Any],
                                                    tmp_path: Path) -> None:
    dataset = recorded(SPREAD, 1, max_cycles=3)
    with pytest.raises(InvalidOptionError, match="give a file name in an existing folder"):
        write_page(dataset, tmp_path)
    with pytest.raises(InvalidOptionError, match="give a file name in an existing folder"):
        write_page(dataset, tmp_path / "missing" / "page.html")


def test_data_never_closes_the_script_that_holds_it() -> None:
    text = script_json({"description": "</script><script>alert(1)</script><!--"})
    assert "</script" not in text and "<!--" not in text
    assert json.loads(text)["description"] == "</script><script>alert(1)</script><!--"
    summary = {"name": "x</title>", "agents": [], "kind": "multi_agent"}
    assert "x&lt;/title&gt;" in render_page(summary, mode="file")


def test_the_command_writes_the_page(cli_run: Callable[..., Any],
                                     recorded: Callable[..., Any], tmp_path: Path) -> None:
    recorded(SPREAD, 2, max_cycles=3)
    out = tmp_path / "page.html"
    result = cli_run("view", "tests/recorded-v0", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"wrote {out}" and out.stat().st_size > 50_000
    result = cli_run("view", "tests/recorded-v0", "--out", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.startswith("error: cannot write the page to")


def test_the_command_serves_until_interrupted(recorded: Callable[..., Any]) -> None:
    recorded(SPREAD, 2, max_cycles=3)
    process = subprocess.Popen([sys.executable, "-m", "marl_minari", "view",
                                "tests/recorded-v0"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("serving tests/recorded-v0 at http://127.0.0.1:"), line
        url = line.split(" at ", 1)[1].split(" ", 1)[0]
        status, body = _get(url + "api/episode/0")
        assert status == 200 and body["steps"] == 3
    finally:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr


@pytest.fixture
def cli_run() -> Callable[..., subprocess.CompletedProcess[str]]:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "marl_minari", *args],
                              capture_output=True, text=True, timeout=300)

    return run


def test_a_plain_dataset_is_one_agent_and_coverage_is_on_the_card(
        record_cartpole: Callable[..., Any]) -> None:
    dataset = record_cartpole("tests/cartpole-v0", 2)
    with open_source(dataset) as source:
        summary = dataset_summary(source, coverage=True)
        payload = episode_payload(source, 1)
    assert summary["agents"] == ["agent_0"] and summary["kind"] == "single_agent"
    assert summary["coverage"].startswith("SACo ")
    assert payload["agents"][0]["action"]["kind"] == "discrete"
    assert len(payload["agents"][0]["reward"]) == payload["steps"]


def test_a_vault_is_a_source_like_any_other(recorded: Callable[..., Any],
                                            tmp_path: Path) -> None:
    from marl_minari.adapters import to_vault

    recorded(SPREAD, 2, max_cycles=4)
    to_vault("tests/recorded-v0", rel_dir=tmp_path / "vaults", vault_name="spread",
             vault_uid="Random")
    out = write_page(tmp_path / "vaults" / "spread" / "Random", tmp_path / "vault.html")
    data = json.loads(out.read_text().split('type="application/json">', 1)[1]
                      .split("</script>", 1)[0])
    assert data["summary"]["kind"] == "vault" and len(data["sample"]) == 2
    assert data["summary"]["agents"] == ["agent_0", "agent_1", "agent_2"]


def test_frames_are_small_and_share_one_budget_per_episode() -> None:
    import base64
    import io

    from gymnasium import spaces
    from PIL import Image

    from marl_minari.view.episode import image_streams
    from marl_minari.view.frames import FRAMES_PER_EPISODE, MAX_FRAMES, frame_rows, frames

    image = spaces.Box(0, 255, (64, 64, 3), np.uint8)
    flat = spaces.Box(-1, 1, (2,), np.float32)
    assert image_streams({"a": image, "b": spaces.Dict({"rgb": image, "x": flat}),
                          "c": flat}, image) == 3
    rows = frame_rows(1001, min(MAX_FRAMES, FRAMES_PER_EPISODE // 21))
    assert len(rows) == 28 and rows[0] == 0 and rows[-1] == 1000
    tall = np.random.default_rng(0).integers(0, 256, (3, 457, 120, 3), dtype=np.uint8)
    shown = frames(tall, np.array([2]))
    picture = Image.open(io.BytesIO(base64.b64decode(shown[0].split(",", 1)[1])))
    assert picture.format == "JPEG" and max(picture.size) <= 200 and picture.size[1] > 150


def test_view_serves_or_writes(recorded: Callable[..., Any], tmp_path: Path) -> None:
    from marl_minari.view import ViewServer, view

    dataset = recorded(SPREAD, 1, max_cycles=3)
    written = view(dataset, out=tmp_path / "page.html")
    assert written == tmp_path / "page.html" and written.is_file()
    served = view(dataset, port=0)
    try:
        assert isinstance(served, ViewServer) and _get(served.url + "api/episode/0")[0] == 200
    finally:
        assert isinstance(served, ViewServer)
        served.close()
