"""Spiders fed by start entries that users push to Redis (``<spider>:start_urls``): a plain
string (a URL, an id) or a JSON object, bounded by START_ENTRY_MAX_BYTES and
START_ENTRY_MAX_DEPTH. An entry a spider cannot use is set aside with its reason, never stopping
the crawl; one given in an ``-a`` list refuses the start instead (docs/spiders.md). A URL in an
entry must be on the spider's base URL (or ALLOWED_START_HOSTS) and carry no user or password.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self
from urllib.parse import SplitResult, urlsplit

from scrapy import Request, Spider, signals

from crawler.config import setting, validate_base_url
from crawler.config.rules import SettingsError
from crawler.extractors import jsondata
from crawler.meta import SEED_META
from crawler.spiders.attributes import own_idle_time, refuse_skipped_hooks
from crawler.spiders.entry_job import job_argument
from crawler.spiders.feed import EntryLimits as EntryLimits  # where spiders import them from
from crawler.spiders.feed import InvalidStartEntry as InvalidStartEntry
from crawler.spiders.feed import StartEntries, StartFeed, entry_problem
from crawler.uris import WEB_PORTS

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


# (scheme, host, port) a start URL may point at.
Origin = tuple[str, str, int]
# Control characters: none in a plain entry; in a JSON entry only the whitespace JSON allows.
_PLAIN_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_JSON_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# Characters browsers and URL parsers disagree about: refused anywhere in a start URL.
_URL_FORBIDDEN = re.compile(r"[\x00-\x20\x7f-\x9f\\]|\s")


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
    text = text.lstrip("\ufeff").strip()  # a byte-order mark an editor wrote is not the entry's
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
    if _escaped_control(value):
        raise InvalidStartEntry("control_characters", "escaped in a JSON string (\\u0000...)")
    return value


def _escaped_control(value: Any) -> bool:
    """Whether a decoded JSON value holds a control character in a string (a key's too), as
    an escape (``\\u0000``) brings it past the check of the entry's text."""
    if isinstance(value, str):
        return bool(_JSON_CONTROL.search(value))
    if isinstance(value, dict):
        return any(_escaped_control(key) or _escaped_control(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_escaped_control(item) for item in value)
    return False


def check_keys(entry: Mapping[str, Any], allowed: set[str], required: set[str]) -> None:
    """Reject JSON entries with unknown or missing keys, naming them."""
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise InvalidStartEntry("unknown_keys", f"{unknown[:20]}; allowed: {sorted(allowed)}")
    missing = sorted(required - set(entry))
    if missing:
        raise InvalidStartEntry("missing_keys", str(missing))


def bounded(value: Any, name: str, limit: int) -> int:
    """A JSON entry's whole number ``name`` from 0 to ``limit``, or InvalidStartEntry."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
        raise InvalidStartEntry(
            f"bad_{name}", f"{repr(value)[:80]} is not a whole number 0..{limit}"
        )
    return value


def url_origin(url: str) -> Origin:
    """(scheme, host, port) of an http(s) URL; InvalidStartEntry if it has none, or credentials."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidStartEntry("bad_url", str(exc)) from None
    if parts.scheme not in WEB_PORTS or not parts.hostname:
        raise InvalidStartEntry("bad_url", "expected an http(s) URL with a host")
    if "@" in parts.netloc:
        raise InvalidStartEntry("credentials", "a start URL carries no user or password")
    return parts.scheme, parts.hostname, port or WEB_PORTS[parts.scheme]


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


# The scrapy-redis attributes a spider takes with ``-a`` too (docs/scrapy-redis.md), and ``job``,
# the crawl job of the entries that name none.
REDIS_ARGUMENTS = frozenset({"redis_key", "redis_batch_size", "redis_encoding", "max_idle_time"})


def check_spider_arguments(spidercls: type[Spider], given: Mapping[str, Any]) -> None:
    """SettingsError naming any ``-a`` argument the spider does not take (names starting with
    ``_``, such as Scrapyd's ``_job``, pass, as do ``job`` and the scrapy-redis attributes):
    a misspelt argument must not be ignored; and a ``job`` that is not a job id."""
    known = REDIS_ARGUMENTS | {"job"}
    unknown = sorted(name for name in given if not name.startswith("_") and name not in known)
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
    job_argument(given.get("job"))


class RedisFedSpider(Spider):
    """Base for spiders whose start entries come from Redis and from ``-a`` arguments: subclasses
    implement :meth:`requests_from_entry` (raising :class:`InvalidStartEntry` for bad input) and may
    override :meth:`argument_entries`. With ``base_url_setting``, every request an entry makes must
    be on that base URL's origin or ALLOWED_START_HOSTS. As in scrapy-redis, ``redis_key`` names the
    spider's start list and ``redis_batch_size`` the entries per round trip."""

    entry_kind: ClassVar[str] = "start entry"
    base_url_setting: ClassVar[str] = ""
    # The host of an entry that is no URL (nor a JSON object with a ``url``), for ``scrapy fleet
    # plan`` (crawler/spiders/entry_hosts.py): "base_url" (the base URL's), "entry" (the entry is
    # a bare host or a domain) or "" (not known without the spider: the plan says so).
    entry_host_from: ClassVar[str] = ""
    # A start entry is an explicit order: fetched even if its URL was seen before. A spider
    # whose start URLs are pages of the crawl they seed (links) sets this to False: a start
    # entry is then a seed (meta SEED_META), fetched unless the same seed was before, even when
    # a link found its URL first, and a page linking back to it does not fetch it twice.
    refetch_start_urls: ClassVar[bool] = True
    redis_key: ClassVar[str | None] = None
    redis_batch_size: ClassVar[int | None] = None
    start_entries: StartEntries
    feed: StartFeed
    max_idle_time: float
    base_url: str

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        check_spider_arguments(type(self), kwargs)
        refuse_skipped_hooks(type(self), RedisFedSpider, own_start=True)
        super().__init__(*args, **kwargs)
        self.entry_limits = EntryLimits()
        self.start_origins: frozenset[Origin] = frozenset()
        # The entries of each ``-a NAME=a,b`` given, checked whole before the crawl starts.
        self.entry_arguments: dict[str, list[str]] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> Self:
        spider = super().from_crawler(crawler, *args, **kwargs)
        settings = crawler.settings
        spider.start_entries = StartEntries.for_spider(crawler, spider)
        spider.entry_limits = EntryLimits.from_settings(settings)
        spider.max_idle_time = own_idle_time(spider, settings)
        spider.feed = StartFeed(
            crawler,
            spider,
            spider.start_entries,
            spider.requests_from_raw,
            spider.max_idle_time,
            spider.entry_limits.max_bytes,
            cls.entry_kind,
        )
        if cls.base_url_setting:
            spider.base_url = validate_base_url(settings, cls.base_url_setting)
            allowed = setting(settings, "ALLOWED_START_HOSTS")
            spider.start_origins = start_origins(spider.base_url, allowed)
        spider.configure(crawler)
        spider.check_entry_arguments()
        crawler.signals.connect(spider.on_idle, signal=signals.spider_idle)
        return spider

    def configure(self, crawler: Crawler) -> None:
        """Read the spider's own settings; done before its ``-a`` entries are checked."""

    def entry_argument(self, name: str, value: str | None) -> list[str]:
        """The entries of ``-a NAME=a,b`` (none when it is not given), kept to be checked as the
        crawl starts; SettingsError when it is given without any."""
        if value is None:
            return []
        entries = [part.strip() for part in value.split(",") if part.strip()]
        if not entries:
            raise SettingsError(f"-a {name}: no entries; give -a {name}=a,b")
        self.entry_arguments[name] = entries
        return entries

    def check_entry_arguments(self) -> None:
        """SettingsError (one line, exit status 2, before any lease) naming the first entry of an
        ``-a`` list the spider cannot use, with its reason: a command line is refused whole, not
        half run. Entries pushed to Redis, and the lines of ``-a file=``, are set aside instead."""
        for name, entries in self.entry_arguments.items():
            for entry in entries:
                try:
                    self.feed.usable([self._checked(r) for r in self.requests_from_entry(entry)])
                except Exception as exc:
                    problem = entry_problem(exc)[1]
                    shown = f"{entry[:200]!r} is invalid ({problem})"
                    raise SettingsError(f"-a {name}: {shown}") from None

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
        for request in self.feed.next_requests():
            yield request

    def requests_from_raw(self, raw: bytes) -> list[Request]:
        """The requests of an entry as Redis holds it, decoded within limits; raises if unusable."""
        entry = decode_entry(raw, self.entry_limits)
        return [self._checked(request) for request in self.requests_from_entry(entry)]

    def _requests_or_set_aside(self, entry: str | dict[str, Any], shown: str) -> list[Request]:
        return self.feed.requests_or_set_aside(
            lambda: [self._checked(request) for request in self.requests_from_entry(entry)], shown
        )

    def _checked(self, request: Request, as_made: bool = False) -> Request:
        """A start entry's request on the spider's origins, fetched again even if seen (or a
        seed: ``refetch_start_urls``); ``as_made``: its ``dont_filter`` is the spider's own
        choice, kept (a ``make_request_from_data`` of the spider's)."""
        if self.start_origins:
            origin = url_origin(request.url)
            if origin not in self.start_origins:
                raise InvalidStartEntry("foreign_host", f"{request.url[:200]} is off the base URL")
        if self.refetch_start_urls:
            return request if as_made else request.replace(dont_filter=True)
        request.meta[SEED_META] = True
        return request

    def count(self, key: str, value: int = 1) -> None:
        assert self.crawler.stats is not None
        self.crawler.stats.inc_value(key, value)

    def count_bad_fields(self, names: Iterable[str]) -> None:
        """Count values of a response that were present but unusable, per field."""
        for name in names:
            self.count(f"extract/bad_field/{name}")

    def on_idle(self) -> None:
        """Feed the next batch, or let the spider close once the fleet has idled long enough."""
        self.feed.on_idle()
