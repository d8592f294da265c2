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
from crawler.control.jobs import recent_jobs
from crawler.frontier.dupefilter import APPROXIMATE_MODES, queue_seen, seen_count
from crawler.frontier.pause import pause_from_replies, queue_read
from crawler.frontier.queue import requests_per_entry, spider_frontier, work_left
from crawler.frontier.riders import first_error
from crawler.keys import FleetKeys, failure_window_key
from crawler.observability.counters import Counters
from crawler.observability.key_types import WrongKeyType, key_types_checked
from crawler.observability.publisher import MINUTE_FIELDS
from crawler.observability.rates import bucket_rate, eta_seconds
from crawler.observability.sizing import BUSY_FIELD, read_sizing
from crawler.observability.spills import spills_status
from crawler.observability.starts import read_starts
from crawler.recrawl.store import RevisitStore
from crawler.uris import MASK, mask_uri

if TYPE_CHECKING:
    from crawler.connection import RedisClient

WORKER_NUMBERS = ("pid", "started", "beat", "ttl", "pages", "items", "mongo_away", "spilled")
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
        own_settings = spider_settings(settings, spidercls)
        try:
            with key_types_checked(server, own_settings, name):
                status = spider_status(server, own_settings, name, minutes, history)
                own = getattr(spidercls, "fleet_report", None)
                if own is not None:
                    status["report"] = own(server, settings)
        except WrongKeyType as exc:
            status = unreadable_status(exc)
        report["spiders"][name] = status
    return report


def unreadable_status(exc: WrongKeyType) -> dict[str, Any]:
    """What is shown of a spider whose keys the report cannot read: which hold what, and no
    figures (they would be wrong)."""
    return {"spider": exc.spider, "error": "; ".join(exc.problems)}


def unreadable_spiders(report: Mapping[str, Any]) -> list[str]:
    """The spiders of ``report`` shown with an ``error`` in place of their figures."""
    return [name for name, status in report["spiders"].items() if status.get("error")]


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
        # items spilled in a MongoDB outage, by spill file (held: by its live worker)
        "spilled": spills_status(server, spider, workers),
        # scrapy fleet autoscale's launches whose worker never reported (crawler/fleet/backoff.py)
        "starts": read_starts(server, spider).to_json(now),
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


def _decode_stats(raw: Mapping[Any, Any]) -> dict[str, Any]:
    return {reply_text(name): _number(reply_text(value)) for name, value in raw.items()}


def _decode_worker(raw: Mapping[Any, Any]) -> dict[str, Any]:
    """A heartbeat hash as shown: its numbers read, those that are not finite numbers (written
    by another tool, damaged) left out as if absent, never an error."""
    beat: dict[str, Any] = {
        reply_text(name, "replace"): reply_text(value, "replace") for name, value in raw.items()
    }
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


def _number(text: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text
