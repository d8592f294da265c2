"""``scrapy status [SPIDER] [--json] [--watch SECONDS] [--serve PORT]``: the fleet at a glance.

For each spider (every spider of the project without SPIDER): the frontier (queued, leased,
delayed, dead, start entries), the approximate count of requests seen, pages and items per
minute over the last minutes with an ETA, the fleet's request, response, item, retry, ban and
dead-letter counts, per-domain counts, the live workers with their pace, and the launches
``scrapy fleet autoscale`` holds back when its instances never start.

scrapy status                        every spider, as text
scrapy status profiles --json        one spider, as JSON
scrapy status profiles --watch 5     refresh every 5 seconds (Ctrl-C to stop); a refresh
                                     Redis does not answer says so and the watch goes on
scrapy status --serve 9400           the fleet page at http://127.0.0.1:9400/ (Ctrl-C to stop)
                                     and each spider's sizing gauges at /metrics

The fleet page (no worker needed) shows the same figures with charts of the last hour, active
ban cool-downs and the newest dead letters; it refreshes itself. It listens on 127.0.0.1 unless
--host says otherwise (it is read-only and shows no secrets).

Dead letters are listed and requeued with ``scrapy frontier SPIDER dead|requeue``; a spider's
frontier is wiped with ``scrapy frontier SPIDER purge``.
"""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError
from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError
from scrapy.spiderloader import get_spider_loader
from twisted.internet.error import CannotListenError

from crawler.commands import ProjectCommand, keep_description_layout, quiet_on_broken_pipe
from crawler.config import setting
from crawler.config.rules import SettingsError
from crawler.fleet.exporter import sizing_registry
from crawler.observability.endpoint import listen, site
from crawler.observability.page import HISTORY_MINUTES
from crawler.observability.page_server import FleetPage
from crawler.observability.report import fleet_report, spider_settings, unreadable_spiders
from crawler.observability.report_text import render_text

if TYPE_CHECKING:
    import argparse

    from crawler.connection import RedisClient

CLEAR_SCREEN = "\033[H\033[2J"
# The longest refresh --watch takes, in seconds (a day: time.sleep refuses far longer ones).
MAX_WATCH = 86_400


class Command(ProjectCommand, ScrapyCommand):
    def syntax(self) -> str:
        return "[spider] [--json] [--watch SECONDS] [--minutes N] [--serve PORT [--host HOST]]"

    def short_desc(self) -> str:
        return "Show the fleet: frontier, counters, pace, ETA and live workers of each spider"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        keep_description_layout(parser)
        parser.add_argument("--json", action="store_true", help="print JSON")
        parser.add_argument("--watch", type=float, metavar="SECONDS", help="refresh every SECONDS")
        parser.add_argument(
            "--minutes", type=int, default=5, help="minutes the pace is measured over (1-60)"
        )
        parser.add_argument(
            "--serve",
            type=int,
            metavar="PORT",
            help="serve the fleet page on PORT (0: any free port)",
        )
        parser.add_argument(
            "--host",
            default="127.0.0.1",
            help="address the fleet page listens on (127.0.0.1; FLEET_PAGE=all lets others in)",
        )

    @quiet_on_broken_pipe
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        spiders = self._spiders(args)
        if not 1 <= opts.minutes <= 60:
            raise UsageError("--minutes must be between 1 and 60")
        if opts.watch is not None and not 0 < opts.watch <= MAX_WATCH:  # nan: neither
            raise UsageError(f"--watch takes a number of seconds above 0, at most {MAX_WATCH:,}")
        if opts.serve is not None and not 0 <= opts.serve <= 65535:
            raise UsageError("--serve takes a port (0-65535; 0 picks a free one)")
        server = self.redis()
        if opts.serve is not None:
            self._serve(server, spiders, opts)
            return
        try:
            if opts.watch:
                self._watch(server, spiders, opts)
            else:
                self._show(server, spiders, opts)
        except KeyboardInterrupt:
            return
        except RedisError as exc:
            self.redis_unreachable(exc)

    def _watch(self, server: RedisClient, spiders: list[str], opts: argparse.Namespace) -> None:
        """Show the fleet every ``--watch`` seconds until Ctrl-C; a refresh Redis does not
        answer says so on stderr, and the next one shows the fleet again once it answers."""
        while True:
            try:
                self._show(server, spiders, opts)
            except RedisError as exc:
                print(
                    f"Redis at {self.redis_url()} is unreachable: {exc}; trying again in "
                    f"{opts.watch:g} s (Ctrl-C to stop)",
                    file=sys.stderr,
                    flush=True,
                )
            time.sleep(opts.watch)

    def _spiders(self, args: list[str]) -> list[str]:
        if len(args) > 1:
            raise UsageError("give at most one spider name")
        return [self.known_spider(args[0])] if args else self.spider_names()

    def _classes(self, spiders: list[str]) -> dict[str, Any]:
        assert self.settings is not None
        loader = get_spider_loader(self.settings)
        return {spider: loader.load(spider) for spider in spiders}

    def _show(self, server: RedisClient, spiders: list[str], opts: argparse.Namespace) -> None:
        """The report, printed; exit status 2 while a spider's keys hold the wrong type."""
        assert self.settings is not None
        report = fleet_report(server, self.settings, self._classes(spiders), opts.minutes)
        self.exitcode = 2 if unreadable_spiders(report) else 0
        if opts.json:
            print(json.dumps(report), flush=True)
            return
        if opts.watch and sys.stdout.isatty():
            print(CLEAR_SCREEN, end="")
        print(render_text(report), flush=True)

    def _sizing_settings(self, classes: dict[str, Any]) -> dict[str, Any]:
        """Each spider's settings as its workers have them (its own update_settings)."""
        assert self.settings is not None
        return {spider: spider_settings(self.settings, cls) for spider, cls in classes.items()}

    def _serve(self, server: RedisClient, spiders: list[str], opts: argparse.Namespace) -> None:
        """Serve the fleet page until Ctrl-C (or SIGTERM)."""
        from twisted.internet import reactor as installed

        assert self.settings is not None
        reactor: Any = installed
        settings, classes = self.settings, self._classes(spiders)
        try:
            mode = setting(settings, "FLEET_PAGE")
        except SettingsError as exc:  # a typo never serves the page beyond this machine
            raise UsageError(str(exc)) from exc
        if mode == "off":
            raise UsageError("FLEET_PAGE is off: the fleet page is not served")
        page = FleetPage(
            lambda: fleet_report(server, settings, classes, opts.minutes, HISTORY_MINUTES),
            local_only=mode == "local",
        )
        registry = sizing_registry(server, self._sizing_settings(classes))
        try:
            listening = listen(opts.host, [opts.serve], site(registry, page))
        except CannotListenError as exc:
            print(
                f"Cannot serve the fleet page on {opts.host}:{opts.serve}: {exc}", file=sys.stderr
            )
            self.exitcode = 1
            return
        shown = f"[{opts.host}]" if ":" in opts.host else opts.host
        # Said once the reactor runs, and so handles Ctrl-C: a stop sent on seeing the line ends
        # the command cleanly (exit 0).
        line = f"Fleet page at http://{shown}:{listening.port}/ (Ctrl-C to stop)"
        reactor.callWhenRunning(print, line, flush=True)
        reactor.run()
