"""Hand work from one spider to another through the other spider's Redis start key."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from crawler.connection import RedisClient

DAY = 86_400.0


class Handoff:
    """Push start entries to another spider, each key (e.g. an author) once per ``ttl`` seconds
    for the whole fleet.

    ``handed_key`` is a sorted set of the keys handed over, by the time until which they are
    not handed again; past it a key seen again is handed again (its profile fetched again), and
    expired keys are trimmed with every push, so the set holds only the last ``ttl``'s keys.
    A key is marked only in the same round trip that pushes it, after checking it was not
    handed over before; a worker dying in between can at worst hand a key over twice, which
    the receiving spider absorbs (one document per key). Nothing is lost.
    """

    def __init__(
        self,
        server: RedisClient,
        start_key: str,
        handed_key: str,
        ttl: float = DAY,
        revisits: tuple[str, Callable[[str], str]] | None = None,
    ) -> None:
        self.server = server
        self.start_key = start_key
        self.handed_key = handed_key
        self.ttl = ttl
        # The receiving spider's revisit set and the fingerprint of a key's page there: a key
        # whose page has a revisit waiting is not handed over (its revisits keep it fresh).
        self.revisits = revisits

    def hand_over(self, entries: dict[str, dict[str, object]]) -> list[str]:
        """Push the entries whose key was not handed over within the TTL and whose page has no
        revisit waiting; return those keys."""
        keys = sorted(entries)
        if not keys:
            return []
        now = time.time()
        until = self.server.zmscore(self.handed_key, keys)
        new = [key for key, end in zip(keys, until, strict=True) if end is None or end <= now]
        if new and self.revisits is not None:
            revisit_key, fingerprint = self.revisits
            waiting = self.server.zmscore(revisit_key, [fingerprint(key) for key in new])
            new = [key for key, due in zip(new, waiting, strict=True) if due is None]
        if new:
            self._push(new, (json.dumps(entries[key], sort_keys=True) for key in new), now)
        return new

    def _push(self, keys: list[str], payloads: Iterable[str], now: float) -> None:
        pipe = self.server.pipeline(transaction=False)
        pipe.lpush(self.start_key, *payloads)
        pipe.zadd(self.handed_key, dict.fromkeys(keys, now + self.ttl))
        pipe.zremrangebyscore(self.handed_key, "-inf", now)
        pipe.execute()
