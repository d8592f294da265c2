"""scrapy-redis's spider attributes, read as scrapy-redis reads them (class, ``__init__`` or
``-a``) and checked, and its start-list hooks, refused when the project's feed would skip them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crawler.config import setting
from crawler.config.rules import SettingsError, integer

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


def own_batch_size(spider: Any) -> int | None:
    """The spider's ``redis_batch_size`` if it sets one (class, ``__init__`` or ``-a``;
    SettingsError unless an integer >= 1); scrapy-redis's setup_redis sets one, the project's bases
    none."""
    size = getattr(spider, "redis_batch_size", None)
    if size is None:
        return None
    return int(integer(1).read(f"{type(spider).__name__}.redis_batch_size", size))


def own_idle_time(spider: Any, settings: BaseSettings) -> float:
    """The spider's own ``max_idle_time`` (whole seconds >= 0, as scrapy-redis's spiders take
    it: ``int()``), else MAX_IDLE_TIME_BEFORE_CLOSE."""
    value = getattr(spider, "max_idle_time", None)
    if value is None:
        return float(setting(settings, "MAX_IDLE_TIME_BEFORE_CLOSE"))
    return float(integer(0).read(f"{type(spider).__name__}.max_idle_time", value))


# scrapy-redis's hooks to its start list: the feed reads the list itself and would skip them.
START_LIST_HOOKS = (
    *("next_requests", "schedule_next_requests", "spider_idle", "fetch_data", "pop_list_queue"),
    "pop_priority_queue",
)


def refuse_skipped_hooks(spidercls: type, base: type, own_start: bool = False) -> None:
    """SettingsError naming each start-list hook ``spidercls`` overrides over ``base``'s and, with
    ``own_start``, a ``start_requests`` without a ``start`` (``base.start()`` never calls it): a
    skipped override is a crawl unlike its code."""
    skipped = [
        name
        for name in START_LIST_HOOKS
        if getattr(spidercls, name, None) is not getattr(base, name, None)
    ]
    defined = _defined_below(spidercls, base)
    if own_start and "start_requests" in defined and "start" not in defined:
        skipped.append("start_requests")
    if skipped:
        raise SettingsError(
            f"spider {spidercls.__name__} overrides {', '.join(skipped)}, which the project's "
            "start-entry feed never calls: turn an entry into requests in "
            "make_request_from_data (or requests_from_entry on the project's bases; raise to "
            "set it aside), or yield your own requests from start()"
        )


def _defined_below(spidercls: type, base: type) -> set[str]:
    """Names defined by the classes of ``spidercls``'s MRO before ``base``."""
    names: set[str] = set()
    for cls in spidercls.__mro__:
        if cls is base:
            break
        names.update(vars(cls))
    return names
