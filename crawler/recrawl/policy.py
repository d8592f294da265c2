"""How long a page waits before its next visit, from what its last visits found (docs/storage.md,
recrawl): pure functions; unchanged doubles the interval, changed halves it, within bounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The most priority steps a revisit gains for changing often (see RecrawlPolicy.urgency).
MAX_URGENCY = 20


@dataclass(frozen=True)
class RecrawlPolicy:
    """Seconds, ``minimum <= initial <= maximum``; ``factor`` > 1; ``jitter`` in [0, 1]."""

    initial: float
    minimum: float
    maximum: float
    factor: float = 2.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if not 0 < self.minimum <= self.initial <= self.maximum:
            raise ValueError(
                f"need 0 < minimum ({self.minimum:g}) <= initial ({self.initial:g}) "
                f"<= maximum ({self.maximum:g})"
            )
        if self.factor <= 1:
            raise ValueError(f"factor must be > 1, not {self.factor:g}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"jitter must be from 0 to 1, not {self.jitter:g}")

    def delay(self, interval: float, draw: float) -> float:
        """``interval`` plus up to ``jitter`` of it, so pages seen together drift apart."""
        return interval * (1 + self.jitter * draw)

    def next_interval(self, previous: float | None, changed: bool | None) -> float:
        """The wait before the next visit, from ``previous``, the wait that led to this visit, and
        ``changed``, whether the content differs (both None on a first visit)."""
        if previous is None or changed is None:
            return self.clamp(self.initial if previous is None else previous)
        step = previous / self.factor if changed else previous * self.factor
        return self.clamp(step)

    def clamp(self, interval: float) -> float:
        return min(self.maximum, max(self.minimum, interval))

    def urgency(self, interval: float) -> int:
        """How far ahead of other requests a revisit at ``interval`` goes: one priority step
        per halving below the maximum (0 at the maximum, at most MAX_URGENCY), so pages that
        change often are not kept waiting behind a crowd of slow ones that came due at once."""
        if interval >= self.maximum:
            return 0
        return min(MAX_URGENCY, round(math.log2(self.maximum / self.clamp(interval))))
