"""`make demo`: crawl the sandbox with explore, then profiles, through Redis into MongoDB.

Starts what is missing (local Redis and MongoDB unless REDIS_URL / MONGO_URI are set, and the
sandbox site), wipes the two spiders' previous Redis state, seeds explore start entries, runs
``scrapy crawl explore`` and ``scrapy crawl profiles`` as real processes, prints a summary and
stops what it started. The stored documents stay in MongoDB.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from urllib.request import Request, urlopen

import pymongo
from scrapy.settings import Settings
from scrapy.utils.project import get_project_settings

from crawler.config import mask_uri
from crawler.connection import redis_from_settings
from crawler.scheduling.state import purge_spider
from crawler.services import DEFAULT_STATE_DIR, ServiceError, down, services, start_sandbox, up
from crawler.spiders.explore import CATEGORIES

SPIDERS = ("explore", "profiles")
# Every category, two pages each, plus one entry that is not a category: it is set aside.
SEED_ENTRIES = [
    *(
        json.dumps({"category": category, "max_pages": 2})
        for category in CATEGORIES
        if category != 120
    ),
    "not-a-category",
]
# A little weather: 3% of sandbox responses are 503s, which the crawl retries.
SANDBOX_CONFIG = {"faults": {"error_rate": 0.03, "seed": 3}}
# The demo sends from eight loopback addresses: eight identities, each within the default
# politeness rate, as a fleet spread over several IPs would.
BIND_ADDRESSES = [f"127.0.0.{n}" for n in range(2, 10)]
SUMMARY_STATS = (
    "downloader/request_count",
    "downloader/response_count",
    "downloader/response_status_count/200",
    "downloader/response_status_count/503",
    "retry/count",
    "ban/count",
    "item_scraped_count",
    "start/entries",
    "explore/authors_handed",
)


def say(message: str) -> None:
    print(f"[demo] {message}", flush=True)


@contextmanager
def local_services(state_dir: Path) -> Iterator[None]:
    """Start the local services that are not running yet; stop those again afterwards."""
    started = []
    for service in services(6379, 27017, state_dir):
        message = up(service)
        say(message)
        if ": started" in message:
            started.append(service)
    try:
        yield
    finally:
        for service in started:
            say(down(service))


@contextmanager
def sandbox_site(log_path: Path) -> Iterator[str]:
    """The sandbox on a free port, with its anti-bot config; yields its base URL."""
    try:
        server, url = start_sandbox(log=log_path)
    except ServiceError as exc:
        raise SystemExit(str(exc)) from exc
    _post_json(f"{url}/__admin__/config", SANDBOX_CONFIG)
    say(f"sandbox site at {url}")
    try:
        yield url
    finally:
        server.stop()


def _post_json(url: str, payload: dict[str, Any]) -> None:
    request = Request(
        url,
        data=json.dumps(payload).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urlopen(request, timeout=10):
        pass


def run_spider(name: str, sandbox_url: str, log_dir: Path) -> None:
    log_path = log_dir / f"demo-{name}.log"
    command = [
        sys.executable,
        "-m",
        "scrapy",
        "crawl",
        name,
        "-s",
        f"EXPLORE_BASE_URL={sandbox_url}",
        "-s",
        f"PROFILES_BASE_URL={sandbox_url}",
        "-s",
        "MAX_IDLE_TIME_BEFORE_CLOSE=1",
        "-s",
        f"BIND_ADDRESSES={','.join(BIND_ADDRESSES)}",
    ]
    say(f"scrapy crawl {name}  (log: {log_path})")
    started = time.monotonic()
    with open(log_path, "w") as log:
        result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False)
    if result.returncode != 0:
        raise SystemExit(f"scrapy crawl {name} failed with {result.returncode}; see {log_path}")
    say(f"{name} finished in {time.monotonic() - started:.1f}s")


def summarize(settings: Settings) -> None:
    server = redis_from_settings(settings)
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(settings.get("MONGO_URI"))
    database = client[settings.get("MONGO_DATABASE")]
    print()
    say("summary")
    for collection in ("videos", "profiles"):
        print(f"  {collection:<9} {database[collection].count_documents({}):>5} documents")
    by_status = database["profiles"].aggregate([{"$group": {"_id": "$status", "n": {"$sum": 1}}}])
    print("  profiles by status: " + ", ".join(f"{row['_id']} {row['n']}" for row in by_status))
    print("  top profiles:")
    for doc in database["profiles"].find({"status": "ok"}).sort("follower_count", -1).limit(3):
        print(
            f"    @{doc['unique_id']:<22} {doc['nickname']!s:<14} "
            f"{doc['follower_count']:>9,} followers  {doc['video_count']:>4} videos"
        )
    for spider in SPIDERS:
        stats = {
            _text(key): _text(value)
            for key, value in server.hgetall("{" + spider + "}:stats").items()
        }
        shown = ", ".join(f"{key}={stats.get(key, 0)}" for key in SUMMARY_STATS)
        print(f"  {spider} stats: {shown}")
    invalid = settings.get("START_INVALID_KEY") % {"name": "explore"}
    print(
        f"  invalid start entries set aside: {server.llen(invalid)} "
        f"(redis-cli lrange {invalid} 0 -1)"
    )
    print(
        f"  data: {mask_uri(settings.get('MONGO_URI'))}, database "
        f"{settings.get('MONGO_DATABASE')!r}, collections videos and profiles"
    )
    client.close()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def main() -> int:
    settings = get_project_settings()
    state_dir = Path(os.environ.get("SERVICES_STATE_DIR", DEFAULT_STATE_DIR))
    state_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with ExitStack() as stack:
        stack.enter_context(local_services(state_dir))
        sandbox_url = stack.enter_context(sandbox_site(state_dir / "demo-sandbox.log"))
        server = redis_from_settings(settings)
        for spider in SPIDERS:
            purge_spider(server, settings, spider)
        server.lpush(settings.get("REDIS_START_URLS_KEY") % {"name": "explore"}, *SEED_ENTRIES)
        say(f"seeded {len(SEED_ENTRIES)} entries into explore:start_urls")
        for spider in SPIDERS:
            run_spider(spider, sandbox_url, state_dir)
        summarize(settings)
    say(
        f"done in {time.monotonic() - started:.0f}s. Local servers keep their data in "
        f"{state_dir}/: `python -m crawler.services up` serves it again."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
