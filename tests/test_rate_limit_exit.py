"""RATE_LIMIT_EXIT: a worker that meets only rate limits stops with exit status 5, its leases
released for the fleet, so an orchestrator backs off instead of restarting it in a loop."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import redis
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st
from scrapy.http import Response
from scrapy.utils.test import get_crawler

from crawler.bans.ratelimit import EXIT_RATE_LIMITED, RateLimitExit
from crawler.config import setting
from crawler.config.rules import SettingsError
from crawler.config.table import answers_per_window
from devtools.services import free_port
from tests.harness import Crawl

ANSWERS = st.sampled_from([(200, {}), (404, {}), (429, {}), (503, {}), (503, {"Retry-After": "5"})])


def limited(status: int, headers: dict[str, str]) -> bool:
    return status == 429 or (status == 503 and "Retry-After" in headers)


@given(
    st.integers(1, 5),
    st.floats(0.5, 10),
    st.lists(st.tuples(st.floats(0, 3), ANSWERS), max_size=40),
)
def test_it_stops_on_m_rate_limited_answers_within_s_seconds_and_none_successful(
    answers: int, seconds: float, events: list[tuple[float, tuple[int, dict[str, str]]]]
) -> None:
    extension = RateLimitExit(get_crawler(), answers, seconds)
    now, seen = 0.0, []  # (time, rate limited?, successful?) as a model keeps them
    for step, (status, headers) in events:
        now += step
        response = Response("http://127.0.0.1/", status=status, headers=headers)
        seen.append((now, limited(status, headers), status < 400))
        recent = [event for event in seen if event[0] >= now - seconds]
        last_success = max((at for at, _, ok in seen if ok), default=-1e9)
        limits = [at for at, hit, _ in recent if hit and at > last_success]
        expected = len(limits) >= answers and now - last_success > seconds and seen[-1][1]
        assert extension.saw(response, now) == expected


@pytest.mark.parametrize("value", ["5", "0/10", "3/0", "x/y", "1/2/3", "-1/5"])
def test_a_bad_value_is_refused_with_its_name(value: str) -> None:
    with pytest.raises(SettingsError, match="RATE_LIMIT_EXIT"):
        setting({"RATE_LIMIT_EXIT": value}, "RATE_LIMIT_EXIT")  # type: ignore[arg-type]
    assert answers_per_window("") is None
    assert answers_per_window("4/30") == (4, 30.0)


@pytest.fixture
def limiting_host() -> Iterator[tuple[int, list[str]]]:
    """A host that answers 429 (no Retry-After) to every request, and the paths it answered."""
    answered: list[str] = []

    async def too_many(request: web.Request) -> web.Response:
        answered.append(request.path)
        return web.Response(status=429, text="Too Many Requests")

    app = web.Application()
    app.router.add_route("GET", "/{path:.*}", too_many)
    port = free_port()
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield port, answered
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)


@pytest.mark.integration
def test_a_worker_meeting_only_rate_limits_exits_5_and_releases_its_leases(
    crawl: Crawl, redis_client: redis.Redis, limiting_host: tuple[int, list[str]]
) -> None:
    port, answered = limiting_host
    paths = [f"/page/{n}" for n in range(12)]
    redis_client.lpush("links:start_urls", *(f"http://127.0.0.1:{port}{path}" for path in paths))
    settings = {"RATE_LIMIT_EXIT": "6/30", "LINKS_SITEMAPS": False, "ROBOTSTXT_OBEY": False}
    with crawl.background("links", settings=settings) as worker:
        status = worker.wait(120)
        log = worker.log_text()
    assert status == EXIT_RATE_LIMITED, log[-3000:]
    assert "rate-limited answers in 30 s and none successful" in log
    assert "'finish_reason': 'rate_limited'" in log
    # Nothing lost: a page the host answered was handled as the spider handles a 429; every
    # other one is back in the frontier for the fleet; none is left leased or dead.
    assert redis_client.zcard("{links}:leases") == 0
    assert redis_client.zcard("{links:start_urls}:leases") == 0
    assert redis_client.llen("{links}:dead") == 0
    queued = [
        json.loads(record)["u"]
        for key in redis_client.keys("{links}:queue:*")
        for record in redis_client.lrange(key, 0, -1)
    ]
    delayed = redis_client.zcard("{links}:delayed")
    unread = redis_client.llen("links:start_urls")
    left = {urlsplit(url).path for url in queued}
    assert len(left) + delayed + unread + len(set(answered) - left) >= len(paths), log[-3000:]
