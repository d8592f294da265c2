"""scrapy-redis's most common pattern side by side: one page per pushed URL, items stored.

scrapy-redis's example spider (``myspider_redis.py``, as published: one item per page, no
links followed) is fed N URLs of one local host (sandbox/hosts.py, one host of N pages) with
``redis-cli lpush``-style pushes, then crawled by:

  stock      stock scrapy-redis (``scrapy runspider`` outside this project: Scrapy's defaults
             with scrapy-redis's scheduler, dupefilter and RedisPipeline: items in Redis),
  ours       ``scrapy crawl`` in this project (leased start entries, the frontier, items in
             MongoDB, in the spider's own collection with no setting), politeness off as for
             stock.

Measured from outside the crawl: from the first request's arrival at the server to the last
item visible in its store (polled every 20 ms), pages/s, and the ratio (target >= 1.0x); also
the crawl process's CPU time a page (start-up and close included), which a loaded machine
does not skew as it skews the time.

Usage: python bench/scrapy_redis_example.py [--urls 2000] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pymongo  # noqa: E402
import redis  # noqa: E402

from bench._hosts_bench import HostsWeb  # noqa: E402
from devtools.services import free_port, start_mongo, start_redis  # noqa: E402
from sandbox.hosts import host_address, page_path  # noqa: E402

# scrapy-redis's example-project/example/spiders/myspider_redis.py, as published.
MYSPIDER_REDIS = """\
from scrapy_redis.spiders import RedisSpider


class MySpider(RedisSpider):
    \"\"\"Spider that reads urls from redis queue (myspider:start_urls).\"\"\"
    name = 'myspider_redis'
    redis_key = 'myspider:start_urls'

    def __init__(self, *args, **kwargs):
        # Dynamically define the allowed domains list.
        domain = kwargs.pop('domain', '')
        self.allowed_domains = filter(None, domain.split(','))
        super(MySpider, self).__init__(*args, **kwargs)

    def parse(self, response):
        return {
            'name': response.css('title::text').extract_first(),
            'url': response.url,
        }
"""
STOCK = {
    "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
    "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
    "ITEM_PIPELINES": json.dumps({"scrapy_redis.pipelines.RedisPipeline": 300}),
    "SCHEDULER_PERSIST": True,
}


def project(tmp: Path) -> Path:
    spiders = tmp / "example" / "example" / "spiders"
    spiders.mkdir(parents=True)
    (spiders.parent / "__init__.py").write_text("")
    (spiders / "__init__.py").write_text("")
    (spiders / "myspider_redis.py").write_text(MYSPIDER_REDIS)
    return tmp / "example"


def run(
    command: list[str],
    env: dict[str, str],
    stored: Callable[[], int],
    urls: int,
    web: HostsWeb,
    cwd: Path,
) -> tuple[float, float]:
    """Start the crawl in ``cwd``, wait until ``urls`` items are stored; returns the seconds
    from the first request's arrival at the server to the last item seen stored, and the CPU
    seconds the crawl process used, start-up and close included."""
    web.reset()
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 600
    try:
        while stored() < urls:
            if process.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"crawl ended with {stored()} of {urls} items stored: {command}")
            time.sleep(0.02)
        done = time.time()
    finally:
        process.terminate()
        _, _, usage = os.wait4(process.pid, 0)
        process.returncode = 0
    first = min(float(at) for seen in web.arrivals().values() for at, _ in seen)
    return done - first, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--urls", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    web = HostsWeb(1, args.urls)
    urls = [f"http://{host_address(0)}:{web.port}{page_path(k)}" for k in range(args.urls)]
    with tempfile.TemporaryDirectory(prefix="bench-scrapy-redis-") as name:
        tmp = Path(name)
        redis_port, mongo_port = free_port(), free_port()
        servers = [start_redis(redis_port, tmp / "redis"), start_mongo(mongo_port, tmp / "mongo")]
        server = redis.Redis(port=redis_port)
        mongo: pymongo.MongoClient[dict[str, object]] = pymongo.MongoClient(port=mongo_port)
        env = {
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": f"{project(tmp)}:{ROOT}",
            "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
            "MONGO_URI": f"mongodb://127.0.0.1:{mongo_port}",
            "MONGO_DATABASE": "bench",
            "MONGO_SPILL_DIR": str(tmp / "spill"),
        }
        spider_file = tmp / "example" / "example" / "spiders" / "myspider_redis.py"
        common = {"CONCURRENT_REQUESTS": args.concurrency, "LOG_LEVEL": "WARNING"}
        results = {}
        for label, command, settings, cwd, stored in (
            (  # Scrapy's defaults and scrapy-redis's components, outside this project
                "stock scrapy-redis",
                [sys.executable, "-m", "scrapy", "runspider", str(spider_file)],
                {**STOCK, "REDIS_URL": env["REDIS_URL"]},
                tmp,
                lambda: int(server.llen("myspider_redis:items")),
            ),
            (
                "ours",
                [sys.executable, "-m", "scrapy", "crawl", "myspider_redis"],
                {
                    "SPIDER_MODULES": "example.spiders",
                    "POLITENESS_RATE": 0,
                },
                ROOT,
                lambda: mongo.bench.myspider_redis.estimated_document_count(),
            ),
        ):
            server.flushall()
            mongo.drop_database("bench")
            server.lpush("myspider:start_urls", *urls)
            command = command + [f"-s{k}={v}" for k, v in {**common, **settings}.items()]
            seconds, cpu = run(command, env, stored, args.urls, web, cwd)
            results[label] = args.urls / seconds
            print(
                f"{label:20} {args.urls} items stored in {seconds:6.2f}s = "
                f"{results[label]:7.1f} pages/s; {1000 * cpu / args.urls:5.2f} ms CPU a page",
                flush=True,
            )
        for item in servers:
            item.stop()
    web.stop()
    ratio = results["ours"] / results["stock scrapy-redis"]
    verdict = "meets" if ratio >= 1.0 else "MISSES"
    print(f"ours / stock scrapy-redis {ratio:.2f}x ({verdict} the target >= 1.0x)")


if __name__ == "__main__":
    main()
