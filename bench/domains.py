"""The domains spider's sweep of the sandbox population, with its resolver and with Scrapy's
defaults, side by side.

The domains sandbox (sandbox/domains.py) serves DOMAINS fake domains on loopback: a DNS server
and web servers answering 200, 404, 5xx, slow pages (SLOW seconds), refused ports, TLS-only
hosts, broken TLS, redirects (off-site, to www., in a loop), parked pages, 5 MB pages, bodies
cut short, ports that reset or close without answering, SSH and SMTP banners, NXDOMAIN,
SERVFAIL and silence (sandbox/domains_population.py). Both sweeps read
the same ``rank,domain`` CSV (``-a file=``) with one worker process each:

  (a) ``scrapy crawl domains`` as shipped: the asynchronous resolver (crawler/domains/
      resolver.py), DOMAINS_DNS_TIMEOUT 2 s with one retry, DOMAINS_DOWNLOAD_TIMEOUT 10 s;
  (b) the same spider with Scrapy's defaults: the thread-pool resolver (here a
      CachingThreadedResolver asking the sandbox's DNS server from the reactor's 10 threads,
      with glibc's default 5 s x 2 attempts), DOWNLOAD_TIMEOUT 180 s.

The worker runs pinned to CPU 0 and everything else (this process: the sandbox's DNS and web
servers; Redis; MongoDB) to CPU 1, so a worker's rate is one core's (``--no-pin`` to share).
Other programs on the machine still share the cores: the worker's own CPU time is printed too,
and domains per CPU-second of the worker is the rate of a core it would have to itself.

Printed per sweep: domains/s (domains stored / time from the first to the last stored),
classification accuracy against the ground truth, peak RSS of the worker, where the time goes
(bench/domains_timing.py, measured in the worker: DNS lookups, TCP connects, open connections,
Redis calls blocking the reactor, CPU), Redis commands per domain and the Redis server's CPU
per domain (hence the domains/s one Redis core serves), the Redis keys and stats fields left
afterwards and the most Prometheus series the worker exported; then the ratio of the two
sweeps.

Usage: python bench/domains.py [--domains 2000] [--slow 15] [--only ours|defaults] [--no-pin]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.error import URLError
from urllib.request import urlopen

import dns.exception
import dns.nameserver
import dns.resolver
import pymongo
import redis
from scrapy.resolver import CachingThreadedResolver
from twisted.internet.threads import deferToThreadPool

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._redis_figures import redis_cpu  # noqa: E402
from devtools.services import free_port, start_mongo, start_redis  # noqa: E402
from sandbox.domains import DomainsSandbox, SandboxThread  # noqa: E402
from sandbox.domains_population import build_population  # noqa: E402

SEED_BAR = 167.0  # the seed's planned domains/s per worker
GLIBC_TIMEOUT, GLIBC_ATTEMPTS = 5.0, 2
WORKER_CORE, SERVERS_CORE = 0, 1


class ThreadedSandboxResolver(CachingThreadedResolver):
    """Scrapy's default resolver, asking the sandbox's name server instead of the system's:
    each lookup blocks one of the reactor's threads, as getaddrinfo does."""

    nameserver: tuple[str, int] = ("127.0.0.1", 53)

    @classmethod
    def from_crawler(cls, crawler: Any, reactor: Any) -> ThreadedSandboxResolver:
        resolver = super().from_crawler(crawler, reactor)
        host, _, port = crawler.settings.getlist("DOMAINS_NAMESERVERS")[0].partition(":")
        resolver.nameserver = (host, int(port or 53))
        return resolver

    def getHostByName(self, name: str, timeout: Sequence[int] = ()) -> Any:
        reactor: Any = self.reactor
        return deferToThreadPool(reactor, reactor.getThreadPool(), self._blocking_lookup, name)

    def _blocking_lookup(self, name: str) -> str:
        client = dns.resolver.Resolver(configure=False)
        client.nameservers = [dns.nameserver.Do53Nameserver(*self.nameserver)]
        client.timeout = GLIBC_TIMEOUT
        client.lifetime = GLIBC_TIMEOUT * GLIBC_ATTEMPTS
        try:
            return str(client.resolve(name, "A", search=False)[0].address)
        except dns.exception.DNSException as exc:
            from twisted.internet.error import DNSLookupError

            raise DNSLookupError(name) from exc


def sweep_command(
    csv_file: Path, sandbox: DomainsSandbox, defaults: bool, core: int, metrics_port: int
) -> list[str]:
    settings: dict[str, Any] = {
        "DOMAINS_NAMESERVERS": sandbox.nameserver,
        "DOMAINS_HTTP_PORT": sandbox.http_port,
        "DOMAINS_HTTPS_PORT": sandbox.https_port,
        "DOMAINS_PRIVATE_ADDRESSES": True,  # the sandbox's domains are on loopback
        "MAX_IDLE_TIME_BEFORE_CLOSE": 2,
        "LOG_LEVEL": "INFO",
        "METRICS_PORT": metrics_port,
        "METRICS_HOST": "127.0.0.1",
    }
    if defaults:
        settings["TWISTED_DNS_RESOLVER"] = "bench.domains.ThreadedSandboxResolver"
        settings["DOMAINS_DOWNLOAD_TIMEOUT"] = 180
    # DOMAINS_PROFILE=<file>: profile the worker with cProfile into that file.
    profile = (
        ["-m", "cProfile", "-o", os.environ["DOMAINS_PROFILE"]]
        if "DOMAINS_PROFILE" in os.environ
        else []
    )
    command = [
        sys.executable,
        *profile,
        "-m",
        "bench.domains_timing",
        str(core),
        "crawl",
        "domains",
        "-a",
        f"file={csv_file}",
    ]
    for name, value in settings.items():
        command += ["-s", f"{name}={value}"]
    return command


def peak_rss_mib(pid: int) -> float:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    match = re.search(r"VmHWM:\s+(\d+) kB", status)
    return int(match.group(1)) / 1024 if match else 0.0


def count_series(port: int) -> int:
    """The worker's Prometheus series (sample lines) now; 0 when it does not answer."""
    try:
        with urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            lines = answer.read().decode().splitlines()
    except (OSError, URLError):
        return 0
    return sum(1 for line in lines if line and not line.startswith("#"))


def run_sweep(command: list[str], env: dict[str, str], metrics_port: int) -> tuple[str, float, int]:
    """The worker's last log lines, its peak RSS (MiB) and the most series it exported."""
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    series = [0]
    done = threading.Event()

    def watch_series() -> None:
        while not done.wait(2.0):
            series.append(count_series(metrics_port))

    watcher = threading.Thread(target=watch_series, daemon=True)
    watcher.start()
    peak = 0.0
    log: list[str] = []
    assert process.stderr is not None
    for line in process.stderr:
        log.append(line)
        peak = max(peak, peak_rss_mib(process.pid))
    process.wait()
    done.set()
    watcher.join(10)
    return "".join(log[-400:]), peak, max(series)


def stat(log: str, name: str) -> float:
    match = re.search(rf"'{re.escape(name)}': ([0-9.]+)", log)
    return float(match.group(1)) if match else 0.0


def measure(label: str, defaults: bool, args: argparse.Namespace, world: dict[str, Any]) -> float:
    """Run one sweep and print its figures; returns its domains/s over the first 90%."""
    client: redis.Redis = world["redis"]
    client.flushdb()
    client.config_resetstat()
    cpu_before = redis_cpu(client)
    database = f"bench_{label}_{int(time.time())}"
    env = {**world["env"], "MONGO_DATABASE": database}
    metrics_port = free_port()
    core = WORKER_CORE if args.pin else -1
    command = sweep_command(world["csv"], world["sandbox"], defaults, core, metrics_port)
    started = time.monotonic()
    log, peak, series = run_sweep(command, env, metrics_port)
    elapsed = time.monotonic() - started
    documents = list(world["mongo"][database].domains.find())
    world["mongo"].drop_database(database)
    stats = {
        key.removeprefix("cmdstat_"): value
        for key, value in client.info("commandstats").items()
        if key != "cmdstat_info"
    }
    commands = sum(value["calls"] for value in stats.values())
    rate = report(label, documents, world["truth"], elapsed, peak, log, commands)
    per_domain = (redis_cpu(client) - cpu_before) / max(1, len(documents))
    print(
        f"Redis CPU           {1e6 * per_domain:.0f} us per domain: one Redis core serves"
        f" {1 / max(per_domain, 1e-9):,.0f} domains/s"
    )
    busiest = sorted(stats.items(), key=lambda item: -item[1]["usec"])[:6]
    shown = ", ".join(
        f"{name} {value['calls']} ({value['usec'] / 1e6:.1f} s)" for name, value in busiest
    )
    print(f"Redis commands      {shown}")
    fields = client.hlen("{domains}:stats")
    print(f"Redis state after   {client.dbsize()} keys, {fields} fields in {{domains}}:stats")
    print(f"Prometheus          {series} series at most (bounded: <= 2,000)")
    return rate


def timing(log: str) -> dict[str, float]:
    """The worker's own figures (bench/domains_timing.py), or {} when it printed none."""
    match = re.search(r"^domains-timing (\{.*\})$", log, re.MULTILINE)
    return json.loads(match.group(1)) if match else {}


def where_the_time_goes(figures: dict[str, float], documents: int) -> None:
    """Seconds summed over the requests in flight (they overlap: sums exceed the wall time),
    except Redis and CPU, which take the worker's one thread."""
    if not figures:
        print("time                (the worker printed no timings)")
        return
    lookups, connections = figures.get("lookups", 0), figures.get("connections", 0)
    connects = connections + figures.get("connect_failed", 0)
    wall, cpu, redis_s = figures["wall"], figures["cpu"], figures.get("redis", 0.0)
    print(
        f"time: DNS           {figures.get('dns', 0):.1f} s over {lookups:.0f} lookups"
        f" ({1000 * figures.get('dns', 0) / max(1, lookups):.0f} ms each,"
        f" {figures.get('dns_failed', 0):.0f} failed)"
    )
    print(
        f"time: TCP connect   {figures.get('connect', 0):.1f} s over {connects:.0f} attempts"
        f" ({1000 * figures.get('connect', 0) / max(1, connects):.1f} ms each,"
        f" {figures.get('connect_failed', 0):.0f} refused or cut at the timeout)"
    )
    print(
        f"time: connection    {figures.get('open', 0):.1f} s open (TLS, request, answer;"
        f" {1000 * figures.get('open', 0) / max(1, connections):.0f} ms each)"
    )
    print(
        f"time: Redis         {redis_s:.1f} s blocking the reactor in"
        f" {figures.get('redis_calls', 0):.0f} calls ({redis_s / max(wall, 0.001):.0%} of the"
        f" worker's {wall:.0f} s)"
    )
    calls = sorted(
        ((name[6:], count) for name, count in figures.items() if name.startswith("redis/")),
        key=lambda item: -item[1],
    )
    shown = ", ".join(f"{name} {count / max(1, documents):.2f}" for name, count in calls[:4])
    print(f"time: Redis calls   per domain: {shown}")
    sweeping = cpu - figures.get("cpu_before", 0.0)
    print(
        f"time: CPU           {cpu:.1f} s of the worker ({cpu / max(wall, 0.001):.0%} of a core),"
        f" {sweeping:.1f} s after start-up: {documents / max(sweeping, 0.001):.0f} domains per"
        " CPU-second (the rate of a core of its own)"
    )


def report(
    label: str,
    documents: list[dict[str, Any]],
    truth: dict[str, Any],
    elapsed: float,
    peak: float,
    log: str,
    redis_commands: int,
) -> float:
    stamps = sorted(document["checked_at"] for document in documents)
    span = (stamps[-1] - stamps[0]) if len(stamps) > 1 else elapsed
    right = sum(
        1
        for document in documents
        if (truth.get(document["domain"]) or {}).get("status") == document["status"]
    )
    count = max(1, len(documents))
    wrong = Counter(
        (document["status"], (truth.get(document["domain"]) or {}).get("status"))
        for document in documents
        if (truth.get(document["domain"]) or {}).get("status") != document["status"]
    )
    print(f"\n== {label}")
    print(f"domains stored      {len(documents)} of {len(truth)}, {right / count:.1%} as expected")
    if wrong:
        shown = ", ".join(f"{n} {got} (truth: {want})" for (got, want), n in wrong.most_common(4))
        print(f"misclassified       {shown}")
    print(f"sweep               {span:.1f} s first-to-last, {elapsed:.1f} s with start/stop")
    print(
        f"domains/s           {len(documents) / max(span, 0.001):.0f} (seed's bar {SEED_BAR:.0f})"
    )
    rate = len(documents) / max(span, 0.001)
    if len(stamps) > 20:
        ninety = stamps[int(len(stamps) * 0.9)] - stamps[0]
        rate = 0.9 * len(stamps) / max(ninety, 0.001)
        print(f"domains/s, first 90% {rate:.0f}")
    print(f"peak RSS            {peak:.0f} MiB")
    dns_ms, queries = stat(log, "domains/dns/ms"), stat(log, "domains/dns/queries")
    if queries:
        print(f"resolver            {queries:.0f} queries, {dns_ms / 1000:.1f} s waited in total")
    where_the_time_goes(timing(log), len(documents))
    print(f"Redis               {redis_commands / count:.1f} commands per domain (server side)")
    return rate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/domains.py", description=__doc__)
    parser.add_argument("--domains", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--slow", type=float, default=15.0, help="seconds slow domains wait")
    parser.add_argument("--only", choices=("ours", "defaults"))
    parser.add_argument("--no-pin", dest="pin", action="store_false", help="do not pin to CPUs")
    args = parser.parse_args(argv)
    if args.pin and not {WORKER_CORE, SERVERS_CORE} <= os.sched_getaffinity(0):
        print("fewer than 2 CPUs to pin to: not pinning")
        args.pin = False
    if args.pin:
        # This process, the sandbox's threads and the Redis and MongoDB servers it starts.
        os.sched_setaffinity(0, {SERVERS_CORE})
    with tempfile.TemporaryDirectory(prefix="bench-domains-") as tmp:
        work = Path(tmp)
        redis_port, mongo_port = free_port(), free_port()
        redis_server = start_redis(redis_port, work / "redis")
        mongo_server = start_mongo(mongo_port, work / "mongo")
        runner = SandboxThread(DomainsSandbox(build_population(args.domains, args.seed), args.slow))
        sandbox = runner.start()
        try:
            csv_file = work / "top.csv"
            rows = (f"{rank},{d.entry}" for rank, d in enumerate(sandbox.domains.values(), 1))
            csv_file.write_text("rank,domain\n" + "\n".join(rows) + "\n")
            world = {
                "redis": redis.Redis(port=redis_port),
                "mongo": pymongo.MongoClient(f"mongodb://127.0.0.1:{mongo_port}"),
                "csv": csv_file,
                "sandbox": sandbox,
                "truth": sandbox.truth(),
                "env": {
                    **os.environ,
                    "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
                    "MONGO_URI": f"mongodb://127.0.0.1:{mongo_port}",
                    "MONGO_SPILL_DIR": str(work / "spill"),
                },
            }
            print(f"sandbox: {sandbox.describe()}")
            pinned = f"worker on CPU {WORKER_CORE}, the rest on CPU {SERVERS_CORE}"
            print(f"pinning: {pinned if args.pin else 'none'}")
            rates = {}
            if args.only in (None, "ours"):
                rates["ours"] = measure("ours", False, args, world)
            if args.only in (None, "defaults"):
                rates["defaults"] = measure("scrapy-defaults", True, args, world)
            if len(rates) == 2:
                ratio = rates["ours"] / max(rates["defaults"], 0.001)
                print(f"\nours / Scrapy's defaults: {ratio:.2f}x domains/s (first 90%)")
        finally:
            runner.stop()
            redis_server.stop()
            mongo_server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
