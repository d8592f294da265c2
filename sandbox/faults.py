"""Seeded random faults: error statuses, slow answers and dropped connections."""

from __future__ import annotations

import random
from dataclasses import dataclass

from aiohttp import web

from sandbox.config import FaultConfig


class DroppedResponse(web.Response):
    """Stands for a connection closed without an answer; it is never written."""


@dataclass(frozen=True)
class FaultPlan:
    """The faults drawn for one request; ``drop`` wins over ``error``, which wins over nothing."""

    drop: bool = False
    error: bool = False
    slow: bool = False


class FaultInjector:
    """Draws a ``FaultPlan`` per request from a ``random.Random`` seeded by the config."""

    def __init__(self, config: FaultConfig) -> None:
        self.configure(config)

    def configure(self, config: FaultConfig) -> None:
        """Apply new rates and restart the random sequence from the seed."""
        self.config = config
        self._rng = random.Random(config.seed)

    def reset(self) -> None:
        """Restart the random sequence from the seed."""
        self._rng = random.Random(self.config.seed)

    def draw(self) -> FaultPlan:
        """Draw the faults of the next request (always three draws, for a stable sequence)."""
        config = self.config
        drop, error, slow = (self._rng.random() for _ in range(3))
        return FaultPlan(
            drop=drop < config.drop_rate,
            error=error < config.error_rate,
            slow=slow < config.slow_rate,
        )
