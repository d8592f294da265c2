"""Start entries read from Redis in leased batches, bad ones set aside, the idle rule: how the
project's spiders (``base.py``) and scrapy-redis spiders (``redis.py``) are fed
(docs/spiders.md, start entries). An entry's function refusing it, whatever went wrong, sets it
aside in the invalid list with the reason, counted under ``start/invalid/<reason>``.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError
from scrapy.exceptions import DontCloseSpider

from crawler.config import setting, setting_int
from crawler.connection import crawl_redis
from crawler.frontier import codec
from crawler.frontier.jobs import InvalidJob
from crawler.frontier.queue import fleet_busy
from crawler.frontier.reports import frontier_scheduler
from crawler.frontier.scheduler import START_META, FrontierScheduler
from crawler.keys import invalid_key, start_key
from crawler.spiders.attributes import own_batch_size
from crawler.spiders.entry_job import entry_job, of_job, spider_job
from crawler.uris import mask_uri

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

    from crawler.connection import RedisClient

logger = logging.getLogger(__name__)

# Seconds one call of StartFeed.next_requests may spend reading batches that make no request.
FEED_BUDGET = 0.2

# The requests of one start entry as Redis holds it; raises for an entry it cannot use.
MakeRequests = Callable[[bytes], Iterable["Request"]]


class InvalidStartEntry(ValueError):
    """A start entry the spider cannot turn into requests; ``reason`` is a short slug."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass(frozen=True)
class EntryLimits:
    """What one start entry may cost: its size in bytes and the nesting of its JSON."""

    max_bytes: int = 16384
    max_depth: int = 8

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> EntryLimits:
        return cls(
            max_bytes=setting_int(settings, "START_ENTRY_MAX_BYTES", 1),
            max_depth=setting_int(settings, "START_ENTRY_MAX_DEPTH", 1, 100),
        )


class StartEntries:
    """The Redis lists a spider reads start entries from and sets bad ones aside in."""

    def __init__(self, server: RedisClient, key: str, invalid_key: str, batch_size: int) -> None:
        self.server = server
        self.key = key
        self.invalid_key = invalid_key
        self.batch_size = batch_size

    @classmethod
    def for_spider(cls, crawler: Crawler, spider: Any) -> StartEntries:
        """The spider's lists (``redis_key`` or its settings), popped its batch size at a time."""
        settings = crawler.settings
        return cls(
            server=crawl_redis(crawler),
            key=start_key(settings, spider),
            invalid_key=invalid_key(settings, spider),
            batch_size=own_batch_size(spider) or setting(settings, "START_BATCH_SIZE"),
        )

    def pop_batch(self, scheduler: FrontierScheduler | None) -> list[tuple[bytes, bytes | None]]:
        """Up to a batch of (entry, lease), in LPUSH order: leased with the frontier scheduler (back
        to the list if this worker dies before their requests are in the frontier), else popped."""
        if scheduler is not None:
            if scheduler.idle is None:  # not open yet
                return []
            members = scheduler.idle.lease_start_entries(self.batch_size)
            return [(member.split(b"\n", 1)[1], member) for member in members]
        entries: Any = self.server.rpop(self.key, self.batch_size)
        return [(bytes(entry), None) for entry in entries or []]

    def set_aside(self, entry: str, reason: str, size: int, raw: bytes | None = None) -> None:
        """Keep the entry (cut to ``size`` characters at most) with the reason it was refused;
        an entry that is not UTF-8 (``raw``, shown with backslash escapes) is also kept byte
        for byte in ``entry_base64``, so it can be pushed back as it was."""
        record: dict[str, Any] = {"entry": entry[:size], "reason": reason, "time": time.time()}
        if len(entry) > size:
            record["truncated_from"] = len(entry)
        if raw is not None and len(raw) <= size and not _is_utf8(raw):
            record["entry_base64"] = base64.b64encode(raw).decode("ascii")
        self.server.rpush(self.invalid_key, json.dumps(record))


def entry_problem(exc: Exception) -> tuple[str, str]:
    """The reason an entry was refused (its stats key's last part) and the message saying it."""
    if isinstance(exc, InvalidStartEntry):
        return exc.reason, str(exc)
    reason = f"error:{type(exc).__name__}"
    return reason, f"{reason}: {str(exc)[:500]}"


def url_length_limit(settings: BaseSettings) -> int:
    """URLLENGTH_LIMIT while Scrapy's UrlLengthMiddleware (which drops longer URLs) is on."""
    middlewares = settings.getwithbase("SPIDER_MIDDLEWARES")
    if middlewares.get("scrapy.spidermiddlewares.urllength.UrlLengthMiddleware") is None:
        return 0
    return settings.getint("URLLENGTH_LIMIT")


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class StartFeed:
    """Feeds one spider from its start list; ``make`` turns an entry into requests. :meth:`on_idle`
    lets the spider close only once the whole fleet has been idle ``max_idle_time`` seconds (0:
    never)."""

    def __init__(
        self,
        crawler: Crawler,
        spider: Spider,
        entries: StartEntries,
        make: MakeRequests,
        max_idle_time: float,
        max_shown: int = EntryLimits.max_bytes,
        kind: str = "start entry",
    ) -> None:
        self.crawler = crawler
        self.spider = spider
        self.entries = entries
        self.make = make
        self.max_idle_time = max_idle_time
        self.max_shown = max_shown
        self.kind = kind
        self._idle_since: float | None = None
        self._said_waiting = False
        self._waiting_level = logging.INFO  # DEBUG once said
        self.fed = False  # whether the last next_requests() read any entry
        self._found_none_at = -math.inf  # when top_up last found the start list empty
        self.idle_poll: float = setting(crawler.settings, "IDLE_POLL_INTERVAL")
        self.job = spider_job(spider)  # -a job=: the job of entries that name none

    def next_requests(self) -> list[Request]:
        """Requests from the next batches of start entries in Redis, bad ones set aside: batches are
        read until one makes requests or FEED_BUDGET seconds have passed, so a run of bad entries
        never holds the reactor (the idle poll asks again). The acks of entries set aside are
        written after each batch; the requests made go with the frontier's next pop, acking their
        entries. None is read while the crawl is paused."""
        requests: list[Request] = []
        scheduler = frontier_scheduler(self.crawler)
        self.fed = False
        if scheduler is not None and scheduler.when_short is None:
            scheduler.when_short = self.top_up
        if scheduler is not None and scheduler.paused():
            return requests  # no entry is read while the crawl is paused
        if scheduler is not None and scheduler.idle and scheduler.idle.no_start_entries_known():
            return requests
        deadline = time.monotonic() + FEED_BUDGET
        while not requests and time.monotonic() < deadline:
            batch = self._pop_batch(scheduler)
            if not batch:
                break
            self.fed = True
            for raw, lease in batch:
                requests.extend(self._entry_requests(raw, lease, scheduler))
            if scheduler is not None and not requests:
                scheduler.flush()  # the acks of the entries set aside, before the next batch
        return requests

    def top_up(self) -> None:
        """The frontier has less than a batch this worker may send now (a polite queue may be full
        of work waiting for its hosts' turns): the next start entries are crawled now, so new hosts
        keep the worker busy; not within IDLE_POLL_INTERVAL of a read that found none."""
        now = time.monotonic()
        if now - self._found_none_at < self.idle_poll:
            return
        try:
            self._crawl(self.next_requests())
        except Exception:
            logger.exception("Could not feed start entries", extra={"spider": self.spider})
        if not self.fed:
            self._found_none_at = now

    def _entry_requests(
        self, raw: bytes, lease: bytes | None, scheduler: FrontierScheduler | None
    ) -> list[Request]:
        """The entry's requests tagged with its lease, or none: the entry is set aside (and
        its lease acked), or, if it could not be, left to come back when its lease expires."""
        shown = raw.decode("utf-8", "backslashreplace")
        try:
            job, read = entry_job(raw, self.job, self.max_shown)
            made = of_job(self.crawler, self.usable(list(self.make(read))), job)
        except RedisError as exc:  # the job's number not known: the entry comes back
            logger.error("Start entry %r left to come back: %s", shown[:200], exc)
            self._settled(scheduler, lease, False, raw)
            return []
        except Exception as exc:
            if isinstance(exc, InvalidJob):
                exc = InvalidStartEntry("bad_job", str(exc))
            self._settled(scheduler, lease, self.set_aside(shown, exc, raw), raw)
            return []
        self.count("start/entries")
        if lease is not None and scheduler is not None:
            for request in made:
                request.meta[START_META] = lease
            scheduler.starts.expect(lease, len(made))
        return made

    def _settled(
        self, scheduler: FrontierScheduler | None, lease: bytes | None, kept: bool, raw: bytes
    ) -> None:
        if lease is not None and scheduler is not None:
            if kept:
                scheduler.starts.finish(lease)
            else:
                scheduler.starts.forget(lease)
        elif not kept:
            self._give_back(raw)

    def _give_back(self, raw: bytes) -> None:
        """Popped without a lease and not set aside: back to the list's popping end."""
        try:
            self.entries.server.rpush(self.entries.key, raw)
        except RedisError as exc:
            logger.error("Start entry %r lost: %s", raw[:2000], exc, extra={"spider": self.spider})

    @cached_property
    def _url_length_limit(self) -> int:
        return url_length_limit(self.crawler.settings)

    def usable(self, requests: list[Request]) -> list[Request]:
        """The requests (each once), or InvalidStartEntry for one the frontier/Scrapy drops."""
        unique = list({id(request): request for request in requests}.values())
        limit = self._url_length_limit
        for request in unique:
            if limit and len(request.url) > limit:
                detail = f"{len(request.url)} characters, URLLENGTH_LIMIT is {limit}"
                raise InvalidStartEntry("url_too_long", detail)
            try:
                codec.dumps(codec.request_record(request, self.spider))
            except Exception as exc:
                detail = f"{type(exc).__name__}: {str(exc)[:300]}"
                raise InvalidStartEntry("not_serializable", detail) from None
        return unique

    def requests_or_set_aside(
        self, make: Callable[[], Iterable[Request]], shown: str
    ) -> list[Request]:
        """``make()``'s requests, or none when it raises: the entry is set aside."""
        try:
            requests = of_job(self.crawler, self.usable(list(make())), self.job)
        except Exception as exc:
            self.set_aside(shown, exc)
            return []
        self.count("start/entries")
        return requests

    def set_aside_stranded(self) -> None:
        """At idle every request of a leased entry reached the scheduler or never will (a
        middleware dropped it, scheduling it failed): an entry still waiting is set aside."""
        scheduler = frontier_scheduler(self.crawler)
        if scheduler is None:
            return
        for member, remaining in list(scheduler.starts.held.items()):
            raw = member.split(b"\n", 1)[1]
            exc = InvalidStartEntry(
                "requests_dropped", f"{remaining} of its requests never reached the scheduler"
            )
            kept = self.set_aside(raw.decode("utf-8", "backslashreplace"), exc, raw)
            self._settled(scheduler, member, kept, raw)

    def set_aside(self, shown: str, exc: Exception, raw: bytes | None = None) -> bool:
        """Keep the entry in the invalid list with the reason; False if Redis refused."""
        reason, message = entry_problem(exc)
        logger.warning(
            "Invalid %s %r (%s); set aside in %s",
            self.kind,
            shown[:200],
            message,
            self.entries.invalid_key,
            exc_info=None if isinstance(exc, InvalidStartEntry) else exc,
            extra={"spider": self.spider},
        )
        self.count(f"start/invalid/{reason}")
        try:
            self.entries.set_aside(shown, message, self.max_shown, raw)
        except RedisError as error:
            logger.error("Could not set the entry aside: %s", error, extra={"spider": self.spider})
            return False
        return True

    def count(self, key: str, value: int = 1) -> None:
        assert self.crawler.stats is not None
        self.crawler.stats.inc_value(key, value)

    def fleet_idle(self) -> bool:
        """True when no worker of the fleet has anything left: queue, leases, delayed, starts."""
        scheduler = frontier_scheduler(self.crawler)
        if scheduler is None:
            return True
        if scheduler.idle is None:
            return False
        sizes = scheduler.idle.fleet_sizes()
        return sizes is not None and not fleet_busy(sizes)

    def on_idle(self) -> None:
        """Feed the next batch, or let the spider close; raises nothing but DontCloseSpider."""
        if not self._may_close():
            raise DontCloseSpider

    def _pop_batch(self, scheduler: FrontierScheduler | None) -> list[tuple[bytes, bytes | None]]:
        try:
            return self.entries.pop_batch(scheduler)
        except RedisError as exc:
            logger.error("Could not read start entries: %s", exc, extra={"spider": self.spider})
            return []

    def _may_close(self) -> bool:
        try:
            self.set_aside_stranded()
            requests = self.next_requests()
            self._crawl(requests)
            if self.fed and not requests:
                self._look_again_at_once()
            busy = bool(requests) or self.fed or not self.fleet_idle()
        except Exception:
            logger.exception(
                "Could not feed start entries; trying again", extra={"spider": self.spider}
            )
            busy = True
        if busy:
            self._idle_since = None
            self._said_waiting = False
            return False
        self._say_waiting()
        now = time.monotonic()
        self._idle_since = self._idle_since or now
        return self.max_idle_time > 0 and now - self._idle_since >= self.max_idle_time

    def _look_again_at_once(self) -> None:
        """All entries read were set aside: read on at the engine's next turn, not after a poll."""
        slot = getattr(self.crawler.engine, "_slot", None)
        if slot is not None and slot.closing is None:
            slot.nextcall.schedule(0)

    def _crawl(self, requests: list[Request]) -> None:
        """Hand each request to the engine; one failing (set aside at idle) keeps back no other."""
        assert self.crawler.engine is not None
        for request in requests:
            try:
                self.crawler.engine.crawl(request)
            except Exception:
                logger.exception(
                    "Could not schedule %s", request.url[:200], extra={"spider": self.spider}
                )

    def _say_waiting(self) -> None:
        """Once per idle spell, at INFO the first time only (a spell between revisits, or
        retries falling due, is no news): where this worker waits for start entries."""
        if self._said_waiting:
            return
        self._said_waiting = True
        level, self._waiting_level = self._waiting_level, logging.DEBUG
        url = mask_uri(str(self.crawler.settings.get("REDIS_URL") or ""))
        revisits = self.crawler.settings.getbool("RECRAWL_ENABLED")
        logger.log(
            level,
            "Idle: the fleet's frontier is empty; waiting for start entries in %s on %s "
            "(redis-cli lpush %s ...)%s",
            self.entries.key,
            url,
            self.entries.key,
            ", or revisits falling due" if revisits else "",
            extra={"spider": self.spider},
        )
