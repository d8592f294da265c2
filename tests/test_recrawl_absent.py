"""A revisit that does not find its page at its address, in pieces: what a revisit's answer or
redirect says (crawler/recrawl/moves.py, with Scrapy's own RedirectMiddleware and the links
spider's fingerprints), and the waiting revisits' absences in a row on real Redis against a
model (hypothesis)."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.exceptions import RedisError
from scrapy import Request
from scrapy.downloadermiddlewares.redirect import RedirectMiddleware
from scrapy.exceptions import (
    CannotResolveHostError,
    DownloadConnectionRefusedError,
    DownloadTimeoutError,
    IgnoreRequest,
)
from scrapy.http import Response
from scrapy.utils.project import get_project_settings
from scrapy.utils.test import get_crawler

from crawler.bans.breaker import ROBOTS_UNAVAILABLE, UNREACHABLE, HostMarked
from crawler.meta import IDENTITY_FAILED_META
from crawler.recrawl.moves import gone, moved, unanswered
from crawler.recrawl.policy import RecrawlPolicy
from crawler.recrawl.revisits import (
    RECRAWL_META,
    WAITING_META,
    revisit_fingerprint,
    stored_revisit,
)
from crawler.recrawl.store import Absence, Backoff, Revisit, RevisitStore
from crawler.spiders.links import LinksSpider
from tests.harness import no_reactor_needed

POLICY = RecrawlPolicy(initial=100, minimum=10, maximum=1000)


@pytest.fixture(scope="module")
def links() -> Any:
    """A crawler of the links spider (its canonical fingerprints), built, never run."""
    project = get_project_settings().copy_to_dict()
    return get_crawler(LinksSpider, settings_dict={**project, **no_reactor_needed()})


def _revisit(crawler: Any, url: str) -> Request:
    """A revisit's request as it is handed to the frontier: marked with its waiting revisit."""
    request = Request(url, meta={RECRAWL_META: {"interval": 40.0, "hash": "h", "priority": 0}})
    fingerprint = revisit_fingerprint(stored_revisit(request, {}, 0, crawler), crawler)
    request.meta[WAITING_META] = fingerprint
    return request


def _redirected(crawler: Any, request: Request, status: int, location: str) -> Request:
    """The request Scrapy's RedirectMiddleware makes of ``request``'s answer."""
    middleware = RedirectMiddleware.from_crawler(crawler)
    answer = Response(request.url, status=status, headers={"Location": location})
    made = middleware.process_response(request, answer)
    assert isinstance(made, Request)
    return made


@pytest.mark.parametrize(
    ("status", "final"), [(301, True), (308, True), (302, False), (307, False)]
)
def test_a_redirect_of_a_revisit_is_its_pages_absence_counted_once(
    links: Any, status: int, final: bool
) -> None:
    request = _revisit(links, "https://a.test/old")
    target = _redirected(links, request, status, "/new")
    absence = moved(target, links, POLICY)
    assert absence == Absence(
        request.meta[WAITING_META], 40.0, absence.spread if absence else 0, final
    )
    # Sent back to the frontier and scheduled again (a cool-down): not counted twice; and the
    # target's record keeps no mark.
    assert moved(target, links, POLICY) is None
    assert WAITING_META not in target.meta


def test_a_page_redirected_to_itself_is_not_absent(links: Any) -> None:
    """/x to /x?utm_source=a is the same page to the links spider (canonical URLs): its visit
    writes the revisit that waits under the same fingerprint."""
    request = _revisit(links, "https://a.test/x")
    assert moved(_redirected(links, request, 301, "/x?utm_source=a"), links, POLICY) is None
    assert moved(_redirected(links, request, 301, "/y"), links, POLICY) is not None


def test_only_a_revisits_own_request_counts_a_redirect(links: Any) -> None:
    first_visit = Request("https://a.test/old")
    assert moved(_redirected(links, first_visit, 301, "/new"), links, POLICY) is None


@given(st.integers(100, 599))
def test_only_404_and_410_are_gone(status: int) -> None:
    request = Request("https://a.test/p", meta={WAITING_META: "ab" * 8})
    absence = gone(request, status, POLICY)
    assert (absence is not None) == (status in (404, 410))
    assert absence is None or absence.final == (status == 410)
    assert absence is None or absence.interval == POLICY.initial  # no state: the initial one
    assert gone(Request("https://a.test/p"), 404, POLICY) is None  # not a revisit


REFUSED = DownloadConnectionRefusedError("refused")


@pytest.mark.parametrize(
    ("exception", "meta", "counted"),
    [
        (REFUSED, {}, True),
        (CannotResolveHostError("no address"), {}, True),
        (DownloadTimeoutError("took too long"), {}, True),
        (HostMarked(UNREACHABLE, "marked"), {}, True),
        (HostMarked(ROBOTS_UNAVAILABLE, "marked"), {}, True),
        # Not the host's: the proxy it went through refused, or the failure was put on the
        # identity it went as; a request turned away (a cancelled job); Redis away; a bug.
        (REFUSED, {"proxy": "http://proxy.test:3128"}, False),
        (REFUSED, {IDENTITY_FAILED_META: True}, False),
        (IgnoreRequest("job 3 cancelled"), {}, False),
        (RedisError("down"), {}, False),
        (ValueError("a middleware's bug"), {}, False),
    ],
)
def test_only_a_host_that_does_not_answer_makes_a_failed_revisit_absent(
    exception: Exception, meta: dict[str, Any], counted: bool
) -> None:
    request = Request("https://a.test/p", meta={WAITING_META: "ab" * 8, **meta})
    absence = unanswered(request, exception, POLICY)
    assert absence == (Absence("ab" * 8, POLICY.initial, 1.0) if counted else None)
    assert unanswered(Request("https://a.test/p"), REFUSED, POLICY) is None  # not a revisit


# --- the waiting revisits' absences on real Redis, against a model ------------------------------

PAGES = st.sampled_from(["aa", "bb"])
OPERATIONS = st.lists(
    st.tuples(st.sampled_from(["add", "absent"]), PAGES, st.booleans()), max_size=12
)
INTERVAL, DUE = 10.0, 5e9


class Model:
    """What the store should hold: each waiting page's due time, and its absences in a row."""

    def __init__(self, backoff: Backoff) -> None:
        self.backoff = backoff
        self.waiting: dict[str, float] = {}
        self.absences: dict[str, int] = {}

    def add(self, page: str, replace: bool) -> None:
        if replace or page not in self.waiting:
            self.waiting[page] = DUE
            self.absences.pop(page, None)

    def absent(self, page: str, final: bool, now: float) -> None:
        if page not in self.waiting:
            return
        times = self.absences.get(page, 0) + 1
        if final or 0 < self.backoff.limit <= times:
            del self.waiting[page]
            self.absences.pop(page, None)
            return
        self.absences[page] = times
        self.waiting[page] = now + min(self.backoff.longest, INTERVAL * 2**times)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(OPERATIONS, st.integers(0, 3), st.sampled_from([25.0, 1e6]))
def test_absences_back_a_page_off_and_end_it_as_the_model_says(
    redis_client: redis.Redis, operations: list[tuple[str, str, bool]], limit: int, longest: float
) -> None:
    redis_client.delete("{s}:revisit", "{s}:revisit:data", "{s}:revisit:absent")
    store, backoff = RevisitStore(redis_client, "s"), Backoff(longest, limit)
    model = Model(backoff)
    for operation, page, flag in operations:
        if operation == "add":
            store.add([Revisit(page, DUE, "{}", replace=flag)])
            model.add(page, flag)
        else:
            now = time.time()
            store.absent([Absence(page, INTERVAL, final=flag)], backoff)
            model.absent(page, flag, now)
    due = store.due_times()
    assert due.keys() == model.waiting.keys()
    for page, when in model.waiting.items():
        assert due[page] == pytest.approx(when, abs=1.0)
    data: Any = redis_client.hkeys("{s}:revisit:data")
    assert {key.decode() for key in data} == due.keys()
    counts: Any = redis_client.hgetall("{s}:revisit:absent")
    absences = {key.decode(): int(times) for key, times in counts.items()}
    assert absences == model.absences
