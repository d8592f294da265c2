"""Redis work that need not go out at once rides in the frontier's next round trip.

At a polite pace a worker fetches a page every few seconds, and each component that talks to
Redis on its own clock (the fleet's stats, the cool-downs the ban middleware reads, the
frontier's marker, revisits, lease renewals) would cost a round trip of its own. Instead each
hands a :class:`Rider` to the crawl's :class:`Riders`: its commands are queued on the pipeline
of the scheduler's next flush or pop, and its replies handed back. A rider that found no trip
by its latest time goes on its own (the scheduler's tick, every FRONTIER_FLUSH_INTERVAL, sends
the waiting ones), so nothing waits longer than its owner allows, whatever the scheduler is.

A rider's replies may hold a :class:`~redis.exceptions.RedisError` (the pipeline runs with
``raise_on_error=False``); when the whole trip fails, each rider's ``failed`` is called and the
rider is dropped: its owner asks again on its own clock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from redis.exceptions import RedisError

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from crawler.connection import RedisClient

logger = logging.getLogger(__name__)

ATTRIBUTE = "_frontier_riders"


@dataclass
class Rider:
    """Commands to queue on a pipeline, and what to do with their replies."""

    write: Callable[[Any], object]  # queues its commands on the pipeline
    read: Callable[[list[Any]], None]  # their replies, in order
    failed: Callable[[RedisError], None] | None = None


@dataclass
class Boarded:
    """The riders queued on one pipeline, each with the slice of replies that is theirs."""

    riders: list[tuple[Rider, int, int]]

    def arrived(self, replies: list[Any]) -> None:
        for rider, first, end in self.riders:
            try:
                rider.read(replies[first:end])
            except Exception:
                logger.exception("A Redis reply could not be read")

    def lost(self, exc: RedisError) -> None:
        for rider, _, _ in self.riders:
            if rider.failed is not None:
                try:
                    rider.failed(exc)
                except Exception:
                    logger.exception("A failed Redis write could not be handled")


class Riders:
    """The crawl's riders waiting for a round trip, each with the latest time it may leave."""

    def __init__(self) -> None:
        self._waiting: dict[str, tuple[float, Rider]] = {}
        # Whether a scheduler carries riders (and sends the due ones); else owners send theirs.
        self.carried = False

    @classmethod
    def of(cls, crawler: Crawler) -> Riders:
        """The crawl's riders (one per crawler, made on first use)."""
        riders = getattr(crawler, ATTRIBUTE, None)
        if not isinstance(riders, Riders):
            riders = cls()
            setattr(crawler, ATTRIBUTE, riders)
        return riders

    def add(self, name: str, rider: Rider, within: float) -> None:
        """Have ``rider`` go within ``within`` seconds; a rider of the same ``name`` waiting
        already is replaced (its time kept if earlier)."""
        latest = time.monotonic() + within
        if name in self._waiting:
            latest = min(latest, self._waiting[name][0])
        self._waiting[name] = (latest, rider)

    def __bool__(self) -> bool:
        """Whether any rider waits."""
        return bool(self._waiting)

    def waiting(self, name: str) -> bool:
        return name in self._waiting

    def due(self) -> bool:
        """Whether a rider's latest time has come."""
        now = time.monotonic()
        return any(latest <= now for latest, _ in self._waiting.values())

    def board(self, pipe: Any) -> Boarded:
        """Queue every waiting rider's commands on ``pipe``. A rider whose ``write`` fails is
        logged and dropped (its commands, if any, go but their replies are not read)."""
        waiting, self._waiting = self._waiting, {}
        boarded: list[tuple[Rider, int, int]] = []
        for _, rider in waiting.values():
            start = len(pipe)
            try:
                rider.write(pipe)
            except Exception:
                logger.exception("A Redis write could not be prepared; it is dropped")
                continue
            boarded.append((rider, start, len(pipe)))
        return Boarded(boarded)

    def send(self, server: RedisClient) -> bool:
        """Send the waiting riders on their own round trip; False if Redis failed it."""
        pipe = server.pipeline(transaction=False)
        boarded = self.board(pipe)
        try:  # an empty pipeline answers [] without a round trip
            replies = pipe.execute(raise_on_error=False)
        except RedisError as exc:
            boarded.lost(exc)
            return False
        boarded.arrived(replies)
        return True


T = TypeVar("T")


class RiderBatch(Generic[T]):
    """Items that go to Redis together as one rider named ``name``, within ``hold()`` seconds
    of the first waiting: ``write(pipe, items)`` queues their commands when the trip goes,
    ``done(items, replies)`` follows once they are written. When the trip fails or a reply
    is an error, the items wait again, ahead of newer ones, ``lost(items, exc)`` is told, and
    the rider goes with a later trip: nothing is dropped."""

    def __init__(
        self,
        riders: Riders,
        name: str,
        write: Callable[[Any, list[T]], object],
        done: Callable[[list[T], list[Any]], None],
        hold: Callable[[], float],
        lost: Callable[[list[T], RedisError], None] | None = None,
    ) -> None:
        self.riders, self.name = riders, name
        self._write, self._done, self._hold, self._lost = write, done, hold, lost
        self.items: list[T] = []
        self._boarded: list[T] = []

    def add(self, items: Iterable[T]) -> None:
        self.items.extend(items)
        if self.items:
            self.ride()

    def ride(self) -> None:
        self.riders.add(self.name, Rider(self._board, self._arrived, self._failed), self._hold())

    def take(self) -> list[T]:
        """Every waiting item, for a caller that writes them itself."""
        items, self.items = self.items, []
        return items

    def put_back(self, items: list[T]) -> None:
        self.items = items + self.items

    def _board(self, pipe: Any) -> None:
        self._boarded = self.take()
        self._write(pipe, self._boarded)

    def _arrived(self, replies: list[Any]) -> None:
        items, self._boarded = self._boarded, []
        if (error := first_error(replies)) is not None:
            self._again(items, error)
        else:
            self._done(items, replies)

    def _failed(self, exc: RedisError) -> None:
        items, self._boarded = self._boarded, []
        self._again(items, exc)

    def _again(self, items: list[T], exc: RedisError) -> None:
        self.put_back(items)
        if self._lost is not None:
            self._lost(items, exc)
        self.ride()


def first_error(replies: list[Any]) -> RedisError | None:
    """The first error among pipeline replies, if any."""
    return next((reply for reply in replies if isinstance(reply, RedisError)), None)
