"""Every default of the project, grouped and documented.

Order of precedence, lowest first: Scrapy's defaults < this module < environment variables read
below (``REDIS_URL``, ``REDIS_CLUSTER``, ``MONGO_URI``, ``MONGO_DATABASE``) < spider
``custom_settings`` < ``scrapy crawl -s NAME=VALUE``.
"""

from __future__ import annotations

import math
import os

BOT_NAME = "crawler"
SPIDER_MODULES = ["crawler.spiders"]
NEWSPIDER_MODULE = "crawler.spiders"
COMMANDS_MODULE = "crawler.commands"

# The asyncio reactor is required by scrapy-playwright and lets pipelines await threads.
TWISTED_REACTOR = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"
FEED_EXPORT_ENCODING = "utf-8"
ROBOTSTXT_OBEY = False
LOG_LEVEL = "INFO"
# A worker exposes no unauthenticated consoles.
TELNETCONSOLE_ENABLED = False
# REMOTE_CONTROL_ENABLED (bool, default False here; Scrapy's default is True): Scrapy's
# RemoteControl extension, an HTTP server on a random localhost port that executes any Python
# code it is sent inside the worker (bearer token, written to a job file in the user's home).
# A worker exposes no code-execution console: turn it on for one debugging run only
# (``scrapy crawl <spider> -s REMOTE_CONTROL_ENABLED=True``).
REMOTE_CONTROL_ENABLED = False

# --- Politeness -------------------------------------------------------------------------------
CONCURRENT_REQUESTS = 16
CONCURRENT_REQUESTS_PER_DOMAIN = 8
DOWNLOAD_DELAY = 0.0
DOWNLOAD_TIMEOUT = 30
# DOWNLOAD_MAXSIZE (int bytes, default 16 MiB; Scrapy's own default is 1 GiB): a larger body is
# refused, both as it arrives (the download is cancelled: dead letter
# "download_error:DownloadCancelledError") and while it is decompressed (a gzip bomb stops
# there: dead letter "response_ignored"), so a worker's memory stays bounded.
# DOWNLOAD_WARNSIZE (int bytes, default 4 MiB): a larger body is logged as a warning.
# What the spiders fetch is far smaller: explore feed pages and profile pages are up to about
# 1 MB on the real sites, map place pages about 2 MB (the maps spider's browser pages are not
# bound by it). A spider that needs more raises both in its custom_settings, a request with meta
# "download_maxsize"/"download_warnsize".
DOWNLOAD_MAXSIZE = 16 * 1024 * 1024
DOWNLOAD_WARNSIZE = 4 * 1024 * 1024
AUTOTHROTTLE_ENABLED = False
USER_AGENT = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/131.0.0.0 Safari/537.36"
)

# --- Bans, retries and politeness (crawler.middlewares) ------------------------------------------
# Downloader middlewares, among Scrapy's (DOWNLOADER_MIDDLEWARES_BASE). process_request runs in
# ascending order, process_response in descending order: on the way back each one sees the
# response as every higher-numbered one left it. Why each sits where it does:
#   1  LeaseDownloaderMiddleware  outermost: its process_exception runs after every other one
#      (retries included), so what reaches it is final; it also guards the request's errback, so
#      an exception raised on the way back (which skips every process_exception) still settles
#      the request's lease.
#   50 Offsite, 100 RobotsTxt: drop requests before anything is spent on them (acked).
#   300-500 HttpAuth, DownloadTimeout, DefaultHeaders, UserAgent: plain request settings.
#   550 BackoffRetryMiddleware (Scrapy's RetryMiddleware off): gets a 5xx only once Ban has found
#      it is no ban; a ban never reaches it (Ban answers it with a deferred request).
#   580 MetaRefresh, 600 Redirect: follow a redirect only after Ban judged it, so a 302 to a
#      captcha or login page is a ban, not a page to follow; MetaRefresh reads the decoded body.
#   640 HostFull (only with POLITENESS_CONCURRENCY): sends back a request of a domain this
#      worker just found full (at 660) before Ban takes a rate token for it.
#   650 BanMiddleware: on the way in, waits out cool-downs and takes the fleet's rate, and picks
#      the identity before HttpProxy (750) reads its proxy and before Cookies (700) adds a Cookie
#      header, so a deferred request goes back to the frontier without one. On the way back, it
#      judges the decoded body.
#   660 HostConcurrency (only with POLITENESS_CONCURRENCY): takes one of the domain's slots for
#      the fleet once Ban admitted the request, before Cookies adds a header.
#   680 HttpCompression (Scrapy puts it at 590): decodes gzip/deflate/br before Ban, so rules
#      always read what the page says, and refuses a body over DOWNLOAD_MAXSIZE once decoded.
#   700 Cookies: keeps the cookies of every answer, bans included, as a browser does.
#   750 HttpProxy, 850 DownloaderStats, 900 HttpCache: the answer as it came over the wire.
DOWNLOADER_MIDDLEWARES = {
    "crawler.middlewares.LeaseDownloaderMiddleware": 1,
    "scrapy.downloadermiddlewares.retry.RetryMiddleware": None,
    "crawler.middlewares.BackoffRetryMiddleware": 550,
    "crawler.middlewares.HostFullMiddleware": 640,
    "crawler.middlewares.BanMiddleware": 650,
    "crawler.middlewares.HostConcurrencyMiddleware": 660,
    "scrapy.downloadermiddlewares.httpcompression.HttpCompressionMiddleware": 680,
}
SPIDER_MIDDLEWARES = {
    # Outermost: acknowledges a request's lease once its output is fully handled.
    "crawler.middlewares.LeaseSpiderMiddleware": 1,
    # Gives every page with items its next visit (only with RECRAWL_ENABLED; see below).
    "crawler.recrawl.RecrawlMiddleware": 50,
}
# RETRY_TIMES (int, default 3), RETRY_HTTP_CODES, RETRY_EXCEPTIONS: Scrapy's settings, used by
# crawler.middlewares.BackoffRetryMiddleware. 429 is not here: it is a ban (see below).
RETRY_TIMES = 3
RETRY_HTTP_CODES = [500, 502, 503, 504, 522, 524, 408]
# RETRY_BACKOFF_BASE (float, default e): retry n waits BASE**n seconds (2.7 s, 7.4 s, 20 s, ...)
# in the frontier's delayed set; RETRY_BACKOFF_MAX (float, default 600) caps it;
# RETRY_BACKOFF_JITTER (float, default 0.2) spreads it by +-20%. Retry-After wins when present
# (up to BAN_COOLDOWN_MAX, below).
RETRY_BACKOFF_BASE = math.e
RETRY_BACKOFF_MAX = 600.0
RETRY_BACKOFF_JITTER = 0.2
# BAN_POLICY (str, default "pause"): what a ban does. "pause": the domain cools down for the
# whole fleet; "rotate": only the banned identity (bind address or proxy) cools down on that
# domain and requests move to the next identity; "stop": the worker also stops, exiting with
# status 3 so a fleet manager can replace its IP.
BAN_POLICY = "pause"
# BAN_COOLDOWN (float seconds, default 1800): how long a ban pauses (Retry-After wins).
BAN_COOLDOWN = 1800.0
# BAN_COOLDOWN_MAX (float seconds, finite, >= BAN_COOLDOWN, default 21600 = 6 h): the longest
# pause a Retry-After header can ask for, after a ban and before a retry alike; a longer one (a
# date years ahead) counts as this long.
BAN_COOLDOWN_MAX = 21600.0
# BAN_MAX_TIMES (int, default 5): bans of one request before it is dead-lettered; 0 = no limit.
BAN_MAX_TIMES = 5
# BAN_RULES (list of import paths, default []): extra rules checked before the built-in ones, each
# a function Page -> Verdict | None (see crawler/bans/rules.py). Spiders can also define
# ``ban_rule(response) -> str | None``, which judges 200 pages.
BAN_RULES: list[str] = []
# POLITENESS_RATE (float, default 0.5): requests per second per domain per identity, shared by
# the whole fleet through Redis (a token bucket); 0 turns the limit off. After a ban the rate
# halves (down to 5%) and recovers linearly over POLITENESS_RECOVERY seconds (default 600).
# POLITENESS_BURST (float, default 5): requests that may go at once after a quiet spell.
# POLITENESS_DOMAIN_RATES (dict, default {}): per-domain rates, e.g. {"www.tiktok.com": 0.2}.
POLITENESS_RATE = 0.5
POLITENESS_BURST = 5.0
POLITENESS_RECOVERY = 600.0
POLITENESS_DOMAIN_RATES: dict[str, float] = {}
# POLITENESS_CONCURRENCY (int >= 0, default 0 = off): requests in flight per domain for the whole
# fleet (leases in Redis that expire with the request's download timeout + 30 s, so a killed
# worker's free themselves). Off, nothing is asked of Redis; on, two round trips per request.
# At most CONCURRENT_REQUESTS_PER_DOMAIN, and with DOWNLOAD_DELAY at most 30 s / (1.5 x delay).
POLITENESS_CONCURRENCY = 0
# BIND_ADDRESSES (list of str, default []) and PROXY_POOL (list of proxy URLs, default []): the
# identities requests are sent as, round-robin, skipping those cooling down after a ban. A
# comma-separated string is accepted (``-s BIND_ADDRESSES=127.0.0.2,127.0.0.3``).
BIND_ADDRESSES: list[str] = []
PROXY_POOL: list[str] = []

# --- Redis: scheduling and start entries (scrapy-redis) ----------------------------------------
# REDIS_URL (str): the shared Redis every worker of the fleet uses. Env REDIS_URL overrides it.
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
# REDIS_CLUSTER (bool, default False): REDIS_URL is one node of a Redis Cluster; the client
# discovers the others (crawler.connection.RedisCluster, same REDIS_PARAMS). The keys each
# frontier script touches share one hash tag, so the scripts run on a cluster. Env
# REDIS_CLUSTER (1/true/yes) overrides it.
REDIS_CLUSTER = os.environ.get("REDIS_CLUSTER", "").strip().lower() in {"1", "true", "yes"}
# REDIS_PARAMS (dict): extra redis-py client arguments. The client class reconnects with
# backoff when Redis goes away (crawler.connection.Redis); keep it when overriding.
# Timeouts are short because Redis calls run on the reactor thread.
REDIS_PARAMS = {
    "redis_cls": "crawler.connection.Redis",
    "socket_timeout": 5,
    "socket_connect_timeout": 2,
}
SCHEDULER = "crawler.frontier.scheduler.FrontierScheduler"
# FRONTIER_BATCH_SIZE (int 1..1000, default 16): requests leased per pop; new requests are
# written to Redis every FRONTIER_FLUSH_INTERVAL, before a pop, or once 8 batches of them wait.
FRONTIER_BATCH_SIZE = 16
# FRONTIER_LEASE_SECONDS (int >= 5, default 60): a popped request (or start entry) is leased to
# its worker this long; live workers renew their leases every third of it, so only a dead
# worker's leases run out and go back to the queue for others.
FRONTIER_LEASE_SECONDS = 60
# RECRAWL_ENABLED (bool, default False): revisit every page whose callback gives items, after
# an interval that adapts to the page: x2 when its items are unchanged, /2 when they changed,
# within RECRAWL_MIN_INTERVAL..RECRAWL_MAX_INTERVAL, starting at RECRAWL_INITIAL_INTERVAL
# (float seconds). Revisits wait in {<spider>}:revisit. Off for explore and domains; the
# profiles, links and maps spiders turn it on with their own intervals (custom_settings):
# profiles 1 day (1 hour..30 days), links pages 1 day (1 hour..30 days), maps places 7 days
# (1 day..90 days). ``-s RECRAWL_ENABLED=False`` turns it off for any of them.
RECRAWL_ENABLED = False
RECRAWL_INITIAL_INTERVAL = 86_400.0
RECRAWL_MIN_INTERVAL = 3_600.0
RECRAWL_MAX_INTERVAL = 30 * 86_400.0
# RECRAWL_JITTER (float 0..1, default 0.1): a revisit is due up to this share of its interval
# later, at random, so pages first crawled together spread out instead of all coming due at once.
RECRAWL_JITTER = 0.1
# RECRAWL_POLL_INTERVAL (float seconds, default 1): how often a worker hands due revisits to
# the frontier, at most RECRAWL_BATCH_SIZE (int, default 100) at a time.
RECRAWL_POLL_INTERVAL = 1.0
RECRAWL_BATCH_SIZE = 100
# FRONTIER_FLUSH_INTERVAL (float seconds, default 0.25): buffered requests and acknowledgements
# are written at least this often.
FRONTIER_FLUSH_INTERVAL = 0.25
# DUPEFILTER_MODE (str, default "bloom"): "bloom" (scalable Bloom filter on Redis bitmaps, about
# 4.4 bytes per URL at 1e-7), "redisbloom" (the RedisBloom module: BF.RESERVE with the capacity
# and error rate below, then BF.ADD), "exact" (a set of
# fingerprints, ~85 bytes per URL, no false positives) or "none". Fingerprints come from
# Scrapy's REQUEST_FINGERPRINTER_CLASS.
DUPEFILTER_MODE = "bloom"
# DUPEFILTER_CAPACITY (int, default 1000000): URLs the first Bloom filter holds at the error
# rate; past it the filter grows (each new one twice as large) without exceeding the rate.
DUPEFILTER_CAPACITY = 1_000_000
# DUPEFILTER_ERROR_RATE (float, default 1e-7): the Bloom filter's false-positive rate, the
# chance that a new URL is taken for one already seen.
DUPEFILTER_ERROR_RATE = 1e-7
# DUPEFILTER_LOCAL_CACHE (int, default 100000): fingerprints a worker remembers having scheduled
# itself; a repeat of one is dropped without a round trip to Redis. 0 turns the cache off.
DUPEFILTER_LOCAL_CACHE = 100_000
# REDIS_START_URLS_KEY (str): list users push start entries to, scrapy-redis convention. A
# spider's own redis_key attribute (scrapy-redis's, "%(name)s" allowed) wins; its bad entries
# then go to "<redis_key>:invalid". scrapy-redis's other settings are honoured or refused at
# start, naming the equivalent (crawler/settings_check/scrapy_redis.py).
REDIS_START_URLS_KEY = "%(name)s:start_urls"
# START_INVALID_KEY (str, default "%(name)s:start_urls:invalid"): list where malformed start
# entries are set aside as JSON {"entry", "reason", "time"} for a person to inspect.
START_INVALID_KEY = "%(name)s:start_urls:invalid"
# START_BATCH_SIZE (int, default 16): start entries popped from Redis per round trip.
START_BATCH_SIZE = 16
# START_ENTRY_MAX_BYTES (int >= 1, default 16384): a start entry longer than this is set aside
# ("too_large") without being decoded; the set-aside copy is cut to this many characters.
START_ENTRY_MAX_BYTES = 16384
# START_ENTRY_MAX_DEPTH (int 1..100, default 8): a JSON start entry whose arrays and objects
# nest deeper than this is set aside ("too_deep") before it is parsed.
START_ENTRY_MAX_DEPTH = 8
# ALLOWED_START_HOSTS (list of str, default []): where URLs in start entries may point besides
# the spider's base URL (EXPLORE_BASE_URL, PROFILES_BASE_URL); each "scheme://host[:port]", or
# "host[:port]" for http and https. Scheme, host and port must match; a URL elsewhere
# ("foreign_host") or with a user or password ("credentials") is set aside.
ALLOWED_START_HOSTS: list[str] = []
# MAX_IDLE_TIME_BEFORE_CLOSE (int seconds, default 0): close the spider after it has been idle
# (nothing queued, nothing in flight, no new start entries) this long; 0 waits forever for new
# start entries, as a long-running fleet worker should.
MAX_IDLE_TIME_BEFORE_CLOSE = 0
# IDLE_POLL_INTERVAL (float seconds > 0, default 1.0): how often an idle worker looks again for
# new start entries and for the end of the fleet's work. Scrapy itself looks only every 5 s.
IDLE_POLL_INTERVAL = 1.0

# SettingsCheck, before every other extension and the engine: a setting outside its allowed
# values (crawler/settings_check/table.py) stops the crawl, naming it, before anything is leased.
EXTENSIONS = {
    "crawler.extensions.SettingsCheck": -1000,
    # A spider built on scrapy_redis.spiders.RedisSpider/RedisCrawlSpider gets leased start
    # entries like the project's (crawler/spiders/redis.py); nothing for other spiders.
    "crawler.extensions.ScrapyRedisSpiders": 0,
    "crawler.extensions.FleetMonitor": 500,
}
# STATS_REDIS_KEY (str, default "{%(spider)s}:stats"): hash each worker adds the deltas of its
# numeric stats to every STATS_PUBLISH_INTERVAL and when it closes, so
# `redis-cli hgetall '{explore}:stats'` shows the fleet's totals. Keep the {spider} hash tag
# (Redis Cluster).
STATS_REDIS_KEY = "{%(spider)s}:stats"

# --- MongoDB storage ----------------------------------------------------------------------------
# MONGO_URI (str): MongoDB connection string. Env MONGO_URI overrides it.
MONGO_URI = os.environ.get("MONGO_URI", "mongodb://127.0.0.1:27017")
# MONGO_DATABASE (str, default "crawler"): database items are stored in. Env MONGO_DATABASE.
MONGO_DATABASE = os.environ.get("MONGO_DATABASE", "crawler")
# MONGO_CONNECT_TIMEOUT_MS (int, default 5000): how long opening the pipeline, and each write,
# waits to reach MongoDB; at start the spider fails with a clear error naming the (masked) URI.
MONGO_CONNECT_TIMEOUT_MS = 5000
# MONGO_BATCH_SIZE (int, default 500): items per collection written in one bulk_write.
MONGO_BATCH_SIZE = 500
# MONGO_FLUSH_INTERVAL (float seconds, default 1.0): a batch is written once its oldest item is
# this old, full or not (and every batch when the spider closes).
MONGO_FLUSH_INTERVAL = 1.0
# MONGO_MAX_PENDING (int, default 5000): items buffered or being written at most; beyond it the
# crawl waits for writes, so a slow MongoDB slows the crawl instead of growing memory.
MONGO_MAX_PENDING = 5000
# MONGO_RETRY_TIMES (int, default 3): retries of a batch on connection errors, timeouts and
# primary step-downs, with exponential backoff (0.25 s, 0.5 s, 1 s, ... at most 8 s).
MONGO_RETRY_TIMES = 3
# MONGO_SPILL_DIR (str, default ".spill"): where batches that could not be written after the
# retries are appended (fsynced JSON lines) and replayed from once MongoDB answers again, or at
# the next start. Nothing is dropped; upserts make a replay harmless.
MONGO_SPILL_DIR = os.environ.get("MONGO_SPILL_DIR", ".spill")
# MONGO_WRITE_CONCERN (dict, default {"w": 1, "j": True}): write concern of the pipeline's
# writes (keys w, j, wtimeout, fsync; acknowledged writes only, so w >= 1 or a tag such as
# "majority"). A batch counts as stored, and its requests' leases are acknowledged, only once
# MongoDB confirms it this way: journaled by default, so a MongoDB killed right after keeps it.
# Overrides any write concern in MONGO_URI for the pipeline.
MONGO_WRITE_CONCERN = {"w": 1, "j": True}
# MONGO_COLLECTIONS (dict, default {}): where items whose class does not say (no ``collection``
# and ``unique_key`` class attributes: dicts, other item classes) are stored, by item class name
# ("dict", "BookItem") or else by spider name: "<collection>:<unique key field>", or "" to pass
# them on unstored. An item with no destination is an error: its request is dead-lettered
# (item_error:UndeclaredItem) and can be requeued once this names it. See
# crawler/storage/destinations.py.
MONGO_COLLECTIONS: dict[str, str] = {}
# MONGO_MAX_DOCUMENT_BYTES (int 1024..16777216, default 16000000): largest BSON size of an
# item's document (MongoDB refuses more than 16 MiB; the default leaves room for the
# timestamps). A larger one is trimmed: its longest string field, then the next, is cut just
# enough to fit, and the document's "_truncated" field maps each cut field to its size before
# (bytes). A document still too large is not stored: its item fails and its request goes to
# the dead-letter list with the reason (crawler/storage/documents.py).
MONGO_MAX_DOCUMENT_BYTES = 16_000_000

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
# EXPLORE_POPULAR_MIN_LIKES (int, default 250000): a video with at least this many likes makes
# its author popular. EXPLORE_POPULAR_MIN_FOLLOWERS (int, default 10000): so does an author with
# at least this many followers. Popular authors are handed to the profiles spider, each once.
EXPLORE_POPULAR_MIN_LIKES = 250_000
EXPLORE_POPULAR_MIN_FOLLOWERS = 10_000
# EXPLORE_HANDOFF_SPIDER (str, default "profiles"): spider whose start key receives authors;
# empty disables the hand-off.
EXPLORE_HANDOFF_SPIDER = "profiles"
# EXPLORE_HANDED_KEY (str): sorted set of authors handed over, by the time until which they are
# not handed again. EXPLORE_HANDOFF_TTL (float seconds, default 86400, the profiles' first
# revisit interval): an author seen again after that is handed over again, so its profile is
# fetched again and the set holds only the authors of the last TTL.
EXPLORE_HANDED_KEY = "{%(spider)s}:handed_until"
EXPLORE_HANDOFF_TTL = 86_400.0

# --- Profiles (TikTok-style profile pages) -----------------------------------------------------
# PROFILES_BASE_URL (str): scheme and host of profile pages (`<base>/@<uniqueId>`).
PROFILES_BASE_URL = "https://www.tiktok.com"

# --- Fleet observability (crawler.observability.FleetMonitor, `scrapy status`) -----------------
# The extension is "crawler.extensions.FleetMonitor" in EXTENSIONS above. Each worker adds the
# deltas of its numeric stats to STATS_REDIS_KEY, counts requests, pages and items per minute in
# "<STATS_REDIS_KEY>:minute:<epoch minute>" (kept about an hour) and keeps a heartbeat
# "{<spider>}:workers:<worker id>" that expires WORKER_HEARTBEAT_TTL seconds after it stops.
# STATS_PUBLISH_INTERVAL (float seconds, default 5): how often a worker publishes its stats and
# reads the frontier's sizes back (one Redis round trip); it also publishes when it closes.
STATS_PUBLISH_INTERVAL = 5.0
# WORKER_HEARTBEAT_TTL (int seconds, default 30): a worker's heartbeat (host, pid, start time,
# pages and items per minute) is refreshed at least every third of this and expires this long
# after the worker dies, which is when `scrapy status` stops listing it. A clean close removes
# it at once.
WORKER_HEARTBEAT_TTL = 30
# PROGRESS_INTERVAL (float seconds, default 60): one INFO line this often (checked at each
# publication) with this worker's and the fleet's pages and items per minute, the frontier's
# sizes and an ETA (queued, leased and delayed requests and start entries at the fleet's pace);
# 0 turns it off.
PROGRESS_INTERVAL = 60.0
# PACE_WINDOW (float seconds, default 60): a worker's own pages and items per minute (its
# heartbeat, /metrics, the progress line, and the ETA `scrapy status` and the fleet page show)
# are measured over the samples of this many last seconds; a worker that stops fetching shows
# 0 this long after its last page. Shorter follows changes sooner but is noisier.
PACE_WINDOW = 60.0
# METRICS_PORT (int, or a range "9410-9419", default 0 = off): serve Prometheus metrics at
# http://<METRICS_HOST>:<port>/metrics; with a range, the first free port (several workers on
# one machine). Names in crawler/observability/metrics.py. Env METRICS_PORT overrides it.
METRICS_PORT = os.environ.get("METRICS_PORT", "0")
# METRICS_HOST (str, default "0.0.0.0"): address the metrics endpoint listens on; "127.0.0.1"
# keeps it to the machine. Env METRICS_HOST overrides it.
METRICS_HOST = os.environ.get("METRICS_HOST", "0.0.0.0")
# FLEET_PAGE ("local", "all" or "off", default "local"): the fleet page at / on the metrics
# endpoint (README "Seeing the fleet"): "local" shows it to this machine only (127.0.0.0/8, ::1;
# others get 403) even when METRICS_HOST lets Prometheus in from elsewhere; "all" to anyone who
# reaches the endpoint (it is read-only, secrets masked); "off" serves /metrics only.
FLEET_PAGE = "local"

# --- Maps (crawler.spiders.maps, Google-Maps-like listings in a headless browser) -------------
# Only the maps spider uses the browser: it sets DOWNLOAD_HANDLERS to its scrapy-playwright
# handler in its custom_settings; other spiders keep Scrapy's HTTP handler.
# MAPS_BASE_URL (str): scheme and host of map pages; point it at the sandbox to test.
MAPS_BASE_URL = "https://www.google.com"
# MAPS_LANGUAGE (str, default "en"): ``hl`` of search URLs; the end-of-list marker is English.
MAPS_LANGUAGE = "en"
# MAPS_REGION (str, default ""): ``gl`` of search URLs; EU regions get the consent page first.
MAPS_REGION = ""
# MAPS_CONSENT (str, default "reject"): the consent interstitial's answer, "reject" or "accept".
MAPS_CONSENT = "reject"
# MAPS_MAX_RESULTS (int, default 120): place links taken per search at most; 0 = no limit.
MAPS_MAX_RESULTS = 120
# MAPS_SCROLL_TIMEOUT (float seconds, default 5): how long one scroll waits for the feed to grow.
# MAPS_SCROLL_MAX_STALLS (int, default 3): scrolls in a row that did not grow the feed before
# the spider stops scrolling (the soft block, or a feed without an end marker).
MAPS_SCROLL_TIMEOUT = 5.0
MAPS_SCROLL_MAX_STALLS = 3
# MAPS_PLACES_WITH_BROWSER (bool, default False): fetch place pages in the browser too. The
# sandbox renders place pages on the server, so plain HTTP reads them; the real site fills them
# with JavaScript and needs True.
MAPS_PLACES_WITH_BROWSER = False
# MAPS_BLOCKED_RESOURCE_TYPES (list, default image, font, media): Playwright resource types
# aborted in the browser, to save bandwidth and memory; [] loads everything.
MAPS_BLOCKED_RESOURCE_TYPES = ["image", "font", "media"]
# MAPS_BROWSER_RESTART_PAGES (int, default 200): close the browser once this many pages were
# closed and none is open (it is launched again at the next request), capping its memory; 0 never.
MAPS_BROWSER_RESTART_PAGES = 200
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
# PLAYWRIGHT_PROCESS_REQUEST_HEADERS (default None): the browser sends its own headers, a
# consistent browser fingerprint; Scrapy's would also strip the consent form's Content-Type.
PLAYWRIGHT_PROCESS_REQUEST_HEADERS = None
# PLAYWRIGHT_MAX_CONTEXTS (int, default 2) and PLAYWRIGHT_MAX_PAGES_PER_CONTEXT (int, default 4):
# browser contexts, and pages open in each, at most; requests wait for a free page.
PLAYWRIGHT_MAX_CONTEXTS = 2
PLAYWRIGHT_MAX_PAGES_PER_CONTEXT = 4
# PLAYWRIGHT_DEFAULT_NAVIGATION_TIMEOUT (int milliseconds, default 30000).
PLAYWRIGHT_DEFAULT_NAVIGATION_TIMEOUT = 30_000
# --- End of maps -------------------------------------------------------------------------------

# --- AWS fleet (scrapy fleet; read in crawler/aws/config.py) ---------------------------------
# FLEET_NAME (str, default "crawler"): value of the crawler:fleet tag marking the fleet's instances.
# FLEET_REGION (str, default: boto3's, from AWS_REGION/AWS_DEFAULT_REGION/profile): EC2 region.
# FLEET_AMI (str, default ""): image of new workers (Python 3.11+ with venv, pip, curl, aws CLI).
# FLEET_INSTANCE_TYPE (str, default "t3.small"): type of new workers (--instance-type wins).
# FLEET_INSTALL (str, default ""): what workers pip install: wheel URL, git+https://...@tag, spec.
# FLEET_SECRETS (str, default "ssm"): "ssm": workers read REDIS_URL/MONGO_URI from the SSM
# parameters FLEET_SSM_REDIS_URL / FLEET_SSM_MONGO_URI (default "/crawler/REDIS_URL",
# "/crawler/MONGO_URI"); "env": the launching environment's values are written into user data.
# FLEET_IAM_INSTANCE_PROFILE, FLEET_SUBNET_ID, FLEET_KEY_NAME (str, default ""),
# FLEET_SECURITY_GROUP_IDS (list, default []): passed to RunInstances when set.
# FLEET_CRAWL_SETTINGS (dict, default {"BAN_POLICY": "stop"}): -s settings of workers' scrapy crawl.
# AWS_ENDPOINT_URL (Scrapy's; default None = boto3's, e.g. env AWS_ENDPOINT_URL): S3 feeds and
# scrapy fleet talk to this endpoint (S3/EC2-compatible stores and APIs).

# --- Links (crawler.spiders.links: breadth-first crawl of whole sites) -------------------------
# LINKS_DEFAULT_SCHEME (str, "http" or "https", default "https"): scheme of a start entry given
# as a bare host (``example.org`` -> https://example.org/).
LINKS_DEFAULT_SCHEME = "https"
# LINKS_MAX_DEPTH (int 0..1000, default 5): links followed from a start URL at most; a start
# entry's "max_depth" overrides it. Pages listed in a host's sitemaps count as depth 1.
LINKS_MAX_DEPTH = 5
# LINKS_MAX_PAGES (int >= 0, default 10000): HTML pages stored per host per start entry (counted
# fleet-wide in Redis); past it nothing of the host is stored or followed (pages queued before
# are still fetched, not stored). 0 = no limit. A start entry's "max_pages" overrides it.
LINKS_MAX_PAGES = 10_000
# LINKS_SCOPE (str, default "host"): which links are followed: "host" (the start URL's host and
# port), "domain" (its registered domain, by the public suffix list bundled with tldextract) or
# "any". A start entry's "scope" overrides it.
LINKS_SCOPE = "host"
# LINKS_MAX_URL_LENGTH (int >= 16, default 2048): longer canonical URLs are not followed.
LINKS_MAX_URL_LENGTH = 2048
# LINKS_MAX_REPEATED_SEGMENTS (int >= 1, default 2): a URL whose path has one segment more often
# than this (/a/b/a/b/a/) is a trap and is not followed.
LINKS_MAX_REPEATED_SEGMENTS = 2
# LINKS_MAX_CALENDAR_HOPS (int >= 0, default 12): calendar-like pages (a path with /2024/01,
# /2024-01-31, ...) followed in a row from another calendar-like page; bounds infinite calendars.
LINKS_MAX_CALENDAR_HOPS = 12
# LINKS_SITEMAPS (bool, default True): the sitemaps robots.txt names (else /sitemap.xml), and
# sitemap indexes, seed each host when its robots.txt is first fetched for the fleet (so only
# with LINKS_ROBOTS_OBEY).
LINKS_SITEMAPS = True
# LINKS_SITEMAP_MAX_URLS (int >= 1, default 50000): locations read from one sitemap at most.
LINKS_SITEMAP_MAX_URLS = 50_000
# LINKS_STATE_TTL (int seconds >= 60, default 604800 = 7 days): per-host counters and page
# budgets in Redis ({links}:host:<host>, {links}:pages:<start>:<host>) expire this long after
# their last change, so per-host state stays bounded.
LINKS_STATE_TTL = 7 * 24 * 3600
# LINKS_ROBOTS_OBEY (bool, default True): obey robots.txt (crawler.links.robots, fetched once
# per host per LINKS_ROBOTS_TTL for the fleet; Scrapy's ROBOTSTXT_OBEY stays off). A robots.txt
# answering 4xx or 5xx, or failing to download, allows everything, as in Scrapy.
LINKS_ROBOTS_OBEY = True
# LINKS_ROBOTS_TTL (int seconds >= 1, default 86400): how long a host's robots.txt is kept in
# Redis ({links}:robots:<origin>) and in each worker before it is fetched again.
LINKS_ROBOTS_TTL = 86_400
# LINKS_ROBOTS_CLAIM_SECONDS (int >= 1, default 30): how long the worker fetching a robots.txt
# holds the claim; other workers' requests for that host wait in the delayed set meanwhile, and
# if the claimant dies, another worker fetches it after this long.
LINKS_ROBOTS_CLAIM_SECONDS = 30
# LINKS_ROBOTS_MAX_BYTES (int >= 1, default 512000): a longer robots.txt is cut (as Google does).
LINKS_ROBOTS_MAX_BYTES = 512_000
# LINKS_STORE_BODY (bool, default False): store each page's body in ``pages`` (field "body",
# zlib-compressed); LINKS_BODY_MAX_BYTES (int >= 1, default 1048576): bytes of a body kept at
# most, cut before compression.
LINKS_STORE_BODY = False
LINKS_BODY_MAX_BYTES = 1024 * 1024
# LINKS_RESOLVE (dict, default {}): host name or suffix -> IP address, answered by
# crawler.links.resolver.MappedResolver when it is the TWISTED_DNS_RESOLVER (the sandbox's web:
# -s TWISTED_DNS_RESOLVER=crawler.links.resolver.MappedResolver -s 'LINKS_RESOLVE={"test":
# "127.0.0.1"}').
LINKS_RESOLVE: dict[str, str] = {}
# --- End of links ------------------------------------------------------------------------------

# --- Domains (crawler.spiders.domains: liveness sweep, one document per domain) ---------------
# The spider turns off the ban middleware (a failure is its result) and sets CONCURRENT_REQUESTS
# 200, FRONTIER_BATCH_SIZE and START_BATCH_SIZE 200 in its custom_settings (-s overrides them).
# DOMAINS_NAMESERVERS (list of "host[:port]", default [] = those of /etc/resolv.conf): the
# name servers the spider's resolver (crawler/domains/resolver.py) asks, in turn.
DOMAINS_NAMESERVERS: list[str] = []
# DOMAINS_DNS_TIMEOUT (float seconds > 0, default 2): how long one DNS query waits.
DOMAINS_DNS_TIMEOUT = 2.0
# DOMAINS_DNS_RETRIES (int 0..10, default 1): a query that timed out or got SERVFAIL/REFUSED is
# asked again this many times, of the next name server. NXDOMAIN is never asked again.
DOMAINS_DNS_RETRIES = 1
# DOMAINS_DNS_CONCURRENCY (int >= 1, default 200): DNS queries in flight per name server.
DOMAINS_DNS_CONCURRENCY = 200
# DOMAINS_DOWNLOAD_TIMEOUT (float seconds > 0, default 10): a probe's download timeout.
DOMAINS_DOWNLOAD_TIMEOUT = 10.0
# DOMAINS_TIMEOUT_RETRIES (int 0..10, default 1): a probe that timed out is sent again this
# many times (at once, not with backoff); then the domain is "timeout" (code 0).
DOMAINS_TIMEOUT_RETRIES = 1
# DOMAINS_MAX_REDIRECTS (int 0..20, default 5): redirects within a domain (www. included)
# followed at most; a redirect to another domain is never followed ("redirect_offsite").
DOMAINS_MAX_REDIRECTS = 5
# DOMAINS_HTTP_PORT (int 1..65535, default 80) and DOMAINS_HTTPS_PORT (default 443): the ports
# probes go to; the sandbox's domains listen on high ports (tests and benchmarks set these).
DOMAINS_HTTP_PORT = 80
DOMAINS_HTTPS_PORT = 443
# DOMAINS_RATE (float >= 0, default 0 = no cap): probes per second a worker sends at most,
# spread evenly (the global cap; per-domain politeness does not apply to one request per domain).
DOMAINS_RATE = 0.0
# DOMAINS_FLEET_RATE (float >= 0, default 0 = no cap): probes per second the whole fleet of the
# spider sends at most (a token bucket in Redis, "{domains}:rate:fleet"), e.g. for an upstream.
DOMAINS_FLEET_RATE = 0.0
# DOMAINS_BODY_BYTES (int >= 1024, default 65536): bytes of a page read at most; the title and
# parking signatures are in the first ones, the rest is not downloaded.
DOMAINS_BODY_BYTES = 65_536
# --- End of domains ----------------------------------------------------------------------------
