"""BackoffRetryMiddleware: retries wait e**n seconds (+-jitter, capped) in the delayed set,
Retry-After wins, bans are left to BanMiddleware, and spent requests become dead letters."""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from datetime import UTC, datetime
from email.utils import format_datetime
from types import SimpleNamespace
from typing import Any, cast

import pytest
import scrapy
from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.exceptions import DownloadTimeoutError, IgnoreRequest
from scrapy.http import HtmlResponse, Response
from scrapy.utils.spider import DefaultSpider
from scrapy.utils.test import get_crawler
from twisted.internet.error import ConnectionLost, ConnectionRefusedError
from twisted.internet.error import TimeoutError as TwistedTimeoutError

from crawler import settings as project_settings
from crawler.bans.policy import retry_after
from crawler.config.rules import SettingsError
from crawler.frontier.leases import LEASE_META
from crawler.frontier.scheduler import FrontierScheduler
from crawler.meta import DUE_META
from crawler.middlewares import BackoffRetryMiddleware

URL = "https://www.tiktok.com/@some.user"
JITTER = project_settings.RETRY_BACKOFF_JITTER
UNIFORM = "crawler.bans.waits.random.uniform"


def _refused() -> Exception:
    return _make(ConnectionRefusedError)


def _make(cls: type[Exception]) -> Exception:
    return cls()


def _crawler(**settings: Any) -> Crawler:
    defaults = {
        name: getattr(project_settings, name) for name in dir(project_settings) if name.isupper()
    }
    crawler = get_crawler(DefaultSpider, settings_dict={**defaults, **settings})
    crawler.spider = crawler._create_spider()
    return crawler


def _middleware(**settings: Any) -> BackoffRetryMiddleware:
    return BackoffRetryMiddleware.from_crawler(_crawler(**settings))


def _stat(mw: BackoffRetryMiddleware, key: str) -> Any:
    assert mw.crawler.stats is not None
    return mw.crawler.stats.get_value(key)


def _response(status: int, request: Request, headers: dict[str, str] | None = None) -> Response:
    return HtmlResponse(URL, status=status, headers=headers, body=b"<html></html>", request=request)


def _retry(mw: BackoffRetryMiddleware, request: Request, status: int = 503) -> Request:
    """The retry of ``request`` after a ``status`` answer, checked to be one."""
    retry = mw.process_response(request, _response(status, request))
    assert isinstance(retry, Request)
    return retry


def _waits(request: Request, before: float, after: float) -> tuple[float, float]:
    """The shortest and longest wait ``request``'s due time can stand for."""
    due = request.meta[DUE_META]
    return due - after, due - before


# --- backoff -------------------------------------------------------------------------------


def test_backoff_grows_as_e_to_the_n_within_the_jitter() -> None:
    mw = _middleware()
    request = Request(URL, meta={"keep": "me"})
    for attempt in (1, 2, 3):
        before = time.time()
        request = _retry(mw, request)
        shortest, longest = _waits(request, before, time.time())
        assert request.meta["retry_times"] == attempt
        assert request.meta["keep"] == "me"
        assert request.dont_filter
        assert shortest >= math.e**attempt * (1 - JITTER) - 0.01
        assert longest <= math.e**attempt * (1 + JITTER) + 0.01
    adjust = mw.crawler.settings.getint("RETRY_PRIORITY_ADJUST")
    assert adjust < 0
    assert request.priority == 3 * adjust


@pytest.mark.parametrize("spread", [-JITTER, 0.0, JITTER])
@pytest.mark.parametrize(("attempt", "seconds"), [(1, 2.718), (2, 7.389), (3, 20.09)])
def test_backoff_bounds(
    monkeypatch: pytest.MonkeyPatch, spread: float, attempt: int, seconds: float
) -> None:
    monkeypatch.setattr(UNIFORM, lambda low, high: spread)
    assert _middleware().delay(attempt) == pytest.approx(seconds * (1 + spread), rel=1e-3)


def test_jitter_spreads_retries() -> None:
    mw = _middleware()
    delays = [mw.delay(2) for _ in range(200)]
    assert all(math.e**2 * (1 - JITTER) <= delay <= math.e**2 * (1 + JITTER) for delay in delays)
    assert max(delays) - min(delays) > math.e**2 * JITTER


@pytest.mark.parametrize(("spread", "at_cap"), [(-JITTER, 30.0 * (1 - JITTER)), (JITTER, 30.0)])
def test_backoff_is_capped(monkeypatch: pytest.MonkeyPatch, spread: float, at_cap: float) -> None:
    """Jitter never takes a wait past RETRY_BACKOFF_MAX, and still spreads waits at the cap."""
    monkeypatch.setattr(UNIFORM, lambda low, high: spread)
    mw = _middleware(RETRY_BACKOFF_MAX=30.0, RETRY_TIMES=8)
    request = Request(URL)
    for attempt in range(1, 9):
        before = time.time()
        request = _retry(mw, request)
        shortest, _longest = _waits(request, before, time.time())
        # The wait lies between the two; how far apart they are is how long the call took.
        assert shortest <= 30.0 + 0.01
        if attempt >= 4:  # e**4 > 30
            assert shortest >= at_cap - 0.01
    assert mw.delay(5000) == pytest.approx(at_cap)


def test_backoff_base_is_a_setting() -> None:
    mw = _middleware(RETRY_BACKOFF_BASE=2.0, RETRY_BACKOFF_JITTER=0.0)
    assert [mw.delay(n) for n in (1, 2, 3, 4)] == [2.0, 4.0, 8.0, 16.0]


# --- Retry-After -----------------------------------------------------------------------------


def _http_date(seconds_from_now: float) -> str:
    return format_datetime(datetime.fromtimestamp(time.time() + seconds_from_now, UTC), True)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        pytest.param("17", 17.0, id="seconds"),
        pytest.param("1200", 1200.0, id="longer-than-backoff-max"),
        pytest.param(None, 95.0, id="http-date"),
    ],
)
def test_retry_after_wins_over_backoff(header: str | None, seconds: float) -> None:
    mw = _middleware()
    request = Request(URL)
    before = time.time()
    value = header or _http_date(seconds)
    retry = mw.process_response(request, _response(503, request, {"Retry-After": value}))
    assert isinstance(retry, Request)
    shortest, longest = _waits(retry, before, time.time())
    # Due the header's time after the answer was read (the backoff's jitter only shortens it).
    assert shortest <= seconds + 0.01
    assert longest >= seconds - 2


TEN_YEARS = 10 * 365 * 24 * 3600


@pytest.mark.parametrize(
    "header",
    [str(TEN_YEARS), "9" * 400, "Fri, 31 Dec 9999 23:59:59 GMT"],
    ids=["ten-years", "overflowing", "year-9999"],
)
def test_retry_after_is_capped_by_ban_cooldown_max(header: str) -> None:
    mw = _middleware(BAN_COOLDOWN_MAX=7200)
    request = Request(URL)
    before = time.time()
    retry = mw.process_response(request, _response(503, request, {"Retry-After": header}))
    assert isinstance(retry, Request)
    shortest, longest = _waits(retry, before, time.time())
    assert shortest <= 7200 + 0.01
    assert longest >= 7200 - 0.01


@pytest.mark.parametrize(
    "settings", [{"BAN_COOLDOWN_MAX": 60, "BAN_COOLDOWN": 120}, {"BAN_COOLDOWN_MAX": "inf"}]
)
def test_ban_cooldown_max_is_checked(settings: dict[str, Any]) -> None:
    with pytest.raises(SettingsError, match="BAN_COOLDOWN_MAX"):
        _middleware(**settings)


def test_retry_after_in_the_past_falls_back_to_backoff() -> None:
    mw = _middleware()
    request = Request(URL)
    before = time.time()
    retry = mw.process_response(request, _response(503, request, {"Retry-After": _http_date(-60)}))
    assert isinstance(retry, Request)
    shortest, longest = _waits(retry, before, time.time())
    assert math.e * (1 - JITTER) - 0.01 <= shortest <= longest <= math.e * (1 + JITTER) + 0.01


# --- what is retried -------------------------------------------------------------------------


@pytest.mark.parametrize("status", [500, 502, 503, 504, 522, 524, 408])
def test_retryable_statuses(status: int) -> None:
    mw = _middleware()
    retry = _retry(mw, Request(URL), status)
    assert retry.meta["retry_times"] == 1
    assert DUE_META in retry.meta


@pytest.mark.parametrize("status", [429, 403, 404, 200, 301])
def test_other_statuses_pass_through(status: int) -> None:
    mw = _middleware()
    request = Request(URL)
    response = _response(status, request, {"Retry-After": "30"})
    assert mw.process_response(request, response) is response
    assert _stat(mw, "retry/count") is None


@pytest.mark.parametrize(
    "exception",
    [
        _make(ConnectionRefusedError),
        _make(TwistedTimeoutError),
        TimeoutError(),
        ConnectionLost(),
        DownloadTimeoutError(),
        OSError("empty gzip body"),
    ],
    ids=lambda exception: type(exception).__name__,
)
def test_retryable_exceptions(exception: Exception) -> None:
    mw = _middleware()
    before = time.time()
    retry = mw.process_exception(Request(URL), exception)
    assert isinstance(retry, Request)
    assert retry.meta["retry_times"] == 1
    shortest, longest = _waits(retry, before, time.time())
    assert math.e * (1 - JITTER) - 0.01 <= shortest <= longest <= math.e * (1 + JITTER) + 0.01
    assert _stat(mw, f"retry/reason_count/{type(exception).__name__}") == 1


@pytest.mark.parametrize("exception", [ValueError("bad"), IgnoreRequest(), KeyError("x")])
def test_other_exceptions_are_not_retried(exception: Exception) -> None:
    mw = _middleware()
    assert mw.process_exception(Request(URL), exception) is None
    assert _stat(mw, "retry/count") is None


# --- per-request and global switches ---------------------------------------------------------


def test_dont_retry() -> None:
    mw = _middleware()
    request = Request(URL, meta={"dont_retry": True})
    response = _response(503, request)
    assert mw.process_response(request, response) is response
    assert mw.process_exception(request, _refused()) is None
    assert _retry(mw, Request(URL, meta={"dont_retry": False})).meta["retry_times"] == 1


def test_max_retry_times_meta() -> None:
    mw = _middleware(RETRY_TIMES=5)
    first = _retry(mw, Request(URL, meta={"max_retry_times": 1}))
    response = _response(503, first)
    assert mw.process_response(first, response) is response
    assert _stat(mw, "retry/max_reached") == 1

    never = Request(URL, meta={"max_retry_times": 0})
    assert mw.process_exception(never, _refused()) is None
    assert _stat(mw, "retry/max_reached") == 2


def test_retry_disabled() -> None:
    mw = _middleware(RETRY_ENABLED=False)
    request = Request(URL)
    response = _response(503, request)
    assert mw.process_response(request, response) is response
    assert mw.process_exception(request, _refused()) is None


# --- running out -----------------------------------------------------------------------------


def test_exhausted_response_is_returned_and_counted() -> None:
    mw = _middleware(RETRY_TIMES=2)
    request = _retry(mw, _retry(mw, Request(URL)))
    response = _response(503, request)
    assert mw.process_response(request, response) is response  # no engine, no scheduler
    assert mw.process_exception(request, _refused()) is None
    assert _stat(mw, "retry/count") == 2
    assert _stat(mw, "retry/max_reached") == 2
    assert _stat(mw, "retry/reason_count/503 Service Unavailable") == 2


def test_exhausted_response_is_a_dead_letter(monkeypatch: pytest.MonkeyPatch) -> None:
    crawler = _crawler(RETRY_TIMES=1)
    scheduler = FrontierScheduler.from_crawler(crawler)
    failures: list[tuple[str, str, str]] = []

    def failed(request: Request, reason: str, error: str) -> None:
        failures.append((request.url, reason, error))

    monkeypatch.setattr(scheduler.ledger, "failed", failed)
    crawler.engine = cast(Any, SimpleNamespace(scheduler=scheduler))
    mw = BackoffRetryMiddleware.from_crawler(crawler)
    request = _retry(mw, Request(URL), 502)
    response = _response(502, request)
    assert mw.process_response(request, response) is response
    assert failures == [(URL, "retries_exhausted:http_502", "502 Bad Gateway")]


class _Book(scrapy.Item):
    collection = "books"
    unique_key = "url"
    url = scrapy.Field()


class _Listing(dict[str, Any]):
    collection = "listings"


@pytest.mark.parametrize("handed", [_Book(url="u"), _Listing(url="u")], ids=["Item", "dict_class"])
def test_an_item_handed_on_in_meta_is_refused_not_turned_into_a_dict(handed: Any) -> None:
    """An item handed to the next page (a scrapy Item, a dict class of one's own) would come back
    from Redis as a plain dict, stored in another collection: the request is refused, named
    and counted, as docs/own-spider.md says; a plain dict, or an OrderedDict, goes."""
    crawler = _crawler()
    scheduler = FrontierScheduler.from_crawler(crawler)
    assert scheduler.enqueue_request(Request(URL, meta={"book": handed})) is False
    assert scheduler.enqueue_request(Request(URL, cb_kwargs={"book": handed})) is False
    assert crawler.stats is not None
    assert crawler.stats.get_value("scheduler/unserializable") == 2
    for plain in ({"url": "u"}, OrderedDict(url="u")):
        made = Request(f"{URL}?{type(plain).__name__}", meta={"book": plain})
        assert scheduler.enqueue_request(made) is True


def test_a_request_whose_callback_is_no_spider_method_is_refused_and_counted() -> None:
    """A lambda (or a plain function) as callback cannot be named in Redis: the request is
    refused, named in an ERROR and counted, as one with meta Redis cannot hold."""
    crawler = _crawler()
    scheduler = FrontierScheduler.from_crawler(crawler)

    def callback(response: Any) -> None: ...

    assert scheduler.enqueue_request(Request(URL, callback=callback)) is False
    assert crawler.stats is not None
    assert crawler.stats.get_value("scheduler/unserializable") == 1


def test_a_retry_whose_meta_redis_cannot_hold_is_a_dead_letter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A middleware that put a value JSON cannot hold in a retry's meta: the retry is not
    scheduled, and its lease ends as a dead letter (which keeps the request as stored)."""
    crawler = _crawler()
    scheduler = FrontierScheduler.from_crawler(crawler)
    dead: list[tuple[str, str, str]] = []
    monkeypatch.setattr(scheduler.ledger, "dead", lambda *args: dead.append(args[:3]))
    retry = Request(URL, meta={LEASE_META: "id7", "pages": {1: "x"}}, dont_filter=True)
    assert scheduler.enqueue_request(retry) is False
    assert dead == [("id7", "not_serializable", "meta['pages']: key 1 is not a string")]
    assert crawler.stats is not None
    assert crawler.stats.get_value("scheduler/unserializable") == 1
    assert crawler.stats.get_value("scheduler/enqueued/redis") is None


def test_stats_count_each_retry_by_reason() -> None:
    mw = _middleware()
    _retry(mw, Request(URL), 503)
    _retry(mw, Request(URL), 503)
    _retry(mw, Request(URL), 500)
    mw.process_exception(Request(URL), _refused())
    assert _stat(mw, "retry/count") == 4
    assert _stat(mw, "retry/reason_count/503 Service Unavailable") == 2
    assert _stat(mw, "retry/reason_count/500 Internal Server Error") == 1
    assert _stat(mw, "retry/reason_count/ConnectionRefusedError") == 1
    assert _stat(mw, "retry/max_reached") is None


# --- retry_after -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        pytest.param(b"17", 17.0, id="seconds"),
        pytest.param(b" 120 ", 120.0, id="padded"),
        pytest.param(b"0", 0.0, id="zero"),
        pytest.param(b"Wed, 21 Oct 2015 07:28:00 GMT", 0.0, id="date-past"),
        pytest.param(b"soon", 0.0, id="garbage"),
        pytest.param(b"-5", 0.0, id="negative"),
        pytest.param(b"1.5", 0.0, id="fraction"),
        pytest.param(b"", 0.0, id="blank"),
        pytest.param(None, 0.0, id="absent"),
        pytest.param(b"1.5", 1.5, id="decimal"),
        pytest.param(b"-3", 0.0, id="negative"),
        # A header given twice, joined by a proxy: its first value (was read as none).
        pytest.param(b"120, 120", 120.0, id="repeated"),
        pytest.param(b"30,60", 30.0, id="repeated-unpadded"),
    ],
)
def test_retry_after(value: bytes | None, seconds: float) -> None:
    headers = {} if value is None else {b"Retry-After": value}
    response = Response(URL, status=429, headers=headers, request=Request(URL))
    assert retry_after(response) == pytest.approx(seconds, abs=2)


def test_retry_after_http_date_in_the_future() -> None:
    headers = {"Retry-After": _http_date(300)}
    response = Response(URL, status=503, headers=headers, request=Request(URL))
    assert 298 <= retry_after(response) <= 300


def test_the_browsers_network_errors_are_retried_for_maps() -> None:
    """A search the browser could not reach (net::ERR_CONNECTION_REFUSED, a navigation
    timeout) is retried as a download error is, not dead-lettered at once."""
    from playwright.async_api import Error as PlaywrightError
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    from crawler.spiders.maps import MapsSpider

    defaults = {n: getattr(project_settings, n) for n in dir(project_settings) if n.isupper()}
    crawler = get_crawler(MapsSpider, settings_dict=defaults)
    crawler.spider = crawler._create_spider()
    mw = BackoffRetryMiddleware.from_crawler(crawler)
    for error in (
        PlaywrightError("net::ERR_CONNECTION_REFUSED at https://www.google.com/maps/search/x"),
        PlaywrightTimeout("Timeout 30000ms exceeded"),
    ):
        retry = mw.process_exception(Request(URL), error)
        assert isinstance(retry, Request), error
