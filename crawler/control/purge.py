"""A spider's whole state in Redis: which keys hold it, and wiping them on purpose.

A spider's start list is ``REDIS_START_URLS_KEY`` (``<spider>:start_urls``), or its own
``redis_key`` attribute when it has one, as scrapy-redis spiders do (``%(name)s`` is the
spider's name). Bad entries are set aside in ``START_INVALID_KEY``, or ``<redis_key>:invalid``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crawler.keys import invalid_key, spider_pattern, start_key, start_leases_key

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

    from crawler.connection import RedisClient


def purge_spider(server: RedisClient, settings: BaseSettings, spider: str) -> list[str]:
    """Delete the spider's queue, leases, duplicate filter, dead letters, stats and start lists
    (``{spider}:*``, its start list, the list's leases and the set-aside invalid entries);
    returns the keys deleted.

    Closing a spider never does this: a fleet shares these keys.
    """
    start = start_key(settings, spider)
    keys = {start, start_leases_key(start), invalid_key(settings, spider)}
    pattern = spider_pattern(spider)
    keys.update(key.decode() for key in server.scan_iter(match=pattern, count=1000))
    return sorted(key for key in keys if server.delete(key))
