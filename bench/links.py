"""The links spider against vanilla Scrapy on the sandbox's web of many hosts, side by side.

The sandbox serves SITES hosts (``siteN.test``, name-based virtual hosts on one loopback port,
resolved to 127.0.0.1 by crawler.links.resolver.MappedResolver in both crawls) of PAGES pages
each, without traps (``extras`` off). Both crawls start from every home page, follow links on
the same host only, obey robots.txt and fetch as fast as they may (no politeness limit):

  (a) vanilla Scrapy: a minimal CrawlSpider (this module, run with ``scrapy runspider`` outside
      the project, so with Scrapy's own settings: in-memory scheduler, RobotsTxtMiddleware);
  (b) ``scrapy crawl links`` with the project's settings (Redis frontier, Bloom dupefilter,
      leases, fleet robots.txt, MongoDB pipeline), POLITENESS_RATE=0.

Printed: pages/s of each (HTML pages the sandbox served / time between its first and last
request), the ratio (target >= 0.9x), Redis commands per page and Redis bytes per host
(per-host counters, robots.txt cache) and per seen URL (dupefilter). Not measured here (issue
13): stock scrapy-redis, politeness at 1 and 0.5 req/s per host, webs of >= 20,000 pages.

Usage: python bench/links.py [--sites 200] [--pages 20] [--concurrency 64] [-s NAME=VALUE]...
(``-s`` settings go to the links crawl only.)
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.request import Request as UrlRequest
from urllib.request import urlopen

from scrapy.http import Response
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule

ROOT = Path(__file__).resolve().parents[1]
TARGET = 0.9
RESOLVE = {
    "TWISTED_DNS_RESOLVER": "crawler.links.resolver.MappedResolver",
    "LINKS_RESOLVE": json.dumps({"test": "127.0.0.1"}),
}


class VanillaLinks(CrawlSpider):
    """What a Scrapy user writes for the same crawl: every same-host link, robots.txt obeyed."""

    name = "vanilla_links"
    rules = (Rule(LinkExtractor(), callback="parse_page", follow=True, process_links="same_host"),)

    def __init__(self, file: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = Path(file).read_text().split()

    def same_host(self, links: list[Any]) -> list[Any]:
        return [link for link in links if link.url.split("/")[2] in self.hosts]

    @property
    def hosts(self) -> set[str]:
        return {url.split("/")[2] for url in self.start_urls}

    def parse_page(self, response: Response) -> dict[str, Any]:
        return {"url": response.url}


def admin(base: str, path: str, payload: dict[str, Any] | None = None) -> Any:
    data = None if payload is None else json.dumps(payload).encode()
    request = UrlRequest(f"{base}/__admin__/{path}", data=data, method="POST" if data else "GET")
    with urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def pages_per_second(base: str) -> tuple[int, float]:
    report = admin(base, "web")
    times = [t for host_times in report["times"].values() for t in host_times]
    pages = sum(
        count
        for paths in report["counts"].values()
        for path, count in paths.items()
        if path == "/" or path.startswith("/p/") or path == "/orphan"
    )
    return pages, pages / max(1e-9, max(times) - min(times))


def run(command: list[str], cwd: Path, env: dict[str, str]) -> None:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{command[3]} failed:\n{result.stderr[-3000:]}")


def settings_args(settings: dict[str, Any]) -> list[str]:
    return [arg for name, value in settings.items() for arg in ("-s", f"{name}={value}")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sites", type=int, default=200)
    parser.add_argument("--pages", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument(
        "-s", dest="extra", action="append", default=[], help="NAME=VALUE for the links crawl"
    )
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import redis

    from crawler.services import free_port, start_mongo, start_redis, start_sandbox

    tmp = Path(tempfile.mkdtemp(prefix="bench-links-"))
    redis_port, mongo_port = free_port(), free_port()
    servers = [start_redis(redis_port, tmp / "redis"), start_mongo(mongo_port, tmp / "mongo")]
    sandbox, base = start_sandbox()
    servers.append(sandbox)
    try:
        results = bench(args, base, tmp, redis_port, mongo_port)
        client = redis.Redis(port=redis_port)
        report(results, client, args.sites)
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def bench(
    args: argparse.Namespace, base: str, tmp: Path, redis_port: int, mongo_port: int
) -> dict[str, tuple[int, float]]:
    port = base.rsplit(":", 1)[1]
    starts = tmp / "starts.txt"
    starts.write_text("".join(f"http://site{i}.test:{port}/\n" for i in range(args.sites)))
    common = {**RESOLVE, "CONCURRENT_REQUESTS": args.concurrency, "LOG_LEVEL": "WARNING"}
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    results = {}
    admin(base, "web", {"sites": args.sites, "pages": args.pages, "extras": False})
    vanilla = [sys.executable, "-m", "scrapy", "runspider", str(ROOT / "bench" / "links.py")]
    vanilla += ["-a", f"file={starts}", *settings_args({**common, "ROBOTSTXT_OBEY": True})]
    run(vanilla, tmp, env)
    results["vanilla Scrapy"] = pages_per_second(base)
    admin(base, "web", {"sites": args.sites, "pages": args.pages, "extras": False})
    ours = [sys.executable, "-m", "scrapy", "crawl", "links", "-a", f"file={starts}"]
    ours += settings_args(
        {
            **common,
            "POLITENESS_RATE": 0,
            "MAX_IDLE_TIME_BEFORE_CLOSE": 1,
            "LINKS_DEFAULT_SCHEME": "http",
        }
    )
    env_ours = {
        **env,
        "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        "MONGO_URI": f"mongodb://127.0.0.1:{mongo_port}",
        "MONGO_SPILL_DIR": str(tmp / "spill"),
    }
    started = time.monotonic()
    run(ours, ROOT, env_ours)
    print(f"links crawl process: {time.monotonic() - started:.1f}s wall")
    results["links (ours)"] = pages_per_second(base)
    return results


def report(results: dict[str, tuple[int, float]], client: Any, sites: int) -> None:
    for name, (pages, rate) in results.items():
        print(f"{name:16} {pages:7d} pages {rate:8.1f} pages/s")
    ratio = results["links (ours)"][1] / results["vanilla Scrapy"][1]
    verdict = "meets" if ratio >= TARGET else "MISSES"
    print(f"links / vanilla Scrapy: {ratio:.2f}x ({verdict} the target >= {TARGET}x)")
    pages = results["links (ours)"][0]
    commands = int(client.info("stats")["total_commands_processed"])
    print(
        f"Redis commands per page (server side, scripts' commands included): {commands / pages:.1f}"
    )
    for label, pattern, per in (
        ("per-host counters", "{links}:host:*", sites),
        ("robots.txt cache", "{links}:robots:*", sites),
        ("page budgets", "{links}:pages:*", sites),
        ("dupefilter", "{links}:dupefilter*", pages),
    ):
        size = sum(client.memory_usage(key) or 0 for key in client.scan_iter(pattern, count=1000))
        unit = "host" if per == sites else "page"
        print(f"Redis bytes for {label}: {size / per:.0f} per {unit}")


if __name__ == "__main__":
    main()
