"""``python -m crawler.aws.report SPIDER --instance-id ID``: a worker reports that it was banned.

The worker's user data runs it when ``scrapy crawl`` exits with status 3 (BAN_POLICY=stop). It
adds the instance to the spider's hash ``{<spider>}:fleet:banned`` (instance id -> JSON with the
time and host), which ``scrapy fleet rotate`` reads, replaces those instances and clears.
"""

from __future__ import annotations

import argparse
import json
import socket
import time
from typing import TYPE_CHECKING, Any

from scrapy.utils.project import get_project_settings

from crawler.connection import redis_from_settings, reply_text
from crawler.keys import banned_key

if TYPE_CHECKING:
    from crawler.connection import RedisClient


def report_banned(server: RedisClient, spider: str, instance_id: str) -> None:
    entry = {"time": round(time.time(), 3), "host": socket.gethostname()}
    server.hset(banned_key(spider), instance_id, json.dumps(entry))


def banned_instances(server: RedisClient, spider: str) -> dict[str, dict[str, Any]]:
    """Instance id -> report, for every instance of ``spider`` that reported a ban."""
    raw: Any = server.hgetall(banned_key(spider))
    return {reply_text(key): json.loads(value) for key, value in raw.items()}


def clear_banned(server: RedisClient, spider: str, instance_ids: list[str]) -> None:
    if instance_ids:
        server.hdel(banned_key(spider), *instance_ids)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("spider")
    parser.add_argument("--instance-id", required=True)
    args = parser.parse_args(argv)
    report_banned(redis_from_settings(get_project_settings()), args.spider, args.instance_id)
    print(f"reported {args.instance_id} of {args.spider} as banned")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
