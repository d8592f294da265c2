"""Politeness counted at the server: the links spider and vanilla Scrapy on a web whose hosts each
have their own loopback address (sandbox/hosts.py), side by side in one run (``bench/links.py
--only hosts``).

For each start-entry shape and each rate, a vanilla Scrapy CrawlSpider (DOWNLOAD_DELAY 1/rate,
not randomized, one request per host slot, DownloaderAwarePriorityQueue) and ``scrapy crawl
links`` (POLITENESS_RATE rate, POLITENESS_BURST 1) crawl the whole web. The server notes every
request's arrival per host; from its notes come pages/s (distinct HTML pages, first to last
arrival), the fetches of a page fetched before, and the early requests (sooner than 0.9 / rate
after the host's previous one). Shapes:

  any     page 0 of every host pushed to links:start_urls, LINKS_SCOPE any
  host    the same entries, LINKS_SCOPE host
  file    the same entries given with ``-a file=``, LINKS_SCOPE host

The bound printed is what politeness allows: every host at its rate for its pages (and
robots.txt), capped by what the machine fetched with politeness off.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandbox.hosts import early_requests, fetched_pages, host_address, site_pages

if TYPE_CHECKING:
    from bench.links import Bench

SHAPES = ("any", "host", "file")


class HostsWeb:
    """The web's server process and what it noted."""

    def __init__(self, hosts: int, pages: int) -> None:
        self.hosts, self.pages = hosts, pages
        command = [sys.executable, "-m", "sandbox.hosts", "--hosts", str(hosts)]
        command += ["--pages", str(pages)]
        root = Path(__file__).resolve().parents[1]
        self.process = subprocess.Popen(command, cwd=root, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        self.port = int(self.process.stdout.readline())

    def homes(self) -> list[str]:
        return [f"http://{host_address(h)}:{self.port}/" for h in range(self.hosts)]

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://{host_address(0)}:{self.port}{path}") as answer:
            return json.loads(answer.read())

    def arrivals(self) -> dict[str, list[list[Any]]]:
        noted: dict[str, list[list[Any]]] = self._get("/__arrivals")
        return noted

    def reset(self) -> None:
        self._get("/__reset")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def measure(web: HostsWeb, rate: float) -> dict[str, Any]:
    """pages/s, early requests and completeness of the crawl that just ended."""
    arrivals = web.arrivals()
    pages = [
        (float(at), address, str(path))
        for address, seen in arrivals.items()
        for at, path in seen
        if path == "/" or str(path).startswith("/p/")
    ]
    times = [at for at, _, _ in pages]
    seconds = max(times) - min(times) if len(times) > 1 else 0.0
    distinct = len({(address, path) for _, address, path in pages})
    early = early_requests(arrivals, rate) if rate else []
    missing = site_pages(web.hosts, web.pages, web.port) - fetched_pages(arrivals)
    return {
        "rate": distinct / max(seconds, 1e-9),
        "seconds": seconds,
        "early": early,
        "missing": len(missing),
        "repeats": len(pages) - distinct,
    }


def run_shape(bench: Bench, web: HostsWeb, shape: str, rate: float) -> dict[str, Any]:
    """Vanilla then links for one shape and rate; prints both and returns their figures."""
    starts = bench.tmp / "hosts-starts.txt"
    starts.write_text("".join(f"{home}\n" for home in web.homes()))
    polite = {"DOWNLOAD_DELAY": 1 / rate, "RANDOMIZE_DOWNLOAD_DELAY": False} if rate else {}
    vanilla_settings = {
        **polite,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
        "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.DownloaderAwarePriorityQueue",
    }
    web.reset()
    bench.vanilla(vanilla_settings, f"vanilla {shape} {rate:g}/s", starts)
    vanilla = measure(web, rate)
    links_settings: dict[str, Any] = {
        "POLITENESS_RATE": rate,
        "POLITENESS_BURST": 1,
        "LINKS_SCOPE": "any" if shape == "any" else "host",
    }
    entries = [] if shape == "file" else web.homes()
    web.reset()
    bench.links(
        links_settings, f"links {shape} {rate:g}/s", starts if shape == "file" else None, entries
    )
    ours = measure(web, rate)
    left = len(list(bench.redis.scan_iter("{links}:queue:*"))) + int(
        bench.redis.zcard("{links}:delayed")
    )
    print(
        f"    at the server: vanilla {vanilla['rate']:.1f} pages/s, {len(vanilla['early'])} early"
        f", {vanilla['missing']} missing, {vanilla['repeats']} fetched again; links "
        f"{ours['rate']:.1f} pages/s, {len(ours['early'])} early (closest "
        f"{ours['early'][0][1] if ours['early'] else '-'} s), {ours['missing']} missing, "
        f"{ours['repeats']} fetched again, {left} left in the frontier",
        flush=True,
    )
    return {"vanilla": vanilla, "links": ours}


def hosts_bench(
    bench: Bench, hosts: int, pages: int, rates: list[float], shapes: list[str]
) -> list[Any]:
    """Every shape (of SHAPES) at every rate; returns (label, ratio, target) rows."""
    if unknown := set(shapes) - set(SHAPES):
        raise SystemExit(f"unknown shapes {sorted(unknown)}: choose among {', '.join(SHAPES)}")
    web = HostsWeb(hosts, pages)
    print(f"hosts web: {hosts} hosts on their own addresses x {pages} pages, port {web.port}")
    rows: list[Any] = []
    early: list[str] = []
    unthrottled = 0.0
    try:
        for rate in rates:
            for shape in shapes:
                print(f"Shape {shape}, {'no limit' if not rate else f'{rate:g} req/s per host'}:")
                figures = run_shape(bench, web, shape, rate)
                ours, vanilla = figures["links"], figures["vanilla"]
                if not rate:
                    unthrottled = max(unthrottled, ours["rate"], vanilla["rate"])
                else:
                    bound = hosts * pages * rate / (pages + 1)
                    bound = min(bound, unthrottled) if unthrottled else bound
                    print(f"    bound {bound:.1f} pages/s; links at {ours['rate'] / bound:.2f}x it")
                target = 1.0 if not rate else 0.95
                rows.append(
                    (f"links/vanilla {shape} {rate:g}/s", ours["rate"] / vanilla["rate"], target)
                )
                early.append(
                    f"{shape} {rate:g}/s: links {len(ours['early'])}, "
                    f"vanilla {len(vanilla['early'])}"
                )
    finally:
        web.stop()
    print("early requests at the server (target 0): " + "; ".join(early))
    return rows
