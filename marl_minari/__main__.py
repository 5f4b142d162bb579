"""``python -m marl_minari``: the ``marl-minari`` command."""

from marl_minari.cli import main

main()
