"""A page's next visit, built from the request that fetched it and what its items say."""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from itemadapter import ItemAdapter
from scrapy.downloadermiddlewares.httpcompression import ACCEPTED_ENCODINGS

from crawler.frontier import codec
from crawler.frontier.leases import unguarded
from crawler.meta import HOLD_META, PACED_META, SENT_AT_META, SENT_BACK_META, SENT_META
from crawler.recrawl.policy import RecrawlPolicy
from crawler.recrawl.store import Revisit
from crawler.storage.changes import content_hash
from crawler.storage.destinations import field_of
from crawler.storage.rules import InvalidFieldRules, rules_of

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

# Meta key of a revisit: {"interval": seconds waited before it, "hash": the content then,
# "priority": the priority of the page's first request, "unknown": the kept fields its items
# had no value of then, when there were any}.
RECRAWL_META = "recrawl"
# A request with this meta key set is never revisited.
DONT_RECRAWL_META = "dont_recrawl"
# Meta key of a revisit's request as it is handed to the frontier: the fingerprint its revisit
# waits under, so that a visit that does not find the page there (gone, moved) can tell that
# revisit (crawler/recrawl/moves.py). Carried by its retries and its redirect's first hop.
WAITING_META = "recrawl_waiting"
# Meta filled in while a request is fetched (download details, retries, redirects, leases,
# its way through the send gate, identities, the browser page) and its crawl job (a revisit
# belongs to none): a revisit starts without it.
TRANSIENT_META = frozenset(
    {
        *("download_slot", "download_latency", "retry_times", "redirect_urls", "redirect_times"),
        *("redirect_ttl", "redirect_reasons", "frontier_lease", "frontier_start", "frontier_due"),
        *("playwright_page", "identity", "proxy", "bindaddress", "ban_times", "crawl_delay"),
        *("is_start_request", "frontier_job", WAITING_META),
        *(PACED_META, HOLD_META, SENT_META, SENT_AT_META),
    }
)


@dataclass(frozen=True)
class Visit:
    """A visit's revisit to schedule, and whether the content changed (None on a first visit)."""

    revisit: Revisit
    interval: float
    changed: bool | None


def items_hash(items: Sequence[Any]) -> str:
    """The content hash of a response's items, each without its class's volatile fields."""
    documents: list[Mapping[str, Any]] = []
    volatile: set[str] = set()
    for item in items:
        documents.append(ItemAdapter(item).asdict())
        volatile.update(getattr(type(item), "volatile_fields", ()))
    return content_hash(documents, volatile)


@dataclass(frozen=True)
class Seen:
    """What a visit's items said: their hash, and the kept fields they had no value of (the
    site answered null or nothing: the store keeps the value before, ``kept_fields``)."""

    digest: str
    unknown: tuple[str, ...] = ()

    def changed_since(self, before: Seen) -> bool | None:
        """Whether the content changed since ``before``; None when the two do not know the same
        fields (a count answered null one time, not the other): no change either way."""
        return self.digest != before.digest if self.unknown == before.unknown else None


def unknown_fields(items: Sequence[Any]) -> tuple[str, ...]:
    """The kept fields (``kept_fields``) some item has no value of, sorted."""
    unknown: set[str] = set()
    for item in items:
        try:
            kept = rules_of(item.__class__).kept
        except InvalidFieldRules:  # the item fails in the pipeline, with its reason
            continue
        unknown.update(name for name in kept if field_of(item, name) is None)
    return tuple(sorted(unknown))


def _seen(state: dict[str, Any]) -> Seen:
    """What the visit before said, as its revisit's state keeps it."""
    unknown = state.get("unknown")
    names = unknown if isinstance(unknown, list) else []
    return Seen(str(state.get("hash")), tuple(sorted(str(name) for name in names)))


def plan_visit(
    request: Request, items: Sequence[Any], policy: RecrawlPolicy, crawler: Crawler
) -> Visit:
    """The next visit of the page ``request`` fetched, whose callback gave ``items``."""
    state: Any = request.meta.get(RECRAWL_META)
    previous = _interval(state)
    seen = Seen(items_hash(items), unknown_fields(items))
    changed = None if previous is None else seen.changed_since(_seen(state))
    interval = policy.next_interval(previous, changed)
    base = _base_priority(state, request)
    state = {"interval": interval, "hash": seen.digest, "priority": base}
    if seen.unknown:
        state["unknown"] = list(seen.unknown)
    revisit = stored_revisit(request, state, base + policy.urgency(interval), crawler)
    fingerprint = revisit_fingerprint(revisit, crawler)
    record = codec.dumps(codec.without_defaults(revisit.to_dict(spider=crawler.spider)))
    due = time.time() + policy.delay(interval, random.random())
    waited = request.meta.get(WAITING_META)
    former = waited if isinstance(waited, str) and waited != fingerprint else ""
    next_visit = Revisit(fingerprint, due, record, replace=previous is not None, former=former)
    return Visit(next_visit, interval, changed)


def stored_revisit(
    request: Request, state: dict[str, Any], priority: int, crawler: Crawler
) -> Request:
    """The revisit of ``request`` as Redis keeps it (:func:`revisit_request`, without the
    headers the downloader gives it again)."""
    revisit = revisit_request(request, state, priority)
    _forget_default_headers(revisit, crawler.settings)
    # Made again from the proxy by the downloader before the next fetch; never kept in Redis.
    revisit.headers.pop(b"Proxy-Authorization", None)
    return revisit


def revisit_fingerprint(revisit: Request, crawler: Crawler) -> str:
    """The fingerprint (hex) a revisit waits under in Redis."""
    assert crawler.request_fingerprinter is not None
    return crawler.request_fingerprinter.fingerprint(revisit)[:16].hex()


def _forget_default_headers(request: Request, settings: BaseSettings) -> None:
    """Take off the headers the downloader middlewares gave (default headers, user agent, accepted
    encodings) and the default download timeout where unchanged: the revisit gets them again as the
    settings are then, and Redis does not hold them."""
    defaults = dict(settings.getdict("DEFAULT_REQUEST_HEADERS"))
    defaults["User-Agent"] = settings.get("USER_AGENT")
    defaults["Accept-Encoding"] = b", ".join(ACCEPTED_ENCODINGS)
    for name, value in defaults.items():
        if value is not None and request.headers.getlist(name) == [_as_bytes(value)]:
            del request.headers[name]
    if request.meta.get("download_timeout") == settings.getfloat("DOWNLOAD_TIMEOUT"):
        del request.meta["download_timeout"]


def _as_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def revisit_request(request: Request, state: dict[str, Any], priority: int) -> Request:
    """``request`` again, past the duplicate filter, without what its fetch added to it."""
    meta = {
        key: value
        for key, value in request.meta.items()
        if key not in TRANSIENT_META and not key.startswith("_")
    }
    meta[RECRAWL_META] = state
    meta[SENT_BACK_META] = request.url
    return request.replace(meta=meta, errback=unguarded(request.errback), priority=priority)


def fallback_due(request: Request, policy: RecrawlPolicy, now: float, least: float) -> float:
    """When a revisit handed to the frontier comes due again should its visit write nothing
    (failed, no items; a page gone or moved, or its host not answering, writes its absence,
    crawler/recrawl/moves.py): as if unchanged (twice its interval), and not before ``least``
    seconds (a lease), so a slow visit is not handed over twice."""
    doubled = policy.clamp(policy.factor * interval_of(request, policy))
    return now + max(doubled, least)


def interval_of(request: Request, policy: RecrawlPolicy) -> float:
    """The interval a revisit's request waited (its meta's state), else the initial one."""
    interval = _interval(request.meta.get(RECRAWL_META))
    return policy.initial if interval is None else interval


def wants_revisit(request: Request, spider: Spider | None) -> bool:
    return not request.meta.get(DONT_RECRAWL_META) and spider is not None


def _base_priority(state: Any, request: Request) -> int:
    """The priority the page's first request had (a revisit's own is raised by urgency)."""
    if isinstance(state, dict) and isinstance(state.get("priority"), int):
        return int(state["priority"])
    return request.priority


def _interval(state: Any) -> float | None:
    """The interval a revisit's state holds; None for anything else."""
    if not isinstance(state, dict):
        return None
    value = state.get("interval")
    return float(value) if isinstance(value, int | float) and value > 0 else None
