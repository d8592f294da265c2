"""The autoscaler's rule over an engine that starts and stops workers the moment it is told,
on a clock advanced one look at a time."""

from __future__ import annotations

from bench.autoscale import InstantEngine
from crawler.fleet.autoscaler import Autoscaler


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
