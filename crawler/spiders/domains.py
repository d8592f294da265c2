"""Liveness sweep: one document per domain in ``domains``, alive or how it is dead.

Start entries (``redis-cli lpush domains:start_urls example.com other.org``):
    ``example.com``                  a domain (also ``www.example.com``, a URL, an IDN; see
                                     crawler/domains/normalize.py for the one-domain rule)
    ``{"domains": ["a.com", ...]}``  a batch; a bad name in it is set aside alone
    ``-a domains=a.com,b.org``       spider arguments
    ``-a file=top10m.csv``           a ``rank,domain`` CSV (or one domain a line,
                                     crawler/domains/lists.py), read line by
                                     line as the crawl goes, never whole; a header is skipped,
                                     a byte order mark (Excel's "CSV UTF-8") too.
                                     Reading pauses while the fleet's queue holds
                                     FILE_AHEAD_BATCHES x FRONTIER_BATCH_SIZE requests: neither
                                     the worker nor Redis ever holds the whole list

Start entries in Redis are leased START_BATCH_SIZE at a time whenever the queue has room, as
the file is read (see :meth:`DomainsSpider.start`).

A name that is not a domain is set aside in ``domains:start_urls:invalid`` with the reason;
one in ``-a domains=`` stops the start instead (docs/spiders.md).

A domain whose DNS answer holds no public address (127.0.0.1, 10.x, 169.254.169.254...) is
not probed: it is stored as ``private_address`` with the address (DOMAINS_PRIVATE_ADDRESSES
probes such addresses, for a sweep of one's own network or a test).

Each domain is probed once: ``http://<domain>/`` first, then ``https://<domain>/`` when HTTP
fails at the connection or protocol level (refused, reset, not HTTP), not on a DNS answer.
Timeouts are tried again DOMAINS_TIMEOUT_RETRIES times in all, the first retry of an HTTP one
over HTTPS (a filtered port 80). A connection tries the name's first DOMAINS_MAX_ADDRESSES
addresses in turn (crawler/domains/resolver.py). Redirects within the domain (to a name under
it too: ``www.``, ``en.``, ``ww25.``...) are followed up to DOMAINS_MAX_REDIRECTS, a redirect
elsewhere is the result, one back to a URL already visited (or one too many) is a loop, one
whose target fails is the domain's answer still (``redirect_failed``). A small page that only
sends the browser on by a script or a meta refresh (GoDaddy's parked ``/`` and its
``/lander``; crawler/domains/page_redirect.py) is a redirect like any other. Each scheme's
failure is kept in the document (``http_error``, ``https_error``) and the class of failures
alone is the one that got furthest; any answer with a status line is an answer (at most
DOMAINS_BODY_BYTES of it read; a body cut short is stored with ``truncated``). The classes and
codes are in crawler/domains/classify.py, the documents in crawler/domains/document.py.
Failures are results: no backoff retry, no ban check, no dead letter
(crawler/domains/probes.py); per-domain politeness does not apply (one request per domain),
DOMAINS_RATE caps a worker's pace instead. Per-domain counters are off
(crawler/observability/domains.py): the fleet's stats stay bounded however long the list.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

from redis.exceptions import RedisError
from scrapy import Request

from crawler import settings as project
from crawler.bans.policy import page_of
from crawler.bans.rules import PROTECTION_RULES
from crawler.config import setting
from crawler.config.rules import SettingsError
from crawler.config.values import start_file
from crawler.domains.classify import falls_back, response_outcome
from crawler.domains.document import answered, failed, noted, redirect_answer
from crawler.domains.lists import csv_domains, not_utf8
from crawler.domains.normalize import InvalidDomain, normalize_domain, same_site
from crawler.domains.page_redirect import page_redirect
from crawler.domains.probes import FAILURE_META, PROBE_META
from crawler.domains.resolver import install
from crawler.domains.summary import summarize
from crawler.frontier.reports import FrontierReports
from crawler.items import DomainItem
from crawler.keys import stats_key
from crawler.spiders.base import InvalidStartEntry, RedisFedSpider, check_keys
from crawler.uris import WEB_PORTS

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings

    from crawler.connection import RedisClient

# A file's domains are read while the fleet's queue holds fewer than this many batches.
FILE_AHEAD_BATCHES = 10
FILE_POLL_SECONDS = 0.1


class DomainsSpider(RedisFedSpider):
    """Probe domains into ``domains``.

    Settings (crawler/settings.py): DOMAINS_DOWNLOAD_TIMEOUT, DOMAINS_TIMEOUT_RETRIES,
    DOMAINS_MAX_REDIRECTS, DOMAINS_HTTP_PORT, DOMAINS_HTTPS_PORT, DOMAINS_RATE,
    DOMAINS_BODY_BYTES and the resolver's DOMAINS_NAMESERVERS, DOMAINS_DNS_TIMEOUT,
    DOMAINS_DNS_RETRIES, DOMAINS_DNS_CONCURRENCY, DOMAINS_PRIVATE_ADDRESSES,
    DOMAINS_MAX_ADDRESSES.
    """

    name = "domains"
    entry_kind = "domains start entry"
    entry_host_from = "entry"
    # A domain seen before is not probed again: the dupefilter keeps a long list from being
    # swept twice (``scrapy frontier domains purge`` before sweeping it again).
    refetch_start_urls = False
    custom_settings = {  # noqa: RUF012 (Scrapy's Spider declares it as an instance field)
        # The project's, with the changes named (the add-on keeps them under a spider's dict too).
        "DOWNLOADER_MIDDLEWARES": {
            **project.DOWNLOADER_MIDDLEWARES,
            "crawler.middlewares.BanMiddleware": None,
            "crawler.domains.probes.DomainProbeMiddleware": 560,
            # The probe middleware decodes gzip and deflate itself, to DOMAINS_BODY_BYTES at
            # most (Scrapy's would decode a cut stream whole or fail on it).
            "scrapy.downloadermiddlewares.httpcompression.HttpCompressionMiddleware": None,
            # The spider names no allowed_domains: every host is on-site, checked for nothing.
            "scrapy.downloadermiddlewares.offsite.OffsiteMiddleware": None,
        },
        # Each a layer every answer's output goes through, for nothing here: no DEPTH_LIMIT nor
        # depth priority (a domain's requests are its redirects and retries), and the spider
        # builds each request's meta anew (nothing copied from a response's).
        "SPIDER_MIDDLEWARES": {
            **project.SPIDER_MIDDLEWARES,
            "scrapy.spidermiddlewares.depth.DepthMiddleware": None,
            "scrapy.spidermiddlewares.metacopy.MetaCopyDetectionMiddleware": None,
        },
        # Each answer's and document's DEBUG line is not made unless LOG_LEVEL shows it.
        "LOG_FORMATTER": "crawler.domains.probes.ProbeLogFormatter",
        "EXTENSIONS": {
            **project.EXTENSIONS,
            "crawler.extensions.FleetMonitor": None,
            "crawler.observability.domains.DomainsFleetMonitor": 500,
        },
        # One request per domain: many domains in flight, none twice at once.
        "CONCURRENT_REQUESTS": 200,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
        # A callback yields one item or request: Scrapy starts a task per CONCURRENT_ITEMS for
        # each answer's output (its default, 100: 100 tasks).
        "CONCURRENT_ITEMS": 1,
        "FRONTIER_BATCH_SIZE": 200,
        "START_BATCH_SIZE": 200,
        "COOKIES_ENABLED": False,
        "REDIRECT_ENABLED": False,
        # A dead domain is a result: a sweep whose answers are mostly failures is not failing.
        "FAILURE_PAUSE_RATIO": 0,
        # A domain that does not answer is a result too, not a host to wait for.
        "HOST_BLOCK_START": 0,
    }

    def __init__(self, domains: str | None = None, file: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.domain_args = self.entry_argument("domains", domains)
        self.file = file
        if file is not None:
            start_file(file)

    @classmethod
    def fleet_report(cls, server: RedisClient, settings: BaseSettings) -> dict[str, Any]:
        """What ``scrapy status domains`` adds: domains checked, the dead share by the seed's
        rule, and the count of each class, from the fleet's stats."""
        summary = summarize(server.hgetall(stats_key(settings, cls.name)))
        checked = f"{summary.total:,}, {summary.dead:,} dead ({summary.dead_share:.1%})"
        return {"checked": checked, "classes": dict(sorted(summary.by_class.items()))}

    def configure(self, crawler: Crawler) -> None:
        settings = crawler.settings
        self.timeout: float = setting(settings, "DOMAINS_DOWNLOAD_TIMEOUT")
        self.timeout_retries: int = setting(settings, "DOMAINS_TIMEOUT_RETRIES")
        self.max_redirects: int = setting(settings, "DOMAINS_MAX_REDIRECTS")
        self.ports = {
            "http": setting(settings, "DOMAINS_HTTP_PORT"),
            "https": setting(settings, "DOMAINS_HTTPS_PORT"),
        }
        self.resolver = install(crawler)
        if self.resolver is None and not setting(settings, "DOMAINS_PRIVATE_ADDRESSES"):
            raise SettingsError(
                "TWISTED_DNS_RESOLVER names another resolver than the domains spider's: only"
                " the spider's keeps probes off addresses that are not public (loopback,"
                " private, 169.254.169.254); set DOMAINS_PRIVATE_ADDRESSES = True to sweep"
                " with it"
            )

    # --- start entries ---------------------------------------------------------------------

    def argument_entries(self) -> Iterator[str]:
        yield from self.domain_args
        if self.file:
            yield from csv_domains(Path(self.file))

    async def start(self) -> AsyncIterator[Any]:
        """The arguments' domains, a batch at a time as the queue empties, then Redis's.

        Requests go to the engine with ``crawl``, not one by one through this generator: for
        each request it yields, Scrapy's engine asks the scheduler for the next one at once,
        which writes and pops it alone (two Redis round trips per domain). Batches of start
        entries in Redis are leased as the queue empties too, not only when the worker is idle
        (a batch would wait for its slowest domain's timeouts before the next is read); once
        there are none, later ones are read when idle, as for every spider."""
        engine = self.crawler.engine
        assert engine is not None
        batch: int = setting(self.crawler.settings, "FRONTIER_BATCH_SIZE")
        most = FILE_AHEAD_BATCHES * batch
        for number, entry in enumerate(self.argument_entries(), 1):
            if (raw := not_utf8(entry)) is not None:  # a list file's line: kept byte for byte
                shown = raw.decode("utf-8", "backslashreplace")
                self.feed.set_aside(shown, InvalidStartEntry("not_utf8"), raw)
                continue
            for request in self._requests_or_set_aside(entry, entry):
                engine.crawl(request)
            if number % batch == 0:
                await self._room_in_queue(most)
                await asyncio.sleep(0)  # the reactor's turn
        while requests := self.feed.next_requests():
            for request in requests:
                engine.crawl(request)
            await self._room_in_queue(most)
            await asyncio.sleep(0)
        return
        yield  # an async generator, as Scrapy's start() is

    async def _room_in_queue(self, most: int) -> None:
        """Return once the fleet's queue holds fewer than ``most`` requests (at once without
        the Redis frontier). Scrapy's engine reads start requests as fast as they come and the
        scheduler writes them all to Redis: this is what keeps a 10M list in the file."""
        frontier = FrontierReports(self.crawler)
        while True:
            try:
                if frontier.flush() and (frontier.queued() or 0) < most:
                    return
            except RedisError:
                pass  # the scheduler reports the outage and backs off; wait for it
            await asyncio.sleep(FILE_POLL_SECONDS)

    def requests_from_entry(self, entry: str | dict[str, Any]) -> Iterable[Request]:
        if isinstance(entry, str):
            return [self.probe(_domain(entry))]
        check_keys(entry, {"domains"}, {"domains"})
        names = entry["domains"]
        if not isinstance(names, list):
            raise InvalidStartEntry("bad_domains", '"domains" is a list of domain names')
        requests = []
        for name in names:
            try:
                requests.append(self.probe(_domain(name)))
            except InvalidStartEntry as exc:
                self.feed.set_aside(str(name), exc)
        return requests

    # --- probes ------------------------------------------------------------------------------

    def probe(self, domain: str, scheme: str = "http") -> Request:
        port = self.ports[scheme]
        netloc = domain if port == WEB_PORTS[scheme] else f"{domain}:{port}"
        url = f"{scheme}://{netloc}/"
        state = {
            "domain": domain,
            "scheme": scheme,
            "timeouts": 0,
            "redirects": 0,
            "tries": 1,
            "visited": [url],
            "errors": {},
        }
        return self._request(url, state, dont_filter=False)

    def _request(self, url: str, state: dict[str, Any], dont_filter: bool = True) -> Request:
        meta = {
            PROBE_META: state,
            "dont_retry": True,
            "dont_ban_check": True,
            "dont_redirect": True,
            "handle_httpstatus_all": True,
            "download_timeout": self.timeout,
            # Any answer is read, whatever length it announces: the probe middleware stops
            # at DOMAINS_BODY_BYTES and keeps what came; a body cut short is still an answer.
            "download_maxsize": 0,
            "download_warnsize": 0,
            "download_fail_on_dataloss": False,
        }
        # Connection: close: a domain is asked once, so no connection is kept for it (Twisted's
        # pool would hold each one open for minutes: thousands of sockets in a sweep).
        return Request(
            url,
            callback=self.parse_probe,
            meta=meta,
            headers={"Connection": "close", "Accept-Encoding": "gzip, deflate"},
            dont_filter=dont_filter,
        )

    def parse_probe(self, response: Response) -> Iterator[Any]:
        state: dict[str, Any] = response.meta[PROBE_META]
        failure = response.meta.get(FAILURE_META)
        if failure is not None:
            yield from self._failed(response, state, failure)
            return
        location = _next_url(response)
        if location is None:
            challenged = response.status >= 400 and _challenge(response)
            outcome = response_outcome(response.status, response.body, challenged=challenged)
            yield self._item(answered(state, outcome, response, response.url))
            return
        redirect = self._redirect(location, state)
        if redirect is None:
            yield self._again(
                location,
                state,
                redirects=state["redirects"] + 1,
                visited=[*state["visited"], location],
                answer=redirect_answer(response, location),
            )
            return
        outcome = response_outcome(response.status, b"", redirect, location)
        yield self._item(answered(state, outcome, response, location))

    def _redirect(self, location: str, state: dict[str, Any]) -> str | None:
        """None when the redirect to ``location`` is followed, else why not: "offsite", or
        "loop" (back to a URL already visited, or one redirect too many)."""
        if not same_site(urlsplit(location).hostname or "", state["domain"]):
            return "offsite"
        if location in state["visited"] or state["redirects"] >= self.max_redirects:
            return "loop"
        return None

    def _failed(
        self, response: Response, state: dict[str, Any], failure: dict[str, Any]
    ) -> Iterator[Any]:
        """After a failure: a retry of a timeout (the first one of an HTTP probe over HTTPS),
        HTTPS after an HTTP failure at the connection or protocol level, else the document."""
        kind = failure["kind"]
        scheme = urlsplit(response.url).scheme
        over_https = scheme == "http" and state["scheme"] == "http"  # not tried yet
        if kind == "timeout" and state["timeouts"] < self.timeout_retries:
            self.count("domains/timeout_retries")
            timeouts = state["timeouts"] + 1
            if over_https:
                yield self._over_https(noted(state, scheme, failure), timeouts=timeouts)
            else:
                yield self._again(response.url, state, timeouts=timeouts)
            return
        state = noted(state, scheme, failure)
        if over_https and falls_back(kind, scheme):
            yield self._over_https(state)
            return
        yield self._item(failed(state, failure))

    def _over_https(self, state: dict[str, Any], **changes: Any) -> Request:
        self.count("domains/https_fallback")
        port = self.ports["https"]
        host = state["domain"] if port == WEB_PORTS["https"] else f"{state['domain']}:{port}"
        url = f"https://{host}/"
        return self._again(url, state, scheme="https", visited=[url], **changes)

    def _again(self, url: str, state: dict[str, Any], **changes: Any) -> Request:
        return self._request(url, {**state, **changes, "tries": state["tries"] + 1})

    def _item(self, item: DomainItem) -> DomainItem:
        self.count(f"domains/status/{item.status}")
        self.count(f"domains/code/{item.code}")
        if item.truncated:
            self.count("domains/truncated")
        if item.response_time is not None and item.http_status is not None:  # an answer's
            self.count("domains/response_ms", int(item.response_time * 1000))
        return item


def _challenge(response: Response) -> bool:
    """Whether an error answer is a bot protection's challenge or block page (the ban rules
    that know them by their own headers and markup: a site's own 403 is not one)."""
    page = page_of(response)
    return any(rule(page) is not None for rule in PROTECTION_RULES)


def _next_url(response: Response) -> str | None:
    """Where the answer sends the browser: the absolute target of a redirect answer, or of a
    page that only redirects by a script or a meta refresh
    (crawler/domains/page_redirect.py); else None."""
    if 200 <= response.status < 300:
        return page_redirect(response.body, response.url)
    if not 300 <= response.status < 400:
        return None
    location = response.headers.get(b"Location")
    if not location:
        return None
    target = urljoin(response.url, location.decode("latin-1").strip())
    return target if urlsplit(target).scheme in WEB_PORTS else None


def _domain(value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidStartEntry("bad_domain", f"a domain is a string, not {type(value).__name__}")
    try:
        return normalize_domain(value)
    except InvalidDomain as exc:
        raise InvalidStartEntry(f"bad_domain:{exc.reason}", str(exc)) from None
