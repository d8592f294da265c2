"""Hand work from one spider to another through the other spider's Redis start key."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from crawler.connection import RedisClient


class Handoff:
    """Push start entries to another spider, each key (e.g. an author) once per fleet.

    A key is marked as handed over only in the same round trip that pushes it, after checking
    it was not handed over before; a worker dying in between can at worst hand a key over twice,
    which the receiving spider's duplicate filter absorbs. Nothing is lost.
    """

    def __init__(self, server: RedisClient, start_key: str, handed_key: str) -> None:
        self.server = server
        self.start_key = start_key
        self.handed_key = handed_key

    def hand_over(self, entries: dict[str, dict[str, object]]) -> list[str]:
        """Push the entries whose key was never handed over; return those keys."""
        keys = sorted(entries)
        if not keys:
            return []
        seen = self.server.smismember(self.handed_key, keys)
        new = [key for key, was_seen in zip(keys, seen, strict=True) if not was_seen]
        if new:
            self._push(new, (json.dumps(entries[key], sort_keys=True) for key in new))
        return new

    def _push(self, keys: list[str], payloads: Iterable[str]) -> None:
        pipe = self.server.pipeline(transaction=False)
        pipe.lpush(self.start_key, *payloads)
        pipe.sadd(self.handed_key, *keys)
        pipe.execute()
