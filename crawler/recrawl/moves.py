"""A revisit that does not find its page at its address (docs/storage.md, recrawl): what its
answer says becomes an :class:`~crawler.recrawl.store.Absence` of the waiting revisit.

- Gone, and nothing stored: a 404 backs the page's revisits off, a 410 (gone for good) ends
  them.
- Redirected: a permanent redirect (301, 308) ends the revisits at the old address, the page
  is revisited where it went (the redirect's target is crawled with the revisit's state, and
  its items give it a revisit of its own); a temporary one (302, 303, 307, a meta refresh)
  backs them off as a 404 does, since the page may come back to its address.
- Unanswered: its host did not answer at all once its retries were spent (refused, no address,
  timed out), or is marked for the fleet (unreachable, its robots.txt unavailable: it failed
  again and again, crawler/bans/breaker.py): backed off as a 404 is. A failure that is
  not the host's (a request turned away here, a cancelled job, Redis away, an identity that
  failed: a bind address, a proxy) says nothing of the page and counts for nothing.

Only a revisit's own request, or its retries, carries the waiting revisit's fingerprint
(``WAITING_META``); its redirect's first hop takes it off once scheduled, so a hop sent back to
the frontier and scheduled again (a cool-down, a politeness turn) counts once.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from crawler.bans.breaker import CONNECTION_FAILURES, HostMarked, identity_at_fault
from crawler.meta import IDENTITY_FAILED_META
from crawler.recrawl.revisits import (
    WAITING_META,
    interval_of,
    revisit_fingerprint,
    stored_revisit,
)
from crawler.recrawl.store import Absence

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

    from crawler.recrawl.policy import RecrawlPolicy

GONE = frozenset({404, 410})
GONE_FOR_GOOD = 410
MOVED_FOR_GOOD = frozenset({301, 308})


def gone(request: Request, status: int, policy: RecrawlPolicy) -> Absence | None:
    """The absence a revisit's answer ``status`` shows when its visit stored nothing; None for
    another status, or a request that is no revisit's own."""
    fingerprint = request.meta.get(WAITING_META)
    if status not in GONE or not isinstance(fingerprint, str):
        return None
    return _absence(fingerprint, request, policy, final=status == GONE_FOR_GOOD)


def moved(request: Request, crawler: Crawler, policy: RecrawlPolicy) -> Absence | None:
    """The absence a scheduled redirect of a revisit shows (its mark taken off); None for any
    other request, and for a page moved to itself (the target's revisit waits under the same
    fingerprint: its visit replaces it)."""
    redirects = request.meta.get("redirect_urls")
    if not redirects or WAITING_META not in request.meta:
        return None
    fingerprint = request.meta.pop(WAITING_META)
    if not isinstance(fingerprint, str):
        return None
    if revisit_fingerprint(stored_revisit(request, {}, 0, crawler), crawler) == fingerprint:
        return None
    reasons = request.meta.get("redirect_reasons") or [None]
    return _absence(fingerprint, request, policy, final=reasons[0] in MOVED_FOR_GOOD)


def unanswered(request: Request, exception: BaseException, policy: RecrawlPolicy) -> Absence | None:
    """The absence a revisit's failed download shows, its retries spent, when its host did not
    answer (:func:`host_failed`); None for another failure, or a request that is no revisit's
    own."""
    fingerprint = request.meta.get(WAITING_META)
    if not isinstance(fingerprint, str) or not host_failed(request, exception):
        return None
    return _absence(fingerprint, request, policy, final=False)


def host_failed(request: Request, exception: BaseException) -> bool:
    """Whether a download failure is its host's own: no answer at all, through no identity at
    fault (crawler/bans/breaker.py), or the host marked for the fleet."""
    if isinstance(exception, HostMarked):
        return True
    if not isinstance(exception, CONNECTION_FAILURES):
        return False
    if request.meta.get(IDENTITY_FAILED_META):
        return False  # put on the identity it went as, not on the host
    return not identity_at_fault(exception, bool(request.meta.get("proxy")))


def _absence(fingerprint: str, request: Request, policy: RecrawlPolicy, final: bool) -> Absence:
    spread = policy.delay(1.0, random.random())
    return Absence(fingerprint, interval_of(request, policy), spread, final)
