"""Every Redis key of a spider, named in this one module (the list, with what each holds: the
Redis keys table of docs/frontier.md).

A spider's own keys share its ``{spider}`` hash tag (:func:`tagged`), so every script that
touches several of them runs on Redis Cluster. The start list keeps the scrapy-redis name
(``REDIS_START_URLS_KEY`` or the spider's ``redis_key``) and its leases take that name as their
hash tag.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from crawler.config.rules import key_template

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

# How long a per-minute bucket is kept: an hour of history, and a margin.
MINUTE_BUCKET_TTL = 3900


def tagged(spider: str, name: str) -> str:
    """The spider's own key ``name``, under its hash tag: ``{spider}:name``."""
    return "{" + spider + "}:" + name


def spider_pattern(spider: str) -> str:
    """A SCAN pattern for every key under the spider's hash tag."""
    return tagged(spider, "*")


def start_leases_key(start: str) -> str:
    """The leases of the start list ``start`` (hash-tagged by the list's own name)."""
    return "{" + start + "}:leases"


def stats_key(settings: BaseSettings, spider: str) -> str:
    """The fleet's stats hash of the spider (``STATS_REDIS_KEY``)."""
    return str(settings.get("STATS_REDIS_KEY")) % {"spider": spider}


def handed_key(settings: BaseSettings, spider: str) -> str:
    """The authors ``spider`` handed to another spider, and until when (``EXPLORE_HANDED_KEY``)."""
    return str(settings.get("EXPLORE_HANDED_KEY")) % {"spider": spider}


def bans_key(spider: str) -> str:
    """The hash of a spider's cool-downs: field -> end time (Unix seconds)."""
    return tagged(spider, "bans")


def reasons_key(spider: str) -> str:
    """The hash of what started each cool-down: field -> ban rule and status."""
    return bans_key(spider) + ":why"


def rate_key(spider: str, domain: str, identity: str) -> str:
    """The token bucket of one domain seen from one identity (bind address or proxy)."""
    return tagged(spider, "rate:") + domain + "|" + identity


def fleet_rate_key(spider: str) -> str:
    """The one token bucket every worker of the spider shares (DOMAINS_FLEET_RATE)."""
    return tagged(spider, "rate:fleet")


def inflight_prefix(spider: str) -> str:
    """Prefix of the per-domain counters of leases in flight (``<prefix><domain>``)."""
    return tagged(spider, "inflight:")


def banned_key(spider: str) -> str:
    """The hash of instances of ``spider`` that reported a ban and wait to be replaced."""
    return tagged(spider, "fleet:banned")


def seen_key(spider: str) -> str:
    """The hash of instance ids of ``spider`` -> when ``scrapy fleet autoscale`` last saw a live
    heartbeat of their worker (Unix time), so a worker that quit is told from one restarting."""
    return tagged(spider, "fleet:seen")


def autoscaled_key(spider: str) -> str:
    """When ``scrapy fleet autoscale`` last grew or shrank the spider's fleet (Unix time), so a
    cool-down holds across one-step runs (``--once`` from cron)."""
    return tagged(spider, "fleet:autoscaled")


def starts_key(spider: str) -> str:
    """How the last launches of ``scrapy fleet autoscale`` went (a hash): ``failed`` in a row
    whose worker never sent a heartbeat, ``holds`` and ``held_until`` (Unix time) while it holds
    its launches back for them."""
    return tagged(spider, "fleet:starts")


def revisit_keys(spider: str) -> list[str]:
    """The waiting revisits of the spider (a sorted set), their requests (a hash) and, for a
    page found absent (gone, moved away) on its last revisits, how many times in a row (a hash)."""
    return [
        tagged(spider, "revisit"),
        tagged(spider, "revisit:data"),
        tagged(spider, "revisit:absent"),
    ]


def robots_key(spider: str, origin: str) -> str:
    """The cached robots.txt body of one origin."""
    return tagged(spider, "robots:") + origin


def robots_claim_key(spider: str, origin: str) -> str:
    """The claim of one worker to download an origin's robots.txt."""
    return tagged(spider, "robots:claim:") + origin


@dataclass(frozen=True)
class LedgerKeys:
    """The links spider's host ledger: pages per host, the top hosts and their totals."""

    spider: str

    @property
    def top(self) -> str:
        return tagged(self.spider, "hosts:top")

    @property
    def totals(self) -> str:
        return tagged(self.spider, "hosts:totals")

    def host(self, host: str) -> str:
        return tagged(self.spider, "host:") + host

    def budget(self, start: str, host: str) -> str:
        """Pages of ``host`` crawled from the start entry ``start``."""
        return tagged(self.spider, "pages:") + start + ":" + host

    def applied(self, worker: str) -> str:
        """The last batch of a worker's counts applied (its number; crawler/links/ledger.py)."""
        return tagged(self.spider, "ledger:applied:") + worker


def breaker_key(spider: str) -> str:
    """The circuit breaker's hosts (crawler/bans/breaker.py): host -> "step incident end"."""
    return tagged(spider, "breaker")


def breaker_failures_key(spider: str) -> str:
    """Hosts' failures in a row by kind: "host|!host_unreachable" (or robots_unavailable) ->
    count."""
    return tagged(spider, "breaker_failures")


def pause_key(spider: str) -> str:
    """The crawl's pause (``scrapy frontier SPIDER pause``): a hash of ``since``, ``by`` and
    ``reason``; while the key exists no worker of the spider takes new requests."""
    return tagged(spider, "paused")


def jobs_key(spider: str) -> str:
    """The spider's jobs by number (crawler/frontier/jobs.py): ``<job id>`` -> number,
    ``#<number>`` -> job id, and ``:seq``, the last number given."""
    return tagged(spider, "jobs")


def job_key(spider: str, job: str) -> str:
    """One job's state: ``started``, ``last`` (Unix times), ``pages`` (fetched, as workers
    count them), and once cancelled ``cancelled`` (when) and ``removed`` (requests and
    entries)."""
    return tagged(spider, f"job:{job}")


def cancelled_jobs_key(spider: str) -> str:
    """The numbers of the spider's cancelled jobs (a set): their requests are dropped."""
    return tagged(spider, "jobs:cancelled")


def job_deadlines_key(spider: str) -> str:
    """Jobs' deadlines (a hash number -> Unix time): after it, a job's requests are dropped."""
    return tagged(spider, "jobs:expires")


def job_budgets_key(spider: str) -> str:
    """Jobs' page budgets (a hash number -> the most requests the pop hands out)."""
    return tagged(spider, "jobs:max_pages")


def job_sent_key(spider: str) -> str:
    """Requests of each job with a budget the pop handed out (a hash number -> count)."""
    return tagged(spider, "jobs:sent")


def jobs_done_key(spider: str) -> str:
    """Each job's requests ended as done (acked; ``<number>``), the items they stored
    (``<number>:items``) and their errors (``<number>:errors``), and its dead letters
    (``<key>:dead``, number -> count): hashes, counted by the settle script."""
    return tagged(spider, "jobs:done")


def paused_jobs_key(spider: str) -> str:
    """The numbers of the spider's paused jobs (a set); ``<key>:<number>`` holds the records
    of one that the pop met while it was paused (a list of "<priority>\n<record>")."""
    return tagged(spider, "jobs:paused")


def failure_window_key(spider: str) -> str:
    """The fleet's last FAILURE_PAUSE_WINDOW answers, "1" failed and "0" not (a list)."""
    return tagged(spider, "answers")


def job_failure_window_key(spider: str, number: int) -> str:
    """The last FAILURE_PAUSE_WINDOW answers to one crawl job's requests (as the fleet's)."""
    return tagged(spider, f"jobs:answers:{number}")


def frontier_marker_key(spider: str) -> str:
    """The token that tells a worker its frontier is still the one it wrote to."""
    return tagged(spider, "frontier")


# A spider class or instance (anything with ``name`` and maybe ``redis_key``), or a name.
SpiderRef = Any


def start_key(settings: BaseSettings, spider: SpiderRef) -> str:
    """The list the spider reads its start entries from."""
    name, own = _name_and_key(settings, spider)
    return (own or str(settings.get("REDIS_START_URLS_KEY"))) % {"name": name}


def invalid_key(settings: BaseSettings, spider: SpiderRef) -> str:
    """The list the spider sets bad start entries aside in."""
    name, own = _name_and_key(settings, spider)
    if own:
        return f"{own % {'name': name}}:invalid"
    return str(settings.get("START_INVALID_KEY")) % {"name": name}


def _name_and_key(settings: BaseSettings, spider: SpiderRef) -> tuple[str, str | None]:
    """The spider's name and its own checked ``redis_key``, if any (a name: a project spider)."""
    if isinstance(spider, str):
        spider = _spider_class(settings, spider) or spider
    if isinstance(spider, str):
        return spider, None
    own = getattr(spider, "redis_key", None)
    if own is None or _setup_default(settings, spider, own):
        return str(spider.name), None
    label = f"{getattr(spider, '__name__', type(spider).__name__)}.redis_key"
    return str(spider.name), str(key_template("name").read(label, own))


def _setup_default(settings: BaseSettings, spider: SpiderRef, own: Any) -> bool:
    """Whether ``own`` is what scrapy-redis's setup_redis gives a spider instance whose class
    names no redis_key (REDIS_START_URLS_KEY, formatted): not the spider's own key, so its
    bad entries go to START_INVALID_KEY, where ``scrapy frontier`` looks for them."""
    if isinstance(spider, type) or getattr(type(spider), "redis_key", None) is not None:
        return False
    default = str(settings.get("REDIS_START_URLS_KEY")) % {"name": spider.name}
    return bool(own == default)


def _spider_class(settings: BaseSettings, name: str) -> type | None:
    from scrapy.spiderloader import get_spider_loader

    try:
        found: type = get_spider_loader(settings).load(name)
    except KeyError:
        return None
    return found


@dataclass(frozen=True)
class FrontierKeys:
    """Every key of one spider's frontier. Internal keys share the ``{spider}`` hash tag; the
    start list keeps the scrapy-redis name and its leases take that name as their hash tag."""

    spider: str
    start: str

    def _key(self, name: str) -> str:
        return tagged(self.spider, name)

    @property
    def queues(self) -> str:
        """The priorities that have queued requests (a sorted set, highest first)."""
        return self._key("queues")

    @property
    def queue_prefix(self) -> str:
        """Prefix of the list of queued requests of one priority (``<prefix><priority>``)."""
        return self._key("queue:")

    @property
    def leases(self) -> str:
        return self._key("leases")

    @property
    def owner(self) -> str:
        return self._key("owner")

    @property
    def data(self) -> str:
        return self._key("data")

    def script_keys(self, *more: str) -> list[str]:
        """The keys every frontier script starts with (the prelude, ``scripts/queue.lua``), then
        ``more``."""
        return [self.queues, self.data, self.seq, *more]

    @property
    def seq(self) -> str:
        return self._key("seq")

    @property
    def delayed(self) -> str:
        return self._key("delayed")

    def job_counts(self) -> list[str]:
        """The hashes of the requests of each job ended as done and as dead letters."""
        done = jobs_done_key(self.spider)
        return [done, f"{done}:dead"]

    def job_keys(self) -> list[str]:
        """The keys of the scripts that hold jobs' records back (``job_hold`` in queue.lua)."""
        spider = self.spider
        held = [cancelled_jobs_key(spider), job_deadlines_key(spider), paused_jobs_key(spider)]
        return [*held, job_budgets_key(spider), job_sent_key(spider)]

    @property
    def dead(self) -> str:
        return self._key("dead")

    @property
    def dupefilter(self) -> str:
        """The duplicate filter: a set ("exact"), a RedisBloom filter, or the base name of the Bloom
        filter's layers (``<base>:<n>``, built in ``scripts/dupefilter.lua``)."""
        return self._key("dupefilter")

    @property
    def dupefilter_depths(self) -> str:
        """The "exact" filter's least depths, fingerprint -> depth, of requests that carry one
        (``<base>:depth``; the Lua builds the same name)."""
        return self.dupefilter + ":depth"

    @property
    def dupefilter_meta(self) -> str:
        """The Bloom filter's shape and per-layer counts (the Lua builds the same name)."""
        return self.dupefilter + ":meta"

    @property
    def start_leases(self) -> str:
        return start_leases_key(self.start)

    @property
    def demand(self) -> str:
        """The last look at the queue's head (``observability/scripts/demand.lua``): when, and
        what it saw, shared by the fleet so the look runs once per period, however many workers
        ask."""
        return self._key("look")

    @property
    def buckets(self) -> str:
        """Prefix of the politeness token buckets, ``<prefix><domain>|<identity>`` (see
        ``rate_key``): the frontier's pop takes tokens from them (``Pacing``)."""
        return self._key("rate:")


@dataclass(frozen=True)
class FleetKeys:
    """Keys of one spider's fleet stats; ``stats`` is ``STATS_REDIS_KEY`` filled in."""

    spider: str
    stats: str

    @classmethod
    def for_spider(cls, spider: str, stats_key_template: str) -> FleetKeys:
        return cls(spider, stats_key_template % {"spider": spider})

    @classmethod
    def from_settings(cls, settings: BaseSettings, spider: str) -> FleetKeys:
        return cls(spider, stats_key(settings, spider))

    @property
    def domains(self) -> str:
        """Set of the domains the fleet's per-domain stats name (DOMAIN_STATS_MAX at most)."""
        return f"{self.stats}:domains"

    def applied(self, worker_id: str) -> str:
        """The last batch of stats deltas of one worker applied to the fleet's (its seq)."""
        return f"{self.stats}:applied:{worker_id}"

    def minute(self, epoch_minute: int) -> str:
        """Hash of the requests, pages and items the fleet counted during one minute."""
        return f"{self.stats}:minute:{epoch_minute}"

    @property
    def workers(self) -> str:
        """Sorted set of worker ids, scored by heartbeat deadline (an index, pruned lazily)."""
        return tagged(self.spider, "workers")

    def worker(self, worker_id: str) -> str:
        """Hash of one worker's heartbeat; it expires when the worker stops beating."""
        return f"{self.workers}:{worker_id}"
