"""Pausing and resuming a whole fleet (``scrapy frontier SPIDER pause|resume``), and the pause
as reports show it. What a worker does while paused is in :mod:`crawler.frontier.pause`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from crawler.connection import reply_hash
from crawler.frontier.pause import Pause, clean_text, pause_from_replies, queue_read
from crawler.keys import pause_key

if TYPE_CHECKING:
    from crawler.connection import RedisClient


def describe_json(pause: Mapping[str, Any]) -> str:
    """:meth:`Pause.describe` of a pause as ``to_json`` gives it (status reports)."""
    return Pause(pause.get("since"), pause.get("by") or "", pause.get("reason") or "").describe()


def pause_crawl(server: RedisClient, spider: str, by: str, reason: str) -> Pause:
    """Pause every worker of ``spider`` (within 2 s); a crawl paused already keeps its
    ``since`` and takes the new ``by`` and ``reason``."""
    key = pause_key(spider)
    pipe = server.pipeline(transaction=True)
    pipe.hsetnx(key, "since", f"{time.time():.3f}")
    pipe.hset(key, mapping={"by": clean_text(by), "reason": clean_text(reason)})
    pipe.hgetall(key)
    return Pause.from_hash(reply_hash(pipe.execute()[-1]))


def resume_crawl(server: RedisClient, spider: str) -> Pause | None:
    """Lift the pause of ``spider``; the pause lifted, or None if it was not paused."""
    key = pause_key(spider)
    pipe = server.pipeline(transaction=True)
    pipe.hgetall(key)
    pipe.delete(key)
    raw, deleted = pipe.execute(raise_on_error=False)
    return pause_from_replies(spider, [raw]) if deleted else None


def read_pause(server: RedisClient, spider: str) -> Pause | None:
    """The pause of ``spider``, None when it runs."""
    pipe = server.pipeline(transaction=False)
    queue_read(pipe, spider)
    return pause_from_replies(spider, pipe.execute(raise_on_error=False))
