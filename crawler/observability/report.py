"""What ``scrapy status`` and the fleet page show: a spider's frontier, fleet counters, pace, ETA,
active cool-downs, newest dead letters and live workers, read from Redis in a few round trips,
as JSON-ready data and as text. Nothing shown carries a secret: the Redis URL and dead letters'
URLs, credential headers and proxies are masked."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from scrapy.settings import BaseSettings

from crawler.bans.politeness import active_cooldowns
from crawler.config import setting
from crawler.connection import decode_counts, reply_text
from crawler.frontier.dupefilter import APPROXIMATE_MODES, queue_seen, seen_count
from crawler.frontier.job_control import recent_jobs
from crawler.frontier.pause import describe_json, pause_from_replies, queue_read
from crawler.frontier.queue import requests_per_entry, spider_frontier, work_left
from crawler.frontier.riders import first_error
from crawler.keys import FleetKeys, failure_window_key
from crawler.observability.counters import Counters
from crawler.observability.publisher import MINUTE_FIELDS
from crawler.observability.rates import bucket_rate, eta_seconds, format_duration
from crawler.observability.sizing import BUSY_FIELD, read_sizing
from crawler.recrawl.store import RevisitStore
from crawler.uris import MASK, mask_uri

if TYPE_CHECKING:
    from crawler.connection import RedisClient

WORKER_NUMBERS = ("pid", "started", "beat", "ttl", "pages", "items")
WORKER_RATES = ("pages_per_min", "items_per_min")
# Request headers and meta keys of a dead letter that hold credentials or URLs that may.
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})
URL_META = ("proxy", "_auth_proxy")
# How many of the newest dead letters a report carries.
DEAD_LETTERS_SHOWN = 10


AnySettings = TypeVar("AnySettings", bound="BaseSettings")


def fleet_report(
    server: RedisClient,
    settings: BaseSettings,
    spiders: Mapping[str, Any],
    minutes: int = 5,
    history: int = 0,
) -> dict[str, Any]:
    """The status of each of ``spiders`` (name -> class), with its class's own ``fleet_report``."""
    report: dict[str, Any] = {
        "redis": mask_uri(settings.get("REDIS_URL") or ""),
        "time": time.time(),
        "spiders": {},
    }
    for name, spidercls in spiders.items():
        status = spider_status(server, spider_settings(settings, spidercls), name, minutes, history)
        own = getattr(spidercls, "fleet_report", None)
        if own is not None:
            status["report"] = own(server, settings)
        report["spiders"][name] = status
    return report


def spider_settings(settings: AnySettings, spidercls: Any) -> AnySettings:
    """The project's settings as the workers of ``spidercls`` run with them (its own
    ``custom_settings``: the ``domains`` spider paces nothing and has no failure threshold)."""
    own = settings.copy()
    own.frozen = False  # a worker's settings are frozen: its copy is ours to change
    spidercls.update_settings(own)
    return own


def spider_status(
    server: RedisClient,
    settings: BaseSettings,
    spider: str,
    minutes: int = 5,
    history: int = 0,
) -> dict[str, Any]:
    """All ``scrapy status`` knows of ``spider``, JSON-ready (``history`` minutes of counts),
    from the spider's own ``settings`` (see :func:`spider_settings`)."""
    now = time.time()
    ratio = setting(settings, "FAILURE_PAUSE_RATIO")
    window_size = setting(settings, "FAILURE_PAUSE_WINDOW")
    frontier = spider_frontier(server, settings, spider)
    frontier_keys, mode = frontier.keys, frontier.dupefilter.mode
    keys = FleetKeys.from_settings(settings, spider)
    sizes = frontier.sizes()
    span = max(minutes, history)
    window = list(range(int(now // 60) - span + 1, int(now // 60) + 1))
    pipe = server.pipeline(transaction=False)
    pipe.hgetall(keys.stats)
    queue_seen(pipe, frontier_keys, mode)
    queue_read(pipe, spider)
    pipe.lrange(failure_window_key(spider), 0, window_size - 1)
    for minute in window:
        pipe.hgetall(keys.minute(minute))
    replies = pipe.execute(raise_on_error=False)
    raw_stats, raw_seen, raw_answers, raw_minutes = replies[0], replies[1], replies[3], replies[4:]
    if (error := first_error([raw_stats, raw_seen, raw_answers, *raw_minutes])) is not None:
        raise error
    pause = pause_from_replies(spider, replies[2:3])
    stats = _decode_stats(raw_stats)
    all_minutes = [
        {"minute": minute * 60, **dict.fromkeys(MINUTE_FIELDS, 0), **decode_counts(raw)}
        for minute, raw in zip(window, raw_minutes, strict=True)
    ]
    per_minute = all_minutes[-minutes:]
    rates = {
        f"{name}_per_min": round(
            bucket_rate({row["minute"] // 60: row[name] for row in per_minute}, now), 1
        )
        for name in MINUTE_FIELDS
        if name != BUSY_FIELD
    }
    workers = live_workers(server, keys)
    pace = {
        f"workers_{name}": round(sum(beat.get(name, 0) for beat in workers), 1)
        for name in WORKER_RATES
    }
    return {
        "spider": spider,
        "paused": None if pause is None else pause.to_json(),
        # The fleet's last answers against the failure threshold (crawler/bans/failures.py).
        "failures": {
            "ratio": ratio,
            "window": window_size,
            "answers": len(raw_answers),
            "failed": sum(1 for answer in raw_answers if reply_text(answer) == "1"),
        },
        "frontier": sizes,
        "revisits": RevisitStore(server, spider).counts(now),
        "seen": {
            "count": seen_count(server, frontier_keys, mode, raw_seen),
            "mode": mode,
            "approximate": mode in APPROXIMATE_MODES,
        },
        "counters": Counters.from_stats(stats).to_json(),
        "rates": {
            "minutes": minutes,
            **rates,
            **pace,
            "per_minute": per_minute,
            **({"history": all_minutes[-history:]} if history else {}),
        },
        "eta_seconds": eta_seconds(
            work_left(sizes, requests_per_entry(stats)), pace["workers_pages_per_min"]
        ),
        "sizing": read_sizing(
            server,
            settings,
            spider,
            sizes,
            {row["minute"] // 60: row for row in per_minute},
            requests_per_entry(stats),
        ).to_json(),
        "cooldowns": [cooldown.to_json() for cooldown in active_cooldowns(server, spider, now)],
        "dead_letters": [
            masked_dead_letter(letter) for letter in frontier.dead_letters(DEAD_LETTERS_SHOWN)
        ],
        "workers": workers,
        "jobs": recent_jobs(server, spider),
        "finish_reason": stats.get("finish_reason"),
        "stats": {name: value for name, value in stats.items() if name != "finish_reason"},
    }


def live_workers(server: RedisClient, keys: FleetKeys) -> list[dict[str, Any]]:
    """Workers whose heartbeat has not expired, oldest first."""
    members: Any = server.zrange(keys.workers, 0, -1)
    ids = [reply_text(member) for member in members]
    if not ids:
        return []
    pipe = server.pipeline(transaction=False)
    for worker in ids:
        pipe.hgetall(keys.worker(worker))
    beats = [_decode_worker(raw) for raw in pipe.execute() if raw]
    return sorted(beats, key=lambda beat: (beat.get("started", 0), beat.get("worker", "")))


def masked_dead_letter(letter: dict[str, Any]) -> dict[str, Any]:
    """A dead letter as shown: credentials in its request's URL, headers and proxy masked."""
    request = dict(letter.get("request") or {})
    if isinstance(request.get("url"), str):
        request["url"] = mask_uri(request["url"])
    headers = request.get("headers")
    if isinstance(headers, dict):
        request["headers"] = {
            name: MASK if name.lower() in SECRET_HEADERS else value
            for name, value in headers.items()
        }
    meta = request.get("meta")
    if isinstance(meta, dict):
        request["meta"] = {
            name: mask_uri(value) if name in URL_META and isinstance(value, str) else value
            for name, value in meta.items()
        }
    failure = letter.get("failure")
    if isinstance(failure, dict) and isinstance(failure.get("error"), str):
        failure = {**failure, "error": masked_text(failure["error"], letter.get("request"))}
        return {**letter, "request": request, "failure": failure}
    return {**letter, "request": request}


_URI_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s<>\"']+")


def masked_text(text: str, request: object = None) -> str:
    """Free text (an error message) with its request's URL and every ``scheme://`` URI masked."""
    url = request.get("url") if isinstance(request, dict) else None
    if isinstance(url, str) and url:
        text = text.replace(url, mask_uri(url))
    return _URI_IN_TEXT.sub(lambda match: mask_uri(match.group()), text)


def render_text(report: Mapping[str, Any]) -> str:
    """The status of every spider in ``report`` as text for a terminal."""
    lines = [
        f"Redis {report['redis']}  at {time.strftime('%H:%M:%S', time.localtime(report['time']))}"
    ]
    for status in report["spiders"].values():
        lines.append("")
        lines.extend(_spider_lines(status, report["time"]))
    return "\n".join(lines)


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
        )
    return lines


def _breakdown(values: Mapping[str, int]) -> str:
    if not values:
        return ""
    ranked = sorted(values.items(), key=lambda pair: -pair[1])
    return " (" + ", ".join(f"{name} {count:,}" for name, count in ranked[:6]) + ")"


def _series(per_minute: list[dict[str, int]], name: str) -> str:
    return " ".join(f"{row[name]:,}" for row in per_minute)


def _decode_stats(raw: Mapping[Any, Any]) -> dict[str, Any]:
    return {reply_text(name): _number(reply_text(value)) for name, value in raw.items()}


def _decode_worker(raw: Mapping[Any, Any]) -> dict[str, Any]:
    """A heartbeat hash as shown: its numbers read, those that are not finite numbers (written
    by another tool, damaged) left out as if absent, never an error."""
    beat: dict[str, Any] = {_text(name): _text(value) for name, value in raw.items()}
    beat.pop("seq", None)
    for name in (*WORKER_NUMBERS, *WORKER_RATES):
        if name in beat:
            number = _number(beat[name])
            if isinstance(number, str) or not math.isfinite(number):
                del beat[name]
            else:
                beat[name] = number
    port = beat.get("metrics_port")
    beat["metrics_port"] = _port(port) if port else None
    return beat


def _port(text: str) -> int | None:
    """A TCP port (1 to 65535) written as digits; None for anything else."""
    if not (text.isascii() and text.isdigit() and len(text) <= 5):
        return None
    return int(text) if 0 < int(text) < 65536 else None


def _text(value: bytes | str) -> str:
    """A reply as text, bytes that are not UTF-8 replaced (a heartbeat's fields are shown)."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _number(text: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text
