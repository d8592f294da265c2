"""What ``scrapy fleet plan`` and ``scrapy fleet autoscale --local`` do, apart from the command's
parsing (crawler/commands/fleet.py); the EC2 autoscaler shares the loop."""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError
from scrapy.exceptions import UsageError
from scrapy.spiderloader import get_spider_loader

from crawler.config import check_worker_settings
from crawler.config.rules import SettingsError
from crawler.fleet.autoscaler import Autoscaler, Engine, Step
from crawler.fleet.backoff import Backoff, StartGuard
from crawler.fleet.local import QUICK_EXIT, LocalWorkers
from crawler.fleet.measure import RedisMark, RedisStarts, fleet_sizing, local_beats
from crawler.fleet.plan import Plan, explain, parse_duration, plan
from crawler.observability.report import spider_settings
from crawler.observability.sizing import Sizing, SizingConfig

if TYPE_CHECKING:
    import argparse

    from scrapy.settings import BaseSettings, Settings

    from crawler.connection import RedisClient

# Options that set an AUTOSCALE_* setting for this run.
OPTION_SETTINGS = {
    "min": "AUTOSCALE_MIN_WORKERS",
    "max": "AUTOSCALE_MAX_WORKERS",
    "cooldown": "AUTOSCALE_COOLDOWN",
    "interval": "AUTOSCALE_INTERVAL",
}


def add_sizing_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--deadline", default=None, help="plan/launch: finish within (4h, 90m)")
    parser.add_argument(
        "--pages", type=int, default=None, help="plan: pages (default: frontier, revisits due)"
    )
    parser.add_argument("--local", action="store_true", help="autoscale local worker processes")
    parser.add_argument("--min", type=int, default=None, help="default AUTOSCALE_MIN_WORKERS")
    parser.add_argument("--max", type=int, default=None, help="default AUTOSCALE_MAX_WORKERS")
    parser.add_argument("--cooldown", type=float, default=None, help="default AUTOSCALE_COOLDOWN")
    parser.add_argument("--interval", type=float, default=None, help="default AUTOSCALE_INTERVAL")
    parser.add_argument("--once", action="store_true", help="autoscale: one step, then exit")
    parser.add_argument("--logs", default=None, help="autoscale --local: workers' log directory")
    parser.add_argument(
        "--calibrate",
        type=float,
        default=0,
        metavar="SECONDS",
        help="plan: with no pace measured, crawl with one local worker up to SECONDS to measure it",
    )


def sizing_settings(settings: Settings, spider: str, opts: argparse.Namespace) -> Settings:
    """The project's settings as ``spider``'s workers have them, with the options' AUTOSCALE_*
    (UsageError naming the setting when one is refused)."""
    ours = spider_settings(settings, get_spider_loader(settings).load(spider))
    for option, name in OPTION_SETTINGS.items():
        if getattr(opts, option) is not None:
            ours.set(name, getattr(opts, option), priority="cmdline")
    try:
        SizingConfig.from_settings(ours)
    except SettingsError as exc:
        raise UsageError(str(exc)) from exc
    return ours


def print_plan(server: RedisClient, settings: BaseSettings, spider: str, opts: Any) -> None:
    """``scrapy fleet plan``: the plan's arithmetic, or JSON."""
    sizing = fleet_sizing(server, settings, spider)
    if not sizing.measured and opts.calibrate > 0:
        sizing = calibrated(server, settings, spider, opts)
    chosen = planned(sizing, opts, spider, SizingConfig.from_settings(settings).max_workers)
    if opts.json:
        print(json.dumps({"spider": spider, **chosen.to_json()}))
    else:
        print(f"{spider}: workers to finish by the deadline")
        print("\n".join(f"  {line}" for line in explain(chosen)))


def planned(sizing: Sizing, opts: Any, spider: str, max_workers: int) -> Plan:
    """The plan for ``--pages`` (or the frontier's work and the revisits due, as the autoscaler
    counts them) by ``--deadline``, with ``max_workers`` at most (AUTOSCALE_MAX_WORKERS,
    ``--max``)."""
    try:
        deadline = parse_duration(opts.deadline or "")
    except ValueError as exc:
        raise UsageError(f"--deadline: {exc}") from exc
    if opts.pages is not None:
        if opts.pages < 1:
            raise UsageError(f"--pages must be at least 1, got {opts.pages}")
        return plan(opts.pages, deadline, sizing, max_workers)
    pages = sizing.work + sizing.revisits_due
    if pages < 1:
        spilled = ""
        if sizing.spills:  # only a worker on their machine replays them: no plan brings one
            files = (
                "1 spill file holds" if sizing.spills == 1 else f"{sizing.spills} spill files hold"
            )
            spilled = f"; {files} items for a worker on its machine"
        raise UsageError(f"{spider} has no work left and no revisit due{spilled}: give --pages N")
    return plan(pages, deadline, sizing, max_workers, sizing.revisits_due)


def calibrated(server: RedisClient, settings: BaseSettings, spider: str, opts: Any) -> Sizing:
    """The sizing once one local worker has crawled until the pace is measured, or for
    ``--calibrate`` seconds at most; the worker is then told to go (it loses nothing)."""
    seconds = f"{opts.calibrate:g}"
    print(f"{spider}: no pace measured: one worker crawls up to {seconds} s to measure it",
          file=sys.stderr, flush=True)  # fmt: skip
    workers = LocalWorkers(
        worker_command(spider, opts),
        lambda: local_beats(server, settings, spider),
        Path(opts.logs) if opts.logs else None,
    )
    workers.start(1)
    deadline = time.monotonic() + opts.calibrate
    sizing = fleet_sizing(server, settings, spider)
    while not sizing.measured and time.monotonic() < deadline and workers.running():
        threading.Event().wait(1.0)
        sizing = fleet_sizing(server, settings, spider)
    workers.close(stop_grace(settings))
    return sizing


def worker_command(spider: str, opts: Any) -> list[str]:
    """``scrapy crawl SPIDER`` with this command's ``-s`` settings."""
    command = [sys.executable, "-m", "scrapy", "crawl", spider]
    for pair in opts.set or []:
        command += ["-s", pair]
    return command


def stop_grace(settings: BaseSettings) -> float:
    """Seconds a worker told to go has to finish its downloads and flush its items."""
    return settings.getfloat("DOWNLOAD_TIMEOUT") + settings.getfloat("MONGO_FLUSH_INTERVAL") + 30


def autoscale_local(server: RedisClient, settings: BaseSettings, spider: str, opts: Any) -> bool:
    """``scrapy fleet autoscale SPIDER --local``: workers as processes of this machine, their
    starts held back after failed ones (crawler/fleet/local.py says which)."""
    try:
        backoff = Backoff.from_settings(settings)
        check_worker_settings(dict(pair.partition("=")[::2] for pair in opts.set or []))
    except SettingsError as exc:
        raise UsageError(str(exc)) from exc
    workers = LocalWorkers(
        worker_command(spider, opts),
        lambda: local_beats(server, settings, spider),
        Path(opts.logs) if opts.logs else None,
        grace=stop_grace(settings),
    )
    news = partial(local_starts_news, logs=opts.logs)
    succeeded = autoscale(workers, server, settings, spider, opts, workers.reap, backoff, news)
    if not opts.once:
        report(None, workers.close(stop_grace(settings)), opts.json)
    return succeeded


def autoscale(
    engine: Engine,
    server: RedisClient,
    settings: BaseSettings,
    spider: str,
    opts: Any,
    reap: Callable[[], dict[str, int]] = dict,
    backoff: Backoff | None = None,
    news: Callable[[Step], str] | None = None,
) -> bool:
    """Move ``engine`` toward the workers wanted, every AUTOSCALE_INTERVAL (once with
    ``--once``), the cool-down kept in Redis across runs; ``reap()`` gives the workers that
    exited since the last look, with their exit status; with ``backoff``, failed starts hold
    launches back (crawler/fleet/backoff.py), ``news`` saying so (EC2's by default). Whether
    the last look succeeded."""
    config = SizingConfig.from_settings(settings)
    guard = None if backoff is None else StartGuard(backoff, RedisStarts(server, spider))
    autoscaler = Autoscaler(
        engine,
        lambda: fleet_sizing(server, settings, spider).wanted,
        config.cooldown,
        mark=RedisMark(server, spider),
        guard=guard,
    )
    return run_loop(
        lambda: report(autoscaler.step(), reap(), opts.json, news or starts_news),
        config.interval,
        opts.once,
        (RedisError, *engine.errors),
    )


def _attempt(step: Callable[[], None], errors: tuple[type[Exception], ...]) -> bool:
    try:
        step()
    except errors as exc:
        print(f"look failed, will look again: {exc}", file=sys.stderr, flush=True)
        return False
    return True


def report(
    step: Step | None,
    exited: dict[str, int],
    as_json: bool,
    news: Callable[[Step], str] | None = None,
) -> None:
    """One look: what it started and stopped, and the workers that exited since the last; a
    hold on launches as it begins, tries again and ends, on stderr too (as ``news`` says it)."""
    if step is not None and step.starts:
        said = (news or starts_news)(step)
        print(f"{time.strftime('%H:%M:%S')}  {said}", file=sys.stderr, flush=True)
    if as_json:
        line = {**(step.to_json() if step else {"time": time.time()}), "exited": exited}
        print(json.dumps(line), flush=True)
        return
    parts = []
    if step is not None and (step.started or step.stopped or step.gone):
        parts.append(f"wanted {step.wanted}, running {step.running}")
        parts += [f"worker gone, stopped {', '.join(step.gone)}"] if step.gone else []
        parts += [f"started {len(step.started)}"] if step.started else []
        parts += [f"stopped {', '.join(step.stopped)}"] if step.stopped else []
    if exited:
        parts.append("exited " + ", ".join(f"{w} ({code})" for w, code in exited.items()))
    if parts:
        print(f"{time.strftime('%H:%M:%S')}  " + "; ".join(parts), flush=True)


def starts_news(step: Step) -> str:
    """What ``step`` changed of the hold on launches (``step.starts``), for a person."""
    failed = f"{step.failed_starts} launches in a row sent no heartbeat within FLEET_WORKER_GRACE"
    if step.starts == "held":
        until = time.strftime("%H:%M:%S", time.localtime(step.held_until or 0))
        return (
            f"{failed}: no launch until {until}, then one at a time until a worker reports "
            "(FLEET_START_FAILURES, FLEET_START_BACKOFF). Are the install target and the "
            "secrets right? An instance's /var/log/crawler-worker.log says, within "
            "FLEET_WORKER_GRACE of its launch (scrapy fleet launch one); once a worker "
            "reports, launches go on"
        )
    if step.starts == "trying":
        return f"{failed}: one instance launched to try again ({', '.join(step.started)})"
    return "a worker reported: launches go as wanted again"


def local_starts_news(step: Step, logs: str | None) -> str:
    """:func:`starts_news` for local workers, whose output is in ``logs`` (``--logs``)."""
    failed = (
        f"{step.failed_starts} workers in a row exited with an error before they reported, or "
        f"within {QUICK_EXIT:g} s of their start"
    )
    if step.starts == "held":
        until = time.strftime("%H:%M:%S", time.localtime(step.held_until or 0))
        where = f"their logs in {logs} say why" if logs else "--logs DIR keeps their output"
        return (
            f"{failed}: none started until {until}, then one at a time until a worker reports "
            f"(FLEET_START_FAILURES, FLEET_START_BACKOFF). Their exit status is above; {where}; "
            "once a worker reports, workers start as wanted"
        )
    if step.starts == "trying":
        return f"{failed}: one started to try again ({', '.join(step.started)})"
    return "a worker reported: workers start as wanted again"


def run_loop(
    step: Callable[[], None],
    interval: float,
    once: bool,
    errors: tuple[type[Exception], ...] = (RedisError,),
) -> bool:
    """``step()`` every ``interval`` seconds until SIGTERM or SIGINT (once with ``once``); a
    step that meets one of ``errors`` (Redis or the engine unreachable) is reported and the next
    one tried. Whether the last step succeeded."""
    stop = threading.Event()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    for sig in handlers:
        signal.signal(sig, lambda *_: stop.set())
    try:
        while True:
            succeeded = _attempt(step, errors)
            if once or stop.wait(interval):
                return succeeded
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
