"""The duplicate filter of a spider's frontier: its modes and settings, this worker's cache of
fingerprints it scheduled lately, and how many requests the fleet's filter has seen.

The filter itself runs inside the frontier's scheduling script (``scripts/dupefilter.lua``, the
scalable Bloom filter; a set for "exact"; RedisBloom's BF.ADD), so a request is checked and
queued atomically; :class:`~crawler.frontier.queue.Pending` carries the fingerprint's hash
arguments to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis.exceptions import ResponseError

from crawler.config import setting, setting_int
from crawler.connection import decode_counts

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

    from crawler.connection import RedisClient
    from crawler.keys import FrontierKeys

DUPEFILTER_MODES = ("bloom", "redisbloom", "exact", "none")
# Modes whose count of requests seen is an estimate.
APPROXIMATE_MODES = ("bloom", "redisbloom")


@dataclass(frozen=True)
class DupefilterConfig:
    """How requests are recognised as seen: mode "bloom", "redisbloom", "exact" or "none"."""

    mode: str = "bloom"
    capacity: int = 1_000_000
    error_rate: float = 1e-7

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> DupefilterConfig:
        return cls(
            setting(settings, "DUPEFILTER_MODE"),
            setting_int(settings, "DUPEFILTER_CAPACITY", 1000),
            setting(settings, "DUPEFILTER_ERROR_RATE"),
        )


class RecentlySeen:
    """Fingerprints this worker scheduled lately (at most ``size``, forgotten all at once when
    full; DUPEFILTER_LOCAL_CACHE): the fleet's filter has them, so they need not go to Redis."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._seen: set[bytes] = set()

    def first_time(self, fingerprint: bytes) -> bool:
        """False for a fingerprint seen lately; True (and remembered) otherwise."""
        if not self.size:
            return True
        if fingerprint in self._seen:
            return False
        if len(self._seen) >= self.size:
            self._seen.clear()
        self._seen.add(fingerprint)
        return True


def queue_seen(pipe: Any, keys: FrontierKeys, mode: str) -> None:
    """Queue the command that tells how many requests the duplicate filter has seen."""
    if mode == "bloom":
        pipe.hgetall(keys.dupefilter_meta)
    elif mode == "exact":
        pipe.scard(keys.dupefilter)
    else:  # RedisBloom's count needs BF.CARD (not on every server); "none" keeps no count
        pipe.exists(keys.dupefilter)


def read_seen(raw: Any, mode: str) -> int | None:
    """The approximate count of requests seen, from what ``queue_seen`` read."""
    if mode == "bloom":
        counts = decode_counts(raw)
        return sum(value for name, value in counts.items() if name.startswith("count:"))
    if mode == "exact":
        return int(raw)
    return None


def seen_count(server: RedisClient, keys: FrontierKeys, mode: str, raw: Any) -> int | None:
    """How many requests the filter has seen: from what ``queue_seen`` read, or for RedisBloom
    from BF.CARD; None when the mode keeps no count."""
    if mode != "redisbloom":
        return read_seen(raw, mode)
    try:
        count: Any = server.execute_command("BF.CARD", keys.dupefilter)  # type: ignore[no-untyped-call]
        return int(count)
    except ResponseError:  # no RedisBloom, or one older than BF.CARD
        return None
