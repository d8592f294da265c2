"""Pausing a whole fleet: the pause key, and one worker's view of it.

``scrapy frontier SPIDER pause [--reason TEXT]`` writes the hash ``{spider}:paused`` (``since``,
Unix time; ``by``; ``reason``) and ``resume`` deletes it (crawler/control/pause.py); other tools
do the same with ``HSET``/``DEL`` (any value of the key pauses; a hash says since when, by whom
and why).

Each worker reads the key at most every CHECK_INTERVAL seconds, riding the scheduler's next
round trip (a pop, a flush, a lease renewal, see ``riders.py``), or on a trip of its own when
none went within RIDE_WITHIN seconds (the scheduler's tick sends it): so a worker notices a
pause or a resume within CHECK_INTERVAL + RIDE_WITHIN + 2 x FRONTIER_FLUSH_INTERVAL (the tick
asks for the read, then sends it), popping or not: 1.75 s with the defaults, which leaves a
busy machine a quarter second of the 2 s the commands promise. While paused the scheduler hands
the engine no request (it pops none, and the requests and turns it holds wait, their leases
renewed as always), holds back the ones the engine had but not sent yet (at the send gate's
middleware), and says it has requests pending, so the crawl never closes as idle; pages in
flight finish and are stored.
"""

from __future__ import annotations

import logging
import time
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError, ResponseError

from crawler.connection import reply_hash
from crawler.frontier.riders import Rider, Riders
from crawler.keys import pause_key

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector

    from crawler.connection import RedisClient

logger = logging.getLogger(__name__)

# Seconds between two reads of the pause key by one worker, and the longest a read waits for a
# round trip that goes anyway before it goes on its own.
CHECK_INTERVAL = 1.0
RIDE_WITHIN = 0.25
RIDER = "frontier-pause"
# Characters kept of a reason or a name ("by").
MAX_TEXT = 300


def clean_text(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` as one line of at most ``limit`` characters: control and format characters
    (newlines, escapes, bidi overrides) become spaces, runs of white space one space."""
    shown = "".join(
        " " if unicodedata.category(char)[0] in "CZ" else char
        for char in text
        if unicodedata.category(char) != "Cs"  # a lone surrogate cannot be stored as UTF-8
    )
    return " ".join(shown.split())[:limit].strip()


@dataclass(frozen=True)
class Pause:
    """A crawl's pause: since when (Unix time; None when the key does not say), by whom, why."""

    since: float | None
    by: str
    reason: str

    @classmethod
    def from_hash(cls, raw: Mapping[Any, Any]) -> Pause:
        """The pause a hash holds, whoever wrote it: missing or unreadable fields are empty."""
        fields = {_text(name): _text(value) for name, value in raw.items()}
        try:
            since: float | None = float(fields.get("since", ""))
        except ValueError:
            since = None
        if since is not None and not 0 <= since < 1e11:  # NaN, inf, or no Unix time
            since = None
        return cls(since, clean_text(fields.get("by", "")), clean_text(fields.get("reason", "")))

    def to_json(self) -> dict[str, Any]:
        return {"since": self.since, "by": self.by, "reason": self.reason}

    def describe(self) -> str:
        """``paused since 2026-01-02 03:04:05 UTC by ops (db migration)``."""
        when = (
            time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.since))
            if self.since is not None
            else "an unknown time"
        )
        return f"paused since {when} by {self.by or 'someone'}" + (
            f" ({self.reason})" if self.reason else ""
        )


def queue_read(pipe: Any, spider: str) -> None:
    """Queue the read of the pause key on ``pipe`` (one command; see pause_from_replies)."""
    pipe.hgetall(pause_key(spider))


def pause_from_replies(spider: str, replies: list[Any]) -> Pause | None:
    """The pause that ``queue_read``'s reply shows (Redis keeps no empty hash: none is no key);
    RedisError if Redis failed the read. A key of another type than a hash pauses too (it
    says no more)."""
    (raw,) = replies
    if isinstance(raw, ResponseError) and str(raw).startswith("WRONGTYPE"):
        return _not_a_hash(spider)
    if isinstance(raw, RedisError):
        raise raw
    return Pause.from_hash(reply_hash(raw)) if raw else None


def _not_a_hash(spider: str) -> Pause:
    return Pause(None, "", f"{pause_key(spider)} is not a hash")


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


class PauseWatch:
    """One worker's view of its crawl's pause, read every CHECK_INTERVAL seconds riding the
    scheduler's round trips; ``changed(pause)`` is called when it turns (None: resumed)."""

    def __init__(
        self,
        spider: str,
        stats: StatsCollector | None,
        changed: Callable[[Pause | None], None],
    ) -> None:
        self.spider = spider
        self.stats = stats
        self.changed = changed
        self.state: Pause | None = None
        self._since = 0.0  # monotonic time this worker saw the pause
        self._next_check = 0.0

    @property
    def paused(self) -> bool:
        return self.state is not None

    def ride(self, riders: Riders) -> None:
        """Have the key read with the next round trip, when CHECK_INTERVAL has passed since the
        last read was asked for; the read goes on its own after RIDE_WITHIN seconds."""
        now = time.monotonic()
        if now < self._next_check or riders.waiting(RIDER):
            return
        self._next_check = now + CHECK_INTERVAL
        rider = Rider(lambda pipe: queue_read(pipe, self.spider), self._read, self._failed)
        riders.add(RIDER, rider, RIDE_WITHIN)

    def look(self, server: RedisClient) -> None:
        """Read the key now, on a round trip of its own (as the scheduler opens: a worker
        started while the crawl is paused reads no start entry and pops nothing)."""
        pipe = server.pipeline(transaction=False)
        queue_read(pipe, self.spider)
        try:
            replies = pipe.execute(raise_on_error=False)
        except RedisError as exc:
            self._failed(exc)
            return
        self._read(replies)

    def _failed(self, exc: RedisError) -> None:
        self._next_check = 0.0  # asked again at the next tick; the state stays as last seen

    def _read(self, replies: list[Any]) -> None:
        self._count("frontier/pause_reads")
        try:
            state = pause_from_replies(self.spider, replies)
        except RedisError as exc:
            self._failed(exc)
            return
        before, self.state = self.state, state
        if (before is None) == (state is None):
            return
        if state is not None:
            self._since = time.monotonic()
            self._count("frontier/paused")
            logger.warning(
                "Crawl of %s %s: no new requests until `scrapy frontier %s resume`; pages in "
                "flight finish and are stored, leases are kept",
                self.spider,
                state.describe(),
                self.spider,
            )
        else:
            seconds = time.monotonic() - self._since
            self._count("frontier/paused_seconds", round(seconds))
            logger.warning("Crawl of %s resumed after %.1f s paused", self.spider, seconds)
        self.changed(state)

    def _count(self, key: str, value: int = 1) -> None:
        if value and self.stats is not None:
            self.stats.inc_value(key, value)
