"""The fleet's requests (``scrapy status``, ``crawler_requests_total``) are those sent to the
sites: a paced crawl's requests the send gate held back for their host's token are counted once,
when they go, as the sandbox counts them (docs/observability.md)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from devtools.services import free_port
from tests.harness import Crawl, Sandbox
from tests.test_observability import USERS, _scrape, _status, _status_json, _total, _worker

PROFILES = USERS[:40]


@pytest.mark.integration
def test_requests_held_by_the_send_gate_are_counted_once_sent(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox, tmp_path: Path
) -> None:
    """40 profiles at 10 requests a second: the send gate holds requests back (counted apart,
    ``politeness/gate_held``), and ``scrapy status`` and ``/metrics`` count the requests the
    sandbox received, each once."""
    redis_client.lpush("profiles:start_urls", *(json.dumps({"unique_id": u}) for u in PROFILES))
    port = free_port()
    last: dict[Any, float] = {}
    log = tmp_path / "worker.log"
    settings = {"METRICS_PORT": port, "STATS_PUBLISH_INTERVAL": 0.5, "POLITENESS_RATE": 10}
    with _worker(crawl, log, **settings, MAX_IDLE_TIME_BEFORE_CLOSE=3) as worker:
        deadline = time.monotonic() + 90
        while worker.poll() is None:
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            if (scraped := _scrape(port)) is not None:
                last = scraped[1]
            time.sleep(0.2)
    assert worker.returncode == 0, log.read_text()[-3000:]

    served = sandbox.admin("stats")["total"]
    assert served == len(PROFILES)
    held = int(redis_client.hget("{profiles}:stats", "politeness/gate_held") or 0)
    assert held > 0  # the case at hand: requests turned back at the gate, sent later
    assert _total(last, "crawler_requests_total") == served
    assert _status_json(crawl)["counters"]["requests"] == served
    text = _status(crawl, "profiles")
    assert f"requests  {served:,}; responses {served:,}" in text.stdout, text.stdout
