"""Redis round trips and commands per page, per spider and per path, end to end.

    python bench/redis_round_trips.py [--profiles 120] [--rates default,20]
                                      [--spiders profiles,explore] [--categories 1,2,...,120]

Each spider (``profiles`` on sandbox users: 300, beyond which ``--profiles`` adds users the
sandbox does not know, one page each, ``explore`` on every category of the sandbox:
82 pages; ``--categories 120`` is its largest, one chain of 38 pages)
runs as a real ``scrapy crawl`` process against the sandbox, a fresh Redis and the MongoDB
wire-protocol server, with the project's settings: frontier, ban detection and fleet-wide
politeness on. Only POLITENESS_RATE differs between runs: its default (0.5 requests/s per
domain and identity: the sandbox is one domain, so the crawl takes ~2 s a page) and the rates
given.

A probe in the crawl process counts each round trip (a command, or a pipeline, sent and its
reply awaited) and each command from the process's start (``scrapy crawl``'s check of Redis and
any connection handshake included), and names its path by the keys it touches: frontier (queue,
leases, duplicate filter, start entries), politeness (token buckets, cool-downs), stats (the
fleet's counters, heartbeats), hand-off (explore's authors for profiles) or other; a pipeline is
named by all of its paths ("frontier+stats"). Also printed: the steady state (round trips per
page between the 10th and the 90th percentile of the pages' arrival), the round trips before
the first page arrived (start-up) and after the last (close), and the crawl process's CPU
seconds (user + system, its start-up included) per page. There is no target: the figures are
a record to compare changes against (docs/benchmarks.md has the last). BENCH_VERBOSE=1 also
prints the round trips by caller; BENCH_TRACE=file appends
one line per round trip to the file (seconds since the crawl started, caller, commands, the
frontier's scripts by name; with BENCH_STACK=1, up to four callers).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
from scrapy import signals  # noqa: E402

from crawler import settings as project  # noqa: E402
from devtools.services import free_port, start_mongo, start_redis, start_sandbox  # noqa: E402
from sandbox.data import ALL_CATEGORY, CATEGORIES  # noqa: E402
from sandbox.seed import build_dataset  # noqa: E402

MODULE = "bench.redis_round_trips"
_COUNTS: Counter[str] = Counter()
_pending_path = ["other"]
_TRIP_TIMES: list[float] = []  # monotonic time of each round trip
_pending_names = [""]
_INSTALLED: list[bool] = []


def _script(command: Any) -> str:
    """A script call's name (the frontier's, by its text) or first key, for the trace."""
    if command[0] == "EVAL" and len(command) > 3:
        text = command[1].decode() if isinstance(command[1], bytes) else str(command[1])
        return f"[{_SCRIPT_NAMES.get(text) or command[3]!s}]"
    if command[0] in ("EVALSHA", "FCALL") and len(command) > 3:
        return f"[{command[3]!s}]"
    return ""


def _script_names() -> dict[str, str]:
    from crawler.frontier import lua

    names = (
        "SCHEDULE",
        "POP",
        "CREDIT",
        "SETTLE",
        "QUEUED",
        "POP_START",
        "HAND_OVER",
        "TAKE",
    )
    return {getattr(lua, name): name.lower() for name in names}


_SCRIPT_NAMES = _script_names()


def path_of(args: tuple[Any, ...]) -> str:
    """The path a command belongs to, from the names of the keys it carries."""
    text = " ".join(str(arg) for arg in args[1:6] if isinstance(arg, str | bytes))
    if ":rate:" in text or "}:bans" in text:
        return "politeness"
    if "}:handed" in text:
        return "hand-off"
    if "}:stats" in text or "}:workers" in text:
        return "stats"
    if "}:" in text or "start_urls" in text:
        return "frontier"
    return "other"


def launch() -> None:
    """``scrapy`` with the counters installed first: the round trips ``scrapy crawl`` makes
    before the crawler starts (its check of the frontier's Redis) are counted too."""
    from scrapy.cmdline import execute

    install_counters()
    execute(["scrapy", *sys.argv[1:]])


def install_counters() -> None:
    """Count round trips and commands per path in this process (wraps redis-py's connection)."""
    from redis.connection import AbstractConnection

    if _INSTALLED:
        return
    _INSTALLED.append(True)

    send_packed: Callable[..., Any] = AbstractConnection.send_packed_command
    send_command: Callable[..., Any] = AbstractConnection.send_command
    pack_commands: Callable[..., Any] = AbstractConnection.pack_commands

    trace = os.environ.get("BENCH_TRACE")
    started = time.monotonic()

    def counted_send_packed(self: Any, command: Any, check_health: bool = True) -> Any:
        _COUNTS["rt:" + _pending_path[0]] += 1
        _TRIP_TIMES.append(time.monotonic())
        caller = _caller()
        _COUNTS["site:" + caller] += 1
        if trace:  # one line a round trip: seconds since start, caller, commands
            with open(trace, "a") as out:
                out.write(f"{time.monotonic() - started:8.2f} {caller} {_pending_names[0]}\n")
        return send_packed(self, command, check_health)

    def counted_send_command(self: Any, *args: Any, **kwargs: Any) -> Any:
        _pending_path[0] = path_of(args)
        _pending_names[0] = str(args[0])
        _COUNTS["cmd:" + _pending_path[0]] += 1
        _COUNTS[f"name:{_pending_path[0]}:{args[0]}"] += 1
        return send_command(self, *args, **kwargs)

    def counted_pack_commands(self: Any, commands: Any) -> Any:
        commands = list(commands)
        paths = sorted({path_of(tuple(command)) for command in commands})
        _COUNTS.update("cmd:" + path_of(tuple(command)) for command in commands)
        _COUNTS.update(f"name:{path_of(tuple(c))}:{c[0]}" for c in commands)
        _pending_path[0] = "+".join(paths) if paths else "other"
        _pending_names[0] = ",".join(f"{c[0]}{_script(c)}" for c in commands)
        return pack_commands(self, commands)

    setattr(AbstractConnection, "send_packed_command", counted_send_packed)  # noqa: B010
    setattr(AbstractConnection, "send_command", counted_send_command)  # noqa: B010
    setattr(AbstractConnection, "pack_commands", counted_pack_commands)  # noqa: B010


def _caller() -> str:
    """The project function a round trip comes from (module:function)."""
    import traceback

    frames = []
    for frame in reversed(traceback.extract_stack(limit=30)):
        name = frame.filename.replace(os.sep, "/")
        if "/crawler/" in name and not name.endswith(("/connection.py", "/queue.py", "/lua.py")):
            frames.append(name.split("/crawler/", 1)[1] + ":" + frame.name)
    return "<".join(frames[:4]) if os.environ.get("BENCH_STACK") else (frames or ["?"])[0]


def steady_state(pages: list[float], trips: list[float]) -> float | None:
    """Round trips per page from the 10th to the 90th percentile of the pages' arrival: the
    crawl once started and before its close (what a long crawl costs per page)."""
    if len(pages) < 20:
        return None
    first, last = pages[len(pages) // 10], pages[len(pages) * 9 // 10]
    within = sum(first < trip <= last for trip in trips)
    return within / (len(pages) * 9 // 10 - len(pages) // 10)


def edges(pages: list[float], trips: list[float]) -> tuple[int, int]:
    """Round trips before the first page arrived (start-up) and after the last (close)."""
    if not pages:
        return len(trips), 0
    return sum(trip < pages[0] for trip in trips), sum(trip > pages[-1] for trip in trips)


class RoundTripProbe:
    """Extension: counts Redis traffic of the crawl, writes it and the page count to a file."""

    def __init__(self, crawler: Any) -> None:
        install_counters()
        self.crawler = crawler
        self.idle = 0
        self.page_times: list[float] = []
        crawler.signals.connect(self.engine_stopped, signal=signals.engine_stopped)
        crawler.signals.connect(self.spider_idle, signal=signals.spider_idle)
        crawler.signals.connect(self.response_received, signal=signals.response_received)

    def response_received(self) -> None:
        self.page_times.append(time.monotonic())

    @classmethod
    def from_crawler(cls, crawler: Any) -> RoundTripProbe:
        return cls(crawler)

    def spider_idle(self) -> None:
        self.idle += 1

    def engine_stopped(self) -> None:
        stats = self.crawler.stats
        pages = stats.get_value("response_received_count", 0)
        deferred = stats.get_value("politeness/deferred/rate", 0)
        result = {
            "pages": pages,
            "deferred": deferred,
            "pause_reads": stats.get_value("frontier/pause_reads", 0),
            "idle": self.idle,
            "counts": dict(_COUNTS),
            "steady": steady_state(self.page_times, _TRIP_TIMES),
            "edges": edges(self.page_times, _TRIP_TIMES),
        }
        Path(self.crawler.settings.get("ROUND_TRIP_FILE")).write_text(json.dumps(result))


def crawl(
    spider: str, args: list[str], rate: str, servers: dict[str, str], tmp: Path
) -> dict[str, Any]:
    out = tmp / f"{spider}-{rate}.json"
    settings = {
        "EXPLORE_BASE_URL": servers["sandbox"],
        "PROFILES_BASE_URL": servers["sandbox"],
        "MAX_IDLE_TIME_BEFORE_CLOSE": "1",
        # The project's extensions (the stats publisher among them) and the probe.
        "EXTENSIONS": json.dumps({**project.EXTENSIONS, f"{MODULE}.RoundTripProbe": 1000}),
        "ROUND_TRIP_FILE": str(out),
        "LOG_LEVEL": "WARNING",
    }
    if rate != "default":
        settings["POLITENESS_RATE"] = rate
    command = [sys.executable, "-c", f"from {MODULE} import launch; launch()"]
    command += ["crawl", spider, *args]
    for name, value in settings.items():
        command += ["-s", f"{name}={value}"]
    env = {
        **os.environ,
        "REDIS_URL": servers["redis"],
        "MONGO_URI": servers["mongo"],
        "MONGO_DATABASE": f"bench_{spider}_{rate}".replace(".", "_"),
        "MONGO_SPILL_DIR": str(tmp / "spill"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600, check=False
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0 or not out.exists():
        raise SystemExit(f"{spider} at rate {rate}: exit {done.returncode}\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.read_text())
    # The crawl process's CPU (user + system), start-up (imports) included.
    result["cpu"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return result


def report(spider: str, rate: str, result: dict[str, Any]) -> float:
    pages = max(1, int(result["pages"]))
    counts: dict[str, int] = result["counts"]
    trips = sum(value for key, value in counts.items() if key.startswith("rt:"))
    commands = sum(value for key, value in counts.items() if key.startswith("cmd:"))
    by_path = sorted(
        ((key[3:], value) for key, value in counts.items() if key.startswith("rt:")),
        key=lambda item: -item[1],
    )
    paths = ", ".join(f"{name} {value / pages:.2f}" for name, value in by_path)
    steady = result.get("steady")
    start, close = result.get("edges", (0, 0))
    cpu = float(result.get("cpu", 0.0))
    print(
        f"{spider:9} rate {rate:>8}: {pages:5} pages  {trips:6} round trips  "
        f"{cpu:7.2f} CPU s ({1000 * cpu / pages:.1f} ms/page)"
    )
    print(
        f"{spider:9} rate {rate:>8}: {pages:5} pages  {trips / pages:6.2f} round trips/page "
        f"(steady state {'-' if steady is None else f'{steady:.2f}'}; start-up {start}, "
        f"close {close}; {paths})  "
        f"{commands / pages:6.2f} commands/page, "
        f"{int(result.get('deferred', 0)) / pages:.1f} deferrals/page (rate), "
        f"{int(result.get('idle', 0)) / pages:.1f} idle checks/page"
    )
    if os.environ.get("BENCH_VERBOSE"):
        sites = {k[5:]: v for k, v in counts.items() if k.startswith("site:")}
        print("    round trips by caller:", sorted(sites.items(), key=lambda item: -item[1]))
    return trips / pages


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", type=int, default=120)
    parser.add_argument("--categories", default=",".join(map(str, [*CATEGORIES, ALL_CATEGORY])))
    parser.add_argument("--rates", default="default,20")
    parser.add_argument("--spiders", default="profiles,explore")
    args = parser.parse_args()
    users = [author.unique_id for author in build_dataset().authors][: args.profiles]
    # Beyond the sandbox's authors, users it does not know: one page each (a missing user's).
    users += [f"bench_missing_{index}" for index in range(args.profiles - len(users))]
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        redis_server = start_redis(free_port(), tmp / "redis")
        mongo_server = start_mongo(free_port(), tmp / "mongo")
        sandbox, sandbox_url = start_sandbox()
        servers = {
            "redis": f"redis://127.0.0.1:{redis_server.port}/0",
            "mongo": f"mongodb://127.0.0.1:{mongo_server.port}",
            "sandbox": sandbox_url,
        }
        client = redis.Redis(port=redis_server.port)
        try:
            for rate in args.rates.split(","):
                for spider in args.spiders.split(","):
                    client.flushall()
                    if spider == "profiles":
                        client.lpush("profiles:start_urls", *users)
                    explore = spider == "explore"
                    spider_args = ["-a", f"categories={args.categories}"] if explore else []
                    result = crawl(spider, spider_args, rate, servers, tmp)
                    report(spider, rate, result)
        finally:
            client.close()
            for server in (sandbox, mongo_server, redis_server):
                server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
