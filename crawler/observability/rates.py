"""Rates and estimates: a worker's own pages per minute, the fleet's from per-minute buckets,
and the time left at that pace."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

# A young crawl's pace is measured over at least this many seconds: no spike at its start.
MIN_SPAN = 10.0


class RateWindow:
    """Per-minute rate of a growing counter over the last ``window`` seconds of samples."""

    def __init__(self, window: float = 60.0) -> None:
        self.window = window
        self._samples: deque[tuple[float, float]] = deque()

    def add(self, now: float, value: float) -> None:
        self._samples.append((now, value))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window:
            self._samples.popleft()

    def per_minute(self) -> float:
        if len(self._samples) < 2:
            return 0.0
        (first_time, first), (last_time, last) = self._samples[0], self._samples[-1]
        elapsed = last_time - first_time
        return (last - first) * 60.0 / elapsed if elapsed > 0 else 0.0


def bucket_rate(counts: Mapping[int, int], now: float) -> float:
    """Per-minute rate from per-minute counts (epoch minute -> count) up to ``now``: the mean of the
    whole minutes between the first with any count and the current one, neither of which skews it; a
    crawl too young for that is measured from the start of its first minute (an underestimate)."""
    active = [minute for minute, count in counts.items() if count > 0]
    if not active:
        return 0.0
    first, current = min(active), int(now // 60)
    whole = range(first + 1, current)
    if whole:
        return sum(counts.get(minute, 0) for minute in whole) / len(whole)
    span = max(MIN_SPAN, now - first * 60.0)
    return sum(counts.values()) * 60.0 / span


def eta_seconds(remaining: int, per_minute: float) -> float | None:
    """Seconds until ``remaining`` requests are done at ``per_minute``; None if not moving."""
    if remaining <= 0:
        return 0.0
    if per_minute <= 0:
        return None
    return remaining * 60.0 / per_minute


def format_duration(seconds: float | None) -> str:
    """``2h 05m``, ``4m 10s``, ``12s``; ``unknown`` for None."""
    if seconds is None:
        return "unknown"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours >= 48:
        return f"{hours // 24}d {hours % 24:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"
