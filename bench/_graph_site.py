"""The throughput benchmark's site: a static link graph, its HTTP server, a load client that
measures the server alone, and the spider that crawls the graph.

``/p/<i>`` (``i`` below the page count) is a small HTML page with 8-10 links: to ``/p/<i+1>``
(so every page is reachable from ``/p/0``) and to seeded pseudo-random pages (so most extracted
links are duplicates). The server answers from pages rendered up front, keep-alive, on
SO_REUSEPORT so several processes can share a port. Run as a script it serves until terminated:
``python bench/_graph_site.py --port P --pages N --seed S``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import random
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from scrapy import Request, Spider  # noqa: E402
from scrapy.http import Response, TextResponse  # noqa: E402

from devtools.services import ServerProcess, free_port, start_server  # noqa: E402

SPIDER_NAME = "graph"
# Where the crawl process finds GraphSpider (SPIDER_MODULES).
MODULE = "bench._graph_site"


def page_links(index: int, pages: int, seed: int) -> list[int]:
    """Targets of page ``index``: the next page, then 7-9 seeded pseudo-random pages."""
    rng = random.Random(seed * 1_000_003 + index)
    links = [(index + 1) % pages]
    links += [rng.randrange(pages) for _ in range(rng.randint(7, 9))]
    return links


def render_page(index: int, pages: int, seed: int) -> bytes:
    """The whole HTTP/1.1 response for ``/p/<index>``. The body holds no CR LF."""
    items = "".join(
        f'<li><a href="/p/{target}">page {target}</a></li>'
        for target in page_links(index, pages, seed)
    )
    body = (
        f"<!doctype html><html><head><title>Page {index}</title></head>\n"
        f"<body><h1>Page {index}</h1><ul>{items}</ul></body></html>\n"
    ).encode()
    return http_response(b"200 OK", body)


def http_response(status: bytes, body: bytes) -> bytes:
    head = (
        b"HTTP/1.1 " + status + b"\r\n"
        b"Content-Type: text/html; charset=utf-8\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n"
        b"Connection: keep-alive\r\n\r\n"
    )
    return head + body


NOT_FOUND = http_response(b"404 Not Found", b"not found\n")


class PageProtocol(asyncio.Protocol):
    """A minimal HTTP/1.1 server connection: GET only, keep-alive, pipelining, no bodies."""

    def __init__(self, responses: dict[bytes, bytes]) -> None:
        self.responses = responses
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def key(self, head: bytes, path: bytes) -> bytes:
        """What a request is looked up by among the responses: its path."""
        return path

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        buffer = self.buffer + data if self.buffer else data
        out: list[bytes] = []
        close = False
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                break
            head, buffer = buffer[:end], buffer[end + 4 :]
            line_end = head.find(b"\r\n")
            parts = (head if line_end < 0 else head[:line_end]).split(b" ")
            path = parts[1] if len(parts) > 2 else b""
            out.append(self.responses.get(self.key(head, path), NOT_FOUND))
            if b"close" in head and b"connection: close" in head.lower():
                close = True
                break
        self.buffer = buffer
        if out:
            self.transport.write(b"".join(out) if len(out) > 1 else out[0])
        if close:
            self.transport.close()


def serve(port: int, pages: int, seed: int) -> None:
    """Serve the link graph on 127.0.0.1:port until terminated (SO_REUSEPORT: run several)."""
    responses = {f"/p/{i}".encode(): render_page(i, pages, seed) for i in range(pages)}
    serve_forever(port, lambda: PageProtocol(responses))


def serve_forever(port: int, protocol: Callable[[], asyncio.Protocol]) -> None:
    """Serve ``protocol`` on 127.0.0.1:port until terminated (SO_REUSEPORT: run several)."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            protocol, "127.0.0.1", port, reuse_port=True, backlog=1024
        )
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def start_graph_server(pages: int, seed: int, processes: int) -> tuple[list[ServerProcess], str]:
    port = free_port()
    command = [sys.executable, str(Path(__file__).resolve()), "--port", str(port)]
    command += ["--pages", str(pages), "--seed", str(seed)]
    servers = [start_server("graph-server", command, port) for _ in range(processes)]
    if processes > 1:
        time.sleep(1.0)  # the first one listening does not mean all are
    return servers, f"http://127.0.0.1:{port}"


class _LoadClient(asyncio.Protocol):
    """Keeps one GET in flight on a keep-alive connection, counting complete responses."""

    def __init__(self, sizes: list[int], deadline: float, done: asyncio.Future[int]) -> None:
        self.sizes = sizes
        self.deadline = deadline
        self.done = done
        self.rng = random.Random(len(sizes))
        self.remaining = 0
        self.count = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self._send()

    def _send(self) -> None:
        assert self.transport is not None
        index = self.rng.randrange(len(self.sizes))
        self.remaining = self.sizes[index]
        self.transport.write(b"GET /p/%d HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % index)

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.remaining -= len(data)
        if self.remaining > 0:
            return
        self.count += 1
        if time.perf_counter() < self.deadline:
            self._send()
        else:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(self.count)


def measure_server(url: str, sizes: list[int], connections: int, seconds: float) -> float:
    """Requests per second the server answers alone (Python client: a lower bound)."""
    port = int(url.rsplit(":", 1)[1])

    async def main() -> float:
        loop = asyncio.get_running_loop()
        start = time.perf_counter()
        deadline = start + seconds
        futures: list[asyncio.Future[int]] = []
        for _ in range(connections):
            done: asyncio.Future[int] = loop.create_future()
            futures.append(done)
            client = functools.partial(_LoadClient, sizes, deadline, done)
            await loop.create_connection(client, "127.0.0.1", port)
        counts = await asyncio.gather(*futures)
        return sum(counts) / (time.perf_counter() - start)

    return asyncio.run(main())


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc (0.0 where /proc is missing)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class GraphSpider(Spider):
    """Starts at /p/0 of BENCH_GRAPH_URL and follows every link; yields no items."""

    name = SPIDER_NAME
    pages_parsed = 0

    async def start(self) -> AsyncIterator[Any]:
        yield Request(self.settings.get("BENCH_GRAPH_URL") + "/p/0", callback=self.parse)

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Request]:
        assert isinstance(response, TextResponse)
        self.pages_parsed += 1
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)


def main() -> int:
    parser = argparse.ArgumentParser(description="Serve the link graph until terminated.")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--pages", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    args = parser.parse_args()
    serve(args.port, args.pages, args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
