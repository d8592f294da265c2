"""The autoscaler's rule over an engine that starts and stops workers the moment it is told,
on a clock advanced one look at a time (the record of failed starts in a real Redis)."""

from __future__ import annotations

from dataclasses import replace

import redis

from bench.autoscale import InstantEngine
from crawler.fleet.autoscaler import Autoscaler, Member
from crawler.fleet.backoff import Backoff, StartGuard
from crawler.fleet.measure import RedisStarts


def _run(wanted: list[int], cooldown: float, every: float = 10.0) -> list[int]:
    """The workers running after each look, the looks ``every`` seconds apart."""
    engine, clock, looks = InstantEngine(), [0.0], iter(wanted)
    scaler = Autoscaler(engine, lambda: next(looks), cooldown, clock=lambda: clock[0])
    running = []
    for _ in wanted:
        scaler.step()
        running.append(len(engine.workers))
        clock[0] += every
    return running


def test_a_dip_shorter_than_the_cooldown_stops_no_worker() -> None:
    """A look that wants fewer (the estimate wavering, a crawl paused for a minute) stops none;
    wanting fewer for the whole cool-down does."""
    wanted = [8] * 6 + [2] + [8] * 3 + [2] * 5
    assert _run(wanted, cooldown=30) == [8] * 13 + [2] * 2


def test_more_wanted_starts_at_once_and_fewer_waits_for_the_cooldown() -> None:
    assert _run([2, 8, 8, 5, 5, 5, 5, 0, 0, 0, 0, 0], cooldown=30) == [
        2, 8, 8, 8, 8, 8, 5, 5, 5, 5, 0, 0,
    ]  # fmt: skip
    assert _run([8, 0, 8, 0], cooldown=0) == [8, 0, 8, 0]


class NewOnesNeverStart(InstantEngine):
    """A worker of an install that worked, and new ones of one that does not: each new one is
    gone, never having reported, at the look after its start."""

    def __init__(self) -> None:
        super().__init__()
        self.workers = [Member("old", 0.0)]
        self.looked: set[str] = set()

    def members(self) -> list[Member]:
        found = [replace(m, gone=m.id in self.looked and m.id != "old") for m in self.workers]
        self.looked = {member.id for member in self.workers}
        return found

    def start(self, count: int) -> list[str]:
        ids = super().start(count)
        self.workers = [replace(m, reported=m.id not in ids and m.reported) for m in self.workers]
        return ids


def test_new_workers_that_never_start_hold_launches_though_an_old_one_reports(
    redis_client: redis.Redis,
) -> None:
    """An install target changed for a broken one: the worker of the old one still reports,
    which says nothing of the new ones. 4 failed starts (3 allowed) hold the launches for 100 s,
    then one tries, then 200 s: 7 launched over 20 minutes, where 2 were launched every other
    look (120)."""
    engine, clock = NewOnesNeverStart(), [0.0]
    guard = StartGuard(Backoff(3, 100.0), RedisStarts(redis_client, "rule"))
    scaler = Autoscaler(engine, lambda: 3, 0.0, clock=lambda: clock[0], guard=guard)
    started = []
    for _ in range(120):
        started.append(len(scaler.step().started))
        clock[0] += 10
    launched_at = [10 * look for look, count in enumerate(started) for _ in range(count)]
    assert launched_at == [0, 0, 20, 20, 140, 360, 780]
    assert [m.id for m in engine.workers if not m.gone] == ["old"]
