"""What a ban does (docs/politeness.md), and the values the ban and retry middlewares share.

The rules of :mod:`crawler.bans.rules` plus the spider's own ``ban_rule(response)`` classify a
response before the spider sees it. A ban cools the domain (BAN_POLICY ``rotate``: the identity)
down for every worker, halves its rate, and sends the request to the delayed set, or to the
dead letters after BAN_MAX_TIMES bans; ``stop`` also stops the worker (exit status EXIT_BANNED).
"""

from __future__ import annotations

import logging
import math
import random
import re
import time
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

from scrapy.downloadermiddlewares.retry import get_retry_request
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.httpobj import urlparse_cached

from crawler.bans.identities import without_identity
from crawler.bans.rules import DEFAULT_RULES, Page, Rule, Verdict, classify, same_page
from crawler.bans.waits import RedisWait, RetryBackoff, cooldown_max
from crawler.config import setting, setting_int
from crawler.frontier.jobs import JobBook
from crawler.frontier.reports import FrontierReports
from crawler.meta import DUE_META, IDENTITY_META, send_back

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from crawler.bans.politeness import FleetPoliteness

logger = logging.getLogger(__name__)

BAN_TIMES_META = "ban_times"
# The exit status of `scrapy crawl` when BAN_POLICY=stop stopped the worker (crawler/aws reads it).
EXIT_BANNED = 3


class BanPolicy:
    """What a ban does (see the module's docstring); the BAN_* settings are read once, here."""

    def __init__(self, crawler: Crawler, fleet: FleetPoliteness, redis: RedisWait) -> None:
        settings = crawler.settings
        self.crawler = crawler
        self.fleet = fleet
        self.redis = redis
        self.frontier = FrontierReports(crawler)
        self.policy: str = setting(settings, "BAN_POLICY")
        self.cooldown: float = setting(settings, "BAN_COOLDOWN")
        self.cooldown_max = cooldown_max(settings)
        self.max_times = setting_int(settings, "BAN_MAX_TIMES", 0)
        extra: list[Any] = setting(settings, "BAN_RULES")  # loaded by its rule
        # A spider may leave default rules out by name (``links``: a site's own 403, a private
        # file, is a page's error, not a block of the whole domain).
        left_out = set(getattr(crawler.spidercls, "ban_rules_left_out", ()))
        if unknown := left_out - {rule.__name__ for rule in DEFAULT_RULES}:
            raise ValueError(f"ban_rules_left_out names no default rule: {sorted(unknown)}")
        own = tuple(rule for rule in DEFAULT_RULES if rule.__name__ not in left_out)
        self.rules: tuple[Rule, ...] = (*extra, *own)

    def classify(self, response: Response) -> Verdict:
        verdict = classify(page_of(response), self.rules)
        if verdict.is_ban or response.status != 200:
            # A spider's rule judges pages; redirects, 404s and 5xx are the generic rules' job.
            return verdict
        spider_rule = getattr(self.crawler.spider, "ban_rule", None)
        rule = spider_rule(response) if spider_rule is not None else None
        return Verdict("ban", rule) if rule else verdict

    async def banned(
        self,
        request: Request,
        response: Response,
        verdict: Verdict,
        blocked: float = 0.0,
        rotated: bool = False,
    ) -> Request:
        """The ban's cool-down (``blocked``: the end of the circuit breaker's block, which
        stands for it; ``rotated``: a block of the identity on the host, under ``rotate``, not
        of the host) and the request's next attempt."""
        domain = urlparse_cached(request).hostname or ""
        identity = str(request.meta.get(IDENTITY_META, "default"))
        self._count("ban/count")
        JobBook.of(self.crawler).answered(request, True, counted=False)  # a job's threshold
        self._count(f"ban/rule/{verdict.rule}")
        self._count(f"ban/domain/{domain}")
        logger.warning(
            "Ban (%s) on %s <%d %s> via %s",
            verdict.rule,
            domain,
            response.status,
            response.url,
            identity,
            extra={"spider": self.crawler.spider},
        )
        seconds = retry_after(response, self.cooldown_max) or self.cooldown
        scope = identity if self.policy == "rotate" else None
        why = f"{verdict.rule} (HTTP {response.status})"
        if blocked:
            self.fleet.penalize(domain, identity)
            until = blocked
            if not rotated:
                scope = None
        else:
            until = await self.redis.wait_for(
                lambda: self._cool_down(domain, identity, scope, seconds, why)
            )
        if self.policy == "stop":
            self._stop(domain)
        return self._again(request, verdict, until if scope is None else time.time())

    async def _cool_down(
        self, domain: str, identity: str, scope: str | None, seconds: float, why: str
    ) -> float:
        """Start the cool-down and halve the rate of (domain, identity); its end. Redone when Redis
        went away in between, a cool-down keeps the later end."""
        until = self.fleet.ban(domain, scope, seconds, why)
        self.fleet.penalize(domain, identity)
        return until

    def _again(self, request: Request, verdict: Verdict, due: float) -> Request:
        times = int(request.meta.get(BAN_TIMES_META, 0)) + 1
        if self.max_times and times >= self.max_times:
            reason, error = f"banned:{verdict.rule}", f"banned {times} times"
            self.frontier.ledger.failed(request, reason, error)
            raise IgnoreRequest(f"banned {times} times ({verdict.rule})")
        meta = without_identity(request.meta, IDENTITY_META)
        meta[BAN_TIMES_META] = times
        return send_back(request, meta, due + random.uniform(0, 1))

    def _stop(self, domain: str) -> None:
        engine = self.crawler.engine
        if engine is not None and engine.spider is not None:
            logger.error("Banned on %s: stopping this worker (BAN_POLICY=stop)", domain)
            deferred_from_coro(engine.close_spider_async(reason="banned"))

    def _count(self, key: str) -> None:
        if self.crawler.stats is not None:
            self.crawler.stats.inc_value(key)


# What a download wrote in its request's meta about that download alone: not the retry's.
DOWNLOAD_ONLY_META = ("download_latency", "cache_timestamp")


def retry_later(
    crawler: Crawler, request: Request, reason: str, backoff: RetryBackoff, server_asked: float = 0
) -> Request | None:
    """get_retry_request's retry (None once spent), due after the backoff or ``server_asked``,
    without what the last download wrote in its meta (``DOWNLOAD_ONLY_META``)."""
    assert crawler.spider is not None
    retry = get_retry_request(
        request,
        spider=crawler.spider,
        reason=reason,
        priority_adjust=crawler.settings.getint("RETRY_PRIORITY_ADJUST"),
    )
    if retry is not None:
        for key in DOWNLOAD_ONLY_META:
            retry.meta.pop(key, None)
        retry.meta[DUE_META] = time.time() + backoff.delay(retry.meta["retry_times"], server_asked)
    return retry


_NUMBER = re.compile(r"[0-9]+(\.[0-9]+)?")


def page_of(response: Response) -> Page:
    """The response as the ban rules read it."""
    headers = {
        name.decode("latin-1").lower(): b", ".join(values).decode("latin-1")
        for name, values in response.headers.items()
    }
    request = response.request
    # Where the request started: its first URL before any redirect.
    first = (request.meta.get("redirect_urls") or [request.url])[0] if request else response.url
    redirected = not same_page(first, response.url)
    return Page(response.status, response.url, headers, response.body, redirected)


def retry_after(response: Response, maximum: float = math.inf) -> float:
    """Seconds of a Retry-After (seconds, with decimals too, or an HTTP date), at most
    ``maximum``; 0 if unreadable or "now" (0, a date passed), which the host breaker takes for
    no header: the server gave no wait to keep to."""
    value = response.headers.get(b"Retry-After")
    if not value:
        return 0.0
    text = value.decode("latin-1").strip()
    first = text.partition(",")[0].strip()  # "120, 120": a header given twice, joined
    try:
        seconds = float(first) if _NUMBER.fullmatch(first) else _until(text)
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return min(maximum, max(0.0, seconds))


def _until(date: str) -> float:
    return parsedate_to_datetime(date).timestamp() - time.time()
