"""The autoscaler's figures: its step response, and a crawl finished by a deadline planned from
the measured pace.

    python bench/autoscale.py [--backlog 50000] [--per-worker 5000] [--max 8] [--cooldown 5]
                              [--interval 1] [--pages 20000] [--calibration 3000]

1. Step response: a backlog stepping 0 -> ``--backlog`` -> 0 requests (on 400 hosts without a
   rate, in a fresh Redis) with ``--per-worker`` ready requests per worker (the pace assumed,
   AUTOSCALE_WORKER_PACE, times AUTOSCALE_BACKLOG_SECONDS) and ``--max`` workers at most: the
   polls the autoscaler takes to reach the maximum, and the seconds to reach 0 after the step
   down (target: within 2 polls, and within the cool-down plus one poll). The engine starts and
   stops workers at once, on a clock advanced one interval per poll: the figure is the rule's.
2. By a deadline: two workers crawl ``--calibration`` profiles (the sandbox's missing users,
   one page each) and the fleet's pace is read as the gauges read it (pages per busy
   worker-second); the deadline is set to what two workers need for ``--pages`` at that pace,
   ``scrapy fleet plan``'s rule gives the workers, as many ``scrapy crawl`` processes crawl the
   pages, and the bench prints when they finished against the deadline (target: within 15%)
   and their worker-seconds against the minimum, pages over pace (target: at most 1.2x).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
from scrapy.settings import Settings  # noqa: E402

from crawler import settings as project_settings  # noqa: E402
from crawler.fleet.autoscaler import Autoscaler, Member  # noqa: E402
from crawler.fleet.local import LocalWorkers  # noqa: E402
from crawler.fleet.measure import fleet_sizing  # noqa: E402
from crawler.fleet.plan import explain, plan  # noqa: E402
from crawler.frontier.dupefilter import DupefilterConfig  # noqa: E402
from crawler.frontier.queue import Frontier, Pending  # noqa: E402
from crawler.keys import FrontierKeys  # noqa: E402
from devtools.services import free_port, start_mongo, start_redis, start_sandbox  # noqa: E402

HOSTS = 400


class InstantEngine:
    """Workers that start and stop the moment they are told."""

    errors: tuple[type[Exception], ...] = ()

    def __init__(self) -> None:
        self.workers: list[Member] = []
        self.count = 0

    def members(self) -> list[Member]:
        return list(self.workers)

    def start(self, count: int) -> list[str]:
        ids = [f"w{self.count + n}" for n in range(count)]
        self.count += count
        self.workers += [Member(worker, time.time()) for worker in ids]
        return ids

    def stop(self, ids: list[str]) -> None:
        self.workers = [member for member in self.workers if member.id not in ids]


def _settings(values: dict[str, Any]) -> Settings:
    settings = Settings()
    settings.setmodule(project_settings, priority="default")
    settings.setdict(values, priority="cmdline")
    return settings


def _fill(server: redis.Redis, spider: str, count: int) -> None:
    frontier = Frontier(
        server, FrontierKeys(spider, f"{spider}:start_urls"), DupefilterConfig("none")
    )
    for first in range(0, count, 2000):
        batch = []
        for n in range(first, min(count, first + 2000)):
            url = f"http://h{n % HOSTS}.example/p/{n}"
            record = json.dumps({"u": url, "c": "parse"}, separators=(",", ":"))
            batch.append(Pending(record, hashlib.sha1(url.encode()).digest()[:8]))
        frontier.schedule(batch)


def step_response(server: redis.Redis, args: argparse.Namespace) -> None:
    spider, clock = "steps", [0.0]
    settings = _settings({
        "POLITENESS_RATE": 0, "AUTOSCALE_BACKLOG_SECONDS": 100,
        "AUTOSCALE_WORKER_PACE": args.per_worker / 100, "AUTOSCALE_MAX_WORKERS": args.max,
        "AUTOSCALE_MIN_WORKERS": 0,
    })  # fmt: skip
    engine = InstantEngine()
    scaler = Autoscaler(
        engine, lambda: fleet_sizing(server, settings, spider).wanted, args.cooldown,
        clock=lambda: clock[0],
    )  # fmt: skip

    def poll() -> int:
        scaler.step()
        clock[0] += args.interval
        return len(engine.workers)

    idle = [poll() for _ in range(3)]
    _fill(server, spider, args.backlog)
    up = next(n for n in range(1, 20) if poll() == args.max)
    server.flushdb()
    down_at = clock[0]
    while poll():
        if clock[0] - down_at > args.cooldown + 10 * args.interval:
            break
    down = clock[0] - down_at
    print(f"step response: idle {idle}; 0 -> {args.backlog:,} requests ({args.per_worker:,} a "
          f"worker, max {args.max}): {args.max} workers after {up} poll(s) (target <= 2); "
          f"{args.backlog:,} -> 0: no worker after {down:.1f} s (cool-down {args.cooldown:g} s + "
          f"poll {args.interval:g} s = {args.cooldown + args.interval:g} s)")  # fmt: skip


def _crawl_env(redis_url: str, mongo_uri: str) -> dict[str, str]:
    import os

    return {**os.environ, "REDIS_URL": redis_url, "MONGO_URI": mongo_uri,
            "MONGO_DATABASE": "bench_autoscale"}  # fmt: skip


def _command(sandbox_url: str) -> list[str]:
    settings = {
        "PROFILES_BASE_URL": sandbox_url, "POLITENESS_RATE": 0, "MAX_IDLE_TIME_BEFORE_CLOSE": 2,
        "IDLE_POLL_INTERVAL": 0.2, "MONGO_FLUSH_INTERVAL": 0.1, "STATS_PUBLISH_INTERVAL": 1,
        "LOG_LEVEL": "WARNING", "RECRAWL_ENABLED": False,
    }  # fmt: skip
    command = [sys.executable, "-m", "scrapy", "crawl", "profiles"]
    for name, value in settings.items():
        command += ["-s", f"{name}={value}"]
    return command


def _run(workers: int, command: list[str], env: dict[str, str], logs: Path) -> tuple[float, float]:
    """Seconds until ``workers`` processes finished the work, and their worker-seconds."""
    fleet = LocalWorkers(command, dict, logs, env)
    began = time.monotonic()
    fleet.start(workers)
    ends: dict[str, float] = {}
    while fleet.running():
        time.sleep(0.2)
        for worker, status in fleet.reap().items():
            ends[worker] = time.monotonic()
            if status != 0:
                raise SystemExit(f"worker {worker} exited with {status}; logs in {logs}")
    for worker in fleet.reap():
        ends[worker] = time.monotonic()
    return max(ends.values()) - began, sum(end - began for end in ends.values())


def by_deadline(server: redis.Redis, env: dict[str, str], sandbox: str, args: Any) -> None:
    settings = _settings({"POLITENESS_RATE": 0})
    command, logs = _command(sandbox), Path(tempfile.mkdtemp(prefix="bench-autoscale-"))
    entries = [json.dumps({"unique_id": f"missing.cal.{n}"}) for n in range(args.calibration)]
    server.lpush("profiles:start_urls", *entries)
    _run(2, command, env, logs / "calibration")
    pace = fleet_sizing(server, settings, "profiles").pace
    entries = [json.dumps({"unique_id": f"missing.run.{n}"}) for n in range(args.pages)]
    server.lpush("profiles:start_urls", *entries)
    sizing = fleet_sizing(server, settings, "profiles")
    deadline = args.pages / (2 * pace)
    chosen = plan(args.pages, deadline, sizing)
    print("\n".join(f"  {line}" for line in explain(chosen)))
    took, worker_seconds = _run(chosen.workers, command, env, logs / "run")
    least = args.pages / pace
    print(f"by a deadline: {args.pages:,} pages, pace {pace:.1f} pages per worker-second "
          f"(measured over {args.calibration:,}), deadline {deadline:.1f} s, {chosen.workers} "
          f"workers: done in {took:.1f} s ({took / deadline - 1:+.0%} of the deadline, target "
          f"within 15%); {worker_seconds:.1f} worker-seconds, {worker_seconds / least:.2f}x the "
          f"minimum {least:.1f} (target <= 1.2x)")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backlog", type=int, default=50_000)
    parser.add_argument("--per-worker", type=int, default=5_000)
    parser.add_argument("--max", type=int, default=8)
    parser.add_argument("--cooldown", type=float, default=5.0)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--pages", type=int, default=20_000)
    parser.add_argument("--calibration", type=int, default=3_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        tmp = Path(directory)
        redis_server = start_redis(free_port(), tmp / "redis")
        mongo_server = start_mongo(free_port(), tmp / "mongo")
        sandbox, sandbox_url = start_sandbox()
        try:
            redis_url = f"redis://127.0.0.1:{redis_server.port}/0"
            server = redis.Redis.from_url(redis_url)
            step_response(server, args)
            server.flushdb()
            env = _crawl_env(redis_url, f"mongodb://127.0.0.1:{mongo_server.port}")
            by_deadline(server, env, sandbox_url, args)
        finally:
            sandbox.stop()
            mongo_server.stop()
            redis_server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
