"""A spider's state in Redis as a whole: its keys, and wiping them on purpose."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from redis import Redis
    from scrapy.settings import BaseSettings


def spider_keys(server: Redis, settings: BaseSettings, spider: str) -> list[str]:
    """Every Redis key holding the spider's state: ``{spider}:*`` plus its start lists."""
    names = {"name": spider}
    keys = {settings.get("REDIS_START_URLS_KEY") % names, settings.get("START_INVALID_KEY") % names}
    pattern = "{" + spider + "}:*"
    keys.update(key.decode() for key in server.scan_iter(match=pattern, count=1000))
    return sorted(key for key in keys if server.exists(key))


def purge_spider(server: Redis, settings: BaseSettings, spider: str) -> list[str]:
    """Delete the spider's queue, duplicate filter, stats and start lists; return their keys.

    Closing a spider never does this: a fleet shares these keys.
    """
    keys = spider_keys(server, settings, spider)
    if keys:
        server.delete(*keys)
    return keys
