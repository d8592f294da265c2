"""``scrapy fleet plan``: the workers a crawl needs to finish by a deadline, from the measured
pace, capped by the politeness ceiling (the sites' allowed rates) and by the most workers allowed
(AUTOSCALE_MAX_WORKERS, ``--max``), with the arithmetic shown.

    pages P, deadline D, pace p pages per worker-second, ceiling C requests/s, most M workers
    needed rate   r = P / D
    needed        n = ceil(r / p), at most ceil(C / p) (more would wait for the sites)
    workers       w = min(n, M)
    finish        max(P / (w x p), S): later than D when a host's work needs longer at its rate
                  or n > M (the deadline is unreachable)

P is ``--pages``, or the frontier's work and the revisits due (of a spider that revisits): as
the autoscaler, which wants a worker while any is due (``crawler.observability.sizing``), the
plan counts each due revisit as a page to fetch. The ceiling is the one of the gauges with the
work spread over the deadline: per host the lesser of its rate and its share of P over D, its
share counting its queued and delayed requests (a polite crawl holds most of its work in the
delayed set, waiting for its hosts' turns). S is the seconds the slowest paced host takes for
its share of P at its rate, whatever the deadline and the workers: the same work finishes no
later for a later deadline. The start entries waiting count for their hosts as the spider would
make their requests (crawler/spiders/entry_hosts.py), from a sample the plan names
(``StartSample``): before any is read they are all the ceiling knows.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crawler.observability.sizing import Sizing

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([hms])")
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0}


def parse_duration(text: str) -> float:
    """Seconds in ``4h``, ``90m``, ``1h30m``, ``3600s`` or ``3600``; ValueError otherwise."""
    text = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        seconds = float(text)
    elif text and re.fullmatch(f"(?:{_DURATION.pattern})+", text):
        seconds = sum(float(n) * _UNITS[unit] for n, unit in _DURATION.findall(text))
    else:
        raise ValueError(f"not a duration: {text!r} (say 4h, 90m, 1h30m or 3600s)")
    if seconds <= 0:
        raise ValueError(f"a deadline must be in the future, not {text!r}")
    return seconds


@dataclass(frozen=True)
class Plan:
    """The workers needed for ``pages`` by ``deadline`` seconds, and whether it can be done."""

    pages: int
    deadline: float
    pace: float
    measured: bool
    ceiling: float | None  # None: no queued work to read the sites' rates from
    workers: int  # never more than ``max_workers``
    by_pace: int  # workers the pace alone asks for
    finish: float  # seconds the crawl takes with ``workers``
    needed: int  # workers the deadline asks for within the ceiling, before ``max_workers``
    max_workers: int | None  # the most workers allowed (None: no cap)
    revisits_due: int = 0  # of ``pages``, revisits due, not in the frontier yet
    starts: StartSample | None = None  # the start entries the ceiling read, if any

    @property
    def ceiling_from(self) -> str | None:
        """What the ceiling was read from: "queue" (the frontier's requests, queued and
        delayed), "start entries", or both (None: none)."""
        if self.ceiling is None:
            return None
        if self.starts is None:
            return "queue"
        return "start entries" if self.starts.only else "queue and start entries"

    @property
    def reachable(self) -> bool:
        return self.finish <= self.deadline * (1 + 1e-9)

    @property
    def capped(self) -> bool:
        """Whether the deadline asks for more workers than ``max_workers``."""
        return self.workers < self.needed

    def to_json(self) -> dict[str, Any]:
        starts = None if self.starts is None else self.starts.__dict__
        return {
            **self.__dict__,
            "starts": starts,
            "ceiling_from": self.ceiling_from,
            "reachable": self.reachable,
            "capped": self.capped,
        }


@dataclass(frozen=True)
class StartSample:
    """The start entries waiting whose hosts the ceiling counts: a sample of ``sampled`` of
    ``waiting`` (START_SAMPLE), naming ``hosts`` hosts; ``unknown`` of them name no host the
    plan can tell without the spider (counted as work without a rate)."""

    waiting: int
    sampled: int
    hosts: int
    unknown: int
    only: bool  # nothing in the queue: the ceiling is the start entries' alone


def start_sample(sizing: Sizing) -> StartSample | None:
    """The start entries of ``sizing``'s look, None when none was read."""
    demand = sizing.demand
    if demand is None or not demand.start_sampled:
        return None
    unknown = sum(entry.count for entry in demand.start_hosts if not entry.host)
    hosts = sum(1 for entry in demand.start_hosts if entry.host)
    return StartSample(demand.start, demand.start_sampled, hosts, unknown, not demand.sampled)


def plan(
    pages: int,
    deadline: float,
    sizing: Sizing,
    max_workers: int | None = None,
    revisits_due: int = 0,
) -> Plan:
    """The plan for ``pages`` by ``deadline`` from ``sizing`` (its pace and its queue's hosts),
    with ``max_workers`` at most; ``revisits_due`` of the pages are revisits due."""
    pace = sizing.pace
    by_pace = max(1, math.ceil(pages / deadline / pace - 1e-9)) if pages else 0
    ceiling = _ceiling(pages, deadline, sizing)
    needed = by_pace
    if ceiling is not None and pages:
        needed = min(by_pace, max(1, math.ceil(ceiling / pace - 1e-9)))
    workers = needed if max_workers is None else min(needed, max_workers)
    finish = max(pages / (workers * pace), _slowest(pages, sizing)) if pages else 0.0
    return Plan(
        pages, deadline, pace, sizing.measured, ceiling, workers, by_pace, finish, needed,
        max_workers, revisits_due, start_sample(sizing) if ceiling is not None else None,
    )  # fmt: skip


def _ceiling(pages: int, deadline: float, sizing: Sizing) -> float | None:
    demand = sizing.demand
    if demand is None or (not demand.hosts and not demand.start_hosts) or not sizing.work:
        return None
    return demand.ceiling(deadline, pages / sizing.work)


def _slowest(pages: int, sizing: Sizing) -> float:
    """Seconds the slowest paced host takes for its share of ``pages`` at its rate."""
    demand = sizing.demand
    if demand is None or not sizing.work:
        return 0.0
    return demand.slowest(pages / sizing.work)


def explain(plan: Plan) -> list[str]:
    """The plan's arithmetic, line by line, and its warnings."""
    hours = plan.deadline / 3600
    source = "measured" if plan.measured else "AUTOSCALE_WORKER_PACE, not measured yet"
    lines = [
        f"pages       {plan.pages:,}{_revisits(plan)}",
        f"deadline    {plan.deadline:,.0f} s ({hours:.2f} h)",
        f"needed      {plan.pages:,} / {plan.deadline:,.0f} s = {plan.pages / plan.deadline:,.2f} "
        "pages/s",
        f"pace        {plan.pace:,.2f} pages per worker-second ({source})",
        f"by pace     ceil({plan.pages / plan.deadline:,.2f} / {plan.pace:,.2f}) = "
        f"{plan.by_pace} workers",
    ]
    if plan.ceiling is None:
        lines.append("ceiling     unknown (nothing queued to read the sites' rates from)")
    else:
        lines.append(
            f"ceiling     {plan.ceiling:,.2f} requests/s the sites allow: at most "
            f"ceil({plan.ceiling:,.2f} / {plan.pace:,.2f}) = "
            f"{max(1, math.ceil(plan.ceiling / plan.pace - 1e-9))} workers"
        )
        lines += _start_lines(plan.starts)
    if plan.max_workers is not None:
        lines.append(f"most        {plan.max_workers} workers (AUTOSCALE_MAX_WORKERS, --max)")
    lines.append(f"workers     {plan.workers}")
    lines.append(f"finish      {plan.finish:,.0f} s ({plan.finish / 3600:.2f} h)")
    if plan.capped:
        lines.append(
            f"WARNING     the deadline cannot be met with {plan.workers} workers "
            f"(AUTOSCALE_MAX_WORKERS, --max): it needs {plan.needed}; {plan.pages:,} pages take "
            f"{plan.finish / 3600:.2f} h with {plan.workers}"
        )
    elif not plan.reachable:
        lines.append(
            f"WARNING     the deadline is unreachable at the sites' allowed rates: "
            f"{plan.pages:,} pages take at least {plan.finish / 3600:.2f} h; more workers would "
            "not go faster"
        )
    return lines


def _start_lines(starts: StartSample | None) -> list[str]:
    """Where the ceiling's start entries came from, and how many of them name no known host."""
    if starts is None:
        return []
    alone = " (nothing queued yet: the ceiling is theirs alone)" if starts.only else ""
    hosts = f"{starts.hosts:,} host{'' if starts.hosts == 1 else 's'}"
    lines = [
        f"sampled     {starts.sampled:,} of the {starts.waiting:,} start entries waiting, "
        f"{hosts}{alone}"
    ]
    if starts.unknown:
        lines.append(
            f"unknown     {starts.unknown:,} of them name no host the plan can tell without the "
            "spider: counted as work without a rate"
        )
    return lines


def _revisits(plan: Plan) -> str:
    """`` (1,200 in the frontier, 300 revisits due)`` when revisits due are among the pages."""
    if not plan.revisits_due:
        return ""
    in_frontier = plan.pages - plan.revisits_due
    return f" ({in_frontier:,} in the frontier, {plan.revisits_due:,} revisits due)"
