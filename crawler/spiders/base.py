"""Spiders fed by start entries that users push to Redis (``<spider>:start_urls``).

An entry is a plain string (a URL, an id) or a JSON object. Each spider turns entries into
requests; an entry it cannot use is logged with the reason, counted under
``start/invalid/<reason>``, and set aside as JSON in ``<spider>:start_urls:invalid`` for a person
to look at. A bad entry never stops the crawl.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from redis.exceptions import RedisError
from scrapy import Request, Spider, signals
from scrapy.exceptions import DontCloseSpider, NotConfigured

from crawler.connection import redis_from_settings
from crawler.scheduling.scheduler import START_META, FrontierScheduler, frontier_scheduler

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

    from crawler.connection import RedisClient

logger = logging.getLogger(__name__)


class InvalidStartEntry(ValueError):
    """A start entry the spider cannot turn into requests; ``reason`` is a short slug."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


class StartEntries:
    """The Redis lists a spider reads start entries from and sets bad ones aside in."""

    def __init__(self, server: RedisClient, key: str, invalid_key: str, batch_size: int) -> None:
        if batch_size < 1:
            raise NotConfigured(f"START_BATCH_SIZE must be at least 1, got {batch_size}")
        self.server = server
        self.key = key
        self.invalid_key = invalid_key
        self.batch_size = batch_size

    @classmethod
    def from_settings(cls, settings: BaseSettings, spider_name: str) -> StartEntries:
        names = {"name": spider_name}
        return cls(
            server=redis_from_settings(settings),
            key=settings.get("REDIS_START_URLS_KEY") % names,
            invalid_key=settings.get("START_INVALID_KEY") % names,
            batch_size=settings.getint("START_BATCH_SIZE"),
        )

    def pop_batch(self, scheduler: FrontierScheduler | None) -> list[tuple[bytes, bytes | None]]:
        """Up to a batch of (entry, lease) in the order they were pushed with LPUSH.

        With the frontier scheduler each entry is leased, and comes back to the list if this
        worker dies before the entry's requests are in the frontier; otherwise it is popped.
        """
        if scheduler is not None:
            members = scheduler.lease_start_entries(self.batch_size)
            return [(member.split(b"\n", 1)[1], member) for member in members]
        entries: Any = self.server.rpop(self.key, self.batch_size)
        return [(bytes(entry), None) for entry in entries or []]

    def set_aside(self, entry: str, reason: str) -> None:
        record = {"entry": entry, "reason": reason, "time": time.time()}
        self.server.rpush(self.invalid_key, json.dumps(record))


def decode_entry(raw: bytes | str) -> str | dict[str, Any]:
    """A start entry as text or, when it is a JSON object, as a dict."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError:
        raise InvalidStartEntry("not_utf8") from None
    text = text.strip()
    if not text:
        raise InvalidStartEntry("empty")
    if not text.startswith(("{", "[")):
        return text
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InvalidStartEntry("invalid_json", str(exc)) from None
    if not isinstance(value, dict):
        raise InvalidStartEntry("not_an_object", "a JSON entry must be an object")
    return value


def check_keys(entry: Mapping[str, Any], allowed: set[str], required: set[str]) -> None:
    """Reject JSON entries with unknown or missing keys, naming them."""
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise InvalidStartEntry("unknown_keys", f"{unknown}; allowed: {sorted(allowed)}")
    missing = sorted(required - set(entry))
    if missing:
        raise InvalidStartEntry("missing_keys", str(missing))


class RedisFedSpider(Spider):
    """Base for spiders whose start entries come from Redis and from ``-a`` arguments.

    Subclasses implement :meth:`requests_from_entry` (raise :class:`InvalidStartEntry` for bad
    input) and may override :meth:`argument_entries` to turn spider arguments into entries.

    Settings:
        REDIS_START_URLS_KEY, START_INVALID_KEY, START_BATCH_SIZE, MAX_IDLE_TIME_BEFORE_CLOSE:
        see crawler/settings.py.
    """

    entry_kind: ClassVar[str] = "start entry"
    start_entries: StartEntries
    max_idle_time: float

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._idle_since: float | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> RedisFedSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        assert isinstance(spider, RedisFedSpider)
        spider.start_entries = StartEntries.from_settings(crawler.settings, spider.name)
        spider.max_idle_time = crawler.settings.getfloat("MAX_IDLE_TIME_BEFORE_CLOSE")
        crawler.signals.connect(spider.on_idle, signal=signals.spider_idle)
        return spider

    def requests_from_entry(self, entry: str | dict[str, Any]) -> Iterable[Request]:
        raise NotImplementedError

    def argument_entries(self) -> Iterable[str | dict[str, Any]]:
        """Start entries given as spider arguments (``-a``); none by default."""
        return ()

    async def start(self) -> AsyncIterator[Any]:
        for entry in self.argument_entries():
            for request in self._requests_or_set_aside(entry, str(entry)):
                yield request
        for request in self.next_start_requests():
            yield request

    def next_start_requests(self) -> list[Request]:
        """Requests from the next batches of start entries in Redis, skipping invalid ones."""
        requests: list[Request] = []
        scheduler = frontier_scheduler(self.crawler)
        while not requests:
            batch = self.start_entries.pop_batch(scheduler)
            if not batch:
                break
            for raw, lease in batch:
                made = self._requests_from_raw(raw)
                if lease is not None and scheduler is not None:
                    for request in made:
                        request.meta[START_META] = lease
                    scheduler.expect_start_requests(lease, len(made))
                requests.extend(made)
        return requests

    def _requests_from_raw(self, raw: bytes) -> list[Request]:
        shown = raw.decode("utf-8", "replace")
        try:
            entry = decode_entry(raw)
        except InvalidStartEntry as exc:
            self._set_aside(shown, exc)
            return []
        return self._requests_or_set_aside(entry, shown)

    def fleet_idle(self) -> bool:
        """True when no worker of the fleet has anything left: queue, leases, delayed, starts."""
        scheduler = frontier_scheduler(self.crawler)
        if scheduler is None or scheduler.frontier is None:
            return True
        if not scheduler.flush():
            return False
        try:
            sizes = scheduler.frontier.sizes()
        except RedisError:
            return False
        return not any(sizes[name] for name in ("queue", "leased", "delayed", "start_leased"))

    def _requests_or_set_aside(self, entry: str | dict[str, Any], shown: str) -> list[Request]:
        try:
            requests = list(self.requests_from_entry(entry))
        except InvalidStartEntry as exc:
            self._set_aside(shown, exc)
            return []
        self.count("start/entries")
        # A start entry is an explicit order: fetch it even if its URL was seen before.
        return [request.replace(dont_filter=True) for request in requests]

    def _set_aside(self, shown: str, exc: InvalidStartEntry) -> None:
        logger.warning(
            "Invalid %s %r (%s); set aside in %s",
            self.entry_kind,
            shown[:200],
            exc,
            self.start_entries.invalid_key,
            extra={"spider": self},
        )
        self.count(f"start/invalid/{exc.reason}")
        self.start_entries.set_aside(shown, str(exc))

    def count(self, key: str, value: int = 1) -> None:
        assert self.crawler.stats is not None
        self.crawler.stats.inc_value(key, value)

    def on_idle(self) -> None:
        """Feed the next batch of start entries, or let the spider close once idle long enough."""
        requests = self.next_start_requests()
        assert self.crawler.engine is not None
        for request in requests:
            self.crawler.engine.crawl(request)
        if requests or not self.fleet_idle():
            self._idle_since = None
            raise DontCloseSpider
        now = time.monotonic()
        self._idle_since = self._idle_since or now
        if self.max_idle_time <= 0 or now - self._idle_since < self.max_idle_time:
            raise DontCloseSpider
