"""The links spider against vanilla Scrapy and stock scrapy-redis, side by side in one run.

The web: bench/_static_web.py, HOSTS hosts (``siteN.test``, name-based virtual hosts on one
loopback port, resolved to 127.0.0.1 by crawler.links.resolver.MappedResolver in every crawl)
of PAGES pages each (default 400 x 50 = 20,000 pages), served from memory. Every crawl starts
from every home page, follows links on the same host only and obeys robots.txt:

  vanilla Scrapy     a minimal CrawlSpider (this module, run with ``scrapy runspider`` outside
                     the project, so with Scrapy's own settings: in-memory scheduler);
  scrapy-redis       the same spider on stock scrapy-redis (its scheduler, priority queue,
                     pickle and set-of-SHA1 dupefilter, on a private Redis);
  links              ``scrapy crawl links`` with the project's settings (Redis frontier, Bloom
                     dupefilter, leases, fleet robots.txt, sitemaps, MongoDB pipeline).

Unlimited (politeness off, whole crawl): links vs vanilla (target >= 0.9x) and vs scrapy-redis
(target >= 1.3x). Polite (a fixed window of WINDOW seconds each): links at POLITENESS_RATE 1
and 0.5 req/s per host (POLITENESS_BURST 1) vs vanilla with DOWNLOAD_DELAY 1 and 2 and one
request per host slot (target >= 0.9x), and the whole web at 1 req/s (the frontier must be
empty at close). pages/s = HTML pages received / time from the first to
the last, counted in the crawl process (BENCH_PROBE_FILE). Also printed: Redis round trips per
page (counted in the crawl process) and commands per page (INFO, server side, scripts' commands
included), Redis bytes per host (counters, page budgets, robots.txt) and of the dupefilter
per page fetched and per URL at its capacity, after the unlimited links crawl.

Hosts on their own addresses (``--only hosts``, bench/_hosts_bench.py): the web of
sandbox/hosts.py (``--hosts-web 400x25``), each start-entry shape at each of ``--rates``,
links against vanilla Scrapy, pages/s and early requests counted at the server.

Usage: python bench/links.py [--hosts 400] [--pages 50] [--concurrency 64] [--window 30]
       [--crawl-window 0] [--only unlimited|polite|polite-whole|links|hosts] [--py-spy DIR]
       [--hosts-web 400x25] [--rates 0,1,0.5] [-s NAME=VALUE]...
(-s: the links crawls only; --crawl-window S: the unlimited crawls too stop after S seconds.)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from scrapy import signals
from scrapy.http import Response
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule

ROOT = Path(__file__).resolve().parents[1]
TARGET_VS_VANILLA = 0.9
TARGET_VS_STOCK = 1.3
CRAWL_TIMEOUT = 900.0
PROBE = "bench.links.LinksProbe"
STOCK_REDIS = {
    "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
    "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
    "SCHEDULER_QUEUE_CLASS": "scrapy_redis.queue.PriorityQueue",
    "SCHEDULER_PERSIST": True,
}


class VanillaLinks(CrawlSpider):
    """What a Scrapy user writes for the same crawl: every same-host link, robots.txt obeyed."""

    name = "vanilla_links"
    rules = (Rule(LinkExtractor(), callback="parse_page", follow=True, process_links="same_host"),)

    def __init__(self, file: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = Path(file).read_text().split()
        self.hosts = {url.split("/")[2] for url in self.start_urls}

    def same_host(self, links: list[Any]) -> list[Any]:
        return [link for link in links if link.url.split("/")[2] in self.hosts]

    def parse_page(self, response: Response) -> dict[str, Any]:
        return {"url": response.url}


class LinksProbe:
    """Extension: notes the time of each HTML page received (``/`` and ``/p/...``, status 200,
    each URL once: vanilla Scrapy fetches a start URL twice), counts Redis round trips and CPU;
    writes them to BENCH_PROBE_FILE when the spider closes."""

    def __init__(self, crawler: Any) -> None:
        from bench._probes import install_redis_counters

        install_redis_counters()
        self.crawler = crawler
        self.seen: set[str] = set()
        self.times: list[float] = []
        crawler.signals.connect(self.response_received, signal=signals.response_received)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Any) -> LinksProbe:
        return cls(crawler)

    def response_received(self, response: Response) -> None:
        path = "/" + response.url.split("/", 3)[-1] if response.url.count("/") >= 3 else "/"
        if response.status != 200 or not (path == "/" or path.startswith("/p/")):
            return
        if response.url not in self.seen:
            self.seen.add(response.url)
            self.times.append(time.perf_counter())

    def spider_closed(self, reason: str) -> None:
        from bench._probes import _REDIS_COUNTS

        result = {
            "reason": reason,
            "times": self.times,
            "cpu": time.process_time(),
            "redis": dict(_REDIS_COUNTS),
        }
        Path(self.crawler.settings.get("BENCH_PROBE_FILE")).write_text(json.dumps(result))


def settings_args(settings: dict[str, Any]) -> list[str]:
    return [arg for name, value in settings.items() for arg in ("-s", f"{name}={value}")]


class Bench:
    """The servers of one benchmark run and the crawls it runs against them."""

    def __init__(self, args: argparse.Namespace, tmp: Path, web_port: int) -> None:
        import redis

        from devtools.services import free_port, start_mongo, start_redis

        self.args = args
        self.tmp = tmp
        self.redis_port, self.mongo_port = free_port(), free_port()
        self.servers = [
            start_redis(self.redis_port, tmp / "redis"),
            start_mongo(self.mongo_port, tmp / "mongo"),
        ]
        self.redis = redis.Redis(port=self.redis_port)
        self.starts = tmp / "starts.txt"
        self.starts.write_text(
            "".join(f"http://site{i}.test:{web_port}/\n" for i in range(args.hosts))
        )
        self.runs = 0

    def common(self) -> dict[str, Any]:
        return {
            "TWISTED_DNS_RESOLVER": "crawler.links.resolver.MappedResolver",
            "LINKS_RESOLVE": json.dumps({"test": "127.0.0.1"}),
            "CONCURRENT_REQUESTS": self.args.concurrency,
            "LOG_LEVEL": "WARNING",
        }

    def vanilla(
        self, settings: dict[str, Any], label: str, starts: Path | None = None
    ) -> dict[str, Any]:
        starts = starts or self.starts
        command = ["runspider", str(ROOT / "bench" / "links.py"), "-a", f"file={starts}"]
        settings = {
            **self.common(),
            "ROBOTSTXT_OBEY": True,
            "EXTENSIONS": json.dumps({PROBE: 1000}),
            **settings,
        }
        return self.crawl(command, settings, self.tmp, label)

    def stock(self, settings: dict[str, Any]) -> dict[str, Any]:
        url = f"redis://127.0.0.1:{self.redis_port}/0"
        return self.vanilla({**STOCK_REDIS, "REDIS_URL": url, **settings}, "scrapy-redis")

    def links(
        self,
        settings: dict[str, Any],
        label: str,
        starts: Path | None = None,
        entries: list[str] | None = None,
    ) -> dict[str, Any]:
        """``scrapy crawl links`` given ``starts`` (a file, default the web's homes), or, with
        ``entries``, those pushed to links:start_urls instead."""
        from crawler import settings as project

        command = ["crawl", "links"]
        if not entries:
            command += ["-a", f"file={starts or self.starts}"]
        settings = {
            **self.common(),
            "EXTENSIONS": json.dumps({**project.EXTENSIONS, PROBE: 1000}),
            "MAX_IDLE_TIME_BEFORE_CLOSE": 1,
            **settings,
            **dict(item.split("=", 1) for item in self.args.extra),
        }
        return self.crawl(command, settings, ROOT, label, entries)

    def crawl(
        self,
        command: list[str],
        settings: dict[str, Any],
        cwd: Path,
        label: str,
        entries: list[str] | None = None,
    ) -> dict[str, Any]:
        """Run one crawl; its pages and pages/s (over the first CLOSESPIDER_TIMEOUT seconds
        when set, else from the first page to the last)."""
        from bench._redis_figures import redis_commands

        window = int(settings.get("CLOSESPIDER_TIMEOUT", 0))
        self.runs += 1
        self.redis.flushall()
        if entries:
            self.redis.lpush("links:start_urls", *entries)
        probe_file = self.tmp / f"probe-{self.runs}.json"
        settings = {**settings, "BENCH_PROBE_FILE": probe_file}
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": str(ROOT),
            "REDIS_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "MONGO_URI": f"mongodb://127.0.0.1:{self.mongo_port}",
            "MONGO_DATABASE": f"bench{self.runs}",
            "MONGO_SPILL_DIR": str(self.tmp / "spill"),
        }
        prefix = [sys.executable]
        if self.args.py_spy:
            py_spy = Path(sys.executable).with_name("py-spy")
            out = Path(self.args.py_spy) / f"{self.runs}-{label.split()[0]}.txt"
            prefix = [str(py_spy), "record", "--format", "raw", "--rate", "200", "--nonblocking"]
            prefix += ["-o", str(out), "--", sys.executable]
        commands_before = redis_commands(self.redis)
        full = [*prefix, "-m", "scrapy", *command, *settings_args(settings)]
        result = subprocess.run(
            full, cwd=cwd, env=env, capture_output=True, text=True, timeout=CRAWL_TIMEOUT
        )
        if result.returncode != 0 or not probe_file.exists():
            sys.exit(f"{label} failed ({result.returncode}):\n{result.stderr[-3000:]}")
        probe: dict[str, Any] = json.loads(probe_file.read_text())
        probe["server_commands"] = redis_commands(self.redis) - commands_before - 1
        times = probe.pop("times")
        if window:  # the pages of the first ``window`` seconds
            times = [t for t in times if t <= times[0] + window]
            probe["seconds"] = float(window)
        else:
            probe["seconds"] = times[-1] - times[0]
        probe["pages"] = len(times)
        probe["rate"] = probe["pages"] / max(1e-9, probe["seconds"])
        half = times[0] + probe["seconds"] / 2
        probe["late_rate"] = sum(1 for t in times if t > half) / max(1e-9, probe["seconds"] / 2)
        probe["label"] = label
        print(
            f"  {label:34} {probe['pages']:7d} pages in {probe['seconds']:6.1f}s "
            f"= {probe['rate']:6.1f} pages/s ({probe['late_rate']:.1f} in the second half; "
            f"CPU {1000 * probe['cpu'] / probe['pages']:.2f} ms/page; {probe['reason']})",
            flush=True,
        )
        return probe

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


def unlimited(bench: Bench) -> list[tuple[str, float, float]]:
    window = bench.args.crawl_window
    print("Politeness off, " + (f"{window}s window:" if window else "whole crawl:"))
    limit = {"CLOSESPIDER_TIMEOUT": window} if window else {}
    vanilla = bench.vanilla(limit, "vanilla Scrapy")
    ours = bench.links({"POLITENESS_RATE": 0, **limit}, "links")
    redis_report(bench, ours)
    stock = bench.stock(limit)
    return [
        ("links / vanilla Scrapy", ours["rate"] / vanilla["rate"], TARGET_VS_VANILLA),
        ("links / stock scrapy-redis", ours["rate"] / stock["rate"], TARGET_VS_STOCK),
    ]


def trips_report(ours: dict[str, Any]) -> None:
    """Redis round trips and commands per page of one of our crawls."""
    pages = max(1, ours["pages"])
    round_trips = ours["redis"].get("round_trips", 0)
    print(
        f"    Redis per page: {round_trips / pages:.2f} round trips from the crawl, "
        f"{ours['server_commands'] / pages:.2f} commands run by the server"
    )
    kinds = {k[3:]: v for k, v in ours["redis"].items() if k.startswith("rt:")}
    top = sorted(kinds.items(), key=lambda item: -item[1])[:6]
    print("    round trips by kind: " + ", ".join(f"{k} {v / pages:.3f}" for k, v in top))


def redis_report(bench: Bench, ours: dict[str, Any]) -> None:
    from bench._redis_figures import redis_bytes

    pages, hosts = ours["pages"], bench.args.hosts
    trips_report(ours)
    for label, pattern, per, unit in (
        ("per-host counters", "{links}:host:*", hosts, "host"),
        ("page budgets", "{links}:pages:*", hosts, "host"),
        ("robots.txt cache", "{links}:robots:*", hosts, "host"),
    ):
        size = redis_bytes(bench.redis, pattern)
        print(f"    Redis bytes for {label:18} {size / per:9.1f} per {unit}")
    from crawler import settings as project

    size, capacity = redis_bytes(bench.redis, "{links}:dupefilter*"), project.DUPEFILTER_CAPACITY
    print(
        f"    Redis bytes for {'dupefilter':18} {size / pages:9.1f} per page fetched (a Bloom "
        f"filter sized up front: {size / capacity:.1f} per URL at its {capacity:,} URLs)"
    )


def polite(bench: Bench) -> list[tuple[str, float, float]]:
    window = bench.args.window
    ratios = []
    for rate in (1.0, 0.5):
        print(f"Politeness {rate} req/s per host, {window}s window:")
        vanilla = bench.vanilla(
            {
                "DOWNLOAD_DELAY": 1 / rate,
                "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
                "CLOSESPIDER_TIMEOUT": window,
            },
            f"vanilla Scrapy DOWNLOAD_DELAY={1 / rate:g}",
        )
        ours = bench.links(
            {"POLITENESS_RATE": rate, "POLITENESS_BURST": 1, "CLOSESPIDER_TIMEOUT": window},
            f"links POLITENESS_RATE={rate:g}",
        )
        trips_report(ours)
        ratios.append((f"links / vanilla at {rate:g} req/s", ours["rate"] / vanilla["rate"], 0.9))
    return ratios


def polite_whole(bench: Bench) -> list[tuple[str, float, float]]:
    """The whole web at 1 req/s per host, to the end: the same ratio, and the frontier empty at
    close (no turn left in the delayed set)."""
    print("Politeness 1 req/s per host, whole crawl:")
    vanilla = bench.vanilla(
        {"DOWNLOAD_DELAY": 1, "CONCURRENT_REQUESTS_PER_DOMAIN": 1},
        "vanilla Scrapy DOWNLOAD_DELAY=1",
    )
    ours = bench.links({"POLITENESS_RATE": 1, "POLITENESS_BURST": 1}, "links POLITENESS_RATE=1")
    trips_report(ours)
    left = {name: int(bench.redis.zcard("{links}:" + name)) for name in ("delayed", "leases")}
    queued = len(list(bench.redis.scan_iter("{links}:queue:*")))
    print(f"    at close: {left['delayed']} delayed, {left['leases']} leased, {queued} queue lists")
    return [("links / vanilla at 1 req/s, whole", ours["rate"] / vanilla["rate"], 0.9)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hosts", type=int, default=400)
    parser.add_argument("--pages", type=int, default=50, help="pages per host")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--window", type=int, default=30, help="seconds of each polite crawl")
    parser.add_argument(
        "--crawl-window", type=int, default=0, help="seconds of each unlimited crawl (0: whole)"
    )
    parser.add_argument("--server-processes", type=int, default=1)
    parser.add_argument("--only", choices=["unlimited", "polite", "polite-whole", "links", "hosts"])
    parser.add_argument(
        "--hosts-web",
        default="400x25",
        help="hosts x pages of the web on distinct addresses (--only hosts, or every run)",
    )
    parser.add_argument("--rates", default="0,1,0.5", help="rates per host of the hosts runs")
    parser.add_argument(
        "--shapes", default="any,host,file", help="start-entry shapes of the hosts runs"
    )
    parser.add_argument("--py-spy", metavar="DIR", help="sample each crawl with py-spy into DIR")
    parser.add_argument("-s", dest="extra", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from bench._static_web import start_static_web

    if args.py_spy:
        Path(args.py_spy).mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    web, port = start_static_web(args.hosts, args.pages, 7, args.server_processes)
    print(f"static web: {args.hosts} hosts x {args.pages} pages on port {port}")
    with tempfile.TemporaryDirectory(prefix="bench-links-") as tmp:
        bench = Bench(args, Path(tmp), port)
        try:
            if args.only == "links":  # for profiling: the unlimited links crawl alone
                window = {"CLOSESPIDER_TIMEOUT": args.crawl_window} if args.crawl_window else {}
                redis_report(bench, bench.links({"POLITENESS_RATE": 0, **window}, "links"))
            ratios = unlimited(bench) if args.only in (None, "unlimited") else []
            ratios += polite(bench) if args.only in (None, "polite") else []
            ratios += polite_whole(bench) if args.only in (None, "polite-whole") else []
            if args.only in (None, "hosts"):
                from bench._hosts_bench import hosts_bench

                hosts, pages = (int(n) for n in args.hosts_web.split("x"))
                rates = [float(rate) for rate in args.rates.split(",")]
                shapes = args.shapes.split(",")
                ratios += hosts_bench(bench, hosts, pages, rates, shapes)
        finally:
            bench.stop()
            for server in web:
                server.stop()
    print()
    for label, ratio, target in ratios:
        verdict = "meets" if ratio >= target else "MISSES"
        print(f"{label:34} {ratio:5.2f}x  ({verdict} the target >= {target}x)")
    print(f"benchmark wall time {time.perf_counter() - started:.0f}s")


if __name__ == "__main__":
    main()
