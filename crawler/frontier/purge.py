"""A spider's whole state in Redis: which keys hold it, and wiping them on purpose.

A spider's start list is ``REDIS_START_URLS_KEY`` (``<spider>:start_urls``), or its own
``redis_key`` attribute when it has one, as scrapy-redis spiders do (``%(name)s`` is the
spider's name). Bad entries are set aside in ``START_INVALID_KEY``, or ``<redis_key>:invalid``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crawler.settings_check.rules import key_template

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

    from crawler.connection import RedisClient

# A spider class or instance (anything with ``name`` and maybe ``redis_key``), or a name.
SpiderRef = Any


def start_key(settings: BaseSettings, spider: SpiderRef) -> str:
    """The list the spider reads its start entries from."""
    name, own = _name_and_key(settings, spider)
    return (own or str(settings.get("REDIS_START_URLS_KEY"))) % {"name": name}


def invalid_key(settings: BaseSettings, spider: SpiderRef) -> str:
    """The list the spider sets bad start entries aside in."""
    name, own = _name_and_key(settings, spider)
    if own:
        return f"{own % {'name': name}}:invalid"
    return str(settings.get("START_INVALID_KEY")) % {"name": name}


def _name_and_key(settings: BaseSettings, spider: SpiderRef) -> tuple[str, str | None]:
    """The spider's name and its own ``redis_key`` (checked: SettingsError when it is not a
    key name), if it has one. A name is looked up among the project's spiders."""
    if isinstance(spider, str):
        spider = _spider_class(settings, spider) or spider
    if isinstance(spider, str):
        return spider, None
    own = getattr(spider, "redis_key", None)
    if own is None or _setup_default(settings, spider, own):
        return str(spider.name), None
    label = f"{getattr(spider, '__name__', type(spider).__name__)}.redis_key"
    return str(spider.name), str(key_template("name").read(label, own))


def _setup_default(settings: BaseSettings, spider: SpiderRef, own: Any) -> bool:
    """Whether ``own`` is what scrapy-redis's setup_redis gives a spider instance whose class
    names no redis_key (REDIS_START_URLS_KEY, formatted): not the spider's own key, so its
    bad entries go to START_INVALID_KEY, where ``scrapy frontier`` looks for them."""
    if isinstance(spider, type) or getattr(type(spider), "redis_key", None) is not None:
        return False
    default = str(settings.get("REDIS_START_URLS_KEY")) % {"name": spider.name}
    return bool(own == default)


def _spider_class(settings: BaseSettings, name: str) -> type | None:
    from scrapy.spiderloader import get_spider_loader

    try:
        found: type = get_spider_loader(settings).load(name)
    except KeyError:
        return None
    return found


def spider_keys(server: RedisClient, settings: BaseSettings, spider: str) -> list[str]:
    """Every existing key of the spider: ``{spider}:*``, its start list, the list's leases and
    the set-aside invalid entries."""
    start = start_key(settings, spider)
    keys = {start, "{" + start + "}:leases", invalid_key(settings, spider)}
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
