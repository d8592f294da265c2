"""Local workers that never start (a setting they refuse, a broken install): `scrapy fleet
autoscale --local` holds its starts back after FLEET_START_FAILURES of them in a row, says so,
tries one at a time after the hold and goes on as wanted once a worker reports
(crawler/fleet/local.py, backoff.py). Real `scrapy crawl` processes, a real Redis."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis
from scrapy.settings import Settings

from crawler.fleet.autoscaler import Autoscaler
from crawler.fleet.backoff import Backoff, StartGuard
from crawler.fleet.local import LocalWorkers
from crawler.fleet.measure import RedisStarts, local_beats
from tests.harness import (
    Crawl,
    autoscaler_exits,
    autoscaler_steps,
    background,
    poll,
    scrapy,
)

pytestmark = pytest.mark.integration

HOLD = 3600.0
# A worker refuses it before it takes any work: exit status 2, no heartbeat (a rule that reads
# the worker's machine, here an import, is left to the worker).
REFUSED = {"SCHEDULER": "no_such_module.Scheduler"}
# Fixed: a worker that stays up, its first heartbeat within a second.
FIXED = {"MAX_IDLE_TIME_BEFORE_CLOSE": 0, "STATS_PUBLISH_INTERVAL": 1}


def _push_profiles(client: redis.Redis, count: int) -> None:
    entries = (json.dumps({"unique_id": f"u{n}"}) for n in range(count))
    client.lpush("profiles:start_urls", *entries)


def test_a_setting_workers_would_refuse_is_refused_before_any_starts(
    crawl: Crawl, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """A worker setting whose rule needs nothing of the worker's machine is read as the
    autoscaler starts: a one-line usage error naming it, no worker started."""
    _push_profiles(redis_client, 3)
    command = crawl.autoscale("profiles", "--max", "3", settings={"MONGO_BATCH_SIZE": -1})
    log = tmp_path / "autoscale.log"
    with background(command, crawl.env(), log) as autoscaler:
        assert autoscaler.wait(60) == 2, log.read_text()[-3000:]
    assert "MONGO_BATCH_SIZE" in log.read_text()
    assert "Traceback" not in log.read_text()
    assert autoscaler_steps(log) == []


def test_local_workers_that_exit_at_once_hold_the_starts_and_it_is_said(
    crawl: Crawl, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """Workers that refuse a setting were started again at every look, for ever. Now 2 of them
    in a row hold the starts: said on stderr, no worker started at the looks that follow, and
    `scrapy status` shows the hold."""
    _push_profiles(redis_client, 3)
    settings = {
        **REFUSED,
        "FLEET_START_FAILURES": 2,
        "FLEET_START_BACKOFF": HOLD,
        "AUTOSCALE_BACKLOG_SECONDS": 0.1,
    }
    logs = tmp_path / "workers"
    command = crawl.autoscale(
        "profiles", "--max", "3", "--interval", "0.3", "--logs", str(logs), settings=settings
    )
    log = tmp_path / "autoscale.log"
    with background(command, crawl.env(), log) as autoscaler:
        poll(lambda: "none started until" in log.read_text(), 60, "the hold", 0.2)
        looks = len(autoscaler_steps(log))
        poll(lambda: len(autoscaler_steps(log)) >= looks + 10, 30, "ten looks more", 0.2)
        status = json.loads(scrapy("status", "profiles", "--json", env=crawl.env()).stdout)
        text = scrapy("status", "profiles", env=crawl.env()).stdout
        autoscaler.terminate()
        assert autoscaler.wait(60) == 0, log.read_text()[-3000:]
    steps = autoscaler_steps(log)
    held = next(n for n, step in enumerate(steps) if step["starts"] == "held")
    assert steps[held]["failed_starts"] >= 2
    assert steps[held]["held_until"] == pytest.approx(time.time() + HOLD, abs=120)
    assert [step["started"] for step in steps[held:]] == [[]] * len(steps[held:])
    assert max(step["wanted"] for step in steps) == 3
    started = sum(len(step["started"]) for step in steps)
    exits = autoscaler_exits(log)
    assert len(exits) == started <= 3 + 1
    assert set(exits.values()) == {2}
    assert f"their logs in {logs} say why" in log.read_text()
    starts = status["spiders"]["profiles"]["starts"]
    assert (starts["failed_starts"] >= 2, starts["held"]) == (True, True)
    assert "  launches  held until " in text


def test_after_the_hold_one_local_worker_tries_and_one_that_reports_ends_the_hold(
    crawl: Crawl, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """The autoscaler's loop over local workers on a clock of its own: 2 workers that refuse a
    setting hold the starts; once the hold is over (the setting fixed), one worker is started,
    not the 2 wanted; it beats, and the other one wanted is started at once."""
    _push_profiles(redis_client, 2)
    settings = Settings()
    settings.setmodule("crawler.settings")
    workers = LocalWorkers(
        crawl.command("profiles", settings=REFUSED),
        lambda: local_beats(redis_client, settings, "profiles"),
        env=crawl.env(),
        grace=30,
    )
    guard = StartGuard(Backoff(2, HOLD), RedisStarts(redis_client, "profiles"))
    clock = [time.time()]
    scaler = Autoscaler(workers, lambda: 2, 0.0, clock=lambda: clock[0], guard=guard)
    try:
        assert len(scaler.step().started) == 2
        poll(lambda: not workers.running(), 60, "both workers refused the setting", 0.2)
        held = scaler.step()
        assert (held.starts, held.failed_starts, held.started) == ("held", 2, [])
        assert scaler.step().started == []
        clock[0] += HOLD + 1
        workers.command = crawl.command("profiles", settings=FIXED)
        tried = scaler.step()
        assert (tried.starts, len(tried.started)) == ("trying", 1)
        poll(lambda: scaler.step().starts == "recovered", 60, "the worker's heartbeat", 0.3)
        assert len(workers.processes) == 2
        assert not redis_client.exists("{profiles}:fleet:starts")
    finally:
        exited = workers.close(30)
    assert sorted(exited.values()) == [0, 0, 2, 2], exited  # the fixed ones told to go
