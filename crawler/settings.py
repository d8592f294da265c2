"""Every default of the project, grouped; each setting's comment gives its type, default and
what it does, and docs/settings.md (grouped the same way) has the longer notes.

Precedence, lowest first: Scrapy's defaults < this module < environment variables read below
(``REDIS_URL``, ``MONGO_URI``, ...) < spider ``custom_settings`` < ``scrapy crawl -s NAME=VALUE``.
"""

from __future__ import annotations

import math
import os

# Imported here, the first module of the project a worker loads, while the call stack is short:
# each deprecated alias Scrapy's module defines names its module with inspect.stack(), which
# reads every frame's source and scans the loaded modules for each. Imported later, under the
# project's commands and middlewares, it cost 0.3 s of CPU at every start.
import scrapy.core.downloader.contextfactory  # noqa: F401
from scrapy.settings import default_settings


def _env_flag(name: str) -> bool | str:
    """An environment variable read as a flag (1/true/yes, 0/false/no or unset); another value
    as it is, for the settings check to refuse with its name."""
    value = os.environ.get(name, "").strip()
    said = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
    return said.get(value.lower(), value) if value else False


# The project's spiders and `scrapy` commands (crawler/commands/).
BOT_NAME = "crawler"
SPIDER_MODULES = ["crawler.spiders"]
NEWSPIDER_MODULE = "crawler.spiders"
# A worker imports its own spider's module only, not every spider's (crawler/spiders/loader.py).
SPIDER_LOADER_CLASS = "crawler.spiders.loader.SpiderLoader"
COMMANDS_MODULE = "crawler.commands"
# The project's add-on: a run's DOWNLOADER_MIDDLEWARES, SPIDER_MIDDLEWARES or EXTENSIONS (``-s``,
# Scrapyd's ``setting=``) adds to the spider's instead of replacing them; a component named with
# None is turned off (crawler/addons.py). ITEM_PIPELINES is replaced, as in Scrapy.
ADDONS = {"crawler.addons.ProjectComponents": 0}

# The asyncio reactor is required by scrapy-playwright and lets pipelines await threads.
TWISTED_REACTOR = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"
# Scrapy's, the project's values (the links spider obeys robots.txt itself: LINKS_ROBOTS_OBEY).
FEED_EXPORT_ENCODING = "utf-8"
# Gives every feed URI %(worker)s, the worker writing it: a fleet's workers that start in the
# same second would otherwise upload to the same key (crawler/feeds.py; deploy/README.md).
FEED_URI_PARAMS = "crawler.feeds.uri_params"
ROBOTSTXT_OBEY = False
LOG_LEVEL = "INFO"
# A worker exposes no unauthenticated consoles.
TELNETCONSOLE_ENABLED = False
# REMOTE_CONTROL_ENABLED (bool, default False; Scrapy's is True): Scrapy's RemoteControl, a
# localhost HTTP server running any Python code it is sent. Turn it on for one debugging run only.
REMOTE_CONTROL_ENABLED = False

# --- Politeness -------------------------------------------------------------------------------
# Scrapy's, the project's values; the fleet's shared politeness is POLITENESS_* below.
CONCURRENT_REQUESTS = 16
CONCURRENT_REQUESTS_PER_DOMAIN = 8
DOWNLOAD_DELAY = 0.0
DOWNLOAD_TIMEOUT = 30
# DOWNLOAD_MAXSIZE (int bytes, default 16 MiB): a larger body is refused, also once decompressed,
# and in the browser (crawler/browser/bounds.py); DOWNLOAD_WARNSIZE (int bytes, default 4 MiB): a
# larger body is logged as a warning.
DOWNLOAD_MAXSIZE = 16 * 1024 * 1024
DOWNLOAD_WARNSIZE = 4 * 1024 * 1024
# Scrapy's: AutoThrottle off (POLITENESS_* paces the fleet) and a desktop browser's User-Agent.
AUTOTHROTTLE_ENABLED = False
USER_AGENT = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/131.0.0.0 Safari/537.36"
)

# --- Bans, retries and politeness (crawler.middlewares) ------------------------------------------
# The project's downloader middlewares among Scrapy's; why each sits where it does: "Middleware
# order" in docs/settings.md (Ban judges a response before retries, redirects and cookies).
DOWNLOADER_MIDDLEWARES = {
    "crawler.middlewares.LeaseDownloaderMiddleware": 1,
    # A revisit whose download failed for good, its host not answering (only with
    # RECRAWL_ENABLED; docs/storage.md, recrawl).
    "crawler.recrawl.RecrawlFailureMiddleware": 2,
    "scrapy.downloadermiddlewares.retry.RetryMiddleware": None,
    "crawler.middlewares.BackoffRetryMiddleware": 550,
    "crawler.middlewares.HostFullMiddleware": 640,
    "crawler.middlewares.BanMiddleware": 650,
    "crawler.middlewares.HostConcurrencyMiddleware": 660,
    "scrapy.downloadermiddlewares.httpcompression.HttpCompressionMiddleware": 680,
    # Last before the download handler: a paced request takes its host's token as it goes.
    "crawler.middlewares.SendGateMiddleware": 950,
    # Scrapy's stats after the send gate (Scrapy puts them at 850): downloader/request_count,
    # the fleet's requests, counts what is sent, not each time the gate turns a request back.
    "scrapy.downloadermiddlewares.stats.DownloaderStats": 960,
    # A request of a cancelled crawl job is not sent (crawler/jobs.py).
    "crawler.jobs.JobDownloaderMiddleware": 5,
    # Each answer to a crawl job's request, for the job's failure threshold (crawler/jobs.py).
    "crawler.jobs.JobAnswersMiddleware": 860,
}
SPIDER_MIDDLEWARES = {
    # Outermost: acknowledges a request's lease once its output is fully handled.
    "crawler.middlewares.LeaseSpiderMiddleware": 1,
    # Gives every page with items its next visit (only with RECRAWL_ENABLED; see below).
    "crawler.recrawl.RecrawlMiddleware": 50,
    # Carries a page's crawl job to its requests and items; drops a cancelled job's.
    "crawler.jobs.JobSpiderMiddleware": 60,
}
# RETRY_TIMES (int, default 3), RETRY_HTTP_CODES, RETRY_EXCEPTIONS: Scrapy's settings, used by
# crawler.middlewares.BackoffRetryMiddleware. 429 is not here: it is a ban (see below).
RETRY_TIMES = 3
RETRY_HTTP_CODES = [500, 502, 503, 504, 522, 524, 408]
# RETRY_BACKOFF_BASE (float, default e): retry n waits BASE**n s in the delayed set (Retry-After
# wins); RETRY_BACKOFF_MAX (float, default 600) caps it; RETRY_BACKOFF_JITTER (0.2): +-20%.
RETRY_BACKOFF_BASE = math.e
RETRY_BACKOFF_MAX = 600.0
RETRY_BACKOFF_JITTER = 0.2
# Scrapy's MetaCopyDetectionMiddleware warns of a request yielded with meta keys copied from a
# response's. The project's retries from callbacks (a malformed answer, get_retry_request) carry
# retry_times on purpose; a copied response.meta is still told by download_latency.
META_COPY_WARN_SKIP_KEYS = ["retry_times"]
# BAN_POLICY (str, default "pause"): what a ban does: "pause" cools the domain down for the fleet,
# "rotate" only the banned identity on it, "stop" also stops the worker (exit status 3).
BAN_POLICY = "pause"
# BAN_COOLDOWN (float seconds, default 1800): how long a ban pauses (Retry-After wins).
BAN_COOLDOWN = 1800.0
# BAN_COOLDOWN_MAX (float seconds, finite, >= BAN_COOLDOWN, default 21600 = 6 h): the longest
# pause a Retry-After header can ask for, after a ban and before a retry alike.
BAN_COOLDOWN_MAX = 21600.0
# BAN_MAX_TIMES (int, default 5): bans of one request before it is dead-lettered; 0 = no limit.
BAN_MAX_TIMES = 5
# FAILURE_PAUSE_RATIO (float >= 0, < 1, default 0.5; 0 = off) and FAILURE_PAUSE_WINDOW (int
# 10-100000, default 200): once more than RATIO of the fleet's last WINDOW answers failed (a
# download error, a 5xx, a ban), the crawl pauses itself until `scrapy frontier SPIDER resume`
# (crawler/bans/failures.py).
FAILURE_PAUSE_RATIO = 0.5
FAILURE_PAUSE_WINDOW = 200
# HOST_BLOCK_START (float seconds >= 0, default 60; 0 = off), HOST_BLOCK_MAX (>= START, default
# 86400) and HOST_BLOCK_FORGIVE (> 0, default 1800): a host answering 429/503 without a usable
# Retry-After, or failing at the connection level, is blocked for the fleet for START seconds,
# doubled per new incident up to MAX, back to START after FORGIVE quiet seconds; a 503 with a
# usable Retry-After holds its host back for the fleet until then. HOST_MAX_EXCEPTIONS (int >= 0,
# default 5; 0 = never): connection failures in a row (an answer not 5xx nor 429 ends the row)
# after which the host's requests are dead-lettered as host_unreachable (crawler/bans/breaker.py).
HOST_BLOCK_START = 60.0
HOST_BLOCK_MAX = 86_400.0
HOST_BLOCK_FORGIVE = 1800.0
HOST_MAX_EXCEPTIONS = 5
# RATE_LIMIT_EXIT (str "M/S", default "" = off): a worker that received M rate-limited answers
# (429, or 503 with a Retry-After) within S seconds and no successful one (status < 400) stops
# with the finish reason "rate_limited" and exit status 5, its leases released for the fleet,
# so an orchestrator backs off instead of restarting it in a loop (crawler/bans/ratelimit.py).
RATE_LIMIT_EXIT = ""
# BAN_RULES (list of import paths, default []): extra rules (Page -> Verdict | None, see
# crawler/bans/rules.py) checked before the built-in ones; a spider's ban_rule judges 200 pages.
BAN_RULES: list[str] = []
# POLITENESS_RATE (float, default 0.5): requests/s per domain per identity for the whole fleet
# (0 = no limit); halved by a ban, back over POLITENESS_RECOVERY (float seconds, default 600).
# POLITENESS_BURST (float, default 5): requests at once after a quiet spell.
# POLITENESS_DOMAIN_RATES (dict, default {}): a host's own rate, {"www.tiktok.com": 0.2}, or a
# domain's for each of its hosts, {"tiktok.com": 0.2} (the nearest name wins).
POLITENESS_RATE = 0.5
POLITENESS_BURST = 5.0
POLITENESS_RECOVERY = 600.0
POLITENESS_DOMAIN_RATES: dict[str, float] = {}
# POLITENESS_CONCURRENCY (int >= 0, default 0 = off): requests in flight per domain for the whole
# fleet (leases in Redis that a killed worker's expire); on, two round trips per request. At
# most CONCURRENT_REQUESTS_PER_DOMAIN, and with DOWNLOAD_DELAY at most 30 s / (1.5 x delay).
POLITENESS_CONCURRENCY = 0
# BIND_ADDRESSES (list of str, default []) and PROXY_POOL (list of proxy URLs, default []): the
# identities requests are sent as, round-robin, skipping those cooling down after a ban.
BIND_ADDRESSES: list[str] = []
PROXY_POOL: list[str] = []

# --- Redis: scheduling and start entries (scrapy-redis) ----------------------------------------
# REDIS_URL (str): the shared Redis every worker of the fleet uses. Env REDIS_URL overrides it.
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
# REDIS_CLUSTER (bool, default False): REDIS_URL names a Redis Cluster node. Env REDIS_CLUSTER
# (1/true/yes, 0/false/no; another value is refused at start, not taken for "no").
REDIS_CLUSTER: bool | str = _env_flag("REDIS_CLUSTER")
# REDIS_PARAMS (dict): redis-py client arguments; a run's own are laid over these (redis_cls,
# which reconnects with backoff, and the timeouts stay unless named). Timeouts are short: Redis
# calls run on the reactor thread. The client speaks RESP2 (no handshake round trips) unless
# "protocol": 3 is given.
REDIS_PARAMS = {
    "redis_cls": "crawler.connection.Redis",
    "socket_timeout": 5,
    "socket_connect_timeout": 2,
}
# The frontier: requests wait in Redis for the whole fleet (crawler/frontier/).
SCHEDULER = "crawler.frontier.scheduler.FrontierScheduler"
# FRONTIER_BATCH_SIZE (int 1..1000, default 16): requests leased per pop (paced, as many more
# whose turn comes within the look-ahead); new requests go to Redis as FRONTIER_FLUSH_INTERVAL says.
FRONTIER_BATCH_SIZE = 16
# FRONTIER_LEASE_SECONDS (int >= 5, default 60): a popped request (or start entry) is leased to
# its worker this long, renewed every third of it; a dead worker's go back to the queue. Paced
# pops look a quarter of it ahead (10 s at most); acks wait up to a sixth of it (10 s at most).
FRONTIER_LEASE_SECONDS = 60
# RECRAWL_ENABLED (bool, default False): revisit every page whose callback gives items, after an
# interval (float seconds) from RECRAWL_INITIAL_INTERVAL, x2 when its items are unchanged, /2 when
# they changed, within RECRAWL_MIN_INTERVAL..RECRAWL_MAX_INTERVAL (spiders' own: docs/settings.md).
RECRAWL_ENABLED = False
RECRAWL_INITIAL_INTERVAL = 86_400.0
RECRAWL_MIN_INTERVAL = 3_600.0
RECRAWL_MAX_INTERVAL = 30 * 86_400.0
# RECRAWL_JITTER (float 0..1, default 0.1): a revisit comes due up to this share later, at random.
RECRAWL_JITTER = 0.1
# RECRAWL_POLL_INTERVAL (float seconds, default 1): how often a worker hands due revisits to
# the frontier, at most RECRAWL_BATCH_SIZE (int, default 100) at a time.
RECRAWL_POLL_INTERVAL = 1.0
RECRAWL_BATCH_SIZE = 100
# RECRAWL_ABSENT_LIMIT (int 0..1000, default 5; 0 = never): revisits in a row that find a page
# gone (404), sent elsewhere for now (302, 303, 307) or its host not answering (a download that
# failed for good: a dead letter) after which its revisits end; each waits twice as long as the
# one before, up to RECRAWL_MAX_INTERVAL. A 410 or a permanent redirect (301, 308) ends them
# at once (docs/storage.md, recrawl).
RECRAWL_ABSENT_LIMIT = 5
# FRONTIER_FLUSH_INTERVAL (float seconds, default 0.25): new requests go to Redis this often (and
# with each pop); acks alone wait for a round trip that goes anyway (docs/settings.md).
FRONTIER_FLUSH_INTERVAL = 0.25
# DUPEFILTER_MODE (str, default "bloom"): "bloom" (scalable Bloom filter on Redis bitmaps),
# "redisbloom" (the RedisBloom module), "exact" (a set of fingerprints) or "none".
DUPEFILTER_MODE = "bloom"
# DUPEFILTER_CAPACITY (int, default 1000000): URLs the first Bloom filter holds; then it grows.
DUPEFILTER_CAPACITY = 1_000_000
# DUPEFILTER_ERROR_RATE (float, default 1e-7): the Bloom filter's false-positive rate.
DUPEFILTER_ERROR_RATE = 1e-7
# DUPEFILTER_LOCAL_CACHE (int, default 100000): fingerprints a worker remembers scheduling; a
# repeat is dropped without a round trip to Redis. 0 turns the cache off.
DUPEFILTER_LOCAL_CACHE = 100_000
# REDIS_START_URLS_KEY (str): list users push start entries to (scrapy-redis convention); a
# spider's own redis_key wins. scrapy-redis's other settings: docs/settings.md.
REDIS_START_URLS_KEY = "%(name)s:start_urls"
# START_INVALID_KEY (str): list where malformed start entries are set aside (JSON) for a person.
START_INVALID_KEY = "%(name)s:start_urls:invalid"
# START_BATCH_SIZE (int, default 16): start entries popped from Redis per round trip.
START_BATCH_SIZE = 16
# START_READ_AHEAD (int >= 0, default 1000): start entries are read, a batch with each pop, while
# the fleet's queue holds fewer requests than this (seeds go in at depth 0 before links found
# elsewhere reach their URLs), and whenever a worker has less than a batch it may send now.
START_READ_AHEAD = 1000
# START_ENTRY_MAX_BYTES (int >= 1, default 16384): a longer start entry is set aside ("too_large").
START_ENTRY_MAX_BYTES = 16384
# START_ENTRY_MAX_DEPTH (int 1..100, default 8): a JSON entry nested deeper is set aside.
START_ENTRY_MAX_DEPTH = 8
# ALLOWED_START_HOSTS (list of str, default []): "scheme://host[:port]" (or "host[:port]": http
# and https) start entries' URLs may point to besides the spider's base URL; others are set aside.
ALLOWED_START_HOSTS: list[str] = []
# MAX_IDLE_TIME_BEFORE_CLOSE (int seconds, default 0): close the spider once idle (nothing
# queued or in flight, no new start entries) this long; 0 waits forever, as a fleet worker should.
MAX_IDLE_TIME_BEFORE_CLOSE = 0
# IDLE_POLL_INTERVAL (float seconds > 0, default 1.0): how often an idle worker looks again for
# new start entries and for the end of the fleet's work (Scrapy itself: every 5 s).
IDLE_POLL_INTERVAL = 1.0

# SettingsCheck, before every other extension and the engine: a setting outside its allowed
# values (crawler/config/table.py) stops the crawl, naming it, before anything is leased.
EXTENSIONS = {
    "crawler.extensions.SettingsCheck": -1000,
    # A spider built on scrapy_redis.spiders.RedisSpider/RedisCrawlSpider gets leased start
    # entries like the project's (crawler/spiders/redis.py); nothing for other spiders.
    "crawler.extensions.ScrapyRedisSpiders": 0,
    # Under a SCHEDULER other than the frontier's (scrapy-redis's), a request sent back or
    # retried waits in the worker until due, not handed straight back (crawler/due_later.py).
    "crawler.extensions.DueLater": 10,
    "crawler.extensions.FleetMonitor": 500,
    "crawler.extensions.RateLimitExit": 600,
    "crawler.extensions.FailurePause": 610,
    # Once the engine starts, full garbage collections skip what was loaded at start, so they
    # stop the reactor for a few milliseconds instead of tens (crawler/heap.py).
    "crawler.extensions.FreezeStartupHeap": 900,
    # Scrapy's RemoteControl when REMOTE_CONTROL_ENABLED turns it on, imported only then.
    "crawler.extensions.RemoteControl": 0,
}
# Scrapy's base extensions but its RemoteControl, which crawler.extensions.RemoteControl loads
# when it is on: Scrapy's module imports aiohttp's web server as it loads, some 0.25 s of CPU at
# every worker's start, and naming it in EXTENSIONS, even as None, imports it.
EXTENSIONS_BASE = {
    path: order
    for path, order in default_settings.EXTENSIONS_BASE.items()
    if path != "scrapy.extensions.remote_control.RemoteControl"
}
# STATS_REDIS_KEY (str): hash each worker adds the deltas of its numeric stats to, so
# `redis-cli hgetall '{explore}:stats'` shows the fleet's totals. Keep the {spider} hash tag.
STATS_REDIS_KEY = "{%(spider)s}:stats"

# --- MongoDB storage ----------------------------------------------------------------------------
# MONGO_URI (str): MongoDB connection string. Env MONGO_URI overrides it.
MONGO_URI = os.environ.get("MONGO_URI", "mongodb://127.0.0.1:27017")
# MONGO_DATABASE (str, default "crawler"): database items are stored in. Env MONGO_DATABASE.
MONGO_DATABASE = os.environ.get("MONGO_DATABASE", "crawler")
# MONGO_CONNECT_TIMEOUT_MS (int, default 5000): how long opening the pipeline and each write wait.
MONGO_CONNECT_TIMEOUT_MS = 5000
# MONGO_ANSWER_TIMEOUT_MS (int >= 1, default 60000): a MongoDB operation with no answer within it
# fails (a batch is retried, then spilled and replayed): a hung server never hangs the crawl.
MONGO_ANSWER_TIMEOUT_MS = 60_000
# MONGO_BATCH_SIZE (int, default 500): items per collection written in one bulk_write.
MONGO_BATCH_SIZE = 500
# MONGO_FLUSH_INTERVAL (float seconds, default 1.0): a batch is written once its oldest item is
# this old, full or not, or once no item has joined it for 0.05 s (a crawl that pauses or ends
# has its last items stored at once).
MONGO_FLUSH_INTERVAL = 1.0
# MONGO_MAX_PENDING (int, default 5000): items buffered or being written at most; beyond it the
# crawl waits for writes, so a slow MongoDB slows the crawl instead of growing memory.
MONGO_MAX_PENDING = 5000
# MONGO_RETRY_TIMES (int, default 3): retries of a batch on connection errors, timeouts and
# step-downs, with exponential backoff (0.25 s, 0.5 s, 1 s, ... at most 8 s); none when no server
# answered at all (the batch is spilled and MongoDB held away at once, docs/storage.md).
MONGO_RETRY_TIMES = 3
# MONGO_SPILL_DIR (str, default ".spill"): where batches still failing after the retries are
# appended (fsynced JSON lines) and replayed from once MongoDB answers. Env MONGO_SPILL_DIR.
MONGO_SPILL_DIR = os.environ.get("MONGO_SPILL_DIR", ".spill")
# MONGO_WRITE_CONCERN (dict, default {"w": 1, "j": True}): write concern of the pipeline's
# writes (acknowledged only); a batch's leases are acked only once MongoDB confirms it this way.
MONGO_WRITE_CONCERN = {"w": 1, "j": True}
# MONGO_COLLECTIONS (dict, default {}): where items whose class does not say are stored, by item
# class name or spider name: "<collection>:<unique key field>", or "" to pass them on unstored.
# Items it does not name go to the collection named after the spider, upserted on "url"
# (inserted when they have none).
MONGO_COLLECTIONS: dict[str, str] = {}
# MONGO_MAX_DOCUMENT_BYTES (int 1024..16777216, default 16000000): largest BSON size of an
# item's document; a larger one has its longest strings cut to fit, else its item fails.
MONGO_MAX_DOCUMENT_BYTES = 16_000_000

# Items missing required fields are dropped, then the rest stored in MongoDB.
ITEM_PIPELINES = {
    "crawler.pipelines.ValidationPipeline": 100,
    "crawler.pipelines.MongoPipeline": 500,
}

# --- Explore feed (TikTok-style explore API) ---------------------------------------------------
# EXPLORE_BASE_URL (str): scheme and host of the explore API; point it at the sandbox to test.
EXPLORE_BASE_URL = "https://www.tiktok.com"
# EXPLORE_PAGE_SIZE (int 1..30, default 16): `count` asked per page.
EXPLORE_PAGE_SIZE = 16
# EXPLORE_MAX_PAGES (int, default 0): pages followed per category; 0 follows until hasMore ends.
EXPLORE_MAX_PAGES = 0
# EXPLORE_POPULAR_MIN_LIKES (int, default 250000), EXPLORE_POPULAR_MIN_FOLLOWERS (int, default
# 10000): a video's likes or an author's followers making the author popular (handed to profiles).
EXPLORE_POPULAR_MIN_LIKES = 250_000
EXPLORE_POPULAR_MIN_FOLLOWERS = 10_000
# EXPLORE_HANDOFF_SPIDER (str, default "profiles"): spider given popular authors; "" = no hand-off.
EXPLORE_HANDOFF_SPIDER = "profiles"
# EXPLORE_HANDED_KEY (str): sorted set of authors handed over, by when they may be handed again;
# EXPLORE_HANDOFF_TTL (float seconds, default 86400): an author seen after that is handed again.
EXPLORE_HANDED_KEY = "{%(spider)s}:handed_until"
EXPLORE_HANDOFF_TTL = 86_400.0

# --- Profiles (TikTok-style profile pages) -----------------------------------------------------
# PROFILES_BASE_URL (str): scheme and host of profile pages (`<base>/@<uniqueId>`).
PROFILES_BASE_URL = "https://www.tiktok.com"

# --- Fleet observability (crawler.observability.FleetMonitor, `scrapy status`) -----------------
# What a worker publishes to Redis (stats, per-minute counts, heartbeat): docs/settings.md.
# STATS_PUBLISH_INTERVAL (float seconds, default 5): how often a worker publishes its stats and
# reads the frontier's sizes back (with the frontier's next round trip, within two intervals).
STATS_PUBLISH_INTERVAL = 5.0
# WORKER_HEARTBEAT_TTL (int seconds, default 30): a worker's heartbeat expires this long after
# the worker dies (then `scrapy status` stops listing it); refreshed every third of it.
WORKER_HEARTBEAT_TTL = 30
# PROGRESS_INTERVAL (float seconds, default 60): one INFO line this often with this worker's and
# the fleet's pages and items per minute, the frontier's sizes and an ETA; 0 turns it off.
PROGRESS_INTERVAL = 60.0
# DOMAIN_STATS_MAX (int, default 1000): the domains the fleet counts requests, responses, items
# and bans of by name (stats `domain/<host>/...` and `ban/domain/<host>`, their /metrics series
# and fields of the fleet's stats hash), the first its workers publish; the others are counted
# together as the domain "(other)". Bounds what a crawl of many sites adds per host; 0: all as
# "(other)". The names are kept in `<STATS_REDIS_KEY>:domains`.
DOMAIN_STATS_MAX = 1000
# PACE_WINDOW (float seconds, default 60): a worker's own pages and items per minute (its
# heartbeat, /metrics, the progress line, and the ETA `scrapy status` and the fleet page show)
# are measured over the samples of this many last seconds; a worker that stops fetching shows
# 0 this long after its last page. Shorter follows changes sooner but is noisier.
PACE_WINDOW = 60.0
# METRICS_PORT (int, or a range "9410-9419", default 0 = off): serve Prometheus metrics at
# http://<METRICS_HOST>:<port>/metrics; with a range, the first free port. Env METRICS_PORT.
METRICS_PORT = os.environ.get("METRICS_PORT", "0")
# METRICS_HOST (str, default "0.0.0.0"): the metrics endpoint's address. Env METRICS_HOST.
METRICS_HOST = os.environ.get("METRICS_HOST", "0.0.0.0")
# FLEET_PAGE ("local", "all" or "off", default "local"): who sees the fleet page at / on the
# metrics endpoint: this machine only, anyone who reaches it (read-only, secrets masked), none.
FLEET_PAGE = "local"

# --- Maps (crawler.spiders.maps, Google-Maps-like listings in a headless browser) -------------
# Only the maps spider uses the browser (DOWNLOAD_HANDLERS in its custom_settings).
# MAPS_BASE_URL (str): scheme and host of map pages; point it at the sandbox to test.
MAPS_BASE_URL = "https://www.google.com"
# MAPS_LANGUAGE (str, default "en"): ``hl`` of search URLs, English (en, en-GB...): the spider
# reads the pages' English words (end of the list, no match, consent buttons, review counts).
MAPS_LANGUAGE = "en"
# MAPS_REGION (str, default ""): ``gl`` of search URLs; EU regions get the consent page first.
MAPS_REGION = ""
# MAPS_CONSENT (str, default "reject"): the consent interstitial's answer, "reject" or "accept".
MAPS_CONSENT = "reject"
# MAPS_MAX_RESULTS (int, default 120): place links taken per search at most; 0 = no limit.
MAPS_MAX_RESULTS = 120
# MAPS_SCROLL_TIMEOUT (float seconds, default 5): how long one scroll waits for the feed to grow;
# MAPS_SCROLL_MAX_STALLS (int, default 3): scrolls in a row without growth, no end shown, before
# the feed is taken for stalled: the search is tried again (RETRY_*), then a dead letter.
MAPS_SCROLL_TIMEOUT = 5.0
MAPS_SCROLL_MAX_STALLS = 3
# MAPS_PLACES_WITH_BROWSER (bool, default False): fetch place pages in the browser too (the real
# site fills them with JavaScript; the sandbox renders them on the server).
MAPS_PLACES_WITH_BROWSER = False
# MAPS_BLOCKED_RESOURCE_TYPES (list, default image, font, media): Playwright types not loaded.
MAPS_BLOCKED_RESOURCE_TYPES = ["image", "font", "media"]
# MAPS_BROWSER_RESTART_PAGES (int, default 200): a browser opens at most this many pages, then
# is closed once they are and a new one launched, capping its memory; 0 never.
MAPS_BROWSER_RESTART_PAGES = 200
# MAPS_BROWSER_DRAIN_SECONDS (int >= 1, default 120): how long a page waits for a full browser's
# pages to close; then it opens in that browser anyway (stat maps/browser/drain_timeouts).
MAPS_BROWSER_DRAIN_SECONDS = 120
# PLAYWRIGHT_*: scrapy-playwright's settings. Debian's Chromium (apt-get install chromium),
# env CHROMIUM_PATH overrides its path; `playwright install` is not needed.
PLAYWRIGHT_BROWSER_TYPE = "chromium"
PLAYWRIGHT_LAUNCH_OPTIONS = {
    "executable_path": os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium"),
    "headless": True,
    "args": [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ],
}
# PLAYWRIGHT_PROCESS_REQUEST_HEADERS (default None): the browser sends its own headers.
PLAYWRIGHT_PROCESS_REQUEST_HEADERS = None
# PLAYWRIGHT_MAX_CONTEXTS (int, default 2) and PLAYWRIGHT_MAX_PAGES_PER_CONTEXT (int, default 4):
# browser contexts, and pages open in each, at most; requests wait for a free page.
PLAYWRIGHT_MAX_CONTEXTS = 2
PLAYWRIGHT_MAX_PAGES_PER_CONTEXT = 4
# PLAYWRIGHT_DEFAULT_NAVIGATION_TIMEOUT (int milliseconds, default 30000).
PLAYWRIGHT_DEFAULT_NAVIGATION_TIMEOUT = 30_000
# --- End of maps -------------------------------------------------------------------------------

# --- AWS fleet (scrapy fleet; read in crawler/aws/config.py, with their defaults) -------------
# FLEET_NAME, FLEET_REGION, FLEET_AMI, FLEET_INSTANCE_TYPE, FLEET_INSTALL, FLEET_SECRETS,
# FLEET_SSM_*, FLEET_IAM_INSTANCE_PROFILE, FLEET_SUBNET_ID, FLEET_KEY_NAME,
# FLEET_SECURITY_GROUP_IDS, FLEET_CRAWL_SETTINGS, AWS_ENDPOINT_URL: see docs/settings.md.
# FLEET_START_FAILURES, FLEET_START_BACKOFF (read in crawler/fleet/backoff.py): the hold on
# launches of `scrapy fleet autoscale`, EC2 or --local, after failed starts (docs/settings.md).

# --- Autoscaling (crawler_workers_wanted; scrapy fleet plan|autoscale) --------------------------
# AUTOSCALE_MIN_WORKERS (int >= 0, default 0): workers wanted at least, work or none (paused: this).
AUTOSCALE_MIN_WORKERS = 0
# AUTOSCALE_MAX_WORKERS (int >= 1, default 8): workers wanted at most.
AUTOSCALE_MAX_WORKERS = 8
# AUTOSCALE_BACKLOG_SECONDS (float > 0 seconds, default 60): the ready and leased work a worker is
# given (its pace times this), and the time a host's backlog is spread over in the ceiling.
AUTOSCALE_BACKLOG_SECONDS = 60.0
# AUTOSCALE_WORKER_PACE (float > 0 pages/s, default 10): a worker's pace until one is measured.
AUTOSCALE_WORKER_PACE = 10.0
# AUTOSCALE_SAMPLE (int >= 1, default 1000): queued requests read per look, and as many delayed
# ones (start entries: 200).
AUTOSCALE_SAMPLE = 1000
# AUTOSCALE_INTERVAL (float > 0 seconds, default 15): how often `scrapy fleet autoscale` looks.
AUTOSCALE_INTERVAL = 15.0
# AUTOSCALE_COOLDOWN (float >= 0 seconds, default 120): no scale-in sooner after the last change.
AUTOSCALE_COOLDOWN = 120.0

# --- Links (crawler.spiders.links: breadth-first crawl of whole sites) -------------------------
# LINKS_DEFAULT_SCHEME ("http" or "https", default "https"): scheme of a start entry's bare host.
LINKS_DEFAULT_SCHEME = "https"
# LINKS_MAX_DEPTH (int 0..1000, default 5): links followed from a start URL at most (sitemap
# pages count as depth 1), by the shortest path found; a start entry's "max_depth" overrides it.
LINKS_MAX_DEPTH = 5
# LINKS_MAX_PAGES (int >= 0, default 10000; 0 = no limit): HTML pages stored per host per start
# entry, fleet-wide; past it nothing of the host is stored or followed. Entry "max_pages" wins.
LINKS_MAX_PAGES = 10_000
# LINKS_SCOPE (str, default "host"): which links are followed: "host" (the start URL's host and
# port), "domain" (its registered domain) or "any". A start entry's "scope" overrides it.
LINKS_SCOPE = "host"
# LINKS_MAX_URL_LENGTH (int >= 16, default 2048): longer canonical URLs are not followed, and
# a longer start URL is set aside (url_too_long).
LINKS_MAX_URL_LENGTH = 2048
# LINKS_MAX_REPEATED_SEGMENTS (int >= 1, default 2): a path repeating a segment more is a trap.
LINKS_MAX_REPEATED_SEGMENTS = 2
# LINKS_MAX_CALENDAR_HOPS (int >= 0, default 12): calendar-like pages (a path with /2024/01,
# /2024-01-31, ...) followed in a row from another calendar-like page; bounds infinite calendars.
LINKS_MAX_CALENDAR_HOPS = 12
# LINKS_SITEMAPS (bool, default True): the sitemaps robots.txt names (else /sitemap.xml) seed
# each host when its robots.txt is first fetched for the fleet (so only with LINKS_ROBOTS_OBEY).
LINKS_SITEMAPS = True
# LINKS_SITEMAP_MAX_URLS (int >= 1, default 50000): locations read from one sitemap at most.
LINKS_SITEMAP_MAX_URLS = 50_000
# LINKS_STATE_TTL (int seconds >= 60, default 604800 = 7 days): per-host counters and page
# budgets in Redis expire this long after their last change, so per-host state stays bounded.
LINKS_STATE_TTL = 7 * 24 * 3600
# LINKS_ROBOTS_OBEY (bool, default True): obey robots.txt, fetched once per host per
# LINKS_ROBOTS_TTL for the fleet (Scrapy's ROBOTSTXT_OBEY stays off); a 4xx allows everything, a
# 5xx or a failed download blocks the host (HOST_BLOCK_*) and is asked again, the host's pages
# waiting; LINKS_ROBOTS_5XX_TRIES (int >= 0, default 4; 0 = never) such robots.txt failures
# in a row (5xx, or no answer) dead-letter its requests as robots_unavailable.
LINKS_ROBOTS_OBEY = True
LINKS_ROBOTS_5XX_TRIES = 4
# LINKS_ROBOTS_TTL (int seconds >= 1, default 86400): how long a host's robots.txt is kept.
LINKS_ROBOTS_TTL = 86_400
# LINKS_ROBOTS_CLAIM_SECONDS (int >= 1, default 30): how long the worker fetching a robots.txt
# holds the claim (other workers' requests for the host wait); then another may fetch it.
LINKS_ROBOTS_CLAIM_SECONDS = 30
# LINKS_ROBOTS_MAX_BYTES (int >= 1, default 512000): a longer robots.txt is cut (as Google does).
LINKS_ROBOTS_MAX_BYTES = 512_000
# LINKS_ROBOTS_CACHE_BYTES (int >= 0, default 4 MiB): robots.txt whose parsed rules a worker keeps
# in memory, the most recently used (each counted as at least 1 KiB; rules take 15 to 50 times
# their text: about 60 to 200 MiB); others are read again from Redis when needed.
LINKS_ROBOTS_CACHE_BYTES = 4 * 1024 * 1024
# LINKS_STORE_BODY (bool, default False): store each page's body (zlib) in ``pages``, field "body";
# LINKS_BODY_MAX_BYTES (int >= 1, default 1048576): bytes of a body kept at most.
LINKS_STORE_BODY = False
LINKS_BODY_MAX_BYTES = 1024 * 1024
# LINKS_RESOLVE (dict, default {}): host name or suffix -> IP address, answered by
# crawler.links.resolver.MappedResolver when it is the TWISTED_DNS_RESOLVER (the sandbox's web).
LINKS_RESOLVE: dict[str, str] = {}
# --- End of links ------------------------------------------------------------------------------

# --- Domains (crawler.spiders.domains: liveness sweep, one document per domain) ---------------
# The spider turns the ban middleware off and its batches up (custom_settings, docs/settings.md).
# DOMAINS_NAMESERVERS (list of "host[:port]", default [] = /etc/resolv.conf's): asked in turn.
DOMAINS_NAMESERVERS: list[str] = []
# DOMAINS_DNS_TIMEOUT (float seconds > 0, default 2): how long one DNS query waits.
DOMAINS_DNS_TIMEOUT = 2.0
# DOMAINS_DNS_RETRIES (int 0..10, default 1): a timed-out or refused query is asked again.
DOMAINS_DNS_RETRIES = 1
# DOMAINS_DNS_CONCURRENCY (int >= 1, default 200): DNS queries in flight per name server.
DOMAINS_DNS_CONCURRENCY = 200
# DOMAINS_PRIVATE_ADDRESSES (bool, default False): probe addresses that are not public (loopback,
# private, link-local such as 169.254.169.254, ...), for a sweep of your own network or a test.
# Off, a domain whose addresses are none of them public is stored "private_address", unprobed.
DOMAINS_PRIVATE_ADDRESSES = False
# DOMAINS_MAX_ADDRESSES (int 1..16, default 4): the addresses of a name a probe connects to at
# most, in the DNS answer's order: the next one 0.3 s after the one before while none has
# connected (as browsers do), all within DOMAINS_DOWNLOAD_TIMEOUT.
DOMAINS_MAX_ADDRESSES = 4
# DOMAINS_DOWNLOAD_TIMEOUT (float seconds > 0, default 10): a probe's download timeout.
DOMAINS_DOWNLOAD_TIMEOUT = 10.0
# DOMAINS_TIMEOUT_RETRIES (int 0..10, default 1): a domain's timed-out probes are sent again, this
# many times in all, the first retry of an HTTP timeout over HTTPS (then "timeout").
DOMAINS_TIMEOUT_RETRIES = 1
# DOMAINS_MAX_REDIRECTS (int 0..20, default 5): redirects within a domain (to names under it,
# www. or en., too) followed at most, a page that only redirects by a script or a meta refresh
# counted as one (one more, or one back to a URL visited, is "redirect_loop"); a redirect to
# another domain is never followed ("redirect_offsite").
DOMAINS_MAX_REDIRECTS = 5
# DOMAINS_HTTP_PORT (int 1..65535, default 80) and DOMAINS_HTTPS_PORT (default 443): the ports
# probes go to; the sandbox's domains listen on high ports (tests and benchmarks set these).
DOMAINS_HTTP_PORT = 80
DOMAINS_HTTPS_PORT = 443
# DOMAINS_RATE (float >= 0, default 0 = no cap): probes per second a worker sends, spread evenly.
DOMAINS_RATE = 0.0
# DOMAINS_FLEET_RATE (float >= 0, default 0 = no cap): probes per second for the whole fleet.
DOMAINS_FLEET_RATE = 0.0
# DOMAINS_BODY_BYTES (int >= 1024, default 65536): bytes of any answer read (and decoded) at most,
# whatever its announced length.
DOMAINS_BODY_BYTES = 65_536
# --- End of domains ----------------------------------------------------------------------------
