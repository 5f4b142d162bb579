"""The page in a real browser (Debian's chromium, headless, driven by Playwright): it loads
with no console error, shows every agent, draws an episode's timeline, plays image frames,
shows whose turn it was; the written file opens offline. A screenshot of each is kept under
the session's temporary folder (printed with ``-s``) to look at."""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import marl_minari as mm
from marl_minari.view import serve, write_page

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
sync_api = pytest.importorskip("playwright.sync_api")
if not Path(CHROMIUM).exists():
    pytest.skip("needs Debian's chromium (apt-get install chromium)", allow_module_level=True)

METADATA = {"algorithm_name": "random", "author": "tests", "author_email": "tests@example.com",
            "code_permalink": "https://example.com/tests"}


def _random_parallel(collector: Any, episodes: int) -> None:
    for episode in range(episodes):
        collector.reset(seed=episode)
        for space in map(collector.action_space, collector.possible_agents):
            space.seed(episode)
        while collector.agents:
            collector.step({a: collector.action_space(a).sample() for a in collector.agents})


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Folders of small real datasets: MPE spread (parallel, state), pistonball (image
    observations and state), tic-tac-toe (turn-based, legal-action masks)."""
    root = tmp_path_factory.mktemp("view-datasets")
    with pytest.MonkeyPatch.context() as patch, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        patch.setenv("MINARI_DATASETS_PATH", str(root))
        spread = mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", max_cycles=12))
        _random_parallel(spread, 6)
        spread.create_dataset("view/spread-v0",
                              description="</script><img src=x onerror=alert(1)>", **METADATA)
        piston = mm.ParallelDataCollector(
            mm.make_env("butterfly/pistonball-v6", max_cycles=6, n_pistons=4),
            jpeg_encoding=True)
        _random_parallel(piston, 1)
        piston.create_dataset("view/pistonball-v0", description="pistonball", **METADATA)
        game = mm.AECDataCollector(mm.make_env("classic/tictactoe-v3", api="aec"))
        for seed in range(3):
            game.reset(seed=seed)
            rng = np.random.default_rng(seed)
            for _ in game.agent_iter():
                observation, _, terminated, truncated, _ = game.last()
                game.step(None if terminated or truncated else int(
                    rng.choice(np.flatnonzero(observation["action_mask"]))))
        game.create_dataset("view/tictactoe-v0", description="tic-tac-toe", **METADATA)
    return {name: root / "view" / f"{name}-v0"
            for name in ("spread", "pistonball", "tictactoe")}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("view-screenshots")
    print(f"\nscreenshots: {folder}")
    return folder


@pytest.fixture
def open_page(browser: Any) -> Iterator[Callable[[str], tuple[Any, list[str]]]]:
    """``open_page(url)`` -> ``(page, problems)``: the page loaded and drawn; ``problems``
    collects console errors and warnings, uncaught exceptions and failed requests."""
    contexts = []

    def open_(url: str) -> tuple[Any, list[str]]:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        contexts.append(context)
        page = context.new_page()
        problems: list[str] = []
        page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
                if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: problems.append(f"exception: {e}"))
        page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
        page.goto(url)
        page.wait_for_selector("body[data-ready='1']", timeout=20_000)
        return page, problems

    yield open_
    for context in contexts:
        context.close()


def _open_episode(page: Any, episode_id: int) -> None:
    page.click(f"#episode-table tbody tr[data-id='{episode_id}']")
    page.wait_for_selector(f"body[data-episode='{episode_id}']", state="attached",
                           timeout=20_000)


def test_the_page_shows_every_agent_and_draws_an_episode(
        datasets: dict[str, Path], open_page: Callable, shots: Path) -> None:
    with serve(datasets["spread"]) as server:
        page, problems = open_page(server.url)
        agents = ["agent_0", "agent_1", "agent_2"]
        assert page.locator(".agent-panel h3").all_inner_texts() == agents
        # the description is shown as text, never run as markup
        assert "</script><img src=x onerror=alert(1)>" in page.inner_text("#card")
        assert page.locator("#card img").count() == 0
        assert page.locator("#episode-table tbody tr").count() == 6
        page.screenshot(path=shots / "spread-dataset.png")

        page.click("#episode-table th[data-key='team']")  # highest team return first
        ids = [int(i) for i in page.locator("#episode-table tbody tr").evaluate_all(
            "rows => rows.map(r => r.dataset.id)")]
        summary = server.source
        returns = [float(summary.read([i]).team_rewards.sum()) for i in ids]
        assert returns == sorted(returns, reverse=True)

        _open_episode(page, ids[0])
        assert page.locator("#episode .uplot").count() >= 2  # reward and return
        assert page.locator("#lanes").count() == 1 and page.locator("#state-heatmap").count()
        page.evaluate("window.mmView.setStep(4)")
        assert page.inner_text("#step-label") == "step 4 of 12"
        readout = page.locator("#readout tbody tr").all_inner_texts()
        assert [row.split("\t")[0] for row in readout] == agents
        page.locator("#episode").screenshot(path=shots / "spread-episode.png")
        assert problems == []


def test_an_image_dataset_plays_frames(datasets: dict[str, Path], open_page: Callable,
                                       shots: Path) -> None:
    with serve(datasets["pistonball"]) as server:
        page, problems = open_page(server.url)
        _open_episode(page, 0)
        frames = page.locator("#frames img")
        assert frames.count() == 5  # four pistons and the state
        sources = "imgs => imgs.map(i => i.getAttribute('src'))"
        first = frames.evaluate_all(sources)
        assert all(src.startswith("data:image/jpeg;base64,") for src in first)
        assert min(frames.evaluate_all("imgs => imgs.map(i => i.naturalWidth)")) > 0
        payload = json.loads(server.episode(0))
        streams = [a["frames"]["images"] for a in payload["agents"]]
        streams.append(payload["state"]["images"])
        assert first == [images[0] for images in streams]
        for step in (3, 6):  # the frames follow the timeline
            page.evaluate(f"window.mmView.setStep({step})")
            assert frames.evaluate_all(sources) == [images[step] for images in streams]
        page.locator("#episode").screenshot(path=shots / "pistonball-episode.png")
        assert problems == []


def test_a_turn_based_dataset_shows_whose_turn_it_was(
        datasets: dict[str, Path], open_page: Callable, shots: Path) -> None:
    with serve(datasets["tictactoe"]) as server:
        page, problems = open_page(server.url)
        _open_episode(page, 0)
        episode = server.source.read([0])
        turns = episode.extras["agent_selection"]
        agents = list(server.source.spec.possible_agents)
        for step in (0, 1, 2):
            page.evaluate(f"window.mmView.setStep({step})")
            assert page.inner_text("#turn") == f"turn: {agents[int(turns[step])]}"
            assert page.locator("#readout tr.turn td").first.inner_text() == \
                agents[int(turns[step])]
        assert page.locator("#lanes").count() == 1
        last = len(turns) - 1
        page.evaluate(f"window.mmView.setStep({last})")
        assert page.inner_text("#turn") == "turn: nobody (game over)"
        # each player's reward as credited: the readout's return column is the player's sum
        page.evaluate(f"window.mmView.setStep({last - 1})")
        shown = [float(row.split("\t")[3]) for row in
                 page.locator("#readout tbody tr").all_inner_texts()]
        assert shown == pytest.approx(episode.rewards.sum(axis=0).tolist(), abs=1e-3)
        page.locator("#episode").screenshot(path=shots / "tictactoe-episode.png")
        assert problems == []


def test_the_written_file_opens_offline_with_its_sample(
        datasets: dict[str, Path], browser: Any, shots: Path, tmp_path: Path) -> None:
    out = write_page(datasets["spread"], tmp_path / "spread.html", sample_episodes=2)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    requested: list[str] = []
    context.route("**/*", lambda route: (requested.append(route.request.url),
                                         route.abort() if not route.request.url.startswith(
                                             ("file:", "data:")) else route.continue_()))
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.goto(out.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=20_000)
    assert "holds 2 of the 6 episodes" in page.inner_text("#sample-note")
    held = page.locator("#episode-table tbody tr:not(.absent)").evaluate_all(
        "rows => rows.map(r => Number(r.dataset.id))")
    assert len(held) == 2 and page.locator("#episode-table tr.absent").count() == 4
    _open_episode(page, held[0])
    page.screenshot(path=shots / "spread-file.png", full_page=True)
    assert [url for url in requested if not url.startswith(("file:", "data:"))] == []
    assert problems == []
    context.close()


def test_compare_shows_identical_episodes(datasets: dict[str, Path], open_page: Callable,
                                          shots: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy-v0"
    shutil.copytree(datasets["spread"], copy)
    with serve(datasets["spread"], compare=copy) as server:
        page, problems = open_page(server.url)
        assert page.inner_text("#identical") == (
            f"All 6 episodes of {datasets['spread']} are identical to episodes of {copy}: "
            "the same data.")
        assert page.locator("#comparison .uplot").count() == 4  # team and each agent
        page.locator("#comparison").screenshot(path=shots / "spread-compare.png")
        assert problems == []


def _with_a_death(agents: int, length: int) -> Any:
    """An episode of ``agents`` agents in which ``agent_1`` terminates at step 3 and the
    others play on to the end."""
    from marl_minari.storage.episode import MultiAgentEpisode

    rng = np.random.default_rng(0)
    names = tuple(f"agent_{i}" for i in range(agents))
    active = np.ones((length + 1, agents), dtype=bool)
    acted = np.ones((length, agents), dtype=bool)
    terminations = np.zeros((length, agents), dtype=bool)
    active[4:, 1], acted[4:, 1], terminations[3, 1] = False, False, True
    terminations[-1, :] = True
    terminations[-1, 1] = False
    rewards = np.where(acted, rng.normal(size=(length, agents)), 0.0)
    observations = {a: np.where(active[:, [i]], rng.uniform(-1, 1, (length + 1, 2)), 0)
                    .astype(np.float32) for i, a in enumerate(names)}
    actions = {a: np.where(acted[:, i], rng.integers(3, size=length), 0)
               for i, a in enumerate(names)}
    ends = np.zeros(length, dtype=bool)
    ends[-1] = True
    return MultiAgentEpisode(
        possible_agents=names, observations=observations, actions=actions, rewards=rewards,
        terminations=terminations, truncations=np.zeros((length, agents), dtype=bool),
        active=active, acted=acted, team_rewards=rewards.sum(axis=1),
        episode_terminations=ends, episode_truncations=np.zeros(length, dtype=bool), seed=0)


def test_many_agents_and_a_death(open_page: Callable, shots: Path,
                                 datasets_root: Path) -> None:
    from gymnasium import spaces

    from marl_minari.format.spec import MultiAgentSpec

    names = tuple(f"agent_{i}" for i in range(12))
    spec = MultiAgentSpec(api="parallel", possible_agents=names,
                          observation_spaces={a: spaces.Box(-1, 1, (2,), np.float32)
                                              for a in names},
                          action_spaces={a: spaces.Discrete(3) for a in names})
    mm.write_dataset("tests/twelve-v0", [_with_a_death(12, 10)], spec, fsync=False)
    with serve("tests/twelve-v0") as server:
        page, problems = open_page(server.url)
        assert page.locator(".agent-panel h3").all_inner_texts() == list(names)
        headers = page.locator("#episode-table th").all_inner_texts()
        assert "lowest agent return" in headers and "agent_0" not in headers
        deaths = page.locator("#episode-table tbody td").last.inner_text()
        assert deaths == "1"  # agent_1 left at step 3 while the others played on
        _open_episode(page, 0)
        page.evaluate("window.mmView.setStep(5)")
        rows = page.locator("#readout tbody tr").all_inner_texts()
        assert len(rows) == 12 and rows[1].split("\t")[1] == "absent"
        page.locator("#episode").screenshot(path=shots / "twelve-agents-episode.png")
        assert problems == []
