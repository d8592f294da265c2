"""The domains spider's sweep of the sandbox population, with its resolver and with Scrapy's
defaults, side by side.

The domains sandbox (sandbox/domains.py) serves DOMAINS fake domains on loopback: a DNS server
and web servers answering 200, 404, 5xx, slow pages (SLOW seconds), refused ports, TLS-only
hosts, broken TLS, redirects, parked pages, NXDOMAIN, SERVFAIL and silence. Both sweeps read
the same ``rank,domain`` CSV (``-a file=``) with one worker process each:

  (a) ``scrapy crawl domains`` as shipped: the asynchronous resolver (crawler/domains/
      resolver.py), DOMAINS_DNS_TIMEOUT 2 s with one retry, DOMAINS_DOWNLOAD_TIMEOUT 10 s;
  (b) the same spider with Scrapy's defaults: the thread-pool resolver (here a
      CachingThreadedResolver asking the sandbox's DNS server from the reactor's 10 threads,
      with glibc's default 5 s x 2 attempts), DOWNLOAD_TIMEOUT 180 s.

Printed per sweep: domains/s (domains stored / time from the first to the last stored),
classification accuracy against the ground truth, peak RSS of the worker, and where the time
goes (DNS seconds and queries, mean response time, Redis commands per domain).

Usage: python bench/domains.py [--domains 2000] [--slow 15] [--only ours|defaults]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dns.exception
import dns.nameserver
import dns.resolver
import pymongo
import redis
from scrapy.resolver import CachingThreadedResolver
from twisted.internet.threads import deferToThreadPool

from crawler.services import free_port, start_mongo, start_redis
from sandbox.domains import DomainsSandbox, SandboxThread
from sandbox.domains_population import build_population

ROOT = Path(__file__).resolve().parents[1]
SEED_BAR = 167.0  # the seed's planned domains/s per worker
GLIBC_TIMEOUT, GLIBC_ATTEMPTS = 5.0, 2


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


def sweep_command(csv_file: Path, sandbox: DomainsSandbox, defaults: bool) -> list[str]:
    settings: dict[str, Any] = {
        "DOMAINS_NAMESERVERS": sandbox.nameserver,
        "DOMAINS_HTTP_PORT": sandbox.http_port,
        "DOMAINS_HTTPS_PORT": sandbox.https_port,
        "MAX_IDLE_TIME_BEFORE_CLOSE": 2,
        "LOG_LEVEL": "INFO",
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
        "scrapy",
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


def run_sweep(command: list[str], env: dict[str, str]) -> tuple[str, float]:
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    peak = 0.0
    log: list[str] = []
    assert process.stderr is not None
    for line in process.stderr:
        log.append(line)
        peak = max(peak, peak_rss_mib(process.pid))
    process.wait()
    return "".join(log[-400:]), peak


def stat(log: str, name: str) -> float:
    match = re.search(rf"'{re.escape(name)}': ([0-9.]+)", log)
    return float(match.group(1)) if match else 0.0


def measure(label: str, defaults: bool, args: argparse.Namespace, world: dict[str, Any]) -> None:
    client: redis.Redis = world["redis"]
    client.flushdb()
    client.config_resetstat()
    database = f"bench_{label}_{int(time.time())}"
    env = {**world["env"], "MONGO_DATABASE": database}
    command = sweep_command(world["csv"], world["sandbox"], defaults)
    started = time.monotonic()
    log, peak = run_sweep(command, env)
    elapsed = time.monotonic() - started
    documents = list(world["mongo"][database].domains.find())
    world["mongo"].drop_database(database)
    commands = sum(
        value["calls"]
        for key, value in client.info("commandstats").items()
        if key != "cmdstat_info"
    )
    report(label, documents, world["truth"], elapsed, peak, log, commands)
    fields = client.hlen("{domains}:stats")
    print(f"Redis state after   {client.dbsize()} keys, {fields} fields in {{domains}}:stats")


def report(
    label: str,
    documents: list[dict[str, Any]],
    truth: dict[str, Any],
    elapsed: float,
    peak: float,
    log: str,
    redis_commands: int,
) -> None:
    stamps = sorted(document["checked_at"] for document in documents)
    span = (stamps[-1] - stamps[0]) if len(stamps) > 1 else elapsed
    right = sum(
        1
        for document in documents
        if (truth.get(document["domain"]) or {}).get("status") == document["status"]
    )
    count = max(1, len(documents))
    print(f"\n== {label}")
    print(f"domains stored      {len(documents)} of {len(truth)}, {right / count:.1%} as expected")
    print(f"sweep               {span:.1f} s first-to-last, {elapsed:.1f} s with start/stop")
    print(
        f"domains/s           {len(documents) / max(span, 0.001):.0f} (seed's bar {SEED_BAR:.0f})"
    )
    if len(stamps) > 20:
        ninety = stamps[int(len(stamps) * 0.9)] - stamps[0]
        print(f"domains/s, first 90% {0.9 * len(stamps) / max(ninety, 0.001):.0f}")
    print(f"peak RSS            {peak:.0f} MiB")
    dns_ms, queries = stat(log, "domains/dns/ms"), stat(log, "domains/dns/queries")
    if queries:
        print(f"DNS                 {queries:.0f} queries, {dns_ms / 1000:.1f} s waited in total")
    response_ms = stat(log, "domains/response_ms")
    answers = max(1.0, stat(log, "downloader/response_count"))
    print(f"HTTP                mean response time {response_ms / answers:.0f} ms")
    print(f"Redis               {redis_commands / count:.1f} commands per domain")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/domains.py", description=__doc__)
    parser.add_argument("--domains", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--slow", type=float, default=15.0, help="seconds slow domains wait")
    parser.add_argument("--only", choices=("ours", "defaults"))
    args = parser.parse_args(argv)
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
            if args.only in (None, "ours"):
                measure("ours", False, args, world)
            if args.only in (None, "defaults"):
                measure("scrapy-defaults", True, args, world)
        finally:
            runner.stop()
            redis_server.stop()
            mongo_server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
