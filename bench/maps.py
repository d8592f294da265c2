"""The maps spider on a fixed listing set, with and without resource blocking, side by side.

The listing set is every category of ``sandbox.places`` in --postal-codes (default all five):
20 searches, each a feed the browser scrolls to its end, and every place page after it. Each
variant runs as a real ``scrapy crawl maps`` process against a fresh sandbox, an empty Redis
database and a new MongoDB database:

  blocked      the default: MAPS_BLOCKED_RESOURCE_TYPES = image, font, media
  unblocked    MAPS_BLOCKED_RESOURCE_TYPES empty (the browser loads everything)

Printed per variant: places stored / the places of the searches (``/__admin__/maps/searches``
of the sandbox), wall time of the crawls, places per minute, peak memory of
the browser (the sum of its processes' PSS, sampled every 0.2 s), the bytes of the documents and
feed batches the browser loaded (rendered again from the seeded data: the same in both
variants), the bytes of images, fonts and media the sandbox served (fixed sizes,
``ASSET_SIZES``), their total, and the ratio of the totals, unblocked / blocked. Place pages
are fetched over plain HTTP in both variants and are not counted. Searches that lost places are
listed, and the benchmark exits with 1 when a variant did not store exactly the sandbox's places.

Usage: python bench/maps.py [--postal-codes 00501,00544,01001,01002,01003] [--timeout 300]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pymongo  # noqa: E402
import redis  # noqa: E402

from devtools.services import private_servers, start_sandbox  # noqa: E402
from sandbox.maps import ASSET_SIZES, MapsPages  # noqa: E402
from sandbox.places import CATEGORIES, POSTAL_CODES  # noqa: E402
from tests.harness import Sandbox  # noqa: E402

ASSET_KINDS = {"/mapfiles/photo/": "photo", "/mapfiles/fonts/": "font", "/mapfiles/media/": "video"}


@dataclass
class Result:
    name: str
    places: int
    expected: int
    missing: dict[str, int]
    seconds: float
    peak_rss: int
    asset_bytes: int
    page_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.asset_bytes + self.page_bytes

    @property
    def per_minute(self) -> float:
        return self.places / self.seconds * 60 if self.seconds else 0.0


def browser_rss(root_pid: int) -> int:
    """Resident bytes of the Chromium processes under ``root_pid``."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        pid = int(entry.name)
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        names[pid] = name
        children.setdefault(int(rest.split()[1]), []).append(pid)
    total, stack = 0, list(children.get(root_pid, []))
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        if "chrom" in names.get(pid, ""):
            total += _rss(pid)
    return total


def _rss(pid: int) -> int:
    """Proportional set size (shared pages split between the processes sharing them)."""
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    for line in rollup.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return 0


def asset_bytes(by_path: dict[str, int]) -> int:
    total = 0
    for path, count in by_path.items():
        for prefix, kind in ASSET_KINDS.items():
            if path.startswith(prefix):
                total += count * ASSET_SIZES[kind]
    return total


def run(
    name: str,
    codes: str,
    extra: dict[str, Any],
    servers: tuple[str, str],
    timeout: float,
    logs: Path,
) -> Result:
    redis_url, mongo_uri = servers
    server, sandbox_url = start_sandbox()
    database = f"bench_maps_{name}"
    try:
        settings = {
            "MAPS_BASE_URL": sandbox_url,
            "MAX_IDLE_TIME_BEFORE_CLOSE": 1,
            "POLITENESS_RATE": 0,
            "LOG_LEVEL": "INFO",
            **extra,
        }
        command = [sys.executable, "-m", "scrapy", "crawl", "maps"]
        env = dict(os.environ, REDIS_URL=redis_url, MONGO_URI=mongo_uri, MONGO_DATABASE=database)
        pymongo.MongoClient(mongo_uri).drop_database(database)
        redis.Redis.from_url(redis_url).flushdb()
        peak, seconds = 0, 0.0
        for category in CATEGORIES:
            args = [*command, "-a", f"category={category}", "-a", f"postal_codes={codes}"]
            for key, value in settings.items():
                args += ["-s", f"{key}={value}"]
            start = time.monotonic()
            log = logs / f"{name}-{category}.log"
            with log.open("w") as stream:
                process = subprocess.Popen(args, cwd=ROOT, env=env, stderr=stream)
            while process.poll() is None:
                peak = max(peak, browser_rss(process.pid))
                if time.monotonic() - start > timeout:
                    process.kill()
                    raise SystemExit(f"{name}: crawl took longer than {timeout}s")
                time.sleep(0.2)
            seconds += time.monotonic() - start
            if process.returncode:
                raise SystemExit(
                    f"{name}: scrapy crawl exited with {process.returncode}, see {log}"
                )
        sandbox = Sandbox(sandbox_url)
        queries = [f"{c} near {code.strip()}" for c in CATEGORIES for code in codes.split(",")]
        expected = {query: sandbox.admin("maps/searches")[query] for query in queries}
        client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(mongo_uri)
        stored = {doc["place_id"] for doc in client[database].places.find({}, {"place_id": 1})}
        missing = {q: len(set(ids) - stored) for q, ids in expected.items() if set(ids) - stored}
        total = len({place_id for ids in expected.values() for place_id in ids})
        by_path = sandbox.admin("stats")["by_path"]
        pages = MapsPages()
        page_bytes = sum(pages.browser_bytes(query) for query in queries)
        return Result(
            name, len(stored), total, missing, seconds, peak, asset_bytes(by_path), page_bytes
        )
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postal-codes", default=",".join(POSTAL_CODES))
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--logs", type=Path, default=None, help="keep the crawl logs here")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, private_servers(Path(tmp)) as servers:
        logs = options.logs or Path(tmp)
        logs.mkdir(parents=True, exist_ok=True)
        results = [
            run("blocked", options.postal_codes, {}, servers, options.timeout, logs),
            run(
                "unblocked",
                options.postal_codes,
                {"MAPS_BLOCKED_RESOURCE_TYPES": ""},
                servers,
                options.timeout,
                logs,
            ),
        ]
    print(
        f"{'variant':<10} {'places':>9} {'seconds':>8} {'places/min':>11} "
        f"{'peak browser MiB':>17} {'page bytes':>11} {'resource bytes':>15} {'total bytes':>12}"
    )
    for r in results:
        print(
            f"{r.name:<10} {f'{r.places}/{r.expected}':>9} {r.seconds:>8.1f} {r.per_minute:>11.0f} "
            f"{r.peak_rss / 2**20:>17.0f} {r.page_bytes:>11,} {r.asset_bytes:>15,} "
            f"{r.total_bytes:>12,}"
        )
    blocked, unblocked = results
    ratio = unblocked.total_bytes / blocked.total_bytes
    print(f"bytes to the browser, unblocked / blocked: {ratio:.1f}x")
    for r in results:
        for query, count in r.missing.items():
            print(f"{r.name}: {count} places of {query!r} not stored")
    return 0 if all(r.places == r.expected and not r.missing for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
