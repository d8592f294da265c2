"""Pages per second of one `scrapy crawl profiles` worker, per scheduler, side by side.

Runs the same crawl of the sandbox (N profile pages, storage off so only scheduling and
downloading count) with (a) Scrapy's own in-memory scheduler, (b) stock scrapy-redis (pickle)
and (c) this project's scheduler settings, each against a fresh private Redis, and prints
pages/s and the ratios. Usage: python bench/scheduler_throughput.py [--pages 1500]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from crawler.services import ServerProcess, free_port, start_redis  # noqa: E402
from sandbox.data import build_dataset  # noqa: E402

VARIANTS: dict[str, dict[str, str]] = {
    "scrapy (memory)": {
        "SCHEDULER": "scrapy.core.scheduler.Scheduler",
        "DUPEFILTER_CLASS": "scrapy.dupefilters.RFPDupeFilter",
    },
    "scrapy-redis (stock)": {
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "SCHEDULER_SERIALIZER": "scrapy_redis.picklecompat",
        "REDIS_PARAMS": "{}",
    },
    "crawler (ours)": {},
}


def start_sandbox() -> tuple[ServerProcess, str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "sandbox", "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    url = process.stdout.readline().strip().removeprefix("sandbox listening on ")
    return ServerProcess("sandbox", process, 0), url


def user_entries(pages: int) -> list[str]:
    known = [author.unique_id for author in build_dataset().authors]
    missing = [f"missing.user{index}" for index in range(max(0, pages - len(known)))]
    return [json.dumps({"unique_id": name}) for name in (known + missing)[:pages]]


def run_variant(settings: dict[str, str], redis_url: str, sandbox: str, pages: int) -> float:
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    client.lpush("profiles:start_urls", *user_entries(pages))
    with tempfile.TemporaryDirectory() as tmp:
        stats_file = Path(tmp) / "stats.json"
        overrides = {
            "PROFILES_BASE_URL": sandbox,
            "ITEM_PIPELINES": "{}",
            "LOG_LEVEL": "WARNING",
            "CLOSESPIDER_PAGECOUNT": str(pages),
            "START_BATCH_SIZE": "200",
            "EXTENSIONS": json.dumps({"bench.scheduler_throughput.DumpStats": 0}),
            "BENCH_STATS_FILE": str(stats_file),
            **settings,
        }
        command = [sys.executable, "-m", "scrapy", "crawl", "profiles"]
        for name, value in overrides.items():
            command += ["-s", f"{name}={value}"]
        env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)}
        subprocess.run(command, cwd=ROOT, env=env, check=True)
        stats = json.loads(stats_file.read_text())
    return float(stats["response_received_count"]) / float(stats["elapsed_time_seconds"])


class DumpStats:
    """Writes the crawl's final stats to BENCH_STATS_FILE (loaded in the crawl process)."""

    def __init__(self, crawler: Any) -> None:
        from scrapy import signals

        self.crawler = crawler
        crawler.signals.connect(self.closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Any) -> DumpStats:
        return cls(crawler)

    def closed(self) -> None:
        stats = {
            k: v for k, v in self.crawler.stats.get_stats().items() if isinstance(v, int | float)
        }
        Path(self.crawler.settings.get("BENCH_STATS_FILE")).write_text(json.dumps(stats))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pages", type=int, default=1500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        redis_server = start_redis(port, Path(tmp))
        sandbox, sandbox_url = start_sandbox()
        try:
            rates = {
                name: run_variant(settings, f"redis://127.0.0.1:{port}/0", sandbox_url, args.pages)
                for name, settings in VARIANTS.items()
            }
        finally:
            sandbox.stop()
            redis_server.stop()
    baseline = rates["scrapy (memory)"]
    print(f"\n{args.pages} profile pages, one worker, storage off")
    for name, rate in rates.items():
        print(f"  {name:<22} {rate:8.1f} pages/s   {rate / baseline:5.2f}x scrapy (memory)")
    ours, stock = rates["crawler (ours)"], rates["scrapy-redis (stock)"]
    print(f"  ours / stock scrapy-redis: {ours / stock:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
