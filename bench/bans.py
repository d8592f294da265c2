"""A shop that bans: Scrapy's defaults against this project's ban handling, side by side.

The sandbox is set up like the shop of TARGETS.md §4 ("no delay: blocked after ~40 requests;
10 s or more: 200+ with no block; a block lasted 30+ minutes"): each client address may send
40 requests in any 60 s, the next one gets it banned, and a ban lasts --ban-seconds (default
120 s: long next to the crawl, short enough for a benchmark). The same workload, the
``profiles`` spider on N profile pages fed through ``profiles:start_urls``, then runs as a real
``scrapy crawl`` process twice, each time against a reset sandbox, an empty Redis database and
a new MongoDB database:

  scrapy defaults  our spider with Scrapy's stock behaviour: its in-memory scheduler
                   (start entries are still read from Redis, by the spider) and
                   duplicate filter, its RetryMiddleware (stock RETRY_TIMES and codes), no ban
                   detection, no politeness, no lease acknowledgements;
  ours             the project's defaults (frontier scheduler, ban detection, fleet-wide
                   politeness at POLITENESS_RATE per identity), sending from --identities
                   loopback addresses, with BAN_COOLDOWN = the ban's length.

Printed per variant: documents stored (with the status the sandbox gave the user), ban answers
the sandbox served, bans it issued, requests it received, from how many client addresses, the
most requests one address sent within any 60 s, when the sandbox gave its last answer and when
the crawl finished (both from process start; finishing includes Scrapy's idle checks and the
2 s of idleness before a worker closes).

Usage: python bench/bans.py [--users 120] [--ban-seconds 120] [--ban-mode 403]
       [--identities 8] [--timeout 240] [--logs DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pymongo  # noqa: E402
import redis  # noqa: E402

from crawler import settings as project_settings  # noqa: E402
from devtools.services import private_servers, start_sandbox  # noqa: E402
from sandbox.client import SandboxClient  # noqa: E402
from sandbox.config import BAN_MODES  # noqa: E402
from sandbox.seed import build_dataset  # noqa: E402

SPIDER = "profiles"
MAX_REQUESTS = 40
WINDOW_SECONDS = 60.0
IDLE_CLOSE_SECONDS = 2
# Scrapy's own retry defaults (the project retries more and leaves 429 to ban detection).
SCRAPY_RETRY_TIMES = 2
SCRAPY_RETRY_HTTP_CODES = "500,502,503,504,522,524,408,429"
# Acknowledges frontier leases; there are none under Scrapy's scheduler.
LEASE_SPIDER_MIDDLEWARE = "crawler.middlewares.LeaseSpiderMiddleware"
HTTP_COMPRESSION = "scrapy.downloadermiddlewares.httpcompression.HttpCompressionMiddleware"


@dataclass(frozen=True)
class Variant:
    name: str
    settings: dict[str, str]
    summary: str


@dataclass
class Result:
    variant: Variant
    seconds: float
    returncode: int | None  # None: killed after --timeout
    stored: int
    other_documents: int
    ban_answers: int
    bans_issued: int
    requests: int
    clients: int
    peak: int  # most requests from one client in any window of the shop's length
    last_answer: float  # seconds from the crawl's start to the sandbox's last answer


@dataclass(frozen=True)
class Bench:
    redis_url: str
    mongo_uri: str
    sandbox: SandboxClient
    users: list[str]
    expected_status: dict[str, str]
    timeout: float
    logs: Path
    keep_logs: bool


# --- servers --------------------------------------------------------------------------------


@contextmanager
def sandbox_server() -> Iterator[SandboxClient]:
    server, url = start_sandbox()
    try:
        yield SandboxClient(url)
    finally:
        server.stop()


def shop_config(ban_seconds: float, ban_mode: str) -> dict[str, Any]:
    return {
        "rate_limit": {
            "enabled": True,
            "max_requests": MAX_REQUESTS,
            "window_seconds": WINDOW_SECONDS,
            "ban_seconds": ban_seconds,
            "ban_mode": ban_mode,
        }
    }


# --- variants -------------------------------------------------------------------------------


def identities(count: int) -> list[str]:
    return [f"127.0.0.{2 + index}" for index in range(count)]


def variants(ban_seconds: float, addresses: list[str]) -> list[Variant]:
    rate, burst = project_settings.POLITENESS_RATE, project_settings.POLITENESS_BURST
    per_window = burst + rate * WINDOW_SECONDS
    ours: dict[str, str] = {"BAN_COOLDOWN": str(ban_seconds + 1)}
    if addresses:
        ours["BIND_ADDRESSES"] = ",".join(addresses)
    if len(addresses) > 1:
        sent_from = f"{len(addresses)} addresses ({addresses[0]}..{addresses[-1]})"
    else:
        sent_from = f"one address ({addresses[0] if addresses else '127.0.0.1'})"
    return [
        Variant(
            "scrapy defaults",
            {
                "SCHEDULER": "scrapy.core.scheduler.Scheduler",
                "DUPEFILTER_CLASS": "scrapy.dupefilters.RFPDupeFilter",
                "SPIDER_MIDDLEWARES": json.dumps({LEASE_SPIDER_MIDDLEWARE: None}),
                # Every project middleware named off (a run's dict adds to the project's), and
                # Scrapy's RetryMiddleware and HttpCompression where Scrapy puts them.
                "DOWNLOADER_MIDDLEWARES": json.dumps(
                    {
                        **dict.fromkeys(project_settings.DOWNLOADER_MIDDLEWARES),
                        "scrapy.downloadermiddlewares.retry.RetryMiddleware": 550,
                        HTTP_COMPRESSION: 590,
                    }
                ),
                "POLITENESS_RATE": "0",
                "RETRY_TIMES": str(SCRAPY_RETRY_TIMES),
                "RETRY_HTTP_CODES": SCRAPY_RETRY_HTTP_CODES,
            },
            "in-memory scheduler, RetryMiddleware, no ban detection, no delay, "
            f"CONCURRENT_REQUESTS={project_settings.CONCURRENT_REQUESTS} "
            f"(per domain {project_settings.CONCURRENT_REQUESTS_PER_DOMAIN}), one address",
        ),
        Variant(
            "ours",
            ours,
            f"project defaults, POLITENESS_RATE={rate:g}/s and BURST={burst:g} per identity "
            f"(at most {per_window:g} requests per {WINDOW_SECONDS:g} s each, the shop allows "
            f"{MAX_REQUESTS}), {sent_from}, BAN_COOLDOWN={ban_seconds + 1:g}",
        ),
    ]


# --- one run --------------------------------------------------------------------------------


def prepare(bench: Bench, database: str) -> None:
    bench.sandbox.admin("reset", {})
    client = redis.Redis.from_url(bench.redis_url)
    try:
        client.flushdb()
        entries = [json.dumps({"unique_id": user}) for user in bench.users]
        client.lpush(f"{SPIDER}:start_urls", *entries)
    finally:
        client.close()
    with mongo_client(bench.mongo_uri) as mongo:
        mongo.drop_database(database)


def crawl_command(variant: Variant, sandbox_url: str) -> list[str]:
    settings = {
        "PROFILES_BASE_URL": sandbox_url,
        "MAX_IDLE_TIME_BEFORE_CLOSE": str(IDLE_CLOSE_SECONDS),
        **variant.settings,
    }
    command = [sys.executable, "-m", "scrapy", "crawl", SPIDER]
    for name, value in settings.items():
        command += ["-s", f"{name}={value}"]
    return command


def run_crawl(bench: Bench, variant: Variant, database: str, log: Path) -> tuple[float, int | None]:
    env = {
        **os.environ,
        "REDIS_URL": bench.redis_url,
        "MONGO_URI": bench.mongo_uri,
        "MONGO_DATABASE": database,
        "MONGO_SPILL_DIR": str(bench.logs / f"{database}.spill"),
        "PYTHONPATH": str(ROOT),
    }
    started = time.monotonic()
    with open(log, "wb") as output:
        process = subprocess.Popen(
            crawl_command(variant, bench.sandbox.url),
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        try:
            returncode: int | None = process.wait(timeout=bench.timeout)
        except subprocess.TimeoutExpired:
            returncode = None
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    return time.monotonic() - started, returncode


def run_variant(bench: Bench, variant: Variant) -> Result:
    database = "bench_bans_" + variant.name.replace(" ", "_")
    prepare(bench, database)
    log = bench.logs / f"{database}.log"
    shown = f" (log: {log})" if bench.keep_logs else ""
    print(f"running {variant.name}{shown} ...", flush=True)
    started = time.time()
    seconds, returncode = run_crawl(bench, variant, database, log)
    served = bench.sandbox.admin("stats")
    answers = served["requests"]
    stored, other = count_documents(bench, database)
    result = Result(
        variant=variant,
        seconds=seconds,
        returncode=returncode,
        stored=stored,
        other_documents=other,
        ban_answers=int(served["bans"]["responses"]),
        bans_issued=int(served["bans"]["issued"]),
        requests=int(served["total"]),
        clients=len(served["by_client"]),
        peak=peak_per_window(answers),
        last_answer=max((float(a["t"]) for a in answers), default=started) - started,
    )
    if returncode != 0:
        print(f"  {variant.name}: exit status {returncode}; end of its log:")
        print(tail(log, 25))
    return result


def peak_per_window(answers: list[dict[str, Any]]) -> int:
    """Most requests one client sent within any WINDOW_SECONDS (from the sandbox's log)."""
    by_client: dict[str, list[float]] = {}
    for answer in answers:
        by_client.setdefault(str(answer["client"]), []).append(float(answer["t"]))
    peak = 0
    for times in by_client.values():
        times.sort()
        first = 0
        for last, moment in enumerate(times):
            while moment - times[first] >= WINDOW_SECONDS:
                first += 1
            peak = max(peak, last - first + 1)
    return peak


@contextmanager
def mongo_client(uri: str) -> Iterator[pymongo.MongoClient[dict[str, Any]]]:
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(
        uri, serverSelectionTimeoutMS=10_000
    )
    try:
        yield client
    finally:
        client.close()


def count_documents(bench: Bench, database: str) -> tuple[int, int]:
    """(documents that are a requested user with the sandbox's status for it, any others)."""
    stored = other = 0
    with mongo_client(bench.mongo_uri) as mongo:
        for doc in mongo[database][SPIDER].find({}, {"unique_id": 1, "status": 1}):
            expected = bench.expected_status.get(str(doc.get("unique_id")))
            if expected is not None and doc.get("status") == expected:
                stored += 1
            else:
                other += 1
    return stored, other


def tail(path: Path, lines: int) -> str:
    text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join("    " + line for line in text[-lines:])


# --- report ---------------------------------------------------------------------------------


def report(results: list[Result], users: int, ban_seconds: float, ban_mode: str) -> None:
    print(
        f"\nShop-like sandbox: {MAX_REQUESTS} requests per {WINDOW_SECONDS:g} s per client "
        f"address, then banned for {ban_seconds:g} s ({ban_mode} answers; the shop's block "
        f"lasted 30+ minutes, shortened to keep the bench short); {users} profile pages"
    )
    for result in results:
        print(f"  {result.variant.name}: {result.variant.summary}")
    print(
        f"\n  {'variant':<16} {'stored':>9} {'ban answers':>12} {'bans issued':>12} "
        f"{'requests':>9} {'clients':>8} {'peak/' + f'{WINDOW_SECONDS:g}s':>9} "
        f"{'last answer':>12} {'finished':>9}"
    )
    for result in results:
        finished = "" if result.returncode == 0 else f"  (exit {result.returncode})"
        if result.returncode is None:
            finished = "  (killed after the timeout)"
        print(
            f"  {result.variant.name:<16} {f'{result.stored}/{users}':>9} "
            f"{result.ban_answers:>12} {result.bans_issued:>12} {result.requests:>9} "
            f"{result.clients:>8} {result.peak:>9} {result.last_answer:>10.1f} s "
            f"{result.seconds:>7.1f} s{finished}"
        )
        if result.other_documents:
            print(f"  {'':<16} + {result.other_documents} documents that are not the pages")
    print()
    print(comparison(results, users))


def comparison(results: list[Result], users: int) -> str:
    stock, ours = results
    ratio = f" ({ours.stored / stock.stored:.1f}x)" if stock.stored else ""
    return (
        f"ours vs scrapy defaults: {ours.stored} vs {stock.stored} of {users} documents{ratio}, "
        f"{ours.ban_answers} ban answers vs {stock.ban_answers}, "
        f"{ours.bans_issued} bans vs {stock.bans_issued}, "
        f"in {ours.seconds:.0f} s vs {stock.seconds:.0f} s"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--users", type=int, default=120, help="profile pages (at most 300)")
    parser.add_argument("--ban-seconds", type=float, default=120.0)
    parser.add_argument("--ban-mode", default="403", choices=BAN_MODES)
    parser.add_argument(
        "--identities",
        type=int,
        default=8,
        help="loopback addresses ours sends from (0: only 127.0.0.1)",
    )
    parser.add_argument("--timeout", type=float, default=240.0, help="per crawl, in seconds")
    parser.add_argument("--logs", type=Path, help="keep the crawl logs here")
    args = parser.parse_args()
    authors = build_dataset().authors[: args.users]
    if args.users < 1 or len(authors) < args.users:
        parser.error(f"--users must be 1..{len(build_dataset().authors)}")
    if not 0 <= args.identities <= 200:
        parser.error("--identities must be 0..200")
    with tempfile.TemporaryDirectory() as tmp:
        logs = args.logs or Path(tmp) / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with private_servers(Path(tmp)) as (redis_url, mongo_uri), sandbox_server() as sandbox:
            sandbox.admin("config", shop_config(args.ban_seconds, args.ban_mode))
            bench = Bench(
                redis_url=redis_url,
                mongo_uri=mongo_uri,
                sandbox=sandbox,
                users=[author.unique_id for author in authors],
                expected_status={author.unique_id: author.state for author in authors},
                timeout=args.timeout,
                logs=logs,
                keep_logs=args.logs is not None,
            )
            chosen = variants(args.ban_seconds, identities(args.identities))
            results = [run_variant(bench, variant) for variant in chosen]
        report(results, args.users, args.ban_seconds, args.ban_mode)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
