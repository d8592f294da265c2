"""scrapy-redis spiders on the frontier (docs/scrapy-redis.md): :class:`RedisSpider` and
:class:`RedisCrawlSpider` here, or scrapy-redis's own classes as they are, whose
``next_requests`` and idle handler :class:`ScrapyRedisSpiders` replaces with the project's
:class:`StartFeed`. Either way start entries are leased, and one ``make_request_from_data``
cannot use is set aside in ``<redis_key>:invalid`` with the reason. An entry is a URL, or JSON
``{"url": ..., "method": ..., "meta": {...}, ...}`` whose other keys are form data; ``meta``
may not set the crawl's own keys (``entry_meta.py``).
"""

from __future__ import annotations

import codecs
import logging
from collections.abc import Iterable
from contextlib import suppress
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, Self

from scrapy import FormRequest, Request, signals
from scrapy.exceptions import NotConfigured
from scrapy.spiders import CrawlSpider

from crawler.config.rules import SettingsError, problem
from crawler.frontier.reports import on_the_frontier
from crawler.spiders.attributes import own_idle_time, refuse_skipped_hooks
from crawler.spiders.base import RedisFedSpider, check_start_url, decode_entry
from crawler.spiders.entry_meta import check_meta
from crawler.spiders.feed import (
    EntryLimits,
    InvalidStartEntry,
    StartEntries,
    StartFeed,
)

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


def request_from_data(data: bytes, encoding: str, limits: EntryLimits) -> Request:
    """scrapy-redis's start entry as a request, or InvalidStartEntry with the reason: a URL, or
    JSON with ``url`` and optional ``method``, ``meta`` (an object) and form fields (text)."""
    if encoding.replace("-", "").replace("_", "").lower() == "utf8":
        entry = decode_entry(data, limits)
    else:
        try:
            entry = decode_entry(data.decode(encoding), limits)
        except (UnicodeDecodeError, LookupError):
            raise InvalidStartEntry("not_decodable", f"not {encoding}") from None
    if isinstance(entry, str):
        return Request(check_start_url(entry, frozenset()).geturl(), dont_filter=True)
    fields = dict(entry)
    if "url" not in fields:
        raise InvalidStartEntry("missing_keys", "['url']")
    url = check_start_url(fields.pop("url"), frozenset()).geturl()
    method, meta = fields.pop("method", "GET"), fields.pop("meta", {})
    if not isinstance(method, str) or not (method.isascii() and method.isalpha()):
        raise InvalidStartEntry("bad_value", "method is a word such as GET or POST")
    meta = check_meta(meta)
    for name, value in fields.items():
        if not isinstance(value, str) and not (
            isinstance(value, list) and all(isinstance(part, str) for part in value)
        ):
            raise InvalidStartEntry("bad_value", f"form field {name[:50]!r} is not text")
    return FormRequest(url, method=method.upper(), formdata=fields, meta=meta, dont_filter=True)


def as_requests(made: Any) -> list[Request]:
    """What ``make_request_from_data`` returned, as a list of requests (at least one)."""
    if isinstance(made, Request):
        requests = [made]
    elif made is None or isinstance(made, str | bytes | dict):
        requests = []
    else:
        requests = list(made)
    if not requests:
        raise InvalidStartEntry("no_requests", "make_request_from_data made no request")
    for request in requests:
        if not isinstance(request, Request):
            raise InvalidStartEntry("not_a_request", f"got {type(request).__name__}")
    return requests


def list_allowed_domains(spider: Any) -> None:
    """Make a one-shot ``allowed_domains`` (scrapy-redis's example spiders set a ``filter``
    object, a list in the Python 2 they were written for) a list: Scrapy reads it twice, and a
    second read of a spent iterator would filter every request as offsite."""
    domains = getattr(spider, "allowed_domains", None)
    if domains is not None and not isinstance(domains, list | tuple | set | frozenset | str):
        spider.allowed_domains = list(domains)


def check_encoding(spider: Any) -> None:
    """SettingsError for an unknown ``redis_encoding`` (every entry would be set aside)."""
    encoding = getattr(spider, "redis_encoding", None) or "utf-8"
    try:
        codecs.lookup(encoding)
    except (LookupError, TypeError):
        allowed = "an encoding Python knows, such as utf-8 or latin-1"
        raise SettingsError(
            problem(f"{type(spider).__name__}.redis_encoding", encoding, allowed)
        ) from None


def check_size(data: bytes, limits: EntryLimits) -> None:
    if len(data) > limits.max_bytes:
        raise InvalidStartEntry("too_large", f"{len(data)} bytes, at most {limits.max_bytes}")


class RedisSpider(RedisFedSpider):
    """scrapy-redis's ``RedisSpider`` on the frontier: ``redis_key``, ``redis_batch_size`` (default
    START_BATCH_SIZE), ``redis_encoding`` (utf-8); override :meth:`make_request_from_data` and raise
    for an entry to set aside. As in scrapy-redis, the requests it makes are scheduled as made:
    the default one fetches an entry's URL even if seen (``dont_filter``), one made with
    ``dont_filter=False`` (Scrapy's default) is a duplicate of a URL scheduled before."""

    redis_encoding: ClassVar[str] = "utf-8"

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> Self:
        spider = super().from_crawler(crawler, *args, **kwargs)
        list_allowed_domains(spider)
        check_encoding(spider)
        return spider

    def make_request_from_data(self, data: bytes) -> Request | Iterable[Request]:
        """The request of a start entry (see :func:`request_from_data`)."""
        return request_from_data(data, self.redis_encoding, self.entry_limits)

    def requests_from_raw(self, raw: bytes) -> list[Request]:
        check_size(raw, self.entry_limits)
        made = as_requests(self.make_request_from_data(raw))
        return [self._checked(request, as_made=True) for request in made]


class RedisCrawlSpider(RedisSpider, CrawlSpider):
    """scrapy-redis's ``RedisCrawlSpider`` (``rules``), fed as :class:`RedisSpider` is."""


def scrapy_redis_requests(spider: Any, limits: EntryLimits, raw: bytes) -> list[Request]:
    """A scrapy-redis spider's entry's requests: its own ``make_request_from_data``, or
    :func:`request_from_data`, which refuses what scrapy-redis's would drop with a warning."""
    from scrapy_redis.spiders import RedisMixin

    check_size(raw, limits)
    if type(spider).make_request_from_data is RedisMixin.make_request_from_data:
        return [request_from_data(raw, spider.redis_encoding or "utf-8", limits)]
    return as_requests(spider.make_request_from_data(raw))


class ScrapyRedisSpiders:
    """Extension: a spider built on scrapy-redis's RedisSpider or RedisCrawlSpider reads its
    start entries through the project's :class:`StartFeed` (leased, bad ones set aside, the
    fleet's idle rule) instead of scrapy-redis's pops. Not configured for other spiders."""

    def __init__(self, crawler: Crawler, spider: Spider) -> None:
        from scrapy_redis.spiders import RedisMixin

        settings = crawler.settings
        # Scrapy's start() (2.13+) never calls start_requests: a login-first override is skipped.
        refuse_skipped_hooks(type(spider), RedisMixin, own_start=True)
        list_allowed_domains(spider)
        check_encoding(spider)
        limits = EntryLimits.from_settings(settings)
        entries = StartEntries.for_spider(crawler, spider)
        max_idle = own_idle_time(spider, settings)
        make = partial(scrapy_redis_requests, spider, limits)
        self.feed = StartFeed(crawler, spider, entries, make, max_idle, limits.max_bytes)
        # scrapy-redis reads its start list only through next_requests; its idle handler yields.
        adopted: Any = spider
        adopted.next_requests = self.feed.next_requests
        with suppress(KeyError):  # not connected: a spider that skipped setup_redis()
            crawler.signals.disconnect(adopted.spider_idle, signal=signals.spider_idle)
        crawler.signals.connect(self.feed.on_idle, signal=signals.spider_idle)
        logger.info(
            "scrapy-redis spider %s: start entries %s from %s, %d at a time; bad ones set "
            "aside in %s",
            spider.name,
            "leased"
            if on_the_frontier(settings)
            else "popped (not leased: SCHEDULER is not "
            "the frontier's, a worker that dies loses the entries it holds)",
            entries.key,
            entries.batch_size,
            entries.invalid_key,
            extra={"spider": spider},
        )

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ScrapyRedisSpiders:
        from scrapy_redis.spiders import RedisMixin

        if not isinstance(crawler.spider, RedisMixin):
            raise NotConfigured
        return cls(crawler, crawler.spider)
