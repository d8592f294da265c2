"""``scrapy status --watch`` outlives a Redis outage: a refresh Redis does not answer says so in
one line and the watch goes on, showing the fleet again once Redis is back, until Ctrl-C (exit
status 0). Without ``--watch``, an unreachable Redis is one line and exit status 1."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests import forkserver
from tests.harness import Crawl, Restartable, background, poll, scrapy

pytestmark = pytest.mark.integration


def _reports(log: Path) -> int:
    """The fleet reports ``--json`` printed so far."""
    lines = log.read_text(errors="replace").splitlines()
    return sum(1 for line in lines if line.startswith("{") and "spiders" in json.loads(line))


def test_a_watch_says_redis_is_unreachable_and_shows_the_fleet_once_it_is_back(
    crawl: Crawl, own_redis: Restartable, tmp_path: Path
) -> None:
    env = {**crawl.env(), "REDIS_URL": own_redis.uri}
    log = tmp_path / "status.log"
    command = [*forkserver.SCRAPY, "status", "profiles", "--json", "--watch", "0.2"]
    with background(command, env, log) as watch:
        poll(lambda: _reports(log) >= 1, 30, "a first report")
        own_redis.stop()
        unreachable = f"Redis at {own_redis.uri} is unreachable: "
        poll(lambda: log.read_text().count(unreachable) >= 2, 30, "the outage said, twice")
        assert watch.poll() is None, log.read_text()[-3000:]
        shown = _reports(log)
        own_redis.start()
        poll(lambda: _reports(log) > shown, 30, "a report once Redis is back")
        watch.send_signal(signal.SIGINT)
        assert watch.wait(30) == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert "Traceback" not in text
    said = [line for line in text.splitlines() if line.startswith(unreachable)]
    assert all(line.endswith("; trying again in 0.2 s (Ctrl-C to stop)") for line in said), said


def test_without_watch_an_unreachable_redis_is_one_line_and_exit_status_1(
    crawl: Crawl, own_redis: Restartable
) -> None:
    own_redis.stop()
    result = scrapy("status", "profiles", env={**crawl.env(), "REDIS_URL": own_redis.uri})
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.startswith(f"Redis at {own_redis.uri} is unreachable: ")
    assert len(result.stderr.strip().splitlines()) == 1
