"""`make demo`: crawl the sandbox with explore, then profiles, then a short maps search, through
Redis into MongoDB, with the fleet page to watch it.

    python -m devtools.demo [--quick] [--state-dir .services/demo]

Every server the demo talks to is one it starts itself, on free loopback ports: a Redis held in
memory for the demo's run only (so every run starts from an empty frontier and nothing is ever
purged), a MongoDB-wire server storing in ``<state-dir>/mongodb-data`` and the sandbox site.
A real fleet's environment (``REDIS_URL``, ``MONGO_URI``, ``MONGO_DATABASE``,
``MONGO_SPILL_DIR``, ``SCRAPY_*`` ...) is ignored. While they run, the two servers have pid files
in the state directory: the demo refuses to start while a server recorded there runs (one that
``python -m devtools.services up --state-dir <state-dir>`` started, or one left by a demo that was
killed; ``python -m devtools.services down --state-dir <state-dir>`` stops it), and refuses a
second demo on the same state directory.

It seeds explore and maps start entries, serves the fleet page (``scrapy status --serve``, on
127.0.0.1: its URL is printed first), runs ``scrapy crawl explore``, ``scrapy crawl profiles`` and
``scrapy crawl maps`` (a few places, in headless Chromium) as real processes, prints a summary and
stops its servers. The stored documents stay in the state directory:
``python -m devtools.services up --state-dir <state-dir>`` serves them again. ``--quick`` crawls
one category for one page and one search: a smoke run of a few seconds.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymongo
import redis
from scrapy.settings import Settings

from crawler.connection import reply_text
from crawler.keys import invalid_key, start_key, stats_key
from crawler.spiders.explore import CATEGORIES
from devtools.services import (
    DEFAULT_STATE_DIR,
    ServerProcess,
    ServiceError,
    free_port,
    services,
    start_mongo,
    start_redis,
    start_sandbox,
)
from sandbox.client import SandboxClient

SPIDERS = ("explore", "profiles", "maps")
DEMO_STATE_DIR = DEFAULT_STATE_DIR / "demo"
DATABASE = "crawler"
# Every category, two pages each, plus one entry that is not a category: it is set aside.
SEED_ENTRIES = [
    *(
        json.dumps({"category": category, "max_pages": 2})
        for category in CATEGORIES
        if category != 120
    ),
    "not-a-category",
]
QUICK_SEED_ENTRIES = [json.dumps({"category": 2, "max_pages": 1}), "not-a-category"]
# Two searches of the sandbox's map listings with a few places each, at most MAPS_RESULTS each.
MAPS_SEARCHES = ["pharmacy near 00544", "pharmacy near 01001"]
MAPS_RESULTS = 6
# A little weather: 3% of sandbox responses are 500s, which the crawl retries (a 503 would block
# the host for a minute: the circuit breaker, docs/politeness.md).
SANDBOX_CONFIG = {"faults": {"error_rate": 0.03, "error_status": 500, "seed": 3}}
# The demo sends from eight loopback addresses: eight identities, each within the default
# politeness rate, as a fleet spread over several IPs would (not maps: its browser cannot send
# from a chosen address, and the crawl refuses BIND_ADDRESSES, docs/politeness.md#identities).
BIND_ADDRESSES = [f"127.0.0.{n}" for n in range(2, 10)]
# What crawler/settings.py takes from the environment of a real fleet's workers: the demo's
# crawls never see the values a user exported, only the demo's own.
FLEET_ENVIRONMENT = (
    "REDIS_URL",
    "REDIS_CLUSTER",
    "MONGO_URI",
    "MONGO_DATABASE",
    "MONGO_SPILL_DIR",
    "METRICS_PORT",
    "METRICS_HOST",
)
SUMMARY_STATS = (
    "downloader/request_count",
    "downloader/response_count",
    "downloader/response_status_count/200",
    "downloader/response_status_count/500",
    "retry/count",
    "ban/count",
    "item_scraped_count",
    "start/entries",
    "explore/authors_handed",
    "maps/searches",
)


def say(message: str) -> None:
    print(f"[demo] {message}", flush=True)


@dataclass(frozen=True)
class Servers:
    """The demo's own Redis and MongoDB."""

    redis_url: str
    mongo_uri: str


@contextmanager
def demo_lock(state_dir: Path) -> Iterator[None]:
    """Hold the state directory for this demo; refuse if another demo holds it."""
    with open(state_dir / "demo.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SystemExit(f"another demo is running on {state_dir}") from None
        yield


def refuse_if_served(state_dir: Path) -> None:
    """Servers recorded in the state directory (pid files) would share the demo's data."""
    for service in services(0, 0, state_dir):
        running = service.running()
        if running:
            raise SystemExit(
                f"{service.name} (pid {running[0]}, port {running[1]}) runs on {state_dir}: "
                f"stop it first with `python -m devtools.services down --state-dir {state_dir}`"
            )


@contextmanager
def own_servers(state_dir: Path) -> Iterator[Servers]:
    """A memory-only Redis and a MongoDB storing in the state directory, on free ports."""
    refuse_if_served(state_dir)
    with ExitStack() as stack:
        redis_server = _start(
            stack,
            state_dir,
            "redis",
            lambda port: start_redis(
                port, state_dir, "--appendonly", "no", log=state_dir / "redis.log"
            ),
        )
        mongo_server = _start(
            stack,
            state_dir,
            "mongodb",
            lambda port: start_mongo(
                port, state_dir / "mongodb-data", log=state_dir / "mongodb.log"
            ),
        )
        yield Servers(
            f"redis://127.0.0.1:{redis_server.port}/0", f"mongodb://127.0.0.1:{mongo_server.port}"
        )


def _start(
    stack: ExitStack, state_dir: Path, name: str, starter: Callable[[int], ServerProcess]
) -> ServerProcess:
    """Start a server, record it in its pid file (as ``devtools.services`` does) until stopped."""
    try:
        server = starter(free_port())
    except ServiceError as exc:
        raise SystemExit(f"the demo's {name} did not start: {exc}") from exc
    pid_file = state_dir / f"{name}.pid"
    pid_file.write_text(f"{server.process.pid} {server.port}\n")
    stack.callback(pid_file.unlink, missing_ok=True)
    stack.callback(server.stop)
    say(f"{name} started (pid {server.process.pid}) on port {server.port}")
    return server


@contextmanager
def sandbox_site(log_path: Path) -> Iterator[str]:
    """The sandbox on a free port, with its anti-bot config; yields its base URL."""
    try:
        server, url = start_sandbox(log=log_path)
    except ServiceError as exc:
        raise SystemExit(str(exc)) from exc
    try:
        SandboxClient(url).admin("config", SANDBOX_CONFIG)
        say(f"sandbox site at {url}")
        yield url
    finally:
        server.stop()


def crawl_environment(servers: Servers, state_dir: Path) -> dict[str, str]:
    """This environment without a real fleet's settings, pointed at the demo's servers."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in FLEET_ENVIRONMENT and not name.startswith("SCRAPY_")
    }
    env.update(
        REDIS_URL=servers.redis_url,
        MONGO_URI=servers.mongo_uri,
        MONGO_DATABASE=DATABASE,
        MONGO_SPILL_DIR=str(state_dir / "spill"),
        SCRAPY_SETTINGS_MODULE="crawler.settings",
    )
    return env


def demo_settings(servers: Servers) -> Settings:
    """The project's settings aimed at the demo's servers, whatever the environment says."""
    settings = Settings()
    settings.setmodule("crawler.settings", priority="project")
    overrides = {"REDIS_URL": servers.redis_url, "REDIS_CLUSTER": False}
    overrides |= {"MONGO_URI": servers.mongo_uri, "MONGO_DATABASE": DATABASE}
    settings.setdict(overrides, priority="cmdline")
    return settings


@contextmanager
def fleet_page(state_dir: Path, env: dict[str, str]) -> Iterator[str]:
    """``scrapy status --serve`` on a free loopback port while the demo runs; yields its URL."""
    log = open(state_dir / "demo-fleet-page.log", "w")  # noqa: SIM115 (closed below)
    process = subprocess.Popen(
        [sys.executable, "-m", "scrapy", "status", "--serve", "0"],
        stdout=subprocess.PIPE,
        stderr=log,
        env=env,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        if not line.startswith("Fleet page at "):
            raise SystemExit(f"the fleet page did not start; see {log.name}")
        url = line.split()[3]
        say(f"fleet page at {url} (refreshes itself; open it in a browser)")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def run_spider(name: str, sandbox_url: str, state_dir: Path, env: dict[str, str]) -> None:
    log_path = state_dir / f"demo-{name}.log"
    command = [sys.executable, "-m", "scrapy", "crawl", name]
    for setting, value in {
        "EXPLORE_BASE_URL": sandbox_url,
        "PROFILES_BASE_URL": sandbox_url,
        "MAPS_BASE_URL": sandbox_url,
        "MAPS_MAX_RESULTS": MAPS_RESULTS,
        "MAX_IDLE_TIME_BEFORE_CLOSE": 1,
        "IDLE_POLL_INTERVAL": 0.2,  # each crawl ends ~1 s after its work, not up to 2 s
        "BIND_ADDRESSES": "" if name == "maps" else ",".join(BIND_ADDRESSES),
    }.items():
        command += ["-s", f"{setting}={value}"]
    say(f"scrapy crawl {name}  (log: {log_path})")
    started = time.monotonic()
    with open(log_path, "w") as log:
        result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, check=False)
    if result.returncode != 0:
        raise SystemExit(f"scrapy crawl {name} failed with {result.returncode}; see {log_path}")
    say(f"{name} finished in {time.monotonic() - started:.1f}s")


def summarize(settings: Settings) -> None:
    server = redis.Redis.from_url(settings.get("REDIS_URL"))
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(settings.get("MONGO_URI"))
    database = client[settings.get("MONGO_DATABASE")]
    print()
    say("summary")
    for collection in ("videos", "profiles", "places"):
        print(f"  {collection:<9} {database[collection].count_documents({}):>5} documents")
    by_status = database["profiles"].aggregate([{"$group": {"_id": "$status", "n": {"$sum": 1}}}])
    print("  profiles by status: " + ", ".join(f"{row['_id']} {row['n']}" for row in by_status))
    print("  top profiles:")
    for doc in database["profiles"].find({"status": "ok"}).sort("follower_count", -1).limit(3):
        print(
            f"    @{doc['unique_id']:<22} {doc['nickname']!s:<14} "
            f"{doc['follower_count']:>9,} followers  {doc['video_count']:>4} videos"
        )
    print("  places:")
    for doc in database["places"].find().sort("name", 1).limit(3):
        print(f"    {doc['name']!s:<24} rated {doc.get('rating')!s:<4} found by {doc['query']!r}")
    for spider in SPIDERS:
        stats = {
            reply_text(key): reply_text(value)
            for key, value in server.hgetall(stats_key(settings, spider)).items()
        }
        shown = ", ".join(f"{key}={stats.get(key, 0)}" for key in SUMMARY_STATS)
        print(f"  {spider} stats: {shown}")
    invalid = invalid_key(settings, "explore")
    for raw in server.lrange(invalid, 0, -1):
        record = json.loads(raw)
        print(f"  start entry set aside: {record['entry']!r} ({record['reason']})")
    client.close()
    server.close()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m devtools.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="one category, one page")
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=DEMO_STATE_DIR,
        help=f"where the demo's MongoDB stores and its logs go (default {DEMO_STATE_DIR})",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    state_dir: Path = args.state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    seeds = QUICK_SEED_ENTRIES if args.quick else SEED_ENTRIES
    searches = MAPS_SEARCHES[:1] if args.quick else MAPS_SEARCHES
    started = time.monotonic()
    with ExitStack() as stack:
        stack.enter_context(demo_lock(state_dir))
        servers = stack.enter_context(own_servers(state_dir))
        sandbox_url = stack.enter_context(sandbox_site(state_dir / "demo-sandbox.log"))
        settings = demo_settings(servers)
        with redis.Redis.from_url(servers.redis_url) as server:
            server.lpush(start_key(settings, "explore"), *seeds)
            server.lpush(start_key(settings, "maps"), *map(_search, searches))
        say(f"seeded {len(seeds)} entries into explore:start_urls, {len(searches)} into maps")
        env = crawl_environment(servers, state_dir)
        stack.enter_context(fleet_page(state_dir, env))
        for spider in SPIDERS:
            run_spider(spider, sandbox_url, state_dir, env)
        summarize(settings)
    say(
        f"done in {time.monotonic() - started:.0f}s. The documents stay in {state_dir}: "
        f"`python -m devtools.services up --state-dir {state_dir}` serves them again "
        f"(database {DATABASE!r}, collections videos, profiles and places)."
    )
    say(
        "more spiders, on your own targets (README, Spiders): `scrapy crawl links -a "
        "urls=https://example.org/` crawls whole sites breadth first into `pages`; `scrapy crawl "
        "domains -a file=top10m.csv` sweeps domains for liveness into `domains`; the sandbox "
        "serves both (`POST /__admin__/web`, `python -m sandbox.domains`)."
    )
    return 0


def _search(query: str) -> str:
    return json.dumps({"query": query})


if __name__ == "__main__":
    raise SystemExit(main())
