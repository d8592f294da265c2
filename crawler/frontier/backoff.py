"""Redis found down: the scheduler's calls wait, nothing is dropped.

After a failed call the scheduler and those who ask it (``in_backoff``) skip their Redis calls
for a while, 0.5 s at first and growing with the outage to 10 s, so a worker does not block
its reactor retrying a dead server; its buffers wait and go once Redis answers again.
"""

from __future__ import annotations

import logging
import time

from redis.exceptions import RedisError

logger = logging.getLogger("crawler.frontier.scheduler")


class RedisBackoff:
    """Whether to skip Redis calls for now, and since when Redis is away."""

    def __init__(self) -> None:
        self.until = 0.0
        self.since: float | None = None

    def active(self) -> bool:
        return time.monotonic() < self.until

    def failed(self, exc: RedisError) -> None:
        now = time.monotonic()
        if self.since is None:
            self.since = now
            logger.error("Redis unavailable (%s); backing off, nothing is dropped", exc)
        self.until = now + min(10.0, 0.5 + (now - self.since) / 2)

    def recovered(self) -> None:
        if self.since is not None:
            logger.warning("Redis reachable again after %.1fs", time.monotonic() - self.since)
            self.since = None
            self.until = 0.0

    def lift(self) -> None:
        """Let the next call go whatever happened (the last writes at close)."""
        self.until = 0.0
