"""Hand work from one spider to another through the other spider's Redis start key."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from crawler.frontier.riders import Rider, Riders, first_error

if TYPE_CHECKING:
    from redis.exceptions import RedisError
    from scrapy import Request

    from crawler.connection import RedisClient
    from crawler.frontier.reports import FrontierReports

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
        revisit waiting; return those keys (two round trips)."""
        keys = sorted(entries)
        if not keys:
            return []
        pipe = self.server.pipeline(transaction=False)
        self.queue_check(pipe, keys)
        new = self.new_keys(keys, pipe.execute())
        if new:
            pipe = self.server.pipeline(transaction=False)
            self.queue_push(pipe, {key: entries[key] for key in new})
            pipe.execute()
        return new

    def queue_check(self, pipe: Any, keys: list[str]) -> int:
        """Queue on ``pipe`` the reads that tell which ``keys`` are new; returns how many."""
        if not keys:
            return 0
        pipe.zmscore(self.handed_key, keys)
        if self.revisits is None:
            return 1
        revisit_key, fingerprint = self.revisits
        pipe.zmscore(revisit_key, [fingerprint(key) for key in keys])
        return 2

    def new_keys(self, keys: list[str], replies: list[Any]) -> list[str]:
        """The ``keys`` to hand over, from the replies to :meth:`queue_check`."""
        if not keys:
            return []
        now = time.time()
        handed = replies[0]
        waiting = replies[1] if self.revisits is not None else [None] * len(keys)
        return [
            key
            for key, until, due in zip(keys, handed, waiting, strict=True)
            if (until is None or until <= now) and due is None
        ]

    def queue_push(self, pipe: Any, entries: dict[str, dict[str, object]]) -> int:
        """Queue on ``pipe`` the push of ``entries`` and their marks; returns how many."""
        if not entries:
            return 0
        now = time.time()
        keys = sorted(entries)
        pipe.lpush(self.start_key, *(json.dumps(entries[key], sort_keys=True) for key in keys))
        pipe.zadd(self.handed_key, dict.fromkeys(keys, now + self.ttl))
        pipe.zremrangebyscore(self.handed_key, "-inf", now)
        return 3


class RidingHandoff:
    """A :class:`Handoff` done in the frontier's round trips (see ``riders.py``): the keys of
    a page are checked in one trip and the new ones pushed in the next, each within ``hold``
    seconds. The page's lease waits for the push (``reports``), so a worker that dies first
    leaves the page to be fetched again, and its keys handed over then. Without a frontier
    to carry them, keys are handed over at once."""

    def __init__(
        self,
        handoff: Handoff,
        riders: Riders,
        reports: FrontierReports,
        hold: float,
        count: Callable[[int], None],
    ) -> None:
        self.handoff = handoff
        self.riders = riders
        self.reports = reports
        self.hold = hold
        self.count = count
        self._checking: list[_Page] = []
        self._pushing: list[_Page] = []
        self._boarded: list[_Page] = []
        self._boarded_push: list[_Page] = []

    def hand_over(self, entries: dict[str, dict[str, object]], request: Request | None) -> None:
        if not entries:
            return
        if request is None or not self.riders.carried:
            self.count(len(self.handoff.hand_over(entries)))
            return
        self.reports.item_started(request)
        self._checking.append(_Page(entries, request))
        self._ride_check()

    def _ride_check(self) -> None:
        rider = Rider(self._queue_check, self._checked, self._check_lost)
        self.riders.add("handoff-check", rider, self.hold)

    def _ride_push(self) -> None:
        rider = Rider(self._queue_push, self._pushed, self._push_lost)
        self.riders.add("handoff-push", rider, self.hold)

    def _queue_check(self, pipe: Any) -> int:
        self._boarded, self._checking = self._checking, []
        keys = sorted({key for page in self._boarded for key in page.entries})
        return self.handoff.queue_check(pipe, keys)

    def _checked(self, replies: list[Any]) -> None:
        pages, self._boarded = self._boarded, []
        if first_error(replies) is not None:
            self._checking = pages + self._checking
            self._ride_check()
            return
        keys = sorted({key for page in pages for key in page.entries})
        new = set(self.handoff.new_keys(keys, replies))
        for page in pages:
            page.entries = {k: v for k, v in page.entries.items() if k in new}
        self._pushing.extend(pages)
        self._ride_push()

    def _check_lost(self, exc: RedisError) -> None:
        self._checking = self._boarded + self._checking
        self._boarded = []
        self._ride_check()

    def _queue_push(self, pipe: Any) -> int:
        self._boarded_push, self._pushing = self._pushing, []
        entries: dict[str, dict[str, object]] = {}
        for page in self._boarded_push:
            entries.update(page.entries)
        return self.handoff.queue_push(pipe, entries)

    def _pushed(self, replies: list[Any]) -> None:
        pages, self._boarded_push = self._boarded_push, []
        if first_error(replies) is not None:
            self._pushing = pages + self._pushing
            self._ride_push()
            return
        self.count(len({key for page in pages for key in page.entries}))
        for page in pages:
            self.reports.item_finished(page.request)

    def _push_lost(self, exc: RedisError) -> None:
        self._pushing = self._boarded_push + self._pushing
        self._boarded_push = []
        self._ride_push()


@dataclass
class _Page:
    entries: dict[str, dict[str, object]]
    request: Request
