"""The maps spider's browser sends each request as the identity the ban middleware gave it
(crawler/browser/proxies.py): through its PROXY_POOL proxy, counted at the sandbox by the
address each proxy forwards from; a ban through one proxy blocks that proxy, not another, in
Redis's breaker state, and so does a proxy refusing the tunnel to an https host. BIND_ADDRESSES,
which Chromium cannot honour, is refused at start."""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from scrapy import Request

from crawler.bans.breaker import UNREACHABLE, breaker_states
from crawler.browser.proxies import proxied_context, without_proxy_authorization
from devtools.services import free_port
from tests.harness import Crawl, Sandbox, closed_port
from tests.test_maps import PLACES, needs_chromium

USER, PASSWORD = "pool.user", "s3cret:pw"
EXPECTED = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


class ForwardProxy:
    """An HTTP forward proxy on loopback wanting Basic credentials, as a paid pool's does. It
    reaches the target from its own ``source`` address, so the sandbox tells the proxies apart;
    a ``banned`` one answers 429 itself, as a site answers an exit address it has banned."""

    def __init__(self, source: str, banned: bool = False) -> None:
        self.source, self.banned = source, banned
        self.paths: list[str] = []  # of the requests it took, credentials right
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.headers.get("Proxy-Authorization") != EXPECTED:
                    self._answer(407, b"", {"Proxy-Authenticate": 'Basic realm="pool"'})
                    return
                proxy.paths.append(urlsplit(self.path).path)
                if proxy.banned:
                    self._answer(429, b"slow down", {"Content-Type": "text/plain"})
                    return
                status, headers, body = proxy.forward(self.path, dict(self.headers.items()))
                self._answer(status, body, headers)

            def _answer(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def forward(self, url: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        target = urlsplit(url)
        upstream = http.client.HTTPConnection(
            target.hostname or "", target.port, timeout=30, source_address=(self.source, 0)
        )
        sent = {k: v for k, v in headers.items() if not k.lower().startswith("proxy-")}
        path = target.path + (f"?{target.query}" if target.query else "")
        upstream.request("GET", path, None, sent)
        answer = upstream.getresponse()
        body = answer.read()
        upstream.close()
        skipped = ("transfer-encoding", "connection", "content-length")
        kept = {k: v for k, v in answer.getheaders() if k.lower() not in skipped}
        return answer.status, kept, body

    @property
    def url(self) -> str:
        return f"http://{USER}:{PASSWORD.replace(':', '%3A')}@127.0.0.1:{self.port}"

    @property
    def identity(self) -> str:
        return f"proxy:127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def proxies(*specs: tuple[str, bool]) -> Iterator[list[ForwardProxy]]:
    with ExitStack() as stack:
        started = []
        for source, banned in specs:
            proxy = ForwardProxy(source, banned)
            stack.callback(proxy.stop)
            started.append(proxy)
        yield started


def _one_batch_queries(sandbox: Sandbox, count: int) -> dict[str, list[str]]:
    searches = sandbox.admin("maps/searches")
    found = {query: ids for query, ids in searches.items() if 1 < len(ids) <= 4}
    return dict(list(found.items())[:count])


def _crawl_maps(crawl: Crawl, client: redis.Redis, queries: list[str], **settings: Any) -> Any:
    client.lpush("maps:start_urls", *(json.dumps({"query": query}) for query in queries))
    base = {"MAPS_BASE_URL": crawl.sandbox_url, "MAPS_SCROLL_TIMEOUT": 3}
    return crawl("maps", settings={**base, **settings}, timeout=120)


def _clients(sandbox: Sandbox) -> dict[str, dict[str, int]]:
    """The sandbox's arrivals by the address they came from, by path."""
    return dict(sandbox.admin("stats")["by_client_path"])


@pytest.mark.integration
@needs_chromium
def test_browser_pages_come_through_the_pool_s_proxies(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox
) -> None:
    """Every request of the crawl, the browser's searches and their feed's included, reaches
    the sandbox from a proxy's address, none from the worker's own."""
    queries = _one_batch_queries(sandbox, 2)
    with proxies(("127.0.0.2", False), ("127.0.0.3", False)) as pool:
        pool_setting = ",".join(proxy.url for proxy in pool)
        result = _crawl_maps(crawl, redis_client, list(queries), PROXY_POOL=pool_setting)
    assert result.returncode == 0, result.stderr[-3000:]
    stored = {doc["place_id"] for doc in crawl.mongo.db.places.find({}, {"place_id": 1})}
    assert stored == {place_id for ids in queries.values() for place_id in ids}
    clients = _clients(sandbox)
    assert set(clients) <= {"127.0.0.2", "127.0.0.3"}, clients
    searched = {ip for ip, paths in clients.items() for path in paths if "/maps/search/" in path}
    assert searched, clients
    assert any("/maps/api/feed" in path for paths in clients.values() for path in paths)
    assert PASSWORD not in result.stderr


@pytest.mark.integration
@needs_chromium
def test_a_proxy_that_cannot_be_reached_is_blocked_everywhere_and_the_other_fetches(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox
) -> None:
    """A pool proxy nothing listens on: the browser's navigation through it is that proxy's own
    failure, which blocks it on every host (``*|proxy``); the search goes through the other
    proxy and every place is stored, no dead letter."""
    (query,) = _one_batch_queries(sandbox, 1)
    dead = f"http://{USER}:{PASSWORD.replace(':', '%3A')}@127.0.0.1:{free_port()}"
    with proxies(("127.0.0.3", False)) as (good,):
        result = _crawl_maps(crawl, redis_client, [query], PROXY_POOL=f"{dead},{good.url}")
    assert result.returncode == 0, result.stderr[-3000:]
    blocked = {state.host for state in breaker_states(redis_client, "maps")}
    assert f"*|proxy:{dead.rsplit('@', 1)[1]}" in blocked, blocked
    assert set(_clients(sandbox)) == {"127.0.0.3"}
    stored = {doc["place_id"] for doc in crawl.mongo.db.places.find({}, {"place_id": 1})}
    assert stored == {place.place_id for place in PLACES.search(query)}
    assert redis_client.llen("{maps}:dead") == 0


@pytest.mark.integration
@needs_chromium
def test_a_ban_through_one_proxy_blocks_that_proxy_and_the_other_fetches(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox
) -> None:
    """One proxy's exit address is banned (429 without Retry-After, under BAN_POLICY rotate):
    the browser's search through it blocks that proxy on the host in the breaker's state, and
    its retry goes through the other proxy, whose address alone reaches the sandbox."""
    (query,) = _one_batch_queries(sandbox, 1)
    with proxies(("127.0.0.2", True), ("127.0.0.3", False)) as (banned, good):
        pool_setting = ",".join(proxy.url for proxy in (banned, good))
        result = _crawl_maps(
            crawl, redis_client, [query], PROXY_POOL=pool_setting, BAN_POLICY="rotate"
        )
    assert result.returncode == 0, result.stderr[-3000:]
    assert any(path.startswith("/maps/search/") for path in banned.paths), banned.paths
    site = sandbox.url.removeprefix("http://")
    blocked = {state.host for state in breaker_states(redis_client, "maps")}
    assert blocked == {f"{site}|{banned.identity}"}
    assert set(_clients(sandbox)) == {"127.0.0.3"}
    stored = {doc["place_id"] for doc in crawl.mongo.db.places.find({}, {"place_id": 1})}
    assert stored == {place.place_id for place in PLACES.search(query)}


class RefusingProxy:
    """A proxy on loopback answering every CONNECT with 403 (or ``status``), as a proxy that
    will not tunnel to a host does; the request lines it took are kept."""

    def __init__(self, status: bytes = b"403 Forbidden") -> None:
        self.lines: list[str] = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        answer = b"HTTP/1.1 " + status + b"\r\nContent-Length: 0\r\n\r\n"
        threading.Thread(target=self._serve, args=(answer,), daemon=True).start()

    def _serve(self, answer: bytes) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return  # closed
            with connection:
                head = b""
                while b"\r\n\r\n" not in head and (chunk := connection.recv(4096)):
                    head += chunk
                self.lines.append(head.split(b"\r\n", 1)[0].decode("latin-1"))
                connection.sendall(answer)

    @property
    def identity(self) -> str:
        return f"proxy:127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()


@pytest.mark.integration
@needs_chromium
def test_a_proxy_refusing_the_tunnel_is_blocked_on_the_host_as_a_download_through_it(
    crawl: Crawl, redis_client: redis.Redis
) -> None:
    """Two proxies that answer the browser's CONNECT to an https host with 403: each refusal
    (Chromium's ERR_TUNNEL_CONNECTION_FAILED, which hides the proxy's status) is Scrapy's
    TunnelError, blocking that proxy on the host in Redis, not on every host (a 5xx would say
    the host is at fault, and Chromium does not say which it was); once both cool down there,
    the host is blamed until it is marked unreachable, and the search is a dead letter."""
    pool = [RefusingProxy(), RefusingProxy()]
    try:
        with closed_port() as port:
            site = f"127.0.0.1:{port}"
            redis_client.lpush("maps:start_urls", "shop near 00501")
            settings = {
                "MAPS_BASE_URL": f"https://{site}",
                "PROXY_POOL": ",".join(f"http://127.0.0.1:{proxy.port}" for proxy in pool),
                "HOST_BLOCK_START": 0.2,
                "HOST_MAX_EXCEPTIONS": 2,
                "RETRY_TIMES": 10,
                "RETRY_BACKOFF_MAX": 0.3,
            }
            result = crawl("maps", settings=settings, timeout=120)
    finally:
        for proxy in pool:
            proxy.stop()
    assert result.returncode == 0, result.stderr[-3000:]
    for proxy in pool:
        assert proxy.lines, "no CONNECT reached a proxy"
        assert set(proxy.lines) == {f"CONNECT {site} HTTP/1.1"}, proxy.lines
    blocked = {state.host for state in breaker_states(redis_client, "maps")}
    assert {f"{site}|{proxy.identity}" for proxy in pool} <= blocked, blocked
    assert not any(host.startswith("*|") for host in blocked), blocked
    (letter,) = [json.loads(raw) for raw in redis_client.lrange("{maps}:dead", 0, -1)]
    assert letter["failure"]["reason"] == UNREACHABLE
    assert "TunnelError" in letter["failure"]["error"]
    assert "net::ERR_TUNNEL_CONNECTION_FAILED" in letter["failure"]["error"]


def test_bind_addresses_are_refused_for_a_browser_crawl(crawl: Crawl) -> None:
    """Chromium cannot send from a chosen local address: the crawl does not start."""
    result = crawl("maps", settings={"BIND_ADDRESSES": "127.0.0.2,127.0.0.3"}, timeout=60)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Crawl not started: BIND_ADDRESSES = " in result.stderr
    assert "Chromium cannot send from a chosen local address" in result.stderr


def test_a_proxy_s_credentials_are_the_context_s_for_the_download_only() -> None:
    """The browser context holds the proxy's credentials while the request downloads; the
    request keeps none after (a retry stores its meta), and the browser's headers carry no
    Proxy-Authorization (through a tunnel, the host would read it)."""
    request = Request("http://a.example/", meta={"proxy": "http://127.0.0.1:9", "identity": "x"})
    request.headers[b"Proxy-Authorization"] = EXPECTED.encode()
    with proxied_context(request):
        name = request.meta["playwright_context"]
        options = request.meta["playwright_context_kwargs"]
    assert name.startswith("proxy:127.0.0.1:9#")
    server = "http://127.0.0.1:9"
    assert options == {"proxy": {"server": server, "username": USER, "password": PASSWORD}}
    assert "playwright_context" not in request.meta
    assert "playwright_context_kwargs" not in request.meta

    def scrapy_headers(**_: Any) -> dict[str, str]:
        return {"User-Agent": "x", "Proxy-Authorization": EXPECTED}

    headers = asyncio.run(without_proxy_authorization(scrapy_headers)())
    assert headers == {"User-Agent": "x"}
