"""scrapy-redis's settings, each honoured or refused at start with the project's equivalent
(docs/scrapy-redis.md): none is silently ignored. The scheduling settings are checked only with
the frontier scheduler (scrapy-redis's own reads them itself); the connection and start-list
settings always, as the project reads Redis and start entries its own way with any scheduler.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scrapy.utils.misc import load_object

from crawler.config.rules import BAD_VALUE, as_bool, as_int, as_text, problem
from crawler.frontier.reports import on_the_frontier

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

PRIORITY_QUEUES = ("scrapy_redis.queue.PriorityQueue", "scrapy_redis.queue.SpiderPriorityQueue")
DUPEFILTERS = ("scrapy.dupefilters.RFPDupeFilter", "scrapy_redis.dupefilter.RFPDupeFilter")
SERIALIZERS = ("crawler.frontier.codec", "crawler.scheduling.serializer")
KEYS = "the frontier's keys are {<spider>}:queue, {<spider>}:dupefilter, ... (README: Redis keys)"


def unset(value: Any) -> bool:
    return value is None or value == ""


def is_false(value: Any) -> bool:
    return unset(value) or not as_bool(value)


def is_true(value: Any) -> bool:
    return unset(value) or as_bool(value)


def is_zero(value: Any) -> bool:
    return unset(value) or as_int(value) == 0


def is_utf8(value: Any) -> bool:
    return unset(value) or codecs.lookup(as_text(value)).name == "utf-8"


def one_of(*paths: str) -> Callable[[Any], bool]:
    def allowed(value: Any) -> bool:
        return unset(value) or value in paths or load_object(value) in map(load_object, paths)

    return allowed


# (setting, passes, what it must be: the project's equivalent)
Check = tuple[str, Callable[[Any], bool], str]

ALWAYS: tuple[Check, ...] = (
    *(
        (name, unset, f"unset: give the {part} in REDIS_URL (redis://HOST:PORT/DB), which wins")
        for name, part in (("REDIS_HOST", "host"), ("REDIS_PORT", "port"), ("REDIS_DB", "db"))
    ),
    ("REDIS_DECODE_RESPONSES", is_false, "False or unset: the frontier reads replies as bytes"),
    (
        "REDIS_ENCODING",
        is_utf8,
        "utf-8 or unset: the frontier's JSON is UTF-8 (a spider whose start entries are in "
        "another encoding sets its redis_encoding attribute)",
    ),
    *(
        (name, is_false, "False or unset: start entries are a Redis list (redis-cli lpush KEY)")
        for name in ("REDIS_START_URLS_AS_SET", "REDIS_START_URLS_AS_ZSET")
    ),
    (
        "REDIS_START_URLS_BATCH_SIZE",
        unset,
        "unset: START_BATCH_SIZE is the start entries leased per round trip (or a spider's "
        "redis_batch_size attribute)",
    ),
)

WITH_THE_FRONTIER: tuple[Check, ...] = (
    (
        "SCHEDULER_PERSIST",
        is_true,
        "True or unset: the frontier always persists; `scrapy frontier <spider> purge` wipes it",
    ),
    (
        "SCHEDULER_FLUSH_ON_START",
        is_false,
        "False or unset: nothing is flushed at start; run `scrapy frontier <spider> purge "
        "--yes` before the crawl instead",
    ),
    (
        "SCHEDULER_IDLE_BEFORE_CLOSE",
        is_zero,
        "0 or unset: a worker closes after MAX_IDLE_TIME_BEFORE_CLOSE seconds once the whole "
        "fleet is idle, looking every IDLE_POLL_INTERVAL",
    ),
    (
        "SCHEDULER_QUEUE_CLASS",
        one_of(*PRIORITY_QUEUES),
        f"{PRIORITY_QUEUES[0]} or unset: the frontier's order is request priority, then first "
        "in first out (DEPTH_PRIORITY turns it depth- or breadth-first)",
    ),
    ("SCHEDULER_QUEUE_KEY", unset, f"unset: {KEYS}"),
    ("SCHEDULER_DUPEFILTER_KEY", unset, f"unset: {KEYS}"),
    (
        "SCHEDULER_DUPEFILTER_CLASS",
        one_of(*DUPEFILTERS),
        f"{DUPEFILTERS[1]} or unset: the frontier filters duplicates itself (DUPEFILTER_MODE)",
    ),
    (
        "DUPEFILTER_CLASS",
        one_of(*DUPEFILTERS),
        f"{DUPEFILTERS[1]} or unset: the frontier filters duplicates itself, as DUPEFILTER_MODE "
        "says (bloom, redisbloom, exact or none)",
    ),
    (
        "SCHEDULER_SERIALIZER",
        one_of(*SERIALIZERS),
        f"{SERIALIZERS[0]} or unset: the frontier stores requests as JSON",
    ),
)


# REDIS_PARAMS keys that redis-py reads as REDIS_DECODE_RESPONSES and REDIS_ENCODING.
PARAMS: tuple[tuple[str, str, Callable[[Any], bool]], ...] = (
    ("decode_responses", "REDIS_DECODE_RESPONSES", is_false),
    ("encoding", "REDIS_ENCODING", is_utf8),
)


def scrapy_redis_problems(settings: BaseSettings) -> list[str]:
    """A line for each scrapy-redis setting whose value the project would not honour."""
    checks = ALWAYS + (WITH_THE_FRONTIER if on_the_frontier(settings) else ())
    return [
        problem(name, settings.get(name), allowed)
        for name, passes, allowed in checks
        if not _passes(passes, settings.get(name))
    ] + _params_problems(settings)


def _params_problems(settings: BaseSettings) -> list[str]:
    """REDIS_PARAMS may not do what REDIS_DECODE_RESPONSES or REDIS_ENCODING may not."""
    try:
        params = settings.getdict("REDIS_PARAMS")
    except BAD_VALUE:
        return []  # table.py names it
    lines = []
    for key, same_as, passes in PARAMS:
        if key in params and not _passes(passes, params[key]):
            allowed = next(allowed for name, _, allowed in ALWAYS if name == same_as)
            lines.append(problem(f"REDIS_PARAMS[{key!r}]", params[key], allowed))
    return lines


def _passes(check: Callable[[Any], bool], value: Any) -> bool:
    try:
        return check(value)
    except BAD_VALUE:
        return False
