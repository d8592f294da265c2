"""Spiders fed by start entries that users push to Redis (``<spider>:start_urls``).

An entry is a plain string (a URL, an id) or a JSON object. Each spider turns entries into
requests; an entry it cannot use, whatever is wrong with it, is logged with the reason, counted
under ``start/invalid/<reason>``, and set aside as JSON in ``<spider>:start_urls:invalid`` for a
person to look at. A bad entry never stops the crawl, and what one entry may cost is bounded:
START_ENTRY_MAX_BYTES, START_ENTRY_MAX_DEPTH. A URL in an entry must be on the spider's base
URL (or ALLOWED_START_HOSTS) and carry no user or password.
"""

from __future__ import annotations

import inspect
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import SplitResult, urlsplit

from redis.exceptions import RedisError
from scrapy import Request, Spider, signals
from scrapy.exceptions import DontCloseSpider

from crawler.config import mask_uri, setting, setting_int, validate_base_url
from crawler.connection import redis_from_settings
from crawler.extractors import jsondata
from crawler.scheduling.scheduler import START_META, FrontierScheduler, frontier_scheduler
from crawler.settings_check import SettingsError

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

    from crawler.connection import RedisClient

logger = logging.getLogger(__name__)

# (scheme, host, port) a start URL may point at.
Origin = tuple[str, str, int]
DEFAULT_PORTS = {"http": 80, "https": 443}
# Control characters: none in a plain entry; in a JSON entry only the whitespace JSON allows.
_PLAIN_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_JSON_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# Characters browsers and URL parsers disagree about: refused anywhere in a start URL.
_URL_FORBIDDEN = re.compile(r"[\x00-\x20\x7f-\x9f\\]|\s")


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
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
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
            batch_size=setting(settings, "START_BATCH_SIZE"),
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

    def set_aside(self, entry: str, reason: str, size: int) -> None:
        """Keep the entry (cut to ``size`` characters at most) with the reason it was refused."""
        record: dict[str, Any] = {"entry": entry[:size], "reason": reason, "time": time.time()}
        if len(entry) > size:
            record["truncated_from"] = len(entry)
        self.server.rpush(self.invalid_key, json.dumps(record))


def decode_entry(raw: bytes | str, limits: EntryLimits | None = None) -> str | dict[str, Any]:
    """A start entry as text or, when it is a JSON object, as a dict, within ``limits``."""
    limits = limits or EntryLimits()
    size = len(raw) if isinstance(raw, bytes) else len(raw.encode("utf-8", "replace"))
    if size > limits.max_bytes:
        raise InvalidStartEntry("too_large", f"{size} bytes, at most {limits.max_bytes}")
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError:
        raise InvalidStartEntry("not_utf8") from None
    text = text.strip()
    if not text:
        raise InvalidStartEntry("empty")
    if not text.startswith(("{", "[")):
        if _PLAIN_CONTROL.search(text):
            raise InvalidStartEntry("control_characters")
        return text
    return _decode_json(text, limits.max_depth)


def _decode_json(text: str, max_depth: int) -> dict[str, Any]:
    if _JSON_CONTROL.search(text):
        raise InvalidStartEntry("control_characters")
    try:
        value = jsondata.loads(text, max_depth)
    except jsondata.TooDeep:
        raise InvalidStartEntry("too_deep", f"JSON nested deeper than {max_depth}") from None
    except jsondata.MalformedData as exc:
        raise InvalidStartEntry("invalid_json", str(exc)) from None
    if not isinstance(value, dict):
        raise InvalidStartEntry("not_an_object", "a JSON entry must be an object")
    return value


def check_keys(entry: Mapping[str, Any], allowed: set[str], required: set[str]) -> None:
    """Reject JSON entries with unknown or missing keys, naming them."""
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise InvalidStartEntry("unknown_keys", f"{unknown[:20]}; allowed: {sorted(allowed)}")
    missing = sorted(required - set(entry))
    if missing:
        raise InvalidStartEntry("missing_keys", str(missing))


def url_origin(url: str) -> Origin:
    """(scheme, host, port) of an http(s) URL; InvalidStartEntry when it has none, or carries
    a user or password."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidStartEntry("bad_url", str(exc)) from None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        raise InvalidStartEntry("bad_url", "expected an http(s) URL with a host")
    if "@" in parts.netloc:
        raise InvalidStartEntry("credentials", "a start URL carries no user or password")
    return parts.scheme, parts.hostname, port or DEFAULT_PORTS[parts.scheme]


def check_start_url(value: Any, origins: frozenset[Origin]) -> SplitResult:
    """The parts of a start URL that is a string, well formed, without credentials and, when
    ``origins`` are given, on one of them; InvalidStartEntry with the reason otherwise."""
    if not isinstance(value, str):
        raise InvalidStartEntry("bad_url", f"a URL is a string, not {type(value).__name__}")
    if _URL_FORBIDDEN.search(value):
        raise InvalidStartEntry("bad_url", "whitespace, control character or backslash")
    origin = url_origin(value)
    if origins and origin not in origins:
        raise InvalidStartEntry("foreign_host", "{}://{}:{} is not a start host".format(*origin))
    return urlsplit(value)


def start_origins(base_url: str, allowed: Iterable[str]) -> frozenset[Origin]:
    """The origin of ``base_url`` and those of ALLOWED_START_HOSTS: ``scheme://host[:port]``,
    or ``host[:port]`` for both http and https."""
    urls = [base_url]
    for item in allowed:
        urls += [item] if "://" in item else [f"http://{item}", f"https://{item}"]
    try:
        return frozenset(url_origin(url) for url in urls)
    except InvalidStartEntry as exc:
        raise SettingsError(
            f"ALLOWED_START_HOSTS and base URLs are hosts or origins: {exc}"
        ) from None


def check_spider_arguments(spidercls: type[Spider], given: Mapping[str, Any]) -> None:
    """SettingsError naming any ``-a`` argument the spider does not take (names starting with
    ``_``, such as Scrapyd's ``_job``, pass): a misspelt argument must not be ignored."""
    unknown = sorted(name for name in given if not name.startswith("_"))
    if unknown:
        takes = sorted(
            name
            for cls in spidercls.__mro__
            if cls.__dict__.get("__init__") and issubclass(cls, RedisFedSpider)
            for name, param in inspect.signature(cls.__init__).parameters.items()
            if name != "self" and param.kind is param.POSITIONAL_OR_KEYWORD
        )
        raise SettingsError(
            f"spider {spidercls.name!r} takes no argument {', '.join(unknown)} "
            f"(-a NAME=VALUE); its arguments: {', '.join(takes) or 'none'}"
        )


class RedisFedSpider(Spider):
    """Base for spiders whose start entries come from Redis and from ``-a`` arguments.

    Subclasses implement :meth:`requests_from_entry` (raise :class:`InvalidStartEntry` for bad
    input) and may override :meth:`argument_entries` to turn spider arguments into entries.
    With ``base_url_setting`` set, every request an entry makes must be on that base URL's
    origin or one of ALLOWED_START_HOSTS (:meth:`start_url` checks a URL given in an entry).

    Settings:
        REDIS_START_URLS_KEY, START_INVALID_KEY, START_BATCH_SIZE, START_ENTRY_MAX_BYTES,
        START_ENTRY_MAX_DEPTH, ALLOWED_START_HOSTS, MAX_IDLE_TIME_BEFORE_CLOSE:
        see crawler/settings.py.
    """

    entry_kind: ClassVar[str] = "start entry"
    base_url_setting: ClassVar[str] = ""
    # A start entry is an explicit order: fetched even if its URL was seen before. A spider
    # whose start URLs are pages of the crawl they seed (links) sets this to False, so a page
    # linking back to its start URL does not fetch it twice.
    refetch_start_urls: ClassVar[bool] = True
    start_entries: StartEntries
    max_idle_time: float
    base_url: str

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        check_spider_arguments(type(self), kwargs)
        super().__init__(*args, **kwargs)
        self._idle_since: float | None = None
        self._said_waiting = False
        self.entry_limits = EntryLimits()
        self.start_origins: frozenset[Origin] = frozenset()

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> RedisFedSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        assert isinstance(spider, RedisFedSpider)
        settings = crawler.settings
        spider.start_entries = StartEntries.from_settings(settings, spider.name)
        spider.entry_limits = EntryLimits.from_settings(settings)
        spider.max_idle_time = setting(settings, "MAX_IDLE_TIME_BEFORE_CLOSE")
        if cls.base_url_setting:
            spider.base_url = validate_base_url(settings, cls.base_url_setting)
            allowed = setting(settings, "ALLOWED_START_HOSTS")
            spider.start_origins = start_origins(spider.base_url, allowed)
        crawler.signals.connect(spider.on_idle, signal=signals.spider_idle)
        return spider

    def requests_from_entry(self, entry: str | dict[str, Any]) -> Iterable[Request]:
        raise NotImplementedError

    def argument_entries(self) -> Iterable[str | dict[str, Any]]:
        """Start entries given as spider arguments (``-a``); none by default."""
        return ()

    def start_url(self, value: Any) -> SplitResult:
        """A URL given in a start entry, checked (see :func:`check_start_url`)."""
        return check_start_url(value, self.start_origins)

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
            batch = self._pop_batch(scheduler)
            if not batch:
                break
            for raw, lease in batch:
                made = self._requests_from_raw(raw)
                if lease is not None and scheduler is not None:
                    for request in made:
                        request.meta[START_META] = lease
                    # No requests (an entry set aside) acks the entry's lease at once.
                    scheduler.expect_start_requests(lease, len(made))
                requests.extend(made)
        return requests

    def _pop_batch(self, scheduler: FrontierScheduler | None) -> list[tuple[bytes, bytes | None]]:
        try:
            return self.start_entries.pop_batch(scheduler)
        except RedisError as exc:
            logger.error("Could not read start entries: %s", exc, extra={"spider": self})
            return []

    def _requests_from_raw(self, raw: bytes) -> list[Request]:
        try:
            entry = decode_entry(raw, self.entry_limits)
        except Exception as exc:
            self._set_aside(raw.decode("utf-8", "backslashreplace"), exc)
            return []
        return self._requests_or_set_aside(entry, raw.decode("utf-8", "backslashreplace"))

    def _requests_or_set_aside(self, entry: str | dict[str, Any], shown: str) -> list[Request]:
        try:
            requests = [self._checked(request) for request in self.requests_from_entry(entry)]
        except Exception as exc:
            self._set_aside(shown, exc)
            return []
        self.count("start/entries")
        return requests

    def _checked(self, request: Request) -> Request:
        if self.start_origins:
            origin = url_origin(request.url)
            if origin not in self.start_origins:
                raise InvalidStartEntry("foreign_host", f"{request.url[:200]} is off the base URL")
        return request.replace(dont_filter=True) if self.refetch_start_urls else request

    def _say_waiting(self) -> None:
        """Once per idle spell: where this worker waits for start entries."""
        if self._said_waiting:
            return
        self._said_waiting = True
        url = mask_uri(str(self.crawler.settings.get("REDIS_URL") or ""))
        logger.info(
            "Idle: waiting for start entries in %s on %s (redis-cli lpush %s ...)",
            self.start_entries.key,
            url,
            self.start_entries.key,
            extra={"spider": self},
        )

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

    def _set_aside(self, shown: str, exc: Exception) -> None:
        if isinstance(exc, InvalidStartEntry):
            reason, message = exc.reason, str(exc)
        else:
            reason = f"error:{type(exc).__name__}"
            message = f"{reason}: {str(exc)[:500]}"
        logger.warning(
            "Invalid %s %r (%s); set aside in %s",
            self.entry_kind,
            shown[:200],
            message,
            self.start_entries.invalid_key,
            exc_info=None if isinstance(exc, InvalidStartEntry) else exc,
            extra={"spider": self},
        )
        self.count(f"start/invalid/{reason}")
        try:
            self.start_entries.set_aside(shown, message, self.entry_limits.max_bytes)
        except RedisError as error:
            logger.error("Could not set the entry aside: %s", error, extra={"spider": self})

    def count(self, key: str, value: int = 1) -> None:
        assert self.crawler.stats is not None
        self.crawler.stats.inc_value(key, value)

    def count_bad_fields(self, names: Iterable[str]) -> None:
        """Count values of a response that were present but unusable, per field."""
        for name in names:
            self.count(f"extract/bad_field/{name}")

    def on_idle(self) -> None:
        """Feed the next batch of start entries, or let the spider close once the whole fleet
        has been idle long enough. Never raises anything but DontCloseSpider."""
        if not self._may_close():
            raise DontCloseSpider

    def _may_close(self) -> bool:
        try:
            requests = self.next_start_requests()
            assert self.crawler.engine is not None
            for request in requests:
                self.crawler.engine.crawl(request)
            busy = bool(requests) or not self.fleet_idle()
        except Exception:
            logger.exception("Could not feed start entries; trying again", extra={"spider": self})
            busy = True
        if busy:
            self._idle_since = None
            self._said_waiting = False
            return False
        self._say_waiting()
        now = time.monotonic()
        self._idle_since = self._idle_since or now
        return self.max_idle_time > 0 and now - self._idle_since >= self.max_idle_time
