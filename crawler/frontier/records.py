"""A request's frontier entry: its due time, the sent-back mark, and the :class:`Pending` entry
the scheduler turns each request it is given into (its JSON record from :mod:`codec`, its
fingerprint, priority and due time).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy.utils.request import request_from_dict

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
# Meta key set on a request whose host's politeness token the frontier's pop took (see
# ``Pacing``), to the Crawl-delay (meta ``crawl_delay``) it was spaced by: the ban middleware
# sends it without taking a token unless a longer delay was learnt since. Never stored.
PACED_META = "frontier_paced"
CRAWL_DELAY_META = "crawl_delay"
# Meta key of a leased request the send gate turned away (its host's token not free yet): the
# Unix time until which the scheduler holds it, its lease kept. Never stored.
HOLD_META = "frontier_hold"


def crawl_delay_of(meta: dict[str, Any]) -> float:
    """Meta ``crawl_delay``: seconds between two requests to the request's domain for the whole
    fleet (the links spider sets it from robots.txt); 0 when absent or not a positive number."""
    value = meta.get(CRAWL_DELAY_META)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return float(value) if 0 < value < math.inf else 0.0


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
    request.meta.pop(PACED_META, None)
    request.meta.pop(HOLD_META, None)
    due = float(request.meta.pop(DUE_META, 0.0))
    return Pending(
        json=codec.dumps(codec.request_record(request, spider)),
        fingerprint=fingerprint,
        priority=request.priority,
        dont_filter=request.dont_filter or again,
        due=due,
    )


def leased_request(data: str, spider: Spider | None, paced: bool) -> Request:
    """The request a popped record holds; ``paced`` when the pop took its host's token."""
    request = request_from_dict(codec.loads(data), spider=spider)
    if paced:
        # The Crawl-delay the pop spaced it by: one learnt later is the worker's to apply.
        request.meta[PACED_META] = crawl_delay_of(request.meta)
    else:
        request.meta.pop(PACED_META, None)
    return request
