"""``scrapy fleet launch|list|rotate|scale-to-zero|plan|autoscale``: a fleet of workers, on AWS EC2
or as local processes, sized by what the work allows (docs/scaling.md, "An elastic fleet").

scrapy fleet launch profiles --count 4 [--spot] [--instance-type t3.small] [--ami ami-...]
    [--install 'git+https://github.com/org/crawler@v1.0'] [--secrets ssm|env]
scrapy fleet list [SPIDER] [--json]
scrapy fleet rotate profiles       replace the workers that reported a ban (new instances, new IPs)
scrapy fleet scale-to-zero profiles    terminate the spider's workers once its frontier is drained
                                       (no revisit due, no spilled item waiting)
scrapy fleet plan profiles --deadline 4h [--pages N] [--calibrate 60]    workers needed by then
scrapy fleet launch profiles --deadline 4h             launch as many as the plan says
scrapy fleet autoscale profiles --local --max 8 [--min 2] [--cooldown 120] [--once]
    start and stop local `scrapy crawl` workers toward the workers the work allows
scrapy fleet autoscale profiles [--once]    the same with EC2 instances

A worker's user data installs the project with pip (FLEET_INSTALL or --install), reads REDIS_URL
and MONGO_URI from SSM parameters (FLEET_SSM_REDIS_URL, FLEET_SSM_MONGO_URI; --secrets env copies
this environment's values into the user data instead) and runs ``scrapy crawl SPIDER -s
BAN_POLICY=stop``. A banned worker exits with status 3 and reports its instance id to Redis
(``{SPIDER}:fleet:banned``); ``rotate`` terminates those instances and launches as many new ones
of the same image, type and market. ``autoscale`` holds its launches back after
FLEET_START_FAILURES instances in a row whose worker never reported, ``--local`` its starts
after as many workers in a row that exited with an error at once (crawler/fleet/backoff.py).
Settings: see crawler/aws/config.py; AUTOSCALE_* for plan and autoscale (--min, --max,
--cooldown and --interval set them for one run).
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from crawler.aws.config import SECRET_MODES, FleetConfig
from crawler.aws.engine import Ec2Workers
from crawler.aws.instances import Fleet, Instance
from crawler.aws.report import banned_instances, clear_banned
from crawler.commands import ProjectCommand, keep_description_layout, quiet_on_broken_pipe
from crawler.config import setting
from crawler.config.rules import SettingsError
from crawler.fleet.cli import (
    add_sizing_options,
    autoscale,
    autoscale_local,
    planned,
    print_plan,
    sizing_settings,
)
from crawler.fleet.measure import beats_by_host, fleet_sizing
from crawler.fleet.plan import explain
from crawler.frontier.queue import WORK_LEFT
from crawler.observability.key_types import WrongKeyType, key_types_checked
from crawler.observability.sizing import SizingConfig
from crawler.recrawl.store import RevisitStore
from crawler.storage.waiting import read_waiting

if TYPE_CHECKING:
    import argparse

ACTIONS = ("launch", "list", "rotate", "scale-to-zero", "plan", "autoscale")
# The actions that start instances: FLEET_CRAWL_SETTINGS is checked before them (list and
# scale-to-zero go on whatever it holds: a fleet can always be looked at and stopped).
LAUNCHING = ("launch", "rotate", "autoscale")


class Command(ProjectCommand, ScrapyCommand):
    def syntax(self) -> str:
        return "launch|list|rotate|scale-to-zero|plan|autoscale [spider] [options]"

    def short_desc(self) -> str:
        return "Plan, launch, autoscale, list, rotate and scale down a fleet of workers"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        keep_description_layout(parser)
        parser.add_argument(
            "--count", type=int, default=None, help="instances to launch (default 1, or planned)"
        )
        parser.add_argument("--spot", action="store_true", help="one-time spot instances")
        parser.add_argument("--instance-type", default=None, help="default FLEET_INSTANCE_TYPE")
        parser.add_argument("--ami", default=None, help="image id (default FLEET_AMI)")
        parser.add_argument("--install", default=None, help="pip target (default FLEET_INSTALL)")
        parser.add_argument(
            "--secrets", choices=SECRET_MODES, default=None, help="default FLEET_SECRETS"
        )
        parser.add_argument("--json", action="store_true", help="print JSON")
        add_sizing_options(parser)

    @quiet_on_broken_pipe
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        try:
            self._run(args, opts)
        except (RedisConnectionError, RedisTimeoutError) as exc:  # one line, as `status` says
            self.redis_unreachable(exc)
        except WrongKeyType as exc:
            self.wrong_key_type(exc)
        except Exception as exc:
            if not self._cloud_refused(exc):
                raise

    def _cloud_refused(self, exc: Exception) -> bool:
        """What the cloud said in one line, not a traceback: no region is a usage error, another
        refusal of AWS (no credentials, not authorized, a limit) exit status 1. False for an
        error that is not the cloud's."""
        # Imported only here, as boto3 is (crawler/aws/instances.py): every command loads this.
        from botocore.exceptions import BotoCoreError, ClientError, NoRegionError

        if isinstance(exc, NoRegionError):
            raise UsageError("no AWS region: set FLEET_REGION (or AWS_DEFAULT_REGION)") from exc
        if not isinstance(exc, BotoCoreError | ClientError):
            return False
        print(f"AWS refused: {str(exc).splitlines()[0][:500]}", file=sys.stderr)
        self.exitcode = 1
        return True

    def _run(self, args: list[str], opts: argparse.Namespace) -> None:
        action, spider = self._parse(args)
        assert self.settings is not None
        if action == "plan" or (action == "autoscale" and opts.local):
            assert spider is not None
            settings = sizing_settings(self.settings, spider, opts)
            if action == "plan":
                server = self.redis()
                with key_types_checked(server, settings, spider):
                    print_plan(server, settings, spider, opts)
            elif not autoscale_local(self.redis(), settings, spider, opts):
                self.exitcode = 1
            return
        try:
            config = FleetConfig.from_settings(self.settings)
            if action in LAUNCHING:
                config.check_crawl_settings()
        except SettingsError as exc:
            raise UsageError(str(exc)) from exc
        fleet = Fleet(config)
        if action == "list":
            self._print(fleet.instances(spider), opts.json)
            return
        assert spider is not None
        if action == "launch":
            self._launch(fleet, spider, opts)
        elif action == "autoscale":
            self._autoscale(fleet, spider, opts)
        elif action == "rotate":
            self._rotate(fleet, spider, opts)
        else:
            self._scale_to_zero(fleet, spider, opts)

    def _parse(self, args: list[str]) -> tuple[str, str | None]:
        if not args or args[0] not in ACTIONS:
            raise UsageError(f"give an action: {', '.join(ACTIONS)}")
        action, rest = args[0], args[1:]
        if len(rest) > 1 or (action != "list" and len(rest) != 1):
            raise UsageError(f"{action} takes {'at most ' if action == 'list' else ''}one spider")
        return action, self.known_spider(rest[0]) if rest else None

    def _launch(self, fleet: Fleet, spider: str, opts: argparse.Namespace) -> None:
        count = self._planned_count(spider, opts) if opts.deadline else opts.count
        count = 1 if count is None else count
        if count < 1:
            raise UsageError("--count must be at least 1")
        launched = fleet.launch(spider, count, **self._launch_options(fleet, spider, opts))
        self._print(launched, opts.json, f"launched {len(launched)} workers of {spider}")

    def _launch_options(
        self, fleet: Fleet, spider: str, opts: argparse.Namespace
    ) -> dict[str, Any]:
        """``Fleet.launch``'s keyword arguments for new workers of ``spider``, from the options
        and FLEET_* (UsageError when the install target, the image or the secrets mode is
        missing or wrong)."""
        if not (opts.ami or fleet.config.ami):
            raise UsageError("give an image: --ami or FLEET_AMI")
        return {
            "user_data": self._user_data(fleet, spider, opts),
            "spot": opts.spot,
            "instance_type": opts.instance_type,
            "ami": opts.ami,
        }

    def _user_data(self, fleet: Fleet, spider: str, opts: argparse.Namespace) -> str:
        """The user data of new workers of ``spider`` (launched, or replacing banned ones):
        what they install, and REDIS_URL and MONGO_URI from SSM or written in ("env": the
        settings' values, ``-s`` over the environment)."""
        config = fleet.config
        install = opts.install or config.install
        if not install:
            raise UsageError("say what workers install: --install or FLEET_INSTALL")
        secrets = opts.secrets or config.secrets
        env = {}
        if secrets == "env":
            assert self.settings is not None
            env = {name: str(self.settings.get(name)) for name in ("REDIS_URL", "MONGO_URI")}
        return fleet.user_data(spider, install, secrets, env)

    def _autoscale(self, fleet: Fleet, spider: str, opts: argparse.Namespace) -> None:
        """EC2 instances toward the workers the work allows (see crawler/fleet/autoscaler.py)."""
        assert self.settings is not None
        settings, server = sizing_settings(self.settings, spider, opts), self.redis()
        launch = self._launch_options(fleet, spider, opts)
        engine = Ec2Workers(
            fleet,
            spider,
            launch,
            lambda: beats_by_host(server, settings, spider),
            server,
            fleet.config.worker_grace,
        )
        backoff = fleet.config.start_backoff
        if not autoscale(engine, server, settings, spider, opts, backoff=backoff):
            self.exitcode = 1

    def _planned_count(self, spider: str, opts: argparse.Namespace) -> int:
        """The workers ``scrapy fleet plan`` gives for ``--deadline``, never more than
        AUTOSCALE_MAX_WORKERS (``--max``; its arithmetic shown on stderr)."""
        if opts.count is not None:
            raise UsageError("give --count or --deadline, not both")
        assert self.settings is not None
        settings = sizing_settings(self.settings, spider, opts)
        max_workers = SizingConfig.from_settings(settings).max_workers
        chosen = planned(fleet_sizing(self.redis(), settings, spider), opts, spider, max_workers)
        print("\n".join(explain(chosen)), file=sys.stderr)
        return chosen.workers

    def _rotate(self, fleet: Fleet, spider: str, opts: argparse.Namespace) -> None:
        """Replace each worker that reported a ban: its replacement launched, then it is
        terminated and its report cleared, one at a time (a launch that fails leaves the
        instances not replaced yet, and their reports, for the next rotate)."""
        server = self.redis()
        reported = banned_instances(server, spider)
        live = {instance.id: instance for instance in fleet.instances(spider)}
        banned = [live[instance_id] for instance_id in reported if instance_id in live]
        # Reports of instances that are gone already are done with.
        clear_banned(server, spider, [i for i in reported if i not in live])
        user_data = self._user_data(fleet, spider, opts) if banned else ""
        replacements: list[Instance] = []
        for instance in banned:
            replacements += fleet.launch(
                spider,
                1,
                user_data=user_data,
                spot=instance.market == "spot",
                instance_type=instance.instance_type,
                ami=instance.image,
            )
            fleet.terminate([instance.id])
            clear_banned(server, spider, [instance.id])
        as_json = opts.json
        if as_json:
            launched = [instance.to_json() for instance in replacements]
            print(json.dumps({"terminated": [i.id for i in banned], "launched": launched}))
            return
        print(f"{spider}: {len(banned)} banned workers replaced")
        for old, new in zip(banned, replacements, strict=True):
            print(f"  {old.id} ({old.public_ip or '-'}) -> {new.id} ({new.public_ip or '-'})")

    def _scale_to_zero(self, fleet: Fleet, spider: str, opts: argparse.Namespace) -> None:
        assert self.settings is not None
        server, as_json = self.redis(), opts.json
        sizes = self.frontier(server, spider).sizes()
        pending = {name: sizes[name] for name in WORK_LEFT if sizes[name]}
        # Due revisits wait for a worker to hand them to the frontier (of a spider that
        # revisits: one that does not never would): not drained.
        revisits = setting(sizing_settings(self.settings, spider, opts), "RECRAWL_ENABLED")
        if revisits and (due := RevisitStore(server, spider).counts()["due"]):
            pending["revisits_due"] = due
        # Items spilled in a MongoDB outage wait on a worker's disk, which terminating loses.
        if spilled := sum(spill.items for spill in read_waiting(server, spider)):
            pending["spilled_items"] = spilled
        terminated: list[str] = []
        if not pending:
            terminated = [instance.id for instance in fleet.instances(spider)]
            fleet.terminate(terminated)
        if as_json:
            print(json.dumps({"spider": spider, "pending": pending, "terminated": terminated}))
        elif pending:
            work = ", ".join(f"{name} {value}" for name, value in pending.items())
            print(f"{spider} is not drained at {self.redis_url()} ({work}): nothing terminated")
        else:
            print(f"{spider} is drained: terminated {len(terminated)} workers")
        if pending:
            self.exitcode = 2

    def _print(self, instances: list[Instance], as_json: bool, title: str = "") -> None:
        if as_json:
            print(json.dumps([instance.to_json() for instance in instances]))
            return
        if title:
            print(title)
        for i in instances:
            print(
                f"{i.id}  {i.spider:<10} {i.state:<10} {i.instance_type:<10} {i.market:<9} "
                f"{i.public_ip or '-':<15} {i.private_ip or '-':<15} {i.launched}"
            )
        if not instances:
            print("no workers", file=sys.stderr)
