"""Crawls of a sandbox that bans: nothing banned is stored, nothing is lost, cool-downs hold."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
import redis

from sandbox.data import build_dataset
from tests.harness import Crawl, Sandbox

pytestmark = pytest.mark.integration

DATASET = build_dataset()
USERS = sorted(DATASET.popular_authors(categories=[1, 2]))[:24]
BAN_SECONDS = 3


def _stats(client: redis.Redis, spider: str) -> dict[str, str]:
    raw = cast(dict[bytes, bytes], client.hgetall("{" + spider + "}:stats"))
    return {key.decode(): value.decode() for key, value in raw.items()}


def _ban_sandbox(sandbox: Sandbox, mode: str, **faults: Any) -> None:
    sandbox.admin(
        "config",
        {
            "rate_limit": {
                "enabled": True,
                "max_requests": 8,
                "window_seconds": 60,
                "ban_seconds": BAN_SECONDS,
                "ban_mode": mode,
            },
            "faults": faults,
        },
    )


def _assert_cooldowns_respected(sandbox: Sandbox, concurrency: int) -> None:
    """Once banned, a client stops: per ban at most the requests already in flight got a ban
    answer, instead of every request sent until the ban ended."""
    bans = sandbox.admin("stats")["bans"]
    assert bans["issued"] >= 1
    assert bans["responses"] <= bans["issued"] * (concurrency + 1), bans


@pytest.mark.parametrize(
    "mode",
    [
        "403",
        "datadome",
        "cloudflare",
        "captcha_redirect",
        "js_redirect",
        "429",
        "empty",
        "json_error",
        "no_data",
    ],
)
def test_every_ban_mode_ends_with_every_profile_stored(
    mode: str, crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox
) -> None:
    _ban_sandbox(sandbox, mode)
    redis_client.lpush("profiles:start_urls", *(json.dumps({"unique_id": u}) for u in USERS))
    result = crawl(
        "profiles",
        settings={
            "BAN_COOLDOWN": BAN_SECONDS + 1,
            "CONCURRENT_REQUESTS": 2,
            "BAN_MAX_TIMES": 0,
        },
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]

    stored = {doc["unique_id"]: doc for doc in crawl.mongo.db.profiles.find()}
    assert set(stored) == set(USERS)
    for unique_id, doc in stored.items():
        assert doc["status"] == DATASET.authors_by_unique_id[unique_id].state
    stats = _stats(redis_client, "profiles")
    assert int(stats["ban/count"]) >= 1
    _assert_cooldowns_respected(sandbox, concurrency=2)
    assert redis_client.llen("{profiles}:dead") == 0
