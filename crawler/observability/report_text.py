"""``scrapy status``'s report (crawler/observability/report.py) as text for a terminal, and the
lines the fleet page shares with it."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from crawler.control.pause import describe_json
from crawler.observability.rates import format_duration
from crawler.observability.spills import spills_lines
from crawler.observability.starts import starts_text


def render_text(report: Mapping[str, Any]) -> str:
    """The status of every spider in ``report`` as text for a terminal."""
    lines = [
        f"Redis {report['redis']}  at {time.strftime('%H:%M:%S', time.localtime(report['time']))}"
    ]
    for status in report["spiders"].values():
        lines.append("")
        if status.get("error"):
            lines.extend([status["spider"], f"  UNREADABLE {unreadable_text(status)}"])
        else:
            lines.extend(_spider_lines(status, report["time"]))
    return "\n".join(lines)


def unreadable_text(status: Mapping[str, Any]) -> str:
    """Why a spider's figures are not shown: its keys of the wrong type, and what to do."""
    return f"{status['error']} (its figures are shown again once the key is fixed or deleted)"


def revisit_line(counts: Mapping[str, int]) -> str:
    """The revisits waiting (crawler/recrawl/), by when they are due."""
    return (
        f"  revisits  {counts.get('due', 0):,} due now, {counts.get('next_hour', 0):,} "
        f"in the next hour, {counts.get('later', 0):,} later"
    )


def job_line(job: dict[str, Any]) -> str:
    """``acme-1 paused: 120 pages, 118 items, 0 errors``, and why when the job paused itself
    (``acme-1 paused (failure threshold: 12 of the last 20 answers failed ...): ...``)."""
    return (
        f"{job['job']} {job_state(job)}: {job['pages']:,} pages, {job['items']:,} items, "
        f"{job['errors']:,} errors"
    )


def job_state(job: Mapping[str, Any]) -> str:
    """A listed job's state, with why when it paused itself (the failure threshold)."""
    state = str(job["state"])
    return f"{state} ({job['why']})" if job.get("why") and state == "paused" else state


def _spider_lines(status: Mapping[str, Any], now: float) -> list[str]:
    spider, sizes, counters = status["spider"], status["frontier"], status["counters"]
    rates, seen = status["rates"], status["seen"]
    seen_text = (
        "-" if seen["count"] is None else f"{'~' if seen['approximate'] else ''}{seen['count']:,}"
    )
    lines = [
        f"{spider}"
        + (f"  (last finish: {status['finish_reason']})" if status["finish_reason"] else ""),
        *([f"  PAUSED    {describe_json(status['paused'])}"] if status.get("paused") else []),
        f"  frontier  {sizes['queue']:,} queued, {sizes['leased']:,} leased, "
        f"{sizes['delayed']:,} delayed, {sizes['dead']:,} dead; start entries {sizes['start']:,} "
        f"(+{sizes['start_leased']:,} leased); seen {seen_text} ({seen['mode']})",
        revisit_line(status.get("revisits") or {}),
        f"  pace      now {rates['workers_pages_per_min']:,.0f} pages/min, "
        f"{rates['workers_items_per_min']:,.0f} items/min; last {rates['minutes']} min "
        f"{rates['pages_per_min']:,.0f} pages/min, {rates['items_per_min']:,.0f} items/min; "
        f"ETA {format_duration(status['eta_seconds'])}",
        *sizing_line(status.get("sizing")),
        f"  per min   items {_series(rates['per_minute'], 'items')}  "
        f"pages {_series(rates['per_minute'], 'pages')}",
        f"  requests  {counters['requests']:,}; responses {counters['responses']:,}"
        f"{_breakdown(counters['responses_by_status'])}; download errors "
        f"{counters['download_errors']:,}",
        f"  items     {counters['items']:,} scraped{_breakdown(counters['items_by_collection'])}; "
        f"{counters['items_dropped']:,} dropped",
        f"  problems  {counters['retries']:,} retries; {counters['bans']:,} bans"
        f"{_breakdown(counters['bans_by_rule'])}{_breakdown(counters['bans_by_domain'])}; "
        f"{counters['dead_letters']:,} dead letters"
        f"{_breakdown(counters['dead_letters_by_reason'])}; "
        f"{counters['duplicates']:,} duplicates filtered",
    ]
    if status.get("failures"):
        lines.append(f"  failures  {failure_text(status['failures'])}")
    lines.extend(f"  job       {job_line(job)}" for job in status.get("jobs") or [])
    lines.extend(_domain_lines(counters["domains"]))
    # The spider's own figures (its fleet_report), one line each.
    lines.extend(
        f"  {name:<9} {figure_text(v)}" for name, v in (status.get("report") or {}).items()
    )
    lines.extend(_worker_lines(status["workers"], now))
    lines.extend(spills_lines(status.get("spilled") or []))
    if launches := starts_text(status.get("starts") or {}, now):
        lines.append(f"  launches  {launches}")
    if sizes["dead"]:
        lines.append(
            f"  dead letters: scrapy frontier {spider} dead | scrapy frontier {spider} requeue"
        )
    return lines


def failure_text(failures: Mapping[str, Any]) -> str:
    """The failure threshold's state: the fleet's last answers, the failed ones, the limit."""
    ratio, window = failures["ratio"], failures["window"]
    if ratio <= 0:
        return "failure threshold off (FAILURE_PAUSE_RATIO 0)"
    answers, failed = failures["answers"], failures["failed"]
    limit = round(ratio * window, 1)
    most = f"{limit:,.0f}" if limit.is_integer() else f"{limit:,.1f}"
    counted = (
        f"{failed:,} of the fleet's last {answers:,} answers failed"
        if answers
        else "no answer in the window yet"
    )
    return (
        f"{counted}; the crawl pauses itself once more than {most} of the last "
        f"{window:,} fail (FAILURE_PAUSE_RATIO {ratio:g})"
    )


def sizing_line(sizing: Mapping[str, Any] | None) -> list[str]:
    """What the work allows (docs/scaling.md, "An elastic fleet"), one line."""
    if not sizing:
        return []
    source = "measured" if sizing["pace_measured"] else "assumed"
    leased = f"{sizing['leased']:,} leased, " if sizing.get("leased") else ""
    due = sizing.get("revisits_due")
    revisits = f"{due:,} revisits due, " if due else ""
    paused = " (the crawl is paused)" if sizing.get("paused") else ""
    return [
        f"  sizing    {sizing['workers_wanted']} workers wanted{paused}: "
        f"{sizing['ready']:,.0f} ready, "
        f"{leased}{revisits}ceiling {sizing['ceiling_per_second']:,.2f} requests/s, pace "
        f"{sizing['pace_per_worker_second']:,.2f} pages per worker-second ({source})"
    ]


def _domain_lines(domains: Mapping[str, Any]) -> list[str]:
    ranked = sorted(domains.items(), key=lambda pair: -pair[1]["requests"])
    return [
        f"  domain    {name}: {numbers['requests']:,} requests, {numbers['responses']:,} "
        f"responses{_breakdown(numbers['responses_by_status'])}, {numbers['items']:,} items"
        for name, numbers in ranked[:10]
    ]


def figure_text(value: Any) -> str:
    """A spider's own figure: a value, or nested ones as ``name value; name (nested pairs)``."""
    if not isinstance(value, Mapping):
        return str(value)
    parts = [
        f"{name} ({figure_text(v)})" if isinstance(v, Mapping) else f"{name} {v}"
        for name, v in value.items()
    ]
    return "; ".join(parts) or "-"


def _worker_lines(workers: list[dict[str, Any]], now: float) -> list[str]:
    lines = [f"  workers   {len(workers)} live"]
    for worker in workers:
        port, started = worker.get("metrics_port"), worker.get("started", now)
        lines.append(
            f"    {worker.get('worker', '?')}  up {format_duration(now - started)}"
            f"  {worker.get('pages_per_min', 0):,.0f} pages/min  "
            f"{worker.get('items_per_min', 0):,.0f} items/min  "
            f"beat {format_duration(max(0.0, now - worker.get('beat', now)))} ago"
            + (f"  metrics :{port}" if port else "")
            + _storage_text(worker)
        )
    return lines


def _storage_text(worker: dict[str, Any]) -> str:
    """``  MONGODB AWAY, 153 items spilled`` while the worker holds MongoDB away, the items
    it spilled while they wait to be replayed, nothing otherwise."""
    away, spilled = worker.get("mongo_away"), worker.get("spilled")
    parts = [
        *(["MONGODB AWAY"] if away else []),
        *([f"{spilled:,} items spilled"] if spilled else []),
    ]
    return "  " + ", ".join(parts) if parts else ""


def _breakdown(values: Mapping[str, int]) -> str:
    if not values:
        return ""
    ranked = sorted(values.items(), key=lambda pair: -pair[1])
    return " (" + ", ".join(f"{name} {count:,}" for name, count in ranked[:6]) + ")"


def _series(per_minute: list[dict[str, int]], name: str) -> str:
    return " ".join(f"{row[name]:,}" for row in per_minute)
