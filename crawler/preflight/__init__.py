"""Every project setting checked once before a crawl starts; a bad one stops it, named.

:func:`check_settings` reads each setting by its rule (crawler/config/table.py), then
:data:`CROSS_CHECKS` compare settings with each other, and raises one :class:`SettingsError`
listing every bad value as ``NAME = value: must be <allowed>`` (docs/settings.md). Components read
their settings through the same rules; none switches itself off for a bad value.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from redis.exceptions import AuthenticationError, RedisError, ResponseError
from scrapy.utils.misc import load_object

from crawler.bans.concurrency import LEASE_SLACK
from crawler.config import enabled_components, setting
from crawler.config.rules import SettingsError, masked, problem
from crawler.config.table import RULES
from crawler.connection import RedisUnavailable, crawl_redis
from crawler.feeds import shared_feed_uris
from crawler.frontier.pacing import fleet_pacing
from crawler.frontier.scheduler import FrontierScheduler
from crawler.frontier.server_check import check_frontier
from crawler.keys import FrontierKeys, start_key
from crawler.middlewares import (
    LeaseDownloaderMiddleware,
    LeaseSpiderMiddleware,
    SendGateMiddleware,
)
from crawler.pipelines import MongoPipeline
from crawler.preflight.scrapy_redis import scrapy_redis_problems
from crawler.storage.mongo import MongoSettings, connect_mongo
from crawler.uris import mask_uri

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

__all__ = [
    "CROSS_CHECKS",
    "SettingsCheck",
    "check_components",
    "check_frontier_server",
    "check_settings",
    "check_storage_server",
]


def check_settings(settings: BaseSettings) -> None:
    """Raise SettingsError listing every setting whose value its rule refuses."""
    problems: list[str] = []
    for name, rule in RULES.items():
        try:
            rule.read(name, settings.get(name))
        except SettingsError as exc:
            problems.extend(exc.problems)
    if not problems:
        problems = [line for check in CROSS_CHECKS for line in check(settings)]
    if problems:
        raise SettingsError(*problems)


def _cooldown_problems(settings: BaseSettings) -> list[str]:
    """A Retry-After is capped at BAN_COOLDOWN_MAX, which cannot be shorter than a ban."""
    cooldown, longest = settings.getfloat("BAN_COOLDOWN"), settings.getfloat("BAN_COOLDOWN_MAX")
    if longest >= cooldown:
        return []
    allowed = f"a number >= BAN_COOLDOWN ({cooldown:g})"
    return [problem("BAN_COOLDOWN_MAX", settings.get("BAN_COOLDOWN_MAX"), allowed)]


def _concurrency_problems(settings: BaseSettings) -> list[str]:
    """A fleet lease (download timeout + LEASE_SLACK) must outlast the wait in Scrapy's own
    per-domain slot: no more leases than the slot downloads at once, and with DOWNLOAD_DELAY
    the last one must start within LEASE_SLACK (else another worker takes its slot)."""
    cap = settings.getint("POLITENESS_CONCURRENCY")
    per_domain = settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN")
    delay = settings.getfloat("DOWNLOAD_DELAY")
    if settings.getbool("RANDOMIZE_DOWNLOAD_DELAY", True):
        delay *= 1.5
    most = min(per_domain, int(LEASE_SLACK // delay) if delay > 0 else per_domain)
    if cap <= most:
        return []
    allowed = (
        f"0 or at most {most} (CONCURRENT_REQUESTS_PER_DOMAIN = {per_domain}, and a queued"
        f" request must start within {LEASE_SLACK:g} s at DOWNLOAD_DELAY"
        f" = {settings.getfloat('DOWNLOAD_DELAY'):g})"
    )
    return [problem("POLITENESS_CONCURRENCY", settings.get("POLITENESS_CONCURRENCY"), allowed)]


def _recrawl_problems(settings: BaseSettings) -> list[str]:
    """A revisit interval starts within its bounds."""
    low, high = settings.getfloat("RECRAWL_MIN_INTERVAL"), settings.getfloat("RECRAWL_MAX_INTERVAL")
    initial = settings.getfloat("RECRAWL_INITIAL_INTERVAL")
    if low <= initial <= high:
        return []
    allowed = f"a number from RECRAWL_MIN_INTERVAL ({low:g}) to RECRAWL_MAX_INTERVAL ({high:g})"
    return [problem("RECRAWL_INITIAL_INTERVAL", settings.get("RECRAWL_INITIAL_INTERVAL"), allowed)]


def _browser_problems(settings: BaseSettings) -> list[str]:
    """A spider whose downloads go through Playwright needs the browser it launches."""
    if not _uses_playwright(settings):
        return []
    path = settings.getdict("PLAYWRIGHT_LAUNCH_OPTIONS").get("executable_path")
    if path is None or (
        isinstance(path, str) and os.path.isfile(path) and os.access(path, os.X_OK)
    ):
        return []
    name = "CHROMIUM_PATH (PLAYWRIGHT_LAUNCH_OPTIONS executable_path)"
    return [problem(name, path, "an executable browser file (Debian: apt-get install chromium)")]


def _browser_bind_problems(settings: BaseSettings) -> list[str]:
    """Chromium sends from the machine's own address, whatever BIND_ADDRESSES says: a crawl
    through the browser refuses it, rather than put bans and failures down to an address its
    pages never came from (a proxy is set per browser context: crawler/browser/proxies.py)."""
    addresses = setting(settings, "BIND_ADDRESSES")
    if not addresses or not _uses_playwright(settings):
        return []
    allowed = (
        "empty when downloads go through the browser (scrapy-playwright: Chromium cannot send "
        "from a chosen local address; give PROXY_POOL instead)"
    )
    return [problem("BIND_ADDRESSES", addresses, allowed)]


def _uses_playwright(settings: BaseSettings) -> bool:
    """Whether a download handler is scrapy-playwright's (or made from it), told by the
    modules of its classes: a crawl without the browser never imports Playwright."""
    for handler in settings.getdict("DOWNLOAD_HANDLERS").values():
        handler_class = load_object(handler) if isinstance(handler, str) else handler
        if isinstance(handler_class, type) and any(
            base.__module__.split(".")[0] == "scrapy_playwright" for base in handler_class.__mro__
        ):
            return True
    return False


def _storage_problems(settings: BaseSettings) -> list[str]:
    """MONGO_COLLECTIONS names where items go: the pipeline that stores them must be on (an
    ITEM_PIPELINES that replaces the project's would otherwise store nothing, silently)."""
    if not settings.getdict("MONGO_COLLECTIONS"):
        return []
    if _enabled(settings, "ITEM_PIPELINES", MongoPipeline):
        return []
    allowed = (
        "a dict with crawler.pipelines.MongoPipeline when MONGO_COLLECTIONS is set: "
        "ITEM_PIPELINES = {**ITEM_PIPELINES, ...} keeps the project's pipelines"
    )
    return [problem("ITEM_PIPELINES", settings.get("ITEM_PIPELINES"), allowed)]


def check_components(settings: BaseSettings) -> None:
    """Raise SettingsError naming each component the frontier needs that the settings turn
    off. Run by :class:`SettingsCheck` once the spider's settings and the add-ons are applied
    (``scrapy crawl`` checks the settings before: a run's dict has not been added to the
    spider's yet)."""
    if problems := _frontier_component_problems(settings):
        raise SettingsError(*problems)


def _frontier_component_problems(settings: BaseSettings) -> list[str]:
    """On the frontier scheduler, the middlewares that settle each request's lease are on, and
    the send gate while the fleet is paced: without them pages would come back when their
    leases expire, and paced requests would go without their host's token. A dict given for a
    run adds to the project's (crawler/addons.py), so only a component named with None, or the
    project's add-on named with None in ADDONS, turns one off."""
    if not _on_frontier(settings):
        return []
    needed = [
        ("DOWNLOADER_MIDDLEWARES", LeaseDownloaderMiddleware),
        ("SPIDER_MIDDLEWARES", LeaseSpiderMiddleware),
    ]
    if fleet_pacing(settings, settings.getint("FRONTIER_LEASE_SECONDS")) is not None:
        needed.append(("DOWNLOADER_MIDDLEWARES", SendGateMiddleware))
    return [
        problem(name, settings.get(name), f"a dict that keeps {component.__qualname__} on")
        for name, component in needed
        if not _enabled(settings, name, component)
    ]


def _on_frontier(settings: BaseSettings) -> bool:
    """Whether the crawl's SCHEDULER is the frontier's (Scrapy's scheduler metaclass makes
    issubclass() true for any scheduler-like class: its MRO is read instead)."""
    return FrontierScheduler in load_object(settings["SCHEDULER"]).__mro__


def _enabled(settings: BaseSettings, name: str, component: type) -> bool:
    """Whether the component dict ``name`` (with its _BASE) turns ``component`` (or a subclass)
    on."""
    return any(
        isinstance(loaded, type) and issubclass(loaded, component)
        for loaded in enabled_components(settings, name)
    )


# Checks of settings against each other, once each passes its own rule.
def _autoscale_problems(settings: BaseSettings) -> list[str]:
    """The fewest workers wanted cannot be more than the most."""
    least, most = settings.getint("AUTOSCALE_MIN_WORKERS"), settings.getint("AUTOSCALE_MAX_WORKERS")
    if least <= most:
        return []
    allowed = f"an integer <= AUTOSCALE_MAX_WORKERS ({most})"
    return [problem("AUTOSCALE_MIN_WORKERS", settings.get("AUTOSCALE_MIN_WORKERS"), allowed)]


CROSS_CHECKS: tuple[Callable[[BaseSettings], list[str]], ...] = (
    *(_cooldown_problems, _concurrency_problems, _recrawl_problems, _storage_problems),
    *(_browser_problems, _browser_bind_problems, scrapy_redis_problems, _autoscale_problems),
)


# --- checks that need the server ----------------------------------------------------------------


def check_frontier_server(crawler: Crawler) -> None:
    """:func:`check_frontier` for a crawl on the frontier scheduler before its engine exists (the
    scheduler checks again when it opens: a spider may name its start key only once built), on the
    crawl's own Redis client, so the connection serves the crawl."""
    settings = crawler.settings
    if not _on_frontier(settings):
        return
    spider = crawler.spider if crawler.spider is not None else crawler.spidercls
    keys = FrontierKeys(spider.name, start_key(settings, spider))
    server, mode = crawl_redis(crawler), settings["DUPEFILTER_MODE"]
    try:
        check_frontier(server, keys, mode)
    except (AuthenticationError, ResponseError) as exc:
        # Refused as the connection opens (SELECT, AUTH): the URL is wrong for this server.
        allowed = f"a URL whose database and password this Redis takes (it answered: {exc})"
        raise SettingsError(
            problem("REDIS_URL", settings.get("REDIS_URL"), allowed, masked)
        ) from None
    except RedisError as exc:
        url = mask_uri(settings.get("REDIS_URL") or "")
        raise RedisUnavailable(f"Redis at {url} is unreachable: {exc}") from exc


def check_storage_server(crawler: Crawler) -> None:
    """MongoUnavailable, naming its masked URI, when the crawl stores items in MongoDB
    (MongoPipeline on) and MongoDB does not answer within MONGO_CONNECT_TIMEOUT_MS: said before
    the engine starts, as the frontier's Redis is, rather than by the pipeline as it opens."""
    if _enabled(crawler.settings, "ITEM_PIPELINES", MongoPipeline):
        connect_mongo(MongoSettings.from_crawler(crawler)).close()


class SettingsCheck:
    """Extension, first in EXTENSIONS: :func:`check_settings` under any runner."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SettingsCheck:
        check_settings(crawler.settings)
        check_components(crawler.settings)
        if not _enabled(crawler.settings, "ITEM_PIPELINES", MongoPipeline):
            # Not an error (a project may store items its own way), but never silent.
            logger.warning(
                "ITEM_PIPELINES has no crawler.pipelines.MongoPipeline: items are not stored "
                "in MongoDB; ITEM_PIPELINES = {**ITEM_PIPELINES, ...} keeps the project's"
            )
        for uri in shared_feed_uris(crawler.settings):
            logger.warning(
                "FEEDS %s has no %%(worker)s: workers of a fleet that start in the same second "
                "write the same key, and the last one's items replace the others'",
                mask_uri(uri),
            )
        return cls(crawler)
