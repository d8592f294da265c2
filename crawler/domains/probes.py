"""The downloader middleware of the domains spider: a probe's failure is its result.

Requests of the domains spider carry ``PROBE_META``. For them this middleware:

- on the way out, takes a turn of the worker's rate cap (DOMAINS_RATE requests per second,
  0 = no cap) and a token of the fleet's (DOMAINS_FLEET_RATE, shared by every worker of the
  spider through Redis), awaiting them on the loop (never sleeping the reactor), and notes the
  send time;
- turns a download failure (DNS, refused, timeout, TLS, ...) into a Response of status 0
  flagged ``domains_failure``, with the failure's class in ``meta[FAILURE_META]``. The response
  goes through the rest of the chain and to the spider's callback like any answer, so the
  request's lease is acknowledged once the domain's document is stored: a dead domain is a
  result, never a dead letter nor a retry with backoff;
- reads at most DOMAINS_BODY_BYTES bytes of any answer, whatever its announced length (the
  title and parking signatures are in the first bytes): the download is stopped there and the
  answer kept (``StopDownload(fail=False)`` from the ``bytes_received`` signal), the body cut to
  the cap, and a gzip or deflate body decoded to at most the cap, so a worker's memory stays
  small whatever the sites send and a received status line is never turned into a failure;
- counts the certificate warnings Scrapy logs for each HTTPS host whose certificate does not
  match its name (``domains/tls/certificate_warnings``; the first one logged at INFO, the others
  at DEBUG), instead of a WARNING line per domain.

It sits at 560, above the retry middleware (550): its ``process_exception`` runs first.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from typing import TYPE_CHECKING, Any, Self

from redis.exceptions import RedisError
from scrapy import signals
from scrapy.exceptions import IgnoreRequest, StopDownload
from scrapy.http import Response
from scrapy.logformatter import LogFormatter, LogFormatterResult
from scrapy.utils.httpobj import urlparse_cached

from crawler.config import setting
from crawler.connection import crawl_redis
from crawler.domains.classify import failure_kind, refine_dns
from crawler.domains.resolver import AsyncResolver, PrivateAddress, install
from crawler.frontier.lua import TAKE
from crawler.keys import fleet_rate_key

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector
    from twisted.python.failure import Failure

    from crawler.connection import RedisClient

PROBE_META = "domain_probe"
FAILURE_META = "domain_failure"
SENT_META = "domain_sent_at"
RECEIVED_META = "domain_bytes"
TRUNCATED_META = "domain_truncated"
FAILURE_FLAG = "domains_failure"
DNS_STATS_SECONDS = 1.0
# Scrapy's TLS module logs a WARNING (twice) for each host whose certificate is not its own.
TLS_LOGGER = "scrapy.core.downloader.tls"
CERTIFICATE_STAT = "domains/tls/certificate_warnings"

logger = logging.getLogger(__name__)


class RateCap:
    """At most ``rate`` turns per second, spread evenly (0 = no cap)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self._next = 0.0

    def reserve(self, now: float) -> float:
        """Seconds to wait before the turn just reserved."""
        if self.rate <= 0:
            return 0.0
        turn = max(now, self._next)
        self._next = turn + 1.0 / self.rate
        return turn - now


class FleetCap:
    """At most ``rate`` turns per second for the whole fleet: a token bucket in Redis at ``key``
    (the fleet politeness's script), from which a worker takes a tenth of a second's worth at
    a time (at most 50), so one worker never hoards the fleet's turns. 0 = no cap."""

    def __init__(self, server: RedisClient | None, key: str, rate: float) -> None:
        self.rate = rate
        self.key = key
        self._bucket = server.register_script(TAKE) if server and rate > 0 else None
        self._tokens = 0
        self._take = max(1, min(50, int(rate / 10)))

    def wait(self) -> float:
        """0 when a turn is taken, else the seconds to wait before asking again."""
        if self._bucket is None:
            return 0.0
        if self._tokens <= 0:
            try:
                granted, wait, _ = self._bucket(
                    keys=[self.key],
                    args=[time.time(), self.rate, self._take, self._take, 1, 1, 0],
                )
            except RedisError:
                return 1.0  # the frontier reports the outage; no turn without Redis
            self._tokens = int(granted)
            if not self._tokens:
                return max(0.001, float(wait))
        self._tokens -= 1
        return 0.0


class CertificateWarnings(logging.Filter):
    """A filter on Scrapy's TLS logger: its warnings are counted as ``CERTIFICATE_STAT``, the
    first one logged again at INFO, the others at DEBUG (a sweep meets thousands of hosts with
    self-signed or mismatched certificates; it does not log a line per domain)."""

    def __init__(self, stats: StatsCollector | None) -> None:
        super().__init__()
        self.stats = stats
        self.seen = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING:
            return True
        self.seen += 1
        if self.stats is not None:
            self.stats.inc_value(CERTIFICATE_STAT)
        level = logging.INFO if self.seen == 1 else logging.DEBUG
        logger.log(
            level,
            "%s (certificate warnings are counted in %s, not logged each)",
            record.getMessage(),
            CERTIFICATE_STAT,
        )
        return False


class ProbeLogFormatter(LogFormatter):
    """Scrapy's log lines, but the two DEBUG lines of each domain (``Crawled (200) <GET ...>``
    for each answer, ``Scraped from ...`` for each document) are not made at all when
    LOG_LEVEL does not show them: Scrapy formats them and makes their log records, which the
    log handler then drops, for every request and every item."""

    def __init__(self, debug: bool) -> None:
        super().__init__()
        self.debug = debug

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        level = crawler.settings.get("LOG_LEVEL")
        if not isinstance(level, int):
            level = logging.getLevelName(str(level).upper())
        return cls(not isinstance(level, int) or level <= logging.DEBUG)

    # None: no line (Scrapy's documented way; its annotations do not say so).
    def crawled(  # type: ignore[override]
        self, request: Request, response: Response, spider: Spider
    ) -> LogFormatterResult | None:
        return super().crawled(request, response, spider) if self.debug else None

    def scraped(  # type: ignore[override]
        self, item: Any, response: Response | Failure | None, spider: Spider
    ) -> LogFormatterResult | None:
        return super().scraped(item, response, spider) if self.debug else None


class DomainProbeMiddleware:
    """Settings: DOMAINS_RATE, DOMAINS_FLEET_RATE, DOMAINS_BODY_BYTES (crawler/settings.py)."""

    def __init__(
        self,
        rate: float,
        body_bytes: int,
        resolver: AsyncResolver | None,
        fleet: FleetCap | None = None,
    ) -> None:
        self.cap = RateCap(rate)
        self.fleet = fleet or FleetCap(None, "", 0)
        self.body_bytes = body_bytes
        self.resolver = resolver
        self.stats: StatsCollector | None = None
        self._next_copy = 0.0
        self.certificates: CertificateWarnings | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> DomainProbeMiddleware:
        settings = crawler.settings
        fleet_rate: float = setting(settings, "DOMAINS_FLEET_RATE")
        assert crawler.spidercls is not None
        fleet = FleetCap(
            crawl_redis(crawler) if fleet_rate > 0 else None,
            fleet_rate_key(crawler.spidercls.name),
            fleet_rate,
        )
        middleware = cls(
            setting(settings, "DOMAINS_RATE"),
            setting(settings, "DOMAINS_BODY_BYTES"),
            install(crawler),
            fleet,
        )
        crawler.signals.connect(middleware.bytes_received, signal=signals.bytes_received)
        # Idle: before the fleet's stats are written a last time (the spider closes when idle).
        crawler.signals.connect(middleware.copy_dns_stats, signal=signals.spider_idle)
        crawler.signals.connect(middleware.spider_closed, signal=signals.spider_closed)
        middleware.stats = crawler.stats
        middleware.certificates = CertificateWarnings(crawler.stats)
        logging.getLogger(TLS_LOGGER).addFilter(middleware.certificates)
        return middleware

    def spider_closed(self) -> None:
        self.copy_dns_stats()
        if self.certificates is not None:
            logging.getLogger(TLS_LOGGER).removeFilter(self.certificates)

    def copy_dns_stats(self) -> None:
        """The resolver's counts as stats (``domains/dns/<count>``, ``domains/dns/ms``), every
        DNS_STATS_SECONDS while probes go out, when idle and at the end, so the fleet's stats
        show them as a sweep goes, a short one too."""
        if self.resolver is None or self.stats is None:
            return
        for name, value in self.resolver.counts.items():
            self.stats.set_value(f"domains/dns/{name}", value)
        self.stats.set_value("domains/dns/ms", int(self.resolver.seconds * 1000))

    async def process_request(self, request: Request) -> None:
        if PROBE_META not in request.meta:
            return
        wait = self.cap.reserve(time.monotonic())
        if wait > 0:
            await asyncio.sleep(wait)
        while (wait := self.fleet.wait()) > 0:
            await asyncio.sleep(wait)
        request.meta[SENT_META] = time.time()
        now = time.monotonic()
        if now >= self._next_copy:
            self._next_copy = now + DNS_STATS_SECONDS
            self.copy_dns_stats()

    def process_response(self, request: Request, response: Response) -> Response:
        """An answer's body as the spider reads it: at most ``body_bytes``, decoded; a body
        the server cut short is flagged in ``meta[TRUNCATED_META]``."""
        if PROBE_META not in request.meta or FAILURE_FLAG in response.flags:
            return response
        if "dataloss" in response.flags:
            request.meta[TRUNCATED_META] = True
        body = readable_body(response, self.body_bytes)
        return response if body is response.body else response.replace(body=body)

    def process_exception(self, request: Request, exception: Exception) -> Response | None:
        # An ignored request (a middleware's decision) and Redis being away are not results.
        if PROBE_META not in request.meta or isinstance(exception, IgnoreRequest | RedisError):
            return None
        sent = request.meta.get(SENT_META)
        kind, error = self._describe(request, exception)
        request.meta[FAILURE_META] = {
            "kind": kind,
            "error": error[:300],
            "elapsed": round(time.time() - sent, 3) if sent else None,
            "address": self._private_address(request) if kind == "private_address" else None,
        }
        return Response(request.url, status=0, request=request, flags=[FAILURE_FLAG])

    def _describe(self, request: Request, exception: Exception) -> tuple[str, str]:
        kind = failure_kind(exception)
        error = f"{type(exception).__name__}: {exception}"
        if self.resolver is None:
            return kind, error
        host = urlparse_cached(request).hostname or ""
        recorded = self.resolver.failure(host)
        refined = refine_dns(
            kind, recorded.outcome if recorded else None, self.resolver.pending(host)
        )
        if refined != kind:
            error = (
                f"{type(recorded).__name__}: {recorded}" if recorded else "DNS: no answer in time"
            )
        return refined, error

    def _private_address(self, request: Request) -> str | None:
        """The address the request was not sent to, not being public."""
        if self.resolver is None:
            return None
        recorded = self.resolver.failure(urlparse_cached(request).hostname or "")
        return recorded.address if isinstance(recorded, PrivateAddress) else None

    def bytes_received(self, data: bytes, request: Request) -> None:
        if PROBE_META not in request.meta:
            return
        received = request.meta.get(RECEIVED_META, 0) + len(data)
        request.meta[RECEIVED_META] = received
        if received >= self.body_bytes:
            # The answer so far is kept (the body is cut to the cap in process_response).
            raise StopDownload(fail=False)


def readable_body(response: Response, limit: int) -> bytes:
    """The first ``limit`` bytes of the answer's content: its body, decoded when it is gzip or
    deflate (decoded to ``limit`` bytes at most, a stream cut short included); empty for an
    encoding not asked for (the probes ask for gzip and deflate only)."""
    body = response.body
    encodings = [
        part.strip().lower()
        for value in response.headers.getlist(b"Content-Encoding")
        for part in value.split(b",")
        if part.strip() and part.strip().lower() != b"identity"
    ]
    if not encodings:
        return body if len(body) <= limit else body[:limit]
    if len(encodings) > 1 or encodings[0] not in (b"gzip", b"x-gzip", b"deflate"):
        return b""
    # 32 + MAX_WBITS reads gzip and zlib; a raw deflate stream (no zlib header) is met too.
    for wbits in (32 + zlib.MAX_WBITS, -zlib.MAX_WBITS):
        try:
            return zlib.decompressobj(wbits).decompress(body, limit)
        except zlib.error:
            continue
    return b""
