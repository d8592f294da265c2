"""The duplicate filter of a spider's frontier: its modes and settings, this worker's cache of
fingerprints it scheduled lately, and how many requests the fleet's filter has seen.

The filter itself runs inside the frontier's scheduling script (``scripts/dupefilter.lua``, the
scalable Bloom filter; a set for "exact"; RedisBloom's BF.ADD), so a request is checked and
queued atomically; :class:`~crawler.frontier.queue.Pending` carries the fingerprint's hash
arguments to it, and the request's depth when it has one (meta DEPTH_META): such a request
passes again when it comes by a shorter path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis.exceptions import ResponseError

from crawler.config import setting, setting_int
from crawler.connection import decode_counts
from crawler.frontier.lua import queue_eval

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

    from crawler.connection import RedisClient
    from crawler.keys import FrontierKeys

# Modes whose count of requests seen is an estimate.
APPROXIMATE_MODES = ("bloom", "redisbloom")
# The modes whose filter lets a URL found again by a shorter path (a smaller depth) through.
DEPTH_MODES = ("bloom", "exact")


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
    full; DUPEFILTER_LOCAL_CACHE): the fleet's filter (of DUPEFILTER_MODE ``mode``) has them, so
    they need not go to Redis. Each with the least depth it was scheduled at (0 without one: the
    fleet's filter holds such a fingerprint as depth 0's, see dupefilter.lua)."""

    def __init__(self, size: int, mode: str) -> None:
        self.size = size
        self.mode = mode
        # The fleet's filter lets a shorter path through: a longer one scheduled here first
        # may be superseded.
        self.by_depth = mode in DEPTH_MODES
        self._seen: dict[bytes, int] = {}

    def passes(self, fingerprint: bytes, seed: bool = False, depth: int | None = None) -> bool:
        """False for a fingerprint this worker scheduled before (at ``depth`` or less): the
        fleet's filter has it, so it is dropped here without serializing it or asking Redis. A
        seed is noted and goes on: only the fleet's filter knows whether it was seeded before.
        With mode "none" everything passes, and nothing is remembered."""
        return self.mode == "none" or self.first_time(fingerprint, depth) or seed

    def first_time(self, fingerprint: bytes, depth: int | None = None) -> bool:
        """False for a fingerprint seen lately at ``depth`` or less; True (and remembered)
        otherwise."""
        if not self.size:
            return True
        depth = depth or 0
        least = self._seen.get(fingerprint)
        if least is not None and least <= depth:
            return False
        if least is None and len(self._seen) >= self.size:
            self._seen.clear()
        self._seen[fingerprint] = depth
        return True

    def forget(self, fingerprint: bytes) -> None:
        """Forget a fingerprint noted here whose request was not scheduled after all."""
        self._seen.pop(fingerprint, None)

    def superseded(self, fingerprint: bytes, depth: int) -> bool:
        """Whether this worker scheduled the fingerprint lately at a depth less than ``depth``
        (a shorter path to the page, fetched from there instead)."""
        least = self._seen.get(fingerprint)
        return least is not None and least < depth


# The "exact" filter's count: its set, and its hash of the least depths (requests with one).
_EXACT_SEEN = "return redis.call('SCARD', KEYS[1]) + redis.call('HLEN', KEYS[2])"


def queue_seen(pipe: Any, keys: FrontierKeys, mode: str) -> None:
    """Queue the command that tells how many requests the duplicate filter has seen."""
    if mode == "bloom":
        pipe.hgetall(keys.dupefilter_meta)
    elif mode == "exact":
        queue_eval(pipe, _EXACT_SEEN, [keys.dupefilter, keys.dupefilter_depths], [])
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
