"""What the dataset page costs: from ``view ID`` to a drawn page, the written file's size,
and opening one long episode.

Records mpe2 ``simple_spread_v3`` (3 agents, discrete actions, a 54-float state): ``--episodes``
episodes of 25 steps, and ``--long-episodes`` episodes of ``--long-steps`` steps. Debian's
chromium (headless, through Playwright) is started once, before any timing: a user's browser is
already running. Each figure is the median of ``--repeats`` runs::

    python benchmarks/bench_view.py
    python benchmarks/bench_view.py --episodes 200 --repeats 1     # a quick look

1. ``serve(ID)`` until the page's script has drawn everything (the card, every histogram and
   the episode table: ``body[data-ready]``), split into the server's part (reading the dataset
   for the summary) and the browser's (loading and drawing the page).
2. ``write_page(ID, FILE)``: the file's size, and its time to open from disk and draw.
3. Opening one ``--long-steps`` episode: from the click on its row to every chart, lane and the
   state heatmap drawn (``body[data-episode]``), from the server and from a written file.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

CHROMIUM = "/usr/bin/chromium"


def record(dataset_id: str, episodes: int, steps: int) -> None:
    import marl_minari as mm

    collector = mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", max_cycles=steps),
                                         durability="none")
    rng = np.random.default_rng(0)
    for episode in range(episodes):
        collector.reset(seed=episode)
        while collector.agents:
            collector.step({a: int(rng.integers(5)) for a in collector.agents})
    collector.create_dataset(dataset_id, algorithm_name="random", author="bench",
                             author_email="bench@example.com",
                             code_permalink="https://example.com/bench")
    collector.close()


def median(runs: int, measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--long-steps", type=int, default=1000)
    parser.add_argument("--long-episodes", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    root = Path(tempfile.mkdtemp(prefix="bench-view-"))
    os.environ["MINARI_DATASETS_PATH"] = str(root / "datasets")
    from playwright.sync_api import sync_playwright

    from marl_minari.view import serve, write_page

    started = time.perf_counter()
    record("bench/short-v0", args.episodes, 25)
    record("bench/long-v0", args.long_episodes, args.long_steps)
    print(f"recorded in {time.perf_counter() - started:.1f} s")

    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])

        page_clock: list[float] = []

        def drawn(url: str, then: Callable[[Any], None] | None = None) -> tuple[float, float]:
            """(seconds to the drawn page, seconds of ``then`` on it); the page's own clock
            (from navigation to drawn) goes to ``page_clock``."""
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            begin = time.perf_counter()
            page.goto(url)
            page.wait_for_selector("body[data-ready='1']", state="attached", timeout=120_000)
            loaded = time.perf_counter() - begin
            page_clock.append(float(page.evaluate("document.body.dataset.drawnMs")) / 1000)
            extra = 0.0
            if then is not None:
                begin = time.perf_counter()
                then(page)
                extra = time.perf_counter() - begin
            page.close()
            return loaded, extra

        parts: list[tuple[float, float]] = []

        def to_drawn_page() -> float:
            begin = time.perf_counter()
            server = serve("bench/short-v0")
            ready = time.perf_counter() - begin
            loaded, _ = drawn(server.url)
            server.close()
            parts.append((ready, loaded))
            return ready + loaded

        total = median(args.repeats, to_drawn_page)
        ready = statistics.median(p[0] for p in parts)
        loaded = statistics.median(p[1] for p in parts)
        in_page = statistics.median(page_clock)
        print(f"view ID -> drawn page, {args.episodes} x 25 steps: {ready + in_page:.2f} s "
              f"(server ready {ready:.2f} s, then navigation to drawn page {in_page:.2f} s "
              f"by the page's clock); through the driver {total:.2f} s (page {loaded:.2f} s)")
        page_clock.clear()

        out = root / "short.html"
        begin = time.perf_counter()
        write_page("bench/short-v0", out)
        written = time.perf_counter() - begin
        opened = median(args.repeats, lambda: drawn(out.as_uri())[0])
        print(f"written file: {out.stat().st_size / 1e6:.2f} MB in {written:.2f} s; "
              f"opens and draws from disk in {statistics.median(page_clock):.2f} s by the "
              f"page's clock ({opened:.2f} s through the driver)")

        in_page: list[float] = []

        def open_long(page: Any) -> None:
            page.click("#episode-table tbody tr[data-id='0']")
            page.wait_for_selector("body[data-episode='0']", state="attached",
                                   timeout=120_000)
            # the page's own clock, from the click to the last lane drawn (without the
            # driver's round trips)
            in_page.append(float(page.evaluate("document.body.dataset.episodeMs")) / 1000)

        def opening(url: str) -> tuple[float, float]:
            in_page.clear()
            wall = median(args.repeats, lambda: drawn(url, open_long)[1])
            return wall, statistics.median(in_page)

        with serve("bench/long-v0") as server:
            served, served_page = opening(server.url)
        long_out = root / "long.html"
        write_page("bench/long-v0", long_out)
        from_file, from_file_page = opening(long_out.as_uri())
        print(f"opening one {args.long_steps}-step episode: {served_page:.3f} s from the "
              f"server, {from_file_page:.3f} s from a written file "
              f"({long_out.stat().st_size / 1e6:.2f} MB); with the driver's round trips "
              f"{served:.3f} s and {from_file:.3f} s")
        browser.close()


if __name__ == "__main__":
    main()
