"""``scrapy frontier SPIDER [status|dead|requeue|purge|hosts|unban DOMAIN|unban --identity NAME
[DOMAIN]|pause|resume|job ID [cancel|pause|resume|expires WHEN|max-pages N]]``: look at and
manage a spider's frontier.

scrapy frontier profiles                     sizes: queued, leased, delayed, dead, start entries,
                                             revisits due now, in the next hour and later
scrapy frontier profiles dead --limit 20     the newest dead letters, with their reasons
scrapy frontier profiles requeue [--limit N] dead letters back into the queue, oldest first
                                             (hosts marked unreachable are given a new chance);
                                             those of a job cancelled or past its deadline
                                             are dropped, counted by job
scrapy frontier profiles hosts               hosts blocked (circuit breaker, bans) or marked
                                             unreachable: until when, why, at which step
scrapy frontier profiles purge [--yes]       delete every key of the spider (asks first)
scrapy frontier profiles unban example.com   lift the domain's ban cool-downs and blocks (every
                                             identity, its marks; the breaker's step starts
                                             over); its delayed requests become due at once
scrapy frontier profiles unban --identity proxy:p1.example:8080 [example.com]
                                             lift the blocks and cool-downs of one identity (a
                                             bind address or proxy, as `hosts` names it) on the
                                             domain, or on every host and its own ("*"); its
                                             step starts over; delayed requests that waited
                                             for it are due at once
scrapy frontier profiles pause [--reason TEXT] [--by NAME]
                                             every worker stops taking new requests within 2 s
                                             (pages in flight finish; leases are kept); the
                                             crawl stays open, paused, until resumed
scrapy frontier profiles resume              every worker goes on within 2 s
scrapy frontier profiles job ID              a crawl job: its requests queued, delayed and
                                             leased and its start entries waiting (counted
                                             in the frontier), its pages, items and errors;
                                             an id the frontier does not know is said so, and
                                             an action on one warns that the job is new
scrapy frontier profiles job ID cancel       remove the job's queued and delayed requests and
                                             its start entries (the counts removed); its
                                             requests are dropped from then on, everywhere
scrapy frontier profiles job ID pause|resume the job's requests wait (other jobs go on); a
                                             cancelled job is not paused, resumed, given a
                                             deadline or budget (exit status 1)
scrapy frontier profiles job ID expires WHEN no request of the job is fetched after WHEN:
                                             an ISO 8601 time (UTC if no zone) or +SECONDS
scrapy frontier profiles job ID max-pages N  the fleet sends at most N of the job's requests;
                                             the rest are dropped, counted as over_budget

The pause is the hash {profiles}:paused (since, by, reason): other tools pause with
redis-cli HSET '{profiles}:paused' since "$(date +%s)" by ops reason "db upgrade" and resume
with redis-cli DEL '{profiles}:paused'.
"""

from __future__ import annotations

import getpass
import json
import socket
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from redis.exceptions import RedisError
from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from crawler.bans.breaker import lift_marks
from crawler.commands import ProjectCommand, keep_description_layout, quiet_on_broken_pipe
from crawler.commands.hosts import print_hosts
from crawler.commands.unban import identity_name, unban_domain, unban_host, unban_identity
from crawler.connection import reply_text
from crawler.control.jobs import TIMES, JobAction, JobCancelled, JobStatus, act_on_job
from crawler.control.pause import pause_crawl, read_pause, resume_crawl
from crawler.control.purge import purge_spider
from crawler.frontier.jobs import InvalidJob, check_job_id
from crawler.frontier.queue import Frontier
from crawler.keys import jobs_key
from crawler.observability.report import masked_dead_letter
from crawler.recrawl.store import RevisitStore

if TYPE_CHECKING:
    import argparse

    from crawler.connection import RedisClient
    from crawler.keys import FrontierKeys

# The most dead letters --limit takes (a list index Redis takes, and more than a dead list holds).
MAX_LIMIT = 10**9
ACTIONS = ("status", "dead", "requeue", "purge", "hosts", "unban", "pause", "resume", "job")


class Command(ProjectCommand, ScrapyCommand):
    def syntax(self) -> str:
        return (
            "<spider> [status|dead|requeue|purge|hosts|unban DOMAIN|unban --identity NAME "
            "[DOMAIN]|pause|resume|job ID [cancel|pause|resume|expires WHEN|max-pages N]] "
            "[options]"
        )

    def short_desc(self) -> str:
        return "Show or manage a spider's Redis frontier (queue, leases, dead letters)"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        keep_description_layout(parser)
        parser.add_argument("--json", action="store_true", help="print JSON")
        parser.add_argument(
            "--limit", type=int, default=None, help="how many dead letters (1 to 10**9)"
        )
        parser.add_argument("--yes", action="store_true", help="purge without asking")
        parser.add_argument("--reason", default=None, help="why the crawl is paused (pause)")
        parser.add_argument("--by", default=None, help="who pauses it (pause; default: user@host)")
        parser.add_argument(
            "--identity", default=None, help="unban: lift this identity's blocks (as hosts shows)"
        )

    @quiet_on_broken_pipe
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        spider, action, domain = self._parse(args, opts.identity is not None)
        if action != "pause" and (opts.reason is not None or opts.by is not None):
            raise UsageError("--reason and --by go with pause")
        if opts.limit is not None and not 1 <= opts.limit <= MAX_LIMIT:
            raise UsageError(f"--limit: {opts.limit} is not a whole number from 1 to {MAX_LIMIT:,}")
        identity = None if opts.identity is None else identity_name(opts.identity)
        try:
            if action == "unban":
                server = self.redis()
                frontier = self.frontier(server, spider)
                if identity is None:
                    unban_domain(frontier, domain, opts.json)
                else:
                    unban_identity(frontier, identity, domain or None, opts.json)
            elif action == "job":
                self._job(spider, domain, args[3:], opts.json)
            else:
                self._act(spider, action, opts)
        except RedisError as exc:
            self.redis_failed(exc, spider)

    def _act(self, spider: str, action: str, opts: argparse.Namespace) -> None:
        server = self.redis()
        frontier = self.frontier(server, spider)
        if action == "status":
            self._status(frontier, opts.json)
        elif action == "dead":
            self._dead(frontier, opts.limit or 20, opts.json)
        elif action in ("pause", "resume"):
            self._pause(server, spider, action, opts)
        elif action == "requeue":
            self._requeue(server, frontier, opts)
        elif action == "hosts":
            print_hosts(server, spider, opts.json)
        else:
            self._purge(server, spider, opts.yes, opts.json)

    def _requeue(self, server: RedisClient, frontier: Frontier, opts: argparse.Namespace) -> None:
        """The marks of every host lifted, then the dead letters back in the queue (those of
        jobs cancelled or past their deadline dropped)."""
        spider = frontier.keys.spider
        lifted = lift_marks(server, spider)
        requeued = frontier.requeue_dead(opts.limit if opts.limit is not None else MAX_LIMIT)
        hosts = sorted({field.split("|", 1)[0] for field in lifted})
        if opts.json:
            dropped = {str(number): count for number, count in requeued.dropped.items()}
            done = {"requeued": requeued.moved, "dropped_by_job_number": dropped}
            print(json.dumps({**done, "marks_lifted": len(lifted), "hosts": hosts}))
            return
        on = f"{len(hosts)} host" + ("s" if len(hosts) > 1 else "")
        marks = f"; the marks of {on} lifted ({len(lifted)})" if lifted else ""
        print(f"requeued {requeued.moved} dead letters of {spider}{marks}")
        if requeued.dropped:
            print(dropped_letters(server, spider, requeued.dropped))

    def _parse(self, args: list[str], identity: bool = False) -> tuple[str, str, str]:
        """Spider, action and the domain of ``unban`` ("" for an identity's on every host) or the
        job of ``job`` ("" for the other actions); ``identity``: ``--identity`` was given."""
        if not 1 <= len(args) <= 5:
            raise UsageError("give a spider name and optionally an action")
        spider, action = args[0], args[1] if len(args) >= 2 else "status"
        if action not in ACTIONS:
            raise UsageError(f"unknown action {action!r}; use one of {', '.join(ACTIONS)}")
        if action == "job":
            rest = args[3:]
            if len(args) < 3 or not (
                (len(rest) <= 1 and rest[:1] in ([], ["cancel"], ["pause"], ["resume"]))
                or (len(rest) == 2 and rest[0] in ("expires", "max-pages"))
            ):
                raise UsageError(JOB_USAGE)
            try:
                return self.known_spider(spider), action, check_job_id(args[2])
            except InvalidJob as exc:
                raise UsageError(str(exc)) from None
        if len(args) >= 4:
            raise UsageError("give a spider name and optionally an action")
        if identity and action != "unban":
            raise UsageError("--identity goes with unban")
        if (action == "unban") != (len(args) == 3) and not (identity and len(args) == 2):
            raise UsageError(
                "unban takes one domain: scrapy frontier SPIDER unban DOMAIN, or an identity: "
                "scrapy frontier SPIDER unban --identity NAME [DOMAIN]"
            )
        domain = unban_host(args[2]) if len(args) == 3 else ""
        return self.known_spider(spider), action, domain

    def _job(self, spider: str, job: str, action: list[str], as_json: bool) -> None:
        server = self.redis()
        keys = self.frontier(server, spider).keys
        what = action[0] if action else "status"
        try:
            status = self._job_action(server, keys, job, what, action[1:])
        except JobCancelled as exc:
            print(f"{exc}; nothing changed", file=sys.stderr)
            self.exitcode = 1
            return
        if not status.known and what != "status":
            print(new_job_warning(spider, job, what), file=sys.stderr)
        if as_json:
            print(json.dumps({"spider": spider, what: status.to_json()}))
        elif what == "cancel":
            print(
                f"job {job} of {spider} cancelled: removed {status.queued:,} queued, "
                f"{status.delayed:,} delayed and {status.parked:,} paused requests and "
                f"{status.starts:,} start entries; {status.leased:,} leased requests finish in "
                "flight, their output dropped"
            )
        else:
            print_job(spider, status, self.redis_url())

    def _job_action(
        self, server: RedisClient, keys: FrontierKeys, job: str, what: str, values: list[str]
    ) -> JobStatus:
        if what == "expires":
            return act_on_job(server, keys, job, "expire", deadline(values[0]))
        if what == "max-pages":
            return act_on_job(server, keys, job, "limit", page_budget(values[0]))
        return act_on_job(server, keys, job, cast(JobAction, what))  # status, cancel, (un)pause

    def _pause(
        self, server: RedisClient, spider: str, action: str, opts: argparse.Namespace
    ) -> None:
        if action == "pause":
            pause = pause_crawl(server, spider, opts.by or who(), opts.reason or "")
            if opts.json:
                print(json.dumps({"spider": spider, "paused": pause.to_json()}))
            else:
                print(f"{spider} {pause.describe()}; workers stop taking requests within 2 s")
            return
        lifted = resume_crawl(server, spider)
        if opts.json:
            print(json.dumps({"spider": spider, "resumed": lifted and lifted.to_json()}))
        elif lifted is None:
            print(f"{spider} was not paused")
        else:
            print(f"{spider} resumed (was {lifted.describe()}); workers go on within 2 s")

    def _status(self, frontier: Frontier, as_json: bool) -> None:
        sizes = frontier.sizes()
        spider = frontier.keys.spider
        revisits = RevisitStore(frontier.server, spider).counts()
        pause = read_pause(frontier.server, spider)
        if as_json:
            paused = pause and pause.to_json()
            print(json.dumps({"spider": spider, **sizes, "revisits": revisits, "paused": paused}))
            return
        print(f"{spider} @ {self.redis_url()}")
        if pause is not None:
            print(f"  {pause.describe()}")
        for name, value in sizes.items():
            print(f"  {name:<13} {value:>10,}")
        for name, value in revisits.items():
            print(f"  {'revisits ' + name:<20} {value:>10,}")

    def _dead(self, frontier: Frontier, limit: int, as_json: bool) -> None:
        letters = [masked_dead_letter(letter) for letter in frontier.dead_letters(limit)]
        if as_json:
            print(json.dumps(letters))
            return
        for letter in letters:
            request, failure = letter.get("request") or {}, letter.get("failure") or {}
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(failure.get("time", 0)))
            print(
                f"{when}  {failure.get('reason')}  attempts={failure.get('attempts')}  "
                f"{request.get('url')}\n    {failure.get('error', '')[:300]}"
            )
        print(f"{len(letters)} shown")

    def _purge(self, server: RedisClient, spider: str, yes: bool, as_json: bool = False) -> None:
        assert self.settings is not None
        if not yes:
            try:
                answer = input(
                    f"Delete every Redis key of {spider} (queue, leases, dead letters, "
                    f"duplicate filter, start entries)? Type the spider name: "
                )
            except EOFError:  # no terminal (a script, </dev/null): nobody said yes
                print("\nnothing deleted: no answer (use --yes)", file=sys.stderr)
                self.exitcode = 1
                return
            if answer.strip() != spider:
                print("nothing deleted", file=sys.stderr)
                self.exitcode = 1
                return
        keys = purge_spider(server, self.settings, spider)
        if as_json:
            print(json.dumps({"deleted": keys}))
            return
        print(f"deleted {len(keys)} keys of {spider}: {', '.join(keys) or '-'}")


JOB_USAGE = "scrapy frontier SPIDER job ID [cancel|pause|resume|expires WHEN|max-pages N]"


def dropped_letters(server: RedisClient, spider: str, dropped: dict[int, int]) -> str:
    """``dropped 30 dead letters of jobs cancelled or past their deadline (acme-1: 20,
    acme-2: 10)``."""
    names: Any = server.hmget(jobs_key(spider), [f"#{number}" for number in dropped])
    jobs = ", ".join(
        f"{reply_text(name) if name else f'#{number}'}: {count:,}"
        for (number, count), name in zip(dropped.items(), names, strict=True)
    )
    return (
        f"dropped {sum(dropped.values()):,} dead letters of jobs cancelled or past their "
        f"deadline ({jobs}); put a deadline off before a requeue to have its letters requeued"
    )


def new_job_warning(spider: str, job: str, what: str) -> str:
    """The one line that says an action numbered a job the frontier did not know (a typo in
    the id makes a job of its own, kept as the action left it)."""
    return (
        f"warning: job {job} of {spider} is new: no entry naming it was read yet and nothing "
        f"was counted; `{what}` holds for the entries that name it later (is the id right?)"
    )


def print_job(spider: str, status: JobStatus, where: str) -> None:
    print(f"job {status.job} of {spider} @ {where}")
    if not status.known:
        print("  unknown to the frontier: no entry naming it was read yet, no command named it")
    for name, value in status.to_json().items():
        if name in TIMES:
            shown = (
                "-" if value is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(value))
            )
        elif value is None:
            shown = "-"
        else:
            shown = f"{value:,}" if isinstance(value, int) else str(value)
        if name not in ("job", "known"):
            print(f"  {name:<16} {shown:>10}")


def deadline(text: str) -> float:
    """A job's deadline: ``+SECONDS`` from now, or an ISO 8601 time (UTC if it names no
    zone), as a Unix time."""
    try:
        if text.startswith("+"):
            seconds = float(text[1:])
            if not 0 <= seconds < 10**9:
                raise ValueError(text)
            return time.time() + seconds
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"expires: {text!r} is neither +SECONDS nor an ISO 8601 time") from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def page_budget(text: str) -> int:
    """A job's page budget: a whole number from 0."""
    if not (text.isascii() and text.isdigit()) or len(text) > 15:
        raise UsageError(f"max-pages: {text!r} is not a whole number from 0")
    return int(text)


def who() -> str:
    """``user@host`` of whoever runs the command (the pause's default ``by``)."""
    try:
        user = getpass.getuser()
    except Exception:  # no user name in the environment nor the password database
        user = "?"
    return f"{user}@{socket.gethostname()}"
