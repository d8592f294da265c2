"""Crawl throughput on a static link graph, per scheduler, side by side in one invocation.

A local server serves N pages ``/p/<i>`` (default 20,000), each a small HTML page with 8-10
links: to ``/p/<i+1>`` (so every page is reachable from ``/p/0``) and to seeded pseudo-random
pages (so most extracted links are duplicates and the duplicate filter works hard). The
``graph`` spider (bench/_graph_site.py) starts at ``/p/0`` and follows every link with
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
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from bench import _graph_site, _probes  # noqa: E402
from bench._graph_site import (  # noqa: E402
    SPIDER_NAME,
    cpu_seconds,
    measure_server,
    page_links,
    render_page,
    start_graph_server,
)
from bench._redis_figures import (  # noqa: E402
    frontier_leftovers,
    redis_bytes,
    redis_commands,
    redis_cpu,
)
from crawler import settings as project_settings  # noqa: E402
from crawler.keys import tagged  # noqa: E402
from devtools.services import free_port, start_redis  # noqa: E402

CRAWL_TIMEOUT = 900.0
TARGET_VS_MEMORY = 0.9
TARGET_VS_STOCK = 1.25

NO_PROJECT_EXTENSIONS = dict.fromkeys(project_settings.EXTENSIONS)
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
            cpu_before = redis_cpu(client)
            commands_before = redis_commands(client)
            server_cpu_before = sum(cpu_seconds(pid) for pid in graph_pids)
            probe_file = Path(tmp) / "probe.json"
            overrides = {
                "SPIDER_MODULES": _graph_site.MODULE,
                "BENCH_GRAPH_URL": graph_url,
                "BENCH_PROBE_FILE": str(probe_file),
                # The probe alone: the project's extensions named off (a run's dict adds).
                "EXTENSIONS": json.dumps(
                    {**NO_PROJECT_EXTENSIONS, f"{_probes.MODULE}.BenchProbe": 1000}
                ),
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
            server_commands = redis_commands(client) - commands_before - 1
            redis_seconds = redis_cpu(client) - cpu_before
            probe = json.loads(probe_file.read_text())
            dupefilter_bytes = redis_bytes(client, *DUPEFILTER_KEYS[variant])
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
        redis_cpu=redis_seconds,
        server_cpu=server_cpu,
        dupefilter_bytes=int(probe["process_dupefilter_bytes"]) if in_process else dupefilter_bytes,
        dupefilter_in_process=in_process,
        redis_counts={k: int(v) for k, v in probe["redis"].items()},
        leftovers=leftovers,
    )


def _leftovers(client: redis.Redis, variant: str) -> dict[str, int]:
    """What a finished crawl should not leave behind (requests queued, leases held)."""
    if variant == STOCK:
        return {"queue": int(client.zcard(f"{SPIDER_NAME}:requests"))}
    return frontier_leftovers(client, SPIDER_NAME) if variant == OURS else {}


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
    args = parser.parse_args()
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
