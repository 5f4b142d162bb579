"""Recorders that wrap PettingZoo environments and write Minari datasets."""

from marl_minari.collectors.aec import AECDataCollector
from marl_minari.collectors.parallel import ParallelDataCollector

__all__ = ["AECDataCollector", "ParallelDataCollector"]
