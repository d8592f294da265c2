"""Hand work from one spider to another through the other spider's Redis start key."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis.cluster
from redis.exceptions import RedisError, ResponseError

from crawler.connection import reply_text
from crawler.frontier.lua import HAND_OVER, queue_eval
from crawler.frontier.riders import RiderBatch, Riders

if TYPE_CHECKING:
    from scrapy import Request

    from crawler.connection import RedisClient
    from crawler.frontier.reports import FrontierReports

logger = logging.getLogger(__name__)
DAY = 86_400.0


class Handoff:
    """Push start entries to another spider, each key (an author, say) once per ``ttl`` seconds for
    the whole fleet: ``handed_key`` holds the keys handed over by the time until which they are not
    handed again. One script checks the keys, pushes the new ones and marks them
    (``hand_over.lua``); on Redis Cluster the two spiders' keys are on different slots, so the push
    follows the check in the next round trip, and a key may then be handed over twice, which the
    receiving spider absorbs."""

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
        self.atomic = not isinstance(server, redis.cluster.RedisCluster)

    def hand_over(self, entries: dict[str, dict[str, object]]) -> list[str]:
        """Push the entries not handed over within the TTL nor with a revisit due; their keys."""
        keys = sorted(entries)
        if not keys:
            return []
        pipe = self.server.pipeline(transaction=False)
        if self.atomic:
            self.queue_hand_over(pipe, entries)
            return self.handed(pipe.execute())
        self.queue_check(pipe, keys)
        new = self.new_keys(keys, pipe.execute())
        if new:
            pipe = self.server.pipeline(transaction=False)
            self.queue_push(pipe, {key: entries[key] for key in new})
            pipe.execute()
        return new

    def queue_hand_over(self, pipe: Any, entries: dict[str, dict[str, object]]) -> None:
        """Queue on ``pipe`` the script pushing new ``entries`` and marking them (not clusters)."""
        if not entries:
            return
        now = time.time()
        keys = sorted(entries)
        script_keys = [self.start_key, self.handed_key]
        args: list[object] = [repr(now), repr(now + self.ttl), len(keys), *keys]
        args += [json.dumps(entries[key], sort_keys=True) for key in keys]
        if self.revisits is not None:
            revisit_key, fingerprint = self.revisits
            script_keys.append(revisit_key)
            args += [fingerprint(key) for key in keys]
        queue_eval(pipe, HAND_OVER, script_keys, args)

    @staticmethod
    def handed(replies: list[Any]) -> list[str]:
        """The keys pushed, from the replies to :meth:`queue_hand_over`."""
        return [reply_text(key) for key in replies[0]] if replies else []

    def queue_check(self, pipe: Any, keys: list[str]) -> None:
        """Queue on ``pipe`` the reads that tell which ``keys`` are new."""
        if not keys:
            return
        pipe.zmscore(self.handed_key, keys)
        if self.revisits is not None:
            revisit_key, fingerprint = self.revisits
            pipe.zmscore(revisit_key, [fingerprint(key) for key in keys])

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

    def queue_push(self, pipe: Any, entries: dict[str, dict[str, object]]) -> None:
        """Queue on ``pipe`` the push of ``entries`` and their marks."""
        if not entries:
            return
        now = time.time()
        keys = sorted(entries)
        pipe.lpush(self.start_key, *(json.dumps(entries[key], sort_keys=True) for key in keys))
        pipe.zadd(self.handed_key, dict.fromkeys(keys, now + self.ttl))
        pipe.zremrangebyscore(self.handed_key, "-inf", now)


class RidingHandoff:
    """A :class:`Handoff` in the frontier's round trips (``riders.py``): a page's keys are handed
    over within ``hold`` seconds, and the page's lease waits for the push, so a worker that dies
    first leaves the page, and its keys, to be fetched again. Without a frontier to carry them, keys
    are handed over at once."""

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
        self.count = count
        lost = self._lost
        self._checks: RiderBatch[_Page] = RiderBatch(
            riders, "handoff-check", self._queue_check, self._checked, lambda: hold, lost
        )
        self._pushes: RiderBatch[_Page] = RiderBatch(
            riders, "handoff-push", self._queue_push, self._pushed, lambda: hold, lost
        )
        self._handovers: RiderBatch[_Page] = RiderBatch(
            riders, "handoff", self._queue_hand_over, self._handed, lambda: hold, lost
        )
        self._said: str | None = None

    def _lost(self, pages: list[_Page], exc: RedisError) -> None:
        """A hand-off Redis refused (a start list of another type, say) waits and is tried
        again, as one it could not send; said once in an ERROR, not silently for ever."""
        if isinstance(exc, ResponseError) and str(exc) != self._said:
            self._said = str(exc)
            logger.error(
                "Hand-off of %d pages' authors refused by Redis (%s): it is tried again; "
                "fix the key (%s) and it goes through",
                len(pages),
                exc,
                self.handoff.start_key,
            )

    def hand_over(self, entries: dict[str, dict[str, object]], request: Request | None) -> None:
        if not entries:
            return
        if request is None or not self.riders.carried:
            self.count(len(self.handoff.hand_over(entries)))
            return
        self.reports.ledger.item_started(request)
        batch = self._handovers if self.handoff.atomic else self._checks
        batch.add([_Page(entries, request)])

    def _queue_hand_over(self, pipe: Any, pages: list[_Page]) -> None:
        self.handoff.queue_hand_over(pipe, _entries(pages))

    def _handed(self, pages: list[_Page], replies: list[Any]) -> None:
        self.count(len(self.handoff.handed(replies)))
        for page in pages:
            self.reports.ledger.item_finished(page.request)

    def _queue_check(self, pipe: Any, pages: list[_Page]) -> None:
        self.handoff.queue_check(pipe, _keys(pages))

    def _checked(self, pages: list[_Page], replies: list[Any]) -> None:
        new = set(self.handoff.new_keys(_keys(pages), replies))
        for page in pages:
            page.entries = {k: v for k, v in page.entries.items() if k in new}
        self._pushes.add(pages)

    def _queue_push(self, pipe: Any, pages: list[_Page]) -> None:
        self.handoff.queue_push(pipe, _entries(pages))

    def _pushed(self, pages: list[_Page], replies: list[Any]) -> None:
        self.count(len(_keys(pages)))
        for page in pages:
            self.reports.ledger.item_finished(page.request)


def _entries(pages: list[_Page]) -> dict[str, dict[str, object]]:
    entries: dict[str, dict[str, object]] = {}
    for page in pages:
        entries.update(page.entries)
    return entries


def _keys(pages: list[_Page]) -> list[str]:
    return sorted({key for page in pages for key in page.entries})


@dataclass
class _Page:
    entries: dict[str, dict[str, object]]
    request: Request
