"""Recorders that write Minari datasets: PettingZoo environments wrapped as they run, and a
Flashbax flat buffer's experience handed over as Mava hands it to ``Vault.write``."""

from marl_minari.collectors.aec import AECDataCollector
from marl_minari.collectors.flat_buffer import FlashbaxDataCollector
from marl_minari.collectors.parallel import ParallelDataCollector

__all__ = ["AECDataCollector", "FlashbaxDataCollector", "ParallelDataCollector"]
