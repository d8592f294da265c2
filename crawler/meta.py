"""Request meta keys more than one part of the crawler reads: when a request is due, whether it
was sent back, the politeness its pop took, its Crawl-delay, and the identity (and pool proxy)
it is sent as. Plain names and small helpers, so the frontier, the ban machinery and the
spiders share them without importing each other.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrapy import Request

# Meta key holding the epoch time before which a request must not be sent (retries, cool-downs):
# it waits in the delayed set until then.
DUE_META = "frontier_due"
# Meta key of a request sent back to the frontier (a cool-down, a politeness turn, robots.txt not
# known yet): its URL, which the duplicate filter lets through once. A redirect or a link made
# from the answer has another URL and is filtered as usual, which ``dont_filter`` would not do.
SENT_BACK_META = "frontier_sent_back"
# Meta key of a sent-back request whose own ``dont_filter`` is False: ``send_back`` sets
# ``dont_filter``, so that any scheduler's duplicate filter lets it through again (scrapy-redis's
# and Scrapy's read no frontier mark), and ``filter_as_made`` puts it back as the frontier stores
# the request or as it comes out of another scheduler: its redirects and offsite checks are as
# the request's own. Never stored.
FILTER_LIFTED_META = "frontier_filter_lifted"
# Meta key set on a request whose turn the frontier's pop planned (see ``Pacing`` in
# crawler/frontier/queue.py), to the Crawl-delay (meta ``crawl_delay``) it was spaced by: the
# send gate (crawler/frontier/gate.py) takes its host's token as it goes, and the ban middleware
# takes none unless a longer delay was learnt since. Never stored.
PACED_META = "frontier_paced"
# Meta key of a leased request the send gate turned away (its host's token not free yet): the
# Unix time until which the scheduler holds it, its lease kept. Never stored.
HOLD_META = "frontier_hold"
# Meta key of a request that took its host's token at the send gate: the Unix time the host's
# bucket counts it sent (see crawler/frontier/gate.py). Never stored.
SENT_META = "frontier_sent"
# Meta key of a request on its way out: the Unix time it left the last downloader middleware (the
# circuit breaker tells a new incident from one in progress by it). Never stored.
SENT_AT_META = "frontier_sent_at"
# Meta key of a start entry's request in a spider that does not fetch a start URL again
# (``refetch_start_urls`` False, as links): a seed, scheduled even when a link found its URL
# first, dropped only when the same seed was scheduled before. Never stored.
SEED_META = "frontier_seed"
# Meta key of a request's depth, its number of links from a start URL (an int 0..DEPTH_LIMIT),
# set by a spider that wants each URL followed from the shortest path it finds (links): the
# frontier's duplicate filter lets a URL through again at a depth less than any it was
# scheduled at (see crawler/frontier/scripts/dupefilter.lua). Stored with the request: a
# redirect's target keeps its depth.
DEPTH_META = "frontier_depth"
DEPTH_LIMIT = 1000
# Meta key of the number of the job a request belongs to (see crawler/frontier/jobs.py): set on
# a start entry's requests when the entry names a job, and carried to every request and item
# made from its answers. Stored with the request, as its record's first field ``"j"``.
JOB_META = "frontier_job"
# Meta key of a Crawl-delay of the request's own (see crawl_delay_of).
CRAWL_DELAY_META = "crawl_delay"
# Meta key naming the identity a request was (or is to be) sent as.
IDENTITY_META = "identity"
# Meta key set on a request whose connection failure the circuit breaker put down to the identity
# it went as (a bind address, a proxy), not to its host: robots.txt is asked again through another
# (crawler/links/robots.py) rather than counted a failure of the host's. Never stored.
IDENTITY_FAILED_META = "identity_failed"
# Meta key of a request whose connection failure counts towards more of the circuit breaker's
# marks than host_unreachable (robots.txt: robots_unavailable too), their names: the ban
# middleware counts them all in its one call for the failure and leaves what it did (a
# crawler.bans.breaker.Block) in BREAKER_BLOCK_META (crawler/links/robots.py reads it). Such a
# request goes through the engine, never the frontier: never stored.
BREAKER_COUNTS_META = "breaker_counts"
BREAKER_BLOCK_META = "breaker_block"
# Meta keys an identity fills in; the proxy ones only when the identity is a proxy.
PROXY_META = ("proxy", "_auth_proxy")


def crawl_delay_of(meta: dict[str, Any]) -> float:
    """Meta ``crawl_delay``: seconds between two requests to the request's domain for the whole
    fleet (the links spider sets it from robots.txt); 0 when absent or not a positive number."""
    value = meta.get(CRAWL_DELAY_META)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return float(value) if 0 < value < math.inf else 0.0


def depth_of(meta: dict[str, Any]) -> int | None:
    """Meta ``frontier_depth`` (DEPTH_META): the request's depth, None when absent or not a
    whole number 0..DEPTH_LIMIT (the request is then filtered as one without a depth)."""
    value = meta.get(DEPTH_META)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= DEPTH_LIMIT:
        return None
    return value


def carry_job(source: Request, made: Request) -> Request:
    """``made``, a request made for ``source`` outside its callback (the sitemaps its host's
    robots.txt names), in the job of ``source`` (meta JOB_META) unless it names its own."""
    if JOB_META in source.meta:
        made.meta.setdefault(JOB_META, source.meta[JOB_META])
    return made


def send_back(request: Request, meta: dict[str, Any], due: float) -> Request:
    """``request`` with ``meta``, going back to the frontier until ``due`` (epoch seconds), past
    the duplicate filter of whichever scheduler takes it (see FILTER_LIFTED_META)."""
    meta[DUE_META] = due
    meta[SENT_BACK_META] = request.url
    if not request.dont_filter:
        meta[FILTER_LIFTED_META] = True
    return request.replace(meta=meta, dont_filter=True)


def filter_as_made(request: Request) -> None:
    """A sent-back request's own ``dont_filter`` (False) back: the lift of ``send_back`` ends."""
    if request.meta.pop(FILTER_LIFTED_META, False):
        request.dont_filter = False


def forget_proxy_secrets(request: Request) -> None:
    """Drop from a request about to be stored in Redis what a pool proxy put on it: the proxy
    URL with its credentials and Scrapy's Proxy-Authorization header made from them. The
    identity's name stays; BanMiddleware applies the proxy again before the next download."""
    if str(request.meta.get(IDENTITY_META, "")).startswith("proxy:"):
        for name in PROXY_META:
            request.meta.pop(name, None)
        request.headers.pop(b"Proxy-Authorization", None)
