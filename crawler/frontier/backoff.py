"""Redis found down: the scheduler's calls wait, nothing is dropped.

After a failed call the scheduler and those who ask it (``in_backoff``) skip their Redis calls
for a while, 0.5 s at first and growing with the outage to 10 s, so a worker does not block
its reactor retrying a dead server; its buffers wait and go once Redis answers again.
"""

from __future__ import annotations

import logging
import time

from redis.exceptions import RedisError

logger = logging.getLogger(__name__)


class RedisBackoff:
    """Whether to skip Redis calls for now, and since when Redis is away: ``start`` seconds
    after the first failure, growing by half the outage's length up to ``cap``. The first
    failure is logged with ``down`` (at ``level``), the recovery with ``up`` (one level
    lower)."""

    def __init__(
        self,
        start: float = 0.5,
        cap: float = 10.0,
        down: str = "Redis unavailable (%s); backing off, nothing is dropped",
        up: str = "Redis reachable again after %.1fs",
        level: int = logging.ERROR,
    ) -> None:
        self.start, self.cap = start, cap
        self.down, self.up, self.level = down, up, level
        self.until = 0.0
        self.since: float | None = None

    def active(self) -> bool:
        return time.monotonic() < self.until

    def remaining(self) -> float:
        """Seconds until calls may go again (0 when they may now)."""
        return max(0.0, self.until - time.monotonic())

    def failed(self, exc: RedisError) -> None:
        now = time.monotonic()
        if self.since is None:
            self.since = now
            logger.log(self.level, self.down, exc)
        self.until = now + min(self.cap, self.start + (now - self.since) / 2)

    def recovered(self) -> None:
        if self.since is not None:
            logger.log(self.level - 10, self.up, time.monotonic() - self.since)
            self.since = None
            self.until = 0.0

    def lift(self) -> None:
        """Let the next call go whatever happened (the last writes at close)."""
        self.until = 0.0
