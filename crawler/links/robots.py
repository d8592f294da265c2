"""robots.txt for the ``links`` spider: fetched once per host per LINKS_ROBOTS_TTL for the whole
fleet, cached in Redis, obeyed with Protego (docs/spiders.md).

When Redis has no rules for an origin, one worker wins the claim (SET NX,
LINKS_ROBOTS_CLAIM_SECONDS) and downloads them; the origin's requests in other workers go back to
the delayed set until then. A robots.txt that answers 4xx allows everything (as Scrapy's
RobotsTxtMiddleware does); one that answers 5xx blocks its host for the fleet (a step of the
circuit breaker, :mod:`crawler.bans.breaker`) and is asked again after, and after
LINKS_ROBOTS_5XX_TRIES such answers in a row the host's requests are dead letters
(``robots_unavailable``), as Google treats a robots.txt it cannot read. One that cannot be
downloaded (refused, reset, timed out, no DNS answer) is no answer either: it is asked again
after the host's block (the breaker's step for that failure), no page of the host is fetched
meanwhile, and it counts towards both marks: once the host is unreachable (HOST_MAX_EXCEPTIONS,
which wins) or its robots.txt unavailable (LINKS_ROBOTS_5XX_TRIES), its requests are dead
letters.
With the breaker off (HOST_BLOCK_START 0) a robots.txt that cannot be downloaded allows
everything. The rules are stored
only once the requests they seed (sitemaps) are in the frontier: a worker killed in between
leaves the claim to expire. robots.txt goes out on the turn of the request that needed it,
which goes back to the frontier for the host's next turn; its Crawl-delay goes in meta
``crawl_delay``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from protego import Protego
from scrapy import Request
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http.request import NO_CALLBACK

from crawler.bans.breaker import (
    CONNECTION_FAILURES,
    ROBOTS_UNAVAILABLE,
    UNREACHABLE,
    Block,
    HostBreaker,
    HostMarked,
    site_of_url,
)
from crawler.config import setting
from crawler.connection import crawl_redis
from crawler.frontier.reports import FrontierReports
from crawler.links.robots_store import FleetRobots
from crawler.meta import (
    BREAKER_BLOCK_META,
    BREAKER_COUNTS_META,
    CRAWL_DELAY_META,
    DUE_META,
    IDENTITY_FAILED_META,
    JOB_META,
    PACED_META,
    SENT_AT_META,
    carry_job,
    send_back,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

    from scrapy.crawler import Crawler
    from scrapy.http import Response


logger = logging.getLogger(__name__)

LINKS_META = "links"
SKIP_META = "dont_obey_robotstxt"
ROBOTS_META = "links_robots"
# Origins whose robots.txt waits (a time each) a worker keeps before it forgets the passed ones.
DEFERRED_ORIGINS_KEPT = 10_000
# What a robots.txt counts for in the worker's cache of parsed rules at least (LINKS_ROBOTS_CACHE_
# BYTES): an empty one's rules take about half of it, rules take 15 to 50 times their text.
ENTRY_BYTES = 1024


class RobotsDeferred(IgnoreRequest):
    """The robots.txt request itself was sent back to wait (its host cools down after a ban,
    or has no token): Scrapy's engine.download would hand it straight back to the downloader,
    so it is given up here and fetched again after ``until``."""

    def __init__(self, until: float) -> None:
        super().__init__(f"robots.txt deferred until {until:.0f}")
        self.until = until


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


class RobotsCache:
    """Parsed rules per origin in this worker, each for ``ttl`` seconds: the most recently used,
    while their robots.txt (each counted as at least ENTRY_BYTES) add up to at most
    ``max_bytes``; the last one put is always kept. Rules not kept are read again from Redis."""

    def __init__(self, max_bytes: int, ttl: float) -> None:
        self.max_bytes = max_bytes
        self.ttl = ttl
        self.held = 0  # bytes of the robots.txt kept
        self._entries: OrderedDict[str, tuple[float, Protego, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, origin: str) -> Protego | None:
        entry = self._entries.get(origin)
        if entry is None:
            return None
        if entry[0] < time.monotonic():
            self._forget(origin)
            return None
        self._entries.move_to_end(origin)
        return entry[1]

    def put(self, origin: str, rules: Protego, size: int) -> None:
        """Keep the rules of ``origin``, parsed from a robots.txt of ``size`` bytes."""
        self._forget(origin)
        weight = max(size, ENTRY_BYTES)
        self._entries[origin] = (time.monotonic() + self.ttl, rules, weight)
        self.held += weight
        while self.held > self.max_bytes and len(self._entries) > 1:
            self._forget(next(iter(self._entries)))

    def _forget(self, origin: str) -> None:
        entry = self._entries.pop(origin, None)
        if entry is not None:
            self.held -= entry[2]


def parse_rules(body: bytes) -> Protego:
    # utf-8-sig: a byte-order mark glued to the first "User-agent" hid its whole group.
    return Protego.parse(body.decode("utf-8-sig", "replace"))


class FleetRobotsMiddleware:
    """In place of Scrapy's RobotsTxtMiddleware (100), for requests with meta ``links`` and no
    ``dont_obey_robotstxt``. Settings: LINKS_ROBOTS_*; ROBOTSTXT_USER_AGENT or USER_AGENT."""

    def __init__(
        self, crawler: Crawler, fleet: FleetRobots, max_bytes: int, cache_bytes: int
    ) -> None:
        self.crawler = crawler
        self.fleet = fleet
        self.max_bytes = max_bytes
        self.cache = RobotsCache(cache_bytes, fleet.ttl)
        settings = crawler.settings
        self.user_agent = settings.get("ROBOTSTXT_USER_AGENT") or settings.get("USER_AGENT")
        self._pending: dict[str, asyncio.Future[Protego | None]] = {}
        self.breaker = HostBreaker.of(crawler)
        self.frontier = FrontierReports(crawler)
        # Origins whose robots.txt waits (RobotsDeferred): not asked again before this time.
        self._not_before: dict[str, float] = {}
        self._seeded: dict[tuple[str, Any], float] = {}  # (origin, job) seeded: until when

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FleetRobotsMiddleware:
        settings = crawler.settings
        if not setting(settings, "LINKS_ROBOTS_OBEY"):
            raise NotConfigured("LINKS_ROBOTS_OBEY is off")
        assert crawler.spidercls is not None
        fleet = FleetRobots(
            crawl_redis(crawler),
            crawler.spidercls.name,
            setting(settings, "LINKS_ROBOTS_TTL"),
            setting(settings, "LINKS_ROBOTS_CLAIM_SECONDS"),
        )
        max_bytes = setting(settings, "LINKS_ROBOTS_MAX_BYTES")
        return cls(crawler, fleet, max_bytes, setting(settings, "LINKS_ROBOTS_CACHE_BYTES"))

    async def process_request(self, request: Request) -> Request | None:
        if request.meta.get(ROBOTS_META) and DUE_META in request.meta:
            raise RobotsDeferred(float(request.meta[DUE_META]))
        if LINKS_META not in request.meta or request.meta.get(SKIP_META):
            return None
        origin = origin_of(request.url)
        paced = PACED_META in request.meta
        try:
            rules = await self.rules_for(origin, request)
        except HostMarked as marked:
            self.frontier.ledger.failed(request, marked.mark, str(marked))
            raise
        if rules is None:
            return self._wait(request, self._not_before.get(origin, 0.0))
        self._seed_for_job(request, origin, rules)
        delay = rules.crawl_delay(self.user_agent)
        if delay:
            request.meta[CRAWL_DELAY_META] = float(delay)
        if not rules.can_fetch(request.url, self.user_agent):
            self._count("robotstxt/forbidden")
            raise IgnoreRequest("Forbidden by robots.txt")
        if paced and PACED_META not in request.meta:
            # Its host's turn went to robots.txt: back to the frontier for the next turn, rather
            # than holding a download slot while it waits for a token.
            return send_back(request, dict(request.meta), time.time())
        return None

    async def rules_for(self, origin: str, request: Request) -> Protego | None:
        """The rules of ``origin``; None while another worker downloads them."""
        rules = self.cache.get(origin)
        if rules is not None:
            return rules
        pending = self._pending.get(origin)
        if pending is not None:
            return await asyncio.shield(pending)
        if self._not_before.get(origin, 0.0) > time.time():
            return None
        found = self.fleet.get_or_claim(origin)
        if isinstance(found, bytes):
            rules = parse_rules(found)
            self.cache.put(origin, rules, len(found))
            return rules
        if not found:
            return None
        return await self._fetch(origin, request)

    async def _fetch(self, origin: str, request: Request) -> Protego | None:
        future: asyncio.Future[Protego | None] = asyncio.get_running_loop().create_future()
        self._pending[origin] = future
        try:
            body = await self._download(origin, request.meta.pop(PACED_META, None) is not None)
            rules = parse_rules(body)
            self.cache.put(origin, rules, len(body))
            if self._seed(request, rules):  # what the rules seed is written: share them
                self.fleet.store(origin, body, request.meta.get(JOB_META))
                self._know_seeded(origin, request.meta.get(JOB_META))
            else:  # the worker that next needs them downloads them again and seeds again
                self._count("robotstxt/not_shared")
                self.fleet.release(origin)
            future.set_result(rules)
        except RobotsDeferred as deferred:
            self._defer_origin(origin, deferred.until)
            future.set_result(None)
            return None
        except HostMarked as marked:
            self.fleet.release(origin)
            future.set_exception(marked)
            future.exception()  # retrieved: waiters get it through their await
            raise
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters get it through their await
            raise
        finally:
            self._pending.pop(origin, None)
        return rules

    async def _download(self, origin: str, paced: bool) -> bytes:
        """robots.txt of ``origin``; ``paced``: on the turn of the request that needs it."""
        meta: dict[str, Any] = {SKIP_META: True, ROBOTS_META: True, "dont_retry": True}
        meta["dont_ban_check"] = True
        # Getting no answer counts towards robots_unavailable too, in the ban middleware's call.
        meta[BREAKER_COUNTS_META] = [ROBOTS_UNAVAILABLE]
        if paced:
            meta[PACED_META] = 0.0
        robots = Request(f"{origin}/robots.txt", priority=1000, meta=meta, callback=NO_CALLBACK)
        engine = self.crawler.engine
        assert engine is not None
        self._count("robotstxt/request_count")
        try:
            response: Response = await engine.download_async(robots)
        except (RobotsDeferred, HostMarked):
            raise
        except Exception as exc:
            self._count(f"robotstxt/error/{type(exc).__name__}")
            if self.breaker.enabled and isinstance(exc, CONNECTION_FAILURES):
                if robots.meta.get(IDENTITY_FAILED_META):
                    # The identity it went as failed, not the host: asked again through another.
                    raise RobotsDeferred(time.time()) from exc
                # No answer: the ban middleware's step of the host's block for this failure,
                # counted towards both marks in its one call (here if no ban middleware ran).
                why = f"robots.txt {type(exc).__name__}"
                block = robots.meta.get(BREAKER_BLOCK_META)
                if not isinstance(block, Block):
                    block = self._failed(origin, robots, why, (UNREACHABLE, ROBOTS_UNAVAILABLE))
                self._unanswered(origin, block, why)
            return b""
        self._count(f"robotstxt/response_status_count/{response.status}")
        if response.status >= 500 and self.breaker.enabled:
            why = f"robots.txt HTTP {response.status}"
            self._unanswered(origin, self._failed(origin, robots, why, (ROBOTS_UNAVAILABLE,)), why)
        return response.body[: self.max_bytes] if 200 <= response.status < 300 else b""

    def _failed(self, origin: str, robots: Request, why: str, counted: tuple[str, ...]) -> Block:
        """A step of the host's block for robots.txt's failure, counted towards ``counted``."""
        sent = float(robots.meta.get(SENT_AT_META) or time.time())
        return self.breaker.failed(site_of_url(origin), sent, why, counted)

    def _unanswered(self, origin: str, block: Block, why: str) -> None:
        """robots.txt got no usable answer, and its host was blocked (``block``, a step of the
        circuit breaker): it is asked again after the block; once the host is unreachable, or
        after LINKS_ROBOTS_5XX_TRIES such answers in a row (5xx, or none), the host's requests
        are dead letters (host_unreachable, which wins, or robots_unavailable)."""
        if UNREACHABLE in block.marks or self.breaker.marked(site_of_url(origin), UNREACHABLE):
            raise HostMarked(UNREACHABLE, f"{why}: the host is unreachable")
        if ROBOTS_UNAVAILABLE in block.marks:
            tries = block.failures[ROBOTS_UNAVAILABLE]
            raise HostMarked(ROBOTS_UNAVAILABLE, f"{why}, {tries} times in a row")
        raise RobotsDeferred(block.until)

    def _seed(self, request: Request, rules: Protego) -> bool:
        """Crawl what the spider makes of new rules, in the job of the request that needed
        them; whether it is written for the fleet."""
        seed = getattr(self.crawler.spider, "robots_requests", None)
        engine = self.crawler.engine
        if seed is None or engine is None:
            return True
        made: Iterable[Request] = seed(request, list(rules.sitemaps))
        for follow in made:
            engine.crawl(carry_job(request, follow))
        return self.frontier.flush()

    def _seed_for_job(self, request: Request, origin: str, rules: Protego) -> None:
        """A start request on a host whose robots.txt was fetched for another crawl job (or
        for none): what it seeds (the sitemaps) is crawled for this request's job too, once
        per LINKS_ROBOTS_TTL, so that each job's crawl of the host is whole."""
        if request.meta[LINKS_META].get("depth") != 0:
            return
        job = request.meta.get(JOB_META)
        if self._seeded.get((origin, job), 0.0) > time.time():  # known here: no round trip
            return
        if self.fleet.seeded(origin, job):
            self._know_seeded(origin, job)
        elif self._seed(request, rules):
            self.fleet.mark_seeded(origin, job)
            self._know_seeded(origin, job)

    def _know_seeded(self, origin: str, job: Any) -> None:
        if len(self._seeded) >= DEFERRED_ORIGINS_KEPT:
            self._seeded.clear()
        self._seeded[(origin, job)] = time.time() + self.fleet.ttl

    def _defer_origin(self, origin: str, until: float) -> None:
        """Release the claim: any worker may fetch the rules once ``until`` has passed."""
        self._count("robotstxt/request_deferred")
        self.fleet.release(origin)
        if len(self._not_before) >= DEFERRED_ORIGINS_KEPT:
            now = time.time()
            self._not_before = {o: t for o, t in self._not_before.items() if t > now}
        self._not_before[origin] = until

    def _wait(self, request: Request, not_before: float = 0.0) -> Request:
        """Back to the frontier until the rules are stored (or their request may go again)."""
        self._count("robotstxt/deferred")
        due = max(time.time(), not_before) + random.uniform(0.5, 1.5)
        return send_back(request, dict(request.meta), due)

    def _count(self, key: str) -> None:
        if self.crawler.stats is not None:
            self.crawler.stats.inc_value(key)
