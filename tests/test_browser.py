"""The maps spider's browser (crawler/browser/) in a real headless Chromium: a host it cannot
reach (refused, dropped, or answering an https URL without TLS) steps the fleet's circuit
breaker as a plain download's failure does, counted at the host's server and in Redis; a page
whose body passes DOWNLOAD_MAXSIZE is closed and dead-lettered while the rest of the crawl goes
on."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, cast

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import async_playwright
from scrapy.core.downloader.handlers.http11 import TunnelError
from scrapy.exceptions import (
    CannotResolveHostError,
    DownloadConnectionRefusedError,
    DownloadFailedError,
    DownloadTimeoutError,
)

from crawler.bans.breaker import UNREACHABLE, UnheardTunnelError, mark_scope
from crawler.browser.failures import HOST_FAILURES, navigation_failure
from crawler.frontier.codec import expand
from crawler.keys import bans_key, breaker_key
from sandbox.hosts import host_address
from tests.harness import Crawl, Sandbox, closed_port, scrapy, served_hosts
from tests.test_maps import CHROMIUM, _log_stats, needs_chromium

# Quick steps: the breaker blocks for 0.2 s, then 0.4 s; a retry waits at most 0.3 s.
QUICK_BREAKER = {
    "HOST_BLOCK_START": 0.2,
    "HOST_MAX_EXCEPTIONS": 2,
    "RETRY_TIMES": 5,
    "RETRY_BACKOFF_MAX": 0.3,
}


def _dead(client: redis.Redis, spider: str) -> list[dict[str, Any]]:
    letters = [json.loads(raw) for raw in client.lrange("{" + spider + "}:dead", 0, -1)]
    return [{**letter, "request": expand(letter["request"])} for letter in letters]


# --- a host the browser cannot reach ---------------------------------------------------------


@contextmanager
def plain_http_server() -> Iterator[tuple[int, list[tuple[float, str]]]]:
    """A loopback port answering plain HTTP (400) to whatever a connection first sends: its
    port, and the arrivals so far (the time and first bytes of each connection)."""
    arrivals: list[tuple[float, str]] = []
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)

        def answer() -> None:
            while True:
                try:
                    connection, _ = server.accept()
                except OSError:
                    return  # closed
                with connection:
                    first = connection.recv(4096)
                    arrivals.append((time.monotonic(), first[:1].hex()))
                    connection.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

        threading.Thread(target=answer, daemon=True).start()
        yield server.getsockname()[1], arrivals
        server.shutdown(socket.SHUT_RDWR)


@contextmanager
def unreachable(kind: str) -> Iterator[tuple[str, list[tuple[float, str]]]]:
    """A site that drops every connection without an answer (its arrivals counted at its server),
    a port that refuses them, or an https site answering plain HTTP to the TLS handshake (each
    arrival its first byte): its base URL, and the arrivals so far."""
    if kind == "refused":
        with closed_port() as port:
            yield f"http://127.0.0.1:{port}", []
        return
    if kind == "no TLS":
        with plain_http_server() as (port, arrivals):
            yield f"https://127.0.0.1:{port}", arrivals
        return
    with served_hosts(1, 1) as web:
        address = host_address(0)
        web.faults[address] = "drop"
        yield f"http://{address}:{web.port}", web.arrivals[address]


def _navigations(arrivals: list[tuple[float, str]]) -> int:
    """The navigations among a host's arrivals: Chromium sends a GET again at once when its
    connection closes without an answer, so one navigation arrives as one or two requests."""
    times = sorted(at for at, _ in arrivals)
    return sum(1 for before, at in zip([-1.0, *times], times, strict=False) if at - before > 0.1)


@pytest.mark.integration
@needs_chromium
@pytest.mark.parametrize("kind", ["dropped", "refused", "no TLS"])
def test_a_host_the_browser_cannot_reach_is_blocked_then_marked_unreachable(
    crawl: Crawl, redis_client: redis.Redis, kind: str
) -> None:
    """Each failed navigation is a step of the host's block for the fleet, and after
    HOST_MAX_EXCEPTIONS in a row the host is unreachable: its search is a dead letter then,
    not retried RETRY_TIMES times."""
    redis_client.lpush("maps:start_urls", "shop near 00501")
    with unreachable(kind) as (base, arrivals):
        started = time.time()
        result = crawl("maps", settings={"MAPS_BASE_URL": base, **QUICK_BREAKER}, timeout=90)
        assert result.returncode == 0, result.stderr[-3000:]
        if kind == "dropped":
            assert _navigations(arrivals) == QUICK_BREAKER["HOST_MAX_EXCEPTIONS"], arrivals
        if kind == "no TLS":
            # Each a TLS handshake (a record starting 0x16) answered in HTTP; Chromium opens
            # several connections per navigation, a few ms to 0.15 s apart, so its navigations
            # are counted by the breaker's steps below.
            assert len(arrivals) >= QUICK_BREAKER["HOST_MAX_EXCEPTIONS"], arrivals
            assert {first for _, first in arrivals} == {"16"}, arrivals
    site = base.split("://", 1)[1]
    (letter,) = _dead(redis_client, "maps")
    assert letter["failure"]["reason"] == UNREACHABLE
    assert letter["request"]["url"].startswith(base + "/maps/search/")
    level, _incident, until = cast(bytes, redis_client.hget(breaker_key("maps"), site)).split()
    assert int(level) == QUICK_BREAKER["HOST_MAX_EXCEPTIONS"]  # one step per failed navigation
    assert float(until) > started
    mark = redis_client.hget(bans_key("maps"), f"{site}|{mark_scope(UNREACHABLE)}")
    assert mark is not None
    assert float(mark) > time.time()
    stats = _log_stats(result.stderr)
    assert stats["breaker/blocks"] == QUICK_BREAKER["HOST_MAX_EXCEPTIONS"]
    assert stats[f"breaker/dead/{UNREACHABLE}"] == 1
    assert stats["maps/pages/open_at_close"] == 0


async def _navigation_errors(urls: dict[str, str], timeout_ms: float) -> dict[str, Exception]:
    """What each navigation's failure is, in Scrapy's words, from a real Chromium."""
    found: dict[str, Exception] = {}
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        page = await browser.new_page()
        for name, url in urls.items():
            try:
                await page.goto(url, timeout=timeout_ms)
            except PlaywrightError as error:
                found[name] = navigation_failure(error)
        await browser.close()
    return found


@needs_chromium
def test_what_a_failed_navigation_is_in_scrapy_s_words() -> None:
    with ExitStack() as stack:
        refused = stack.enter_context(closed_port())
        web = stack.enter_context(served_hosts(1, 1))
        web.faults[host_address(0)] = "drop"
        silent = stack.enter_context(socket.socket())
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # accepts, never answers
        plain, _ = stack.enter_context(plain_http_server())
        urls = {
            "refused": f"http://127.0.0.1:{refused}/",
            "dropped": f"http://{host_address(0)}:{web.port}/",
            "silent": f"http://127.0.0.1:{silent.getsockname()[1]}/",
            "no address": "http://no-such-host.invalid/",
            "no TLS": f"https://127.0.0.1:{plain}/",
        }
        found = asyncio.run(_navigation_errors(urls, timeout_ms=1000))
    kinds = {name: type(error) for name, error in found.items()}
    assert kinds == {
        "refused": DownloadConnectionRefusedError,
        "dropped": DownloadFailedError,
        "silent": DownloadTimeoutError,
        "no address": CannotResolveHostError,
        "no TLS": DownloadFailedError,  # as Scrapy's OpenSSL "wrong version number"
    }
    assert "net::ERR_CONNECTION_REFUSED at http://127.0.0.1:" in str(found["refused"])
    assert "net::ERR_SSL_PROTOCOL_ERROR at https://127.0.0.1:" in str(found["no TLS"])


@given(st.text(max_size=200), st.sampled_from([*HOST_FAILURES, "ERR_ABORTED", "ERR_CERT_DATE"]))
def test_a_browser_error_is_a_host_s_failure_only_when_chromium_names_one(
    text: str, code: str
) -> None:
    error = PlaywrightError(f"Page.goto: {text}")
    assert navigation_failure(error) is error or "net::ERR_" in text
    named = PlaywrightError(f"Page.goto: net::{code} at http://a.example/\nCall log: {text}")
    failure = navigation_failure(named)
    if code in HOST_FAILURES:
        assert isinstance(failure, HOST_FAILURES[code])
        assert f"Page.goto: net::{code} at http://a.example/" in str(failure)
    else:
        assert failure is named


def test_a_proxy_s_refused_tunnel_is_scrapy_s_tunnel_error_its_answer_unheard() -> None:
    """Chromium's words for a proxy answering CONNECT with anything but 200 or 407 (seen from a
    real Chromium in test_browser_proxies.py), as Scrapy's TunnelError of a plain download."""
    error = PlaywrightError("Page.goto: net::ERR_TUNNEL_CONNECTION_FAILED at https://a.example/")
    failure = navigation_failure(error)
    assert isinstance(failure, TunnelError)
    assert isinstance(failure, UnheardTunnelError)
    assert str(failure) == "Page.goto: net::ERR_TUNNEL_CONNECTION_FAILED at https://a.example/"


# --- a page too large -----------------------------------------------------------------------

HOSTILE_PAGE_SPIDER = """
import scrapy


class HostilePage(scrapy.Spider):
    name = "hostile_page"
    custom_settings = {"DOWNLOAD_HANDLERS": {"http": "crawler.browser.BrowserHandler"}}

    async def start(self):
        for path in ("/hostile/huge/a", "/hostile/endless/b", "/@quote.user0"):
            yield scrapy.Request(self.base + path, meta={"playwright": True})

    def parse(self, response):
        yield {"url": response.url, "size": len(response.body)}
"""

MAXSIZE = 2 * 1024 * 1024


@pytest.mark.integration
@needs_chromium
def test_a_browser_page_over_download_maxsize_is_a_dead_letter_and_the_crawl_goes_on(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox, tmp_path: Any
) -> None:
    """A body of 200 MiB and an endless one: each page is closed once DOWNLOAD_MAXSIZE of it
    arrived, its request a dead letter saying so; the page beside them is scraped."""
    spider = tmp_path / "hostile_page.py"
    spider.write_text(HOSTILE_PAGE_SPIDER)
    started = time.monotonic()
    result = scrapy(
        "runspider",
        str(spider),
        "-a",
        f"base={sandbox.url}",
        "-s",
        "MAX_IDLE_TIME_BEFORE_CLOSE=1",
        "-s",
        f"DOWNLOAD_MAXSIZE={MAXSIZE}",
        "-s",
        "RETRY_TIMES=0",
        env=crawl.env(),
        timeout=90,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert time.monotonic() - started < 60  # not a navigation timeout's wait
    letters = {
        letter["request"]["url"]: letter["failure"]
        for letter in _dead(redis_client, "hostile_page")
    }
    assert set(letters) == {sandbox.url + "/hostile/huge/a", sandbox.url + "/hostile/endless/b"}
    for failure in letters.values():
        assert failure["reason"] == "download_error:DownloadCancelledError"
        assert f"larger than download max size ({MAXSIZE})" in failure["error"]
    stats = _log_stats(result.stderr)
    assert stats["item_scraped_count"] == 1
    assert stats["playwright/page_count"] == 3
    served = sandbox.admin("stats")["by_path"]
    assert served["/hostile/huge/a"] == served["/hostile/endless/b"] == 1
