"""One rule for every engine: start workers at once when more are wanted, stop the surplus only
once AUTOSCALE_COOLDOWN has passed since the fleet last changed, and only beyond the most
workers wanted over that long (a dip of the estimate, or a pause of the crawl, shorter than the
cool-down stops none), idle workers first, then the newest; a member whose worker quit (an EC2
instance left up, ``gone``) is stopped at once and not counted, so it is replaced when workers
are wanted. A worker is told to go with SIGTERM (or its instance's shutdown): it stops taking
work, releases what it holds, flushes its items and exits 0 (docs/scaling.md, "An elastic
fleet"). With a ``guard`` (crawler/fleet/backoff.py), members gone without their worker ever
having reported hold the launches back.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from crawler.observability.starts import Starts


@dataclass(frozen=True)
class Member:
    """One worker of the fleet as its engine sees it."""

    id: str
    started: float  # Unix time
    up: bool = True  # whether it may be told to go now (a booting process may not)
    idle: bool = False  # whether it fetched nothing since the last look
    gone: bool = False  # whether its worker quit (its machine left up): stopped at once
    reported: bool = True  # whether its worker was ever seen beating (gone, never: a failed start)


class Engine(Protocol):
    """Where workers run: local processes, EC2 instances; ``errors`` are what a look may meet
    when the engine cannot be reached (reported, and the next look tried)."""

    @property
    def errors(self) -> tuple[type[Exception], ...]: ...

    def members(self) -> list[Member]:
        """The workers running and not told to go (and those whose worker quit, ``gone``)."""

    def start(self, count: int) -> list[str]:
        """Start ``count`` workers; their ids."""

    def stop(self, ids: list[str]) -> None:
        """Tell these workers to go."""


@dataclass
class Step:
    """What one look did."""

    time: float
    wanted: int
    running: int
    started: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)  # whose worker quit: stopped, not counted
    waiting: float = 0.0  # seconds of cool-down left before the surplus may go
    failed_starts: int = 0  # launches in a row whose worker never reported (with a guard)
    held: bool = False  # launches held back for them: none until ``held_until``, then one
    held_until: float | None = None  # while no launch may go: until when (Unix time)
    starts: str = ""  # what this look changed of it: "held", "trying" (one), "recovered"

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def surplus(members: list[Member], count: int) -> list[Member]:
    """The ``count`` workers to stop: idle ones first, then the newest; never one not up."""
    candidates = [member for member in members if member.up]
    candidates.sort(key=lambda member: (not member.idle, -member.started))
    return candidates[:count]


class Mark(Protocol):
    """Where the time of the fleet's last change is kept between runs (Unix time)."""

    def read(self) -> float: ...

    def write(self, when: float) -> None: ...


class Guard(Protocol):
    """What holds launches back after failed starts (``crawler.fleet.backoff.StartGuard``)."""

    @property
    def starts(self) -> Starts: ...

    def look(self, gone: list[Member], live: list[Member], now: float) -> str: ...

    def allowed(self, more: int, live: list[Member], now: float) -> int: ...


class Autoscaler:
    """Moves ``engine`` toward ``wanted()`` workers, one look per :meth:`step`; with ``mark``,
    the cool-down counts from a change made by an earlier run too."""

    def __init__(
        self,
        engine: Engine,
        wanted: Callable[[], int],
        cooldown: float,
        clock: Callable[[], float] = time.time,
        mark: Mark | None = None,
        guard: Guard | None = None,
    ) -> None:
        self.engine = engine
        self.wanted = wanted
        self.cooldown = cooldown
        self.clock = clock
        self.mark = mark
        self.guard = guard
        self.changed = float("-inf")  # when the fleet last grew or shrank
        self.looks: deque[tuple[float, int]] = deque()  # (when, wanted) over the cool-down

    def step(self) -> Step:
        target, members = self.wanted(), self.engine.members()
        now = self.clock()
        if self.mark is not None:
            self.changed = max(self.changed, self.mark.read())
        step = self._move(target, self._kept(now, target), members, now)
        if (step.started or step.stopped) and self.mark is not None:
            self.mark.write(now)
        return step

    def _kept(self, now: float, target: int) -> int:
        """The most workers wanted over the last cool-down, this look's included."""
        self.looks.append((now, target))
        while self.looks[0][0] < now - self.cooldown:
            self.looks.popleft()
        return max(wanted for _, wanted in self.looks)

    def _move(self, target: int, kept: int, members: list[Member], now: float) -> Step:
        gone = [member for member in members if member.gone]
        members = [member for member in members if not member.gone]
        step = Step(time.time(), target, len(members), gone=[member.id for member in gone])
        if gone:  # no work is lost: their workers quit; the cool-down is not restarted
            self.engine.stop(step.gone)
        if self.guard is not None:
            self._guard(step, gone, members, now)
        more = self._allowed(target - len(members), members, now)
        if target > len(members) and more:
            step.started = self.engine.start(more)
            self.changed = now
            if step.held:  # one to try again
                step.starts = "trying"
        elif target < len(members):
            step.waiting = max(0.0, self.changed + self.cooldown - now)
            if not step.waiting and kept < len(members):
                step.stopped = [m.id for m in surplus(members, len(members) - kept)]
                if step.stopped:
                    self.engine.stop(step.stopped)
                    self.changed = now
        return step

    def _guard(self, step: Step, gone: list[Member], members: list[Member], now: float) -> None:
        """Count the failed starts among ``gone`` into ``step``."""
        assert self.guard is not None
        step.starts = self.guard.look(gone, members, now)
        starts = self.guard.starts
        step.failed_starts, step.held = starts.failed, starts.holds > 0
        step.held_until = starts.held_until if starts.held(now) else None

    def _allowed(self, more: int, members: list[Member], now: float) -> int:
        """Of ``more`` workers wanted (none when not above 0), how many may start now."""
        if more <= 0 or self.guard is None:
            return max(0, more)
        return self.guard.allowed(more, members, now)
