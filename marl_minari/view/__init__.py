"""See the data: a dataset's page in the browser, served on 127.0.0.1 or written as one file.

:func:`view` opens anything :func:`marl_minari.open_source` opens and either serves its page
(:class:`ViewServer`: episodes are read when the page opens them) or writes one self-contained
HTML file that opens offline and holds a bounded sample of episodes. The page shows the dataset
card, per-agent return and step distributions, an episode table sortable by return, length and
how the episode ended, and one episode at a time on the environment's step axis: per agent its
reward and return, actions, presence, ends, legal-action mask and image frames, the global
state, and whose turn each step was in a turn-based game. With ``compare=`` it sets a second
dataset beside the first: return distributions and identical episodes. Charts are drawn by
uPlot (MIT, vendored in ``static/``), the rest by the page's own script.
"""

from __future__ import annotations

from marl_minari.view.compare import comparison, identical_episodes
from marl_minari.view.episode import episode_payload
from marl_minari.view.server import LOOPBACK, ViewServer
from marl_minari.view.summary import dataset_summary
from marl_minari.view.viewer import SAMPLE_BYTES, SAMPLE_EPISODES, serve, view, write_page

__all__ = ["LOOPBACK", "SAMPLE_BYTES", "SAMPLE_EPISODES", "ViewServer", "comparison",
           "dataset_summary", "episode_payload", "identical_episodes", "serve", "view",
           "write_page"]
