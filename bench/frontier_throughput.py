"""Crawl throughput on a static link graph, per scheduler, side by side in one invocation.

A local server serves N pages ``/p/<i>`` (default 20,000), each a small HTML page with 8-10
links: to ``/p/<i+1>`` (so every page is reachable from ``/p/0``) and to seeded pseudo-random
pages (so most extracted links are duplicates and the duplicate filter works hard). The
``graph`` spider of this module starts at ``/p/0`` and follows every link with
``response.follow``; storage is off. The same crawl runs as a real ``scrapy crawl`` process,
against the same server and each time a fresh private Redis, with:

  (a) Scrapy's in-memory scheduler and duplicate filter,
  (b) stock scrapy-redis (priority queue, pickle, its set-of-SHA1 duplicate filter),
  (c) this project's scheduler (FrontierScheduler, Bloom duplicate filter), project defaults.

The project's spider and downloader middlewares stay on for all three (the lease middlewares do
nothing without our scheduler). Printed per variant: pages/s (pages crawled / time from spider
open to the last response), ratios, Redis round trips and commands per page (counted in the
crawl process by wrapping redis-py's connection, and on the server with INFO's
total_commands_processed, which includes commands run inside Lua scripts), CPU per page of the
crawl process, Redis and the page server, and the duplicate filter's size (MEMORY USAGE of its
keys) per URL. Targets: ours >= 0.9x Scrapy's memory scheduler and >= 1.25x stock scrapy-redis.

Usage: python bench/frontier_throughput.py [--pages 20000] [--concurrency 32] [--repeat 1]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
from scrapy import Request, Spider, signals  # noqa: E402
from scrapy.http import Response, TextResponse  # noqa: E402

from crawler.frontier.dupefilter import DupefilterConfig  # noqa: E402
from crawler.frontier.queue import Frontier  # noqa: E402
from crawler.keys import FrontierKeys, tagged  # noqa: E402
from devtools.services import (  # noqa: E402
    ServerProcess,
    free_port,
    start_redis,
    start_server,
)

SPIDER_NAME = "graph"
MODULE = "bench.frontier_throughput"
CRAWL_TIMEOUT = 900.0
TARGET_VS_MEMORY = 0.9
TARGET_VS_STOCK = 1.25

MEMORY, STOCK, OURS = "scrapy memory", "scrapy-redis stock", "crawler (ours)"
VARIANTS: dict[str, dict[str, str]] = {
    MEMORY: {
        "SCHEDULER": "scrapy.core.scheduler.Scheduler",
        "DUPEFILTER_CLASS": "scrapy.dupefilters.RFPDupeFilter",
    },
    STOCK: {
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
        "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.PriorityQueue",
        "SCHEDULER_SERIALIZER": "scrapy_redis.picklecompat",
        "REDIS_PARAMS": "{}",
        # Keep the queue and duplicate filter at close (no DEL), so the filter can be measured.
        "SCHEDULER_PERSIST": "True",
    },
    OURS: {},
}
# Redis keys holding each variant's duplicate filter (glob patterns, spider name "graph").
DUPEFILTER_KEYS = {
    MEMORY: [],
    STOCK: [f"{SPIDER_NAME}:dupefilter"],
    OURS: [tagged(SPIDER_NAME, "dupefilter"), tagged(SPIDER_NAME, "dupefilter:*")],
}


# --- the link graph and its server ---------------------------------------------------------------


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
    command = [sys.executable, str(Path(__file__).resolve()), "--serve", "--port", str(port)]
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


# --- inside the crawl process: the spider and the probe ----------------------------------------


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


_REDIS_COUNTS: Counter[str] = Counter()
_next_kind = ["?"]


def install_redis_counters() -> None:
    """Count round trips (socket writes a reply is waited for) and commands, per kind."""
    from redis.connection import AbstractConnection

    if getattr(AbstractConnection, "_bench_counted", False):
        return
    send_packed: Callable[..., Any] = AbstractConnection.send_packed_command
    send_command: Callable[..., Any] = AbstractConnection.send_command
    pack_commands: Callable[..., Any] = AbstractConnection.pack_commands
    counts = _REDIS_COUNTS

    def counted_send_packed(self: Any, command: Any, check_health: bool = True) -> Any:
        counts["round_trips"] += 1
        counts["rt:" + _next_kind[0]] += 1
        _next_kind[0] = "?"
        return send_packed(self, command, check_health)

    def counted_send_command(self: Any, *args: Any, **kwargs: Any) -> Any:
        name = str(args[0]).upper() if args else "?"
        counts["commands"] += 1
        counts["cmd:" + name] += 1
        _next_kind[0] = name
        return send_command(self, *args, **kwargs)

    def counted_pack_commands(self: Any, commands: Any) -> Any:
        commands = list(commands)
        names = [str(command[0]).upper() for command in commands]
        counts["commands"] += len(names)
        counts.update("cmd:" + name for name in names)
        _next_kind[0] = "pipeline[" + ",".join(sorted(set(names))) + "]"
        return pack_commands(self, commands)

    setattr(AbstractConnection, "send_packed_command", counted_send_packed)  # noqa: B010
    setattr(AbstractConnection, "send_command", counted_send_command)  # noqa: B010
    setattr(AbstractConnection, "pack_commands", counted_pack_commands)  # noqa: B010
    setattr(AbstractConnection, "_bench_counted", True)  # noqa: B010


class BenchProbe:
    """Extension: times the crawl, counts Redis traffic, writes it all to BENCH_PROBE_FILE."""

    def __init__(self, crawler: Any) -> None:
        install_redis_counters()
        self.crawler = crawler
        self.opened = 0.0
        self.first = 0.0
        self.last = 0.0
        self.responses = 0
        self.cpu_opened = 0.0
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.response_received, signal=signals.response_received)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Any) -> BenchProbe:
        return cls(crawler)

    def spider_opened(self) -> None:
        self.opened = time.perf_counter()
        self.cpu_opened = time.process_time()

    def response_received(self) -> None:
        now = time.perf_counter()
        if not self.responses:
            self.first = now
        self.last = now
        self.responses += 1

    def spider_closed(self, spider: Spider, reason: str) -> None:
        stats = {
            key: value
            for key, value in self.crawler.stats.get_stats().items()
            if isinstance(value, int | float) and not isinstance(value, bool)
        }
        scheduler = self.crawler.engine.scheduler if self.crawler.engine else None
        result = {
            "reason": reason,
            "stats": stats,
            "pages_parsed": getattr(spider, "pages_parsed", 0),
            "responses": self.responses,
            "crawl_seconds": self.last - self.opened,
            "first_to_last_seconds": self.last - self.first,
            "cpu_seconds": time.process_time() - self.cpu_opened,
            "redis": dict(_REDIS_COUNTS),
            "process_dupefilter_bytes": _memory_dupefilter_bytes(scheduler),
        }
        Path(self.crawler.settings.get("BENCH_PROBE_FILE")).write_text(json.dumps(result))


def _memory_dupefilter_bytes(scheduler: Any) -> int:
    """Size of Scrapy's in-memory fingerprint set (the set and its bytes objects)."""
    fingerprints = getattr(getattr(scheduler, "df", None), "_fingerprints", None)
    if not isinstance(fingerprints, set):
        return 0
    return sys.getsizeof(fingerprints) + sum(sys.getsizeof(fp) for fp in fingerprints)


# --- running the variants ------------------------------------------------------------------------


@dataclass
class Result:
    variant: str
    pages: int
    crawl_seconds: float
    elapsed_seconds: float
    round_trips: int
    client_commands: int
    server_commands: int
    crawler_cpu: float
    redis_cpu: float
    server_cpu: float
    dupefilter_bytes: int
    dupefilter_in_process: bool
    redis_counts: dict[str, int]
    leftovers: dict[str, int]

    @property
    def rate(self) -> float:
        return self.pages / self.crawl_seconds


def run_variant(
    variant: str,
    graph_url: str,
    graph_pids: list[int],
    args: argparse.Namespace,
    run_number: int,
) -> Result:
    settings = VARIANTS[variant]
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        redis_server = start_redis(port, Path(tmp) / "redis")
        try:
            client = redis.Redis(port=port)
            cpu_before = _redis_cpu(client)
            commands_before = _redis_commands(client)
            server_cpu_before = sum(cpu_seconds(pid) for pid in graph_pids)
            probe_file = Path(tmp) / "probe.json"
            overrides = {
                "SPIDER_MODULES": MODULE,
                "BENCH_GRAPH_URL": graph_url,
                "BENCH_PROBE_FILE": str(probe_file),
                "EXTENSIONS": json.dumps({f"{MODULE}.BenchProbe": 1000}),
                "ITEM_PIPELINES": "{}",
                "LOG_LEVEL": "WARNING",
                "CONCURRENT_REQUESTS": str(args.concurrency),
                "CONCURRENT_REQUESTS_PER_DOMAIN": str(args.concurrency),
                # One local domain: a per-domain politeness limit would measure the limit.
                "POLITENESS_RATE": "0",
                **settings,
            }
            if variant == OURS:
                overrides.update(args.ours_settings)
            command = [sys.executable]
            slug = f"{variant.split()[0].strip('()').replace('-', '_')}-{run_number}"
            if args.py_spy:
                py_spy = Path(sys.executable).with_name("py-spy")
                samples = Path(args.py_spy) / f"{slug}.txt"
                command = [str(py_spy), "record", "--format", "raw", "--rate", "250"]
                command += ["--nonblocking", "--idle", "-o", str(samples), "--", sys.executable]
            elif args.profile:
                command += ["-m", "cProfile", "-o", str(Path(args.profile) / f"{slug}.prof")]
            command += ["-m", "scrapy", "crawl", SPIDER_NAME]
            for name, value in overrides.items():
                command += ["-s", f"{name}={value}"]
            env = {**os.environ, "REDIS_URL": f"redis://127.0.0.1:{port}/0", "REDIS_CLUSTER": ""}
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
            completed = subprocess.run(
                command,
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=CRAWL_TIMEOUT,
                check=False,
            )
            if completed.returncode != 0 or not probe_file.exists():
                sys.stderr.write(completed.stdout[-5000:])
                raise SystemExit(f"{variant}: scrapy crawl exited with {completed.returncode}")
            if args.verbose and completed.stdout.strip():
                print(f"--- {variant} output ---\n{completed.stdout.strip()[-3000:]}")
            server_cpu = sum(cpu_seconds(pid) for pid in graph_pids) - server_cpu_before
            server_commands = _redis_commands(client) - commands_before - 1
            redis_cpu = _redis_cpu(client) - cpu_before
            probe = json.loads(probe_file.read_text())
            dupefilter_bytes = _redis_bytes(client, DUPEFILTER_KEYS[variant])
            leftovers = _leftovers(client, variant)
            client.close()
        finally:
            redis_server.stop()
    in_process = variant == MEMORY
    pages = int(probe["stats"].get("response_received_count", 0))
    parsed = int(probe["pages_parsed"])
    if pages != args.pages or parsed != args.pages:
        raise SystemExit(
            f"{variant}: crawled {pages} pages and parsed {parsed}, expected {args.pages} "
            f"(finish reason {probe['reason']!r})"
        )
    return Result(
        variant=variant,
        pages=pages,
        crawl_seconds=float(probe["crawl_seconds"]),
        elapsed_seconds=float(probe["stats"].get("elapsed_time_seconds", 0.0)),
        round_trips=int(probe["redis"].get("round_trips", 0)),
        client_commands=int(probe["redis"].get("commands", 0)),
        server_commands=server_commands,
        crawler_cpu=float(probe["cpu_seconds"]),
        redis_cpu=redis_cpu,
        server_cpu=server_cpu,
        dupefilter_bytes=int(probe["process_dupefilter_bytes"]) if in_process else dupefilter_bytes,
        dupefilter_in_process=in_process,
        redis_counts={k: int(v) for k, v in probe["redis"].items()},
        leftovers=leftovers,
    )


def _redis_cpu(client: redis.Redis) -> float:
    info: Any = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _redis_commands(client: redis.Redis) -> int:
    info: Any = client.info("stats")
    return int(info["total_commands_processed"])


def _redis_bytes(client: redis.Redis, patterns: list[str]) -> int:
    total = 0
    for pattern in patterns:
        for key in client.scan_iter(match=pattern.replace("{", "\\{").replace("}", "\\}")):
            total += int(client.memory_usage(key, samples=0) or 0)
    return total


def _leftovers(client: redis.Redis, variant: str) -> dict[str, int]:
    """What a finished crawl should not leave behind (requests queued, leases held)."""
    if variant == STOCK:
        return {"queue": int(client.zcard(f"{SPIDER_NAME}:requests"))}
    if variant == OURS:
        sizes = Frontier(client, FrontierKeys(SPIDER_NAME, ""), DupefilterConfig()).sizes()
        return {
            "queue": sizes["queue"],
            "leases": sizes["leased"],
            "delayed": sizes["delayed"],
            "dead": sizes["dead"],
        }
    return {}


# --- report --------------------------------------------------------------------------------------


def print_report(
    best: dict[str, Result], args: argparse.Namespace, server_rate: float, server_load: float
) -> None:
    memory, stock, ours = best[MEMORY], best[STOCK], best[OURS]
    links = sum(len(page_links(i, args.pages, args.seed)) for i in range(args.pages))
    print(
        f"\nlink graph: {args.pages} pages, {links} links ({links / args.pages:.1f}/page), "
        f"CONCURRENT_REQUESTS={args.concurrency} (per domain too), storage off, "
        f"best of {args.repeat} run(s) by pages/s"
    )
    if args.ours_settings:
        print(f"our variant also runs with {args.ours_settings}")
    fastest = max(best.values(), key=lambda result: result.rate)
    print(
        f"page server alone: {server_rate:,.0f} req/s at {100 * server_load:.0f}% of a core "
        f"({args.concurrency} keep-alive connections,\n  one request in flight each, Python "
        f"client); during the fastest crawl it used "
        f"{100 * fastest.server_cpu / fastest.crawl_seconds:.1f}% of a core"
    )
    print(
        "crawl s: spider open to last response (start-up and close excluded); "
        "elapsed s: Scrapy's elapsed_time_seconds\n"
    )
    header = (
        f"{'variant':<20} {'pages':>6} {'crawl s':>8} {'elapsed s':>9} {'pages/s':>8} "
        f"{'x memory':>8} {'x stock':>8}"
    )
    print(header)
    print("-" * len(header))
    for result in (memory, stock, ours):
        print(
            f"{result.variant:<20} {result.pages:>6} {result.crawl_seconds:>8.2f} "
            f"{result.elapsed_seconds:>9.2f} {result.rate:>8.1f} "
            f"{result.rate / memory.rate:>8.2f} {result.rate / stock.rate:>8.2f}"
        )
    print(
        "\nper page: Redis round trips and commands sent by the crawl process; commands the "
        "Redis server ran\n(including those inside Lua scripts); CPU ms of the crawl process, "
        "Redis and the page server.\nDuplicate filter: MEMORY USAGE of its Redis keys "
        "(Scrapy's: its in-process set), per crawled URL.\n"
    )
    header = (
        f"{'variant':<20} {'RT/page':>8} {'cmd/page':>8} {'srv cmd':>8} {'crawl CPU':>9} "
        f"{'Redis CPU':>9} {'srv CPU':>8} {'df bytes':>10} {'B/URL':>7}"
    )
    print(header)
    print("-" * len(header))
    for result in (memory, stock, ours):
        pages = result.pages
        print(
            f"{result.variant:<20} {result.round_trips / pages:>8.2f} "
            f"{result.client_commands / pages:>8.2f} {result.server_commands / pages:>8.2f} "
            f"{1000 * result.crawler_cpu / pages:>9.3f} {1000 * result.redis_cpu / pages:>9.3f} "
            f"{1000 * result.server_cpu / pages:>8.3f} "
            f"{result.dupefilter_bytes:>10,} {result.dupefilter_bytes / pages:>7.1f}"
            + ("*" if result.dupefilter_in_process else "")
        )
    print("* in the crawl process, not in Redis")
    from crawler import settings as project

    mode = args.ours_settings.get("DUPEFILTER_MODE", project.DUPEFILTER_MODE)
    capacity = int(args.ours_settings.get("DUPEFILTER_CAPACITY", project.DUPEFILTER_CAPACITY))
    if mode == "bloom" and capacity > args.pages:
        print(
            f"ours: the Bloom filter is allocated up front for DUPEFILTER_CAPACITY "
            f"({capacity:,} URLs), so at {args.pages:,} URLs\n  it is mostly empty: "
            f"{ours.dupefilter_bytes / capacity:.1f} bytes per URL once filled to capacity."
        )
    for result in (stock, ours):
        if any(result.leftovers.values()):
            print(f"warning: {result.variant} left {result.leftovers} in Redis")
    if args.verbose:
        for result in (stock, ours):
            kinds = {k[3:]: v for k, v in result.redis_counts.items() if k.startswith("rt:")}
            top = sorted(kinds.items(), key=lambda item: -item[1])[:8]
            print(f"{result.variant} round trips by kind: {top}")

    vs_memory, vs_stock = ours.rate / memory.rate, ours.rate / stock.rate
    print()
    missed = 0
    for label, ratio, target in (
        ("ours / scrapy memory", vs_memory, TARGET_VS_MEMORY),
        ("ours / scrapy-redis stock", vs_stock, TARGET_VS_STOCK),
    ):
        verdict = "PASS" if ratio >= target else "FAIL"
        missed += verdict == "FAIL"
        print(f"target {label:<26} {ratio:5.2f}x  (>= {target:.2f}x)  {verdict}")
    if missed:
        print(f"{missed} target(s) missed; exit status stays 0 (this is a measurement).")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pages", type=int, default=20_000, help="pages in the graph")
    parser.add_argument("--concurrency", type=int, default=32, help="CONCURRENT_REQUESTS")
    parser.add_argument("--repeat", type=int, default=1, help="runs per variant; best is kept")
    parser.add_argument("--seed", type=int, default=7, help="seed of the link graph")
    parser.add_argument(
        "--server-processes", type=int, default=1, help="page server processes (SO_REUSEPORT)"
    )
    parser.add_argument(
        "--variants",
        default="memory,stock,ours",
        help="comma-separated subset of memory,stock,ours (the report needs all three)",
    )
    parser.add_argument(
        "--set",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help="extra -s setting for our variant only (repeatable), e.g. FRONTIER_BATCH_SIZE=64",
    )
    parser.add_argument(
        "--profile", metavar="DIR", help="run each crawl under cProfile, writing DIR/*.prof"
    )
    parser.add_argument(
        "--py-spy",
        metavar="DIR",
        help="sample each crawl with py-spy (next to this Python), collapsed stacks in DIR/*.txt",
    )
    parser.add_argument("--verbose", action="store_true", help="crawl output, round trip kinds")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.port, args.pages, args.seed)
        return 0
    if args.pages < 2 or args.concurrency < 1 or args.repeat < 1:
        parser.error("--pages must be at least 2, --concurrency and --repeat at least 1")
    if any("=" not in item for item in args.set):
        parser.error("--set takes NAME=VALUE")
    args.ours_settings = dict(item.split("=", 1) for item in args.set)
    # Stopped with SIGTERM: unwind, so the crawl, the page server and Redis are stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    names = {"memory": MEMORY, "stock": STOCK, "ours": OURS}
    if not set(map(str.strip, args.variants.split(","))) <= set(names):
        parser.error("--variants takes a comma-separated subset of memory,stock,ours")
    chosen = [names[name.strip()] for name in args.variants.split(",")]
    if args.py_spy and not Path(sys.executable).with_name("py-spy").exists():
        parser.error(f"--py-spy needs py-spy next to {sys.executable} (pip install py-spy)")
    for directory in (args.profile, args.py_spy):
        if directory:
            Path(directory).mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    servers, graph_url = start_graph_server(args.pages, args.seed, args.server_processes)
    results: dict[str, list[Result]] = {name: [] for name in chosen}
    try:
        sizes = [len(render_page(i, args.pages, args.seed)) for i in range(args.pages)]
        pids = [server.process.pid for server in servers]
        cpu_before, clock = sum(map(cpu_seconds, pids)), time.perf_counter()
        server_rate = measure_server(graph_url, sizes, args.concurrency, 2.0)
        server_load = (sum(map(cpu_seconds, pids)) - cpu_before) / (time.perf_counter() - clock)
        print(
            f"page server at {graph_url}: {server_rate:,.0f} req/s alone, "
            f"using {100 * server_load:.0f}% of a core",
            flush=True,
        )
        for run in range(1, args.repeat + 1):
            for variant in chosen:
                result = run_variant(variant, graph_url, pids, args, run)
                results[variant].append(result)
                print(
                    f"run {run} {variant:<20} {result.rate:8.1f} pages/s "
                    f"({result.pages} pages in {result.crawl_seconds:.2f}s; per page: "
                    f"{result.round_trips / result.pages:.2f} round trips, CPU ms "
                    f"{1000 * result.crawler_cpu / result.pages:.3f} crawl "
                    f"{1000 * result.redis_cpu / result.pages:.3f} Redis)",
                    flush=True,
                )
    finally:
        for server in servers:
            server.stop()
    best = {name: max(runs, key=lambda result: result.rate) for name, runs in results.items()}
    if len(best) == len(VARIANTS):
        print_report(best, args, server_rate, server_load)
    print(f"\nbenchmark wall time {time.perf_counter() - started:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
