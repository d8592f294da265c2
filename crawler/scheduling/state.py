"""A spider's whole state in Redis: which keys hold it, and wiping them on purpose."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

    from crawler.connection import RedisClient


def spider_keys(server: RedisClient, settings: BaseSettings, spider: str) -> list[str]:
    """Every existing key of the spider: ``{spider}:*``, its start list, the list's leases and
    the set-aside invalid entries."""
    names = {"name": spider}
    start = settings.get("REDIS_START_URLS_KEY") % names
    keys = {start, "{" + start + "}:leases", settings.get("START_INVALID_KEY") % names}
    pattern = "{" + spider + "}:*"
    keys.update(key.decode() for key in server.scan_iter(match=pattern, count=1000))
    return sorted(key for key in keys if server.exists(key))


def purge_spider(server: RedisClient, settings: BaseSettings, spider: str) -> list[str]:
    """Delete the spider's queue, leases, duplicate filter, dead letters, stats and start lists.

    Closing a spider never does this: a fleet shares these keys.
    """
    keys = spider_keys(server, settings, spider)
    for key in keys:
        server.delete(key)
    return keys
