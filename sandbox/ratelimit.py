"""Sliding-window request counting per client address, and the bans it issues."""

from __future__ import annotations

import enum
import time
from collections import deque
from collections.abc import Callable

from sandbox.config import RateLimitConfig


class Verdict(enum.Enum):
    """What the rate limiter decided for one request."""

    ALLOWED = "allowed"
    BANNED_NOW = "banned_now"
    BANNED = "banned"


class RateLimiter:
    """Counts requests per client in a sliding window; a client over the limit is banned.

    A ban lasts ``ban_seconds``; the client's window starts empty once the ban ends.
    """

    def __init__(
        self, config: RateLimitConfig, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config
        self._clock = clock
        self._windows: dict[str, deque[float]] = {}
        self._bans: dict[str, float] = {}

    def configure(self, config: RateLimitConfig) -> None:
        """Apply new limits; current windows and bans are kept."""
        self.config = config

    def reset(self) -> None:
        """Forget every window and lift every ban."""
        self._windows.clear()
        self._bans.clear()

    def check(self, client: str) -> Verdict:
        """Count one request of ``client`` and tell whether it may be served."""
        now = self._clock()
        if self.ban_remaining(client) > 0:
            return Verdict.BANNED
        if not self.config.enabled:
            return Verdict.ALLOWED
        window = self._windows.setdefault(client, deque())
        window.append(now)
        while window and window[0] <= now - self.config.window_seconds:
            window.popleft()
        if len(window) <= self.config.max_requests:
            return Verdict.ALLOWED
        self._bans[client] = now + self.config.ban_seconds
        del self._windows[client]
        return Verdict.BANNED_NOW

    def ban_remaining(self, client: str) -> float:
        """Seconds until ``client``'s ban ends (0 when not banned)."""
        until = self._bans.get(client)
        if until is None:
            return 0.0
        remaining = until - self._clock()
        if remaining <= 0:
            del self._bans[client]
            return 0.0
        return remaining

    def active_bans(self) -> list[str]:
        """Clients banned right now, sorted."""
        return sorted(client for client in list(self._bans) if self.ban_remaining(client) > 0)
