"""Scrapy requests as the frontier stores them: JSON records, and back.

The scheduler turns each request it is given into a :class:`Pending` entry (its JSON, its
fingerprint, priority and due time) and each popped record back into a Scrapy request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy import Request

from crawler.bans.identities import forget_proxy_secrets
from crawler.frontier import codec
from crawler.frontier.queue import Pending

if TYPE_CHECKING:
    from scrapy import Spider

# Meta key holding the epoch time before which a request must not be sent (retries, cool-downs):
# it waits in the delayed set until then.
DUE_META = "frontier_due"
# Meta key of a request sent back to the frontier (a cool-down, a politeness turn, robots.txt not
# known yet): its URL, which the duplicate filter lets through once. A redirect or a link made
# from the answer has another URL and is filtered as usual, which ``dont_filter`` would not do.
SENT_BACK_META = "frontier_sent_back"


def sent_back(request: Request, meta: dict[str, Any], due: float) -> Request:
    """``request`` with ``meta``, going back to the frontier until ``due`` (epoch seconds)."""
    meta[DUE_META] = due
    meta[SENT_BACK_META] = request.url
    return request.replace(meta=meta)


def passes_again(request: Request) -> bool:
    """Whether ``request`` was sent back for its own URL (the mark is used up)."""
    return bool(request.meta.pop(SENT_BACK_META, None) == request.url)


def pending(
    request: Request, fingerprint: bytes, spider: Spider | None, again: bool = False
) -> Pending:
    """The frontier entry of ``request``; its due time leaves its meta for the entry, and a
    pool proxy's credentials stay out of Redis. ``again``: past the duplicate filter this once
    (sent back), while its record keeps the request's own ``dont_filter``."""
    forget_proxy_secrets(request)
    due = float(request.meta.pop(DUE_META, 0.0))
    return Pending(
        json=codec.dumps(request_record(request, spider)),
        fingerprint=fingerprint,
        priority=request.priority,
        dont_filter=request.dont_filter or again,
        due=due,
    )


# What a plain GET request has unless told otherwise: left out of its record, since Scrapy's
# request_from_dict gives a missing field its default (records with every field, as written
# before, load the same).
DEFAULTS: dict[str, Any] = {
    "callback": None,
    "errback": None,
    "headers": {},
    "body": b"",
    "cookies": {},
    "meta": {},
    "encoding": "utf-8",
    "flags": [],
    "cb_kwargs": {},
    "dont_filter": False,
    "method": "GET",
    "priority": 0,
}


def request_record(request: Request, spider: Spider | None) -> dict[str, Any]:
    """``request.to_dict(spider=spider)`` in format 2 (short field names, see
    ``codec.SHORT_NAMES``) without the fields that have their default, and without
    Scrapy's scan of every spider attribute to name the callbacks when they are the spider's
    own methods (the usual case)."""
    callback = _method_name(spider, request.callback)
    errback = _method_name(spider, request.errback)
    if type(request) is not Request or callback is False or errback is False:
        return codec.shorten(request.to_dict(spider=spider))
    fields = {
        "callback": callback,
        "errback": errback,
        "headers": dict(request.headers),
        "body": request.body,
        "cookies": request.cookies,
        "meta": request.meta,
        "encoding": request.encoding,
        "flags": request.flags,
        "cb_kwargs": request.cb_kwargs,
        "dont_filter": request.dont_filter,
        "method": request.method,
        "priority": request.priority,
    }
    record: dict[str, Any] = {"url": request.url}
    record.update((name, value) for name, value in fields.items() if value != DEFAULTS[name])
    return codec.shorten(record)


def _method_name(spider: Spider | None, function: Any) -> str | bool | None:
    """The name of ``function`` on ``spider``, None without one, False when Scrapy must look."""
    if function is None:
        return None
    name = getattr(function, "__name__", None)
    if spider is None or name is None or getattr(spider, name, None) != function:
        return False
    return str(name)
