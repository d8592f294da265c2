"""A request's frontier entry: its due time, the sent-back mark, and the :class:`Pending` entry
the scheduler turns each request it is given into (its JSON record from :mod:`codec`, its
fingerprint, priority and due time).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import TYPE_CHECKING

from scrapy import Request
from scrapy.utils.request import request_from_dict

from crawler.frontier import codec
from crawler.frontier.queue import Pending
from crawler.meta import (
    DUE_META,
    HOLD_META,
    JOB_META,
    PACED_META,
    SENT_AT_META,
    SENT_BACK_META,
    SENT_META,
    crawl_delay_of,
    depth_of,
    filter_as_made,
    forget_proxy_secrets,
)

if TYPE_CHECKING:
    from scrapy import Spider

# The scrapy-playwright page a browser request's response carries (PLAYWRIGHT_INCLUDE_PAGE).
BROWSER_PAGE_META = "playwright_page"
_CLOSING: set[asyncio.Future[None]] = set()


def passes_again(request: Request) -> bool:
    """Whether ``request`` was sent back for its own URL (the mark is used up); its own
    ``dont_filter`` is back for its record."""
    filter_as_made(request)
    return bool(request.meta.pop(SENT_BACK_META, None) == request.url)


def pending(
    request: Request,
    fingerprint: bytes,
    spider: Spider | None,
    again: bool = False,
    seed: bool = False,
) -> Pending:
    """The frontier entry of ``request``; its due time leaves its meta for the entry, and a
    pool proxy's credentials stay out of Redis. ``again``: past the duplicate filter this once
    (sent back), while its record keeps the request's own ``dont_filter``."""
    forget_proxy_secrets(request)
    _let_go_of_page(request)
    for transient in (PACED_META, HOLD_META, SENT_META, SENT_AT_META):
        request.meta.pop(transient, None)
    due = float(request.meta.pop(DUE_META, 0.0))
    return Pending(
        json=codec.dumps(codec.request_record(request, spider)),
        fingerprint=fingerprint,
        priority=request.priority,
        dont_filter=request.dont_filter or again,
        seed=seed,
        due=due,
        depth=depth_of(request.meta),
    )


def _let_go_of_page(request: Request) -> None:
    """A browser page the request still holds (sent back, retried or redirected before a
    callback had it) is closed, never stored: a page object is no JSON, and a page kept open
    holds one of the browser's PLAYWRIGHT_MAX_PAGES_PER_CONTEXT."""
    page = request.meta.pop(BROWSER_PAGE_META, None)
    if page is not None and callable(close := getattr(page, "close", None)):
        closing = asyncio.ensure_future(_closed(close))
        _CLOSING.add(closing)  # held until done: a task no one holds may be collected
        closing.add_done_callback(_CLOSING.discard)


async def _closed(close: Callable[[], Awaitable[None]]) -> None:
    with suppress(Exception):  # closed already, or its browser gone
        await close()


def job_fingerprint(fingerprint: bytes, request: Request) -> bytes:
    """``fingerprint`` of a request of no crawl job; a job's own one for a job's request
    (meta JOB_META), so that each job's duplicate filter is its own: a page two jobs reach is
    fetched for each, and cancelling one leaves the other's requests whole."""
    number = request.meta.get(JOB_META)
    if type(number) is not int or number <= 0:
        return fingerprint
    return hashlib.sha1(fingerprint + b"|job:%d" % number, usedforsecurity=False).digest()


def leased_request(data: str, spider: Spider | None, paced: bool) -> Request:
    """The request a popped record holds; ``paced`` when the pop took its host's token."""
    request = request_from_dict(codec.loads(data), spider=spider)
    if paced:
        # The Crawl-delay the pop spaced it by: one learnt later is the worker's to apply.
        request.meta[PACED_META] = crawl_delay_of(request.meta)
    else:
        request.meta.pop(PACED_META, None)
    return request
