"""The table of every project setting: its type and allowed range (see rules.py).

Every UPPERCASE name of ``crawler/settings.py`` has a line here (a test checks it), as do the
settings the project reads without a default there (``FLEET_*``, ``DOWNLOAD_HANDLERS``).
"""

from __future__ import annotations

import codecs
import ipaddress
import logging
import re
import socket
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from scrapy.settings import BaseSettings
from scrapy.utils.misc import load_object

from crawler.config.rules import (
    Rule,
    as_dict,
    as_float,
    as_int,
    as_text,
    base_url,
    choice,
    flag,
    hidden,
    import_path,
    integer,
    items,
    key_template,
    mapping,
    number,
    proxy_url,
    redis_url,
    text,
    url,
    within,
)
from crawler.config.values import NameServer, parse_destination
from crawler.config.values import write_concern as read_write_concern
from crawler.uris import ascii_host, is_ip

LOG_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")
RESOURCE_TYPES = (
    *("document", "stylesheet", "image", "media", "font", "script", "texttrack", "xhr"),
    *("fetch", "eventsource", "websocket", "manifest", "other"),
)
FLEET_TEXT = (
    *("FLEET_NAME", "FLEET_REGION", "FLEET_AMI", "FLEET_INSTANCE_TYPE", "FLEET_INSTALL"),
    *("FLEET_SSM_REDIS_URL", "FLEET_SSM_MONGO_URI", "FLEET_IAM_INSTANCE_PROFILE"),
    *("FLEET_SUBNET_ID", "FLEET_KEY_NAME"),
)


def answers_per_window(value: Any) -> tuple[int, float] | None:
    """RATE_LIMIT_EXIT: ``"M/S"`` (M answers within S seconds, both above 0), or "" (off)."""
    text = as_text(value).strip()
    if not text:
        return None
    answers, seconds = text.split("/")
    window = as_int(int(answers)), as_float(seconds)
    if window[0] < 1 or not window[1] > 0:
        raise ValueError(value)
    return window


def ip_address(value: Any) -> str:
    return str(ipaddress.ip_address(as_text(value).strip()))


def host_name(value: Any) -> str:
    """A host or domain name as URLs give it (lower case, no trailing dot; an IDN in its ASCII
    form), not a URL or ``host:port``."""
    name = as_text(value).strip().lower()
    if is_ip(name):
        return str(ipaddress.ip_address(name.strip("[]")))  # as a URL's host gives it
    if not name.rstrip(".") or any(char in name for char in "/:@?#[] \t"):
        raise ValueError(value)
    return ascii_host(name)


def listen_host(value: Any) -> str:
    """METRICS_HOST: an IP address, or a name this machine resolves (``localhost``; looked up
    once, as the crawl starts): a typo is refused, not a metrics endpoint left off."""
    name = as_text(value).strip()
    try:
        return ip_address(name)
    except ValueError:
        pass
    try:
        socket.getaddrinfo(name, None)
    except (OSError, UnicodeError):
        raise ValueError(value) from None
    return name


def spider_name(value: Any) -> str:
    """EXPLORE_HANDOFF_SPIDER: a spider's name (letters, digits, ``_.-``), or "" for none."""
    name = as_text(value).strip()
    if name.lower() in ("none", "null") or not re.fullmatch(r"[A-Za-z0-9_.-]*", name):
        raise ValueError(value)
    return name


def english_language(value: Any) -> str:
    """MAPS_LANGUAGE: ``en`` or a variant (``en-GB``): the end of a results list, a search that
    found nothing, the consent buttons and the review counts are read by their English words."""
    name = as_text(value).strip()
    if not re.fullmatch(r"en(-[A-Za-z0-9]{2,8})?", name):
        raise ValueError(value)
    return name


def region_code(value: Any) -> str:
    """MAPS_REGION: two letters, or "" (the site picks one)."""
    code = as_text(value).strip()
    if code and not re.fullmatch(r"[A-Za-z]{2}", code):
        raise ValueError(value)
    return code.lower()


def nameserver(value: Any) -> Any:
    """DOMAINS_NAMESERVERS item: an IP address with an optional port (``host[:port]``)."""
    return NameServer.parse(as_text(value))


def ports(value: Any) -> list[int]:
    """``METRICS_PORT``: 0 or empty (off), a port ``9410``, or a range ``9410-9419``."""
    raw = "" if value is None else str(value).strip()
    if raw in ("", "0"):
        return []
    first, _, last = raw.partition("-")
    low, high = int(first), int(last or first)
    if not 0 < low <= high < 65536:
        raise ValueError(value)
    return list(range(low, high + 1))


def start_host(value: Any) -> str:
    """ALLOWED_START_HOSTS item: ``scheme://host[:port]`` (http or https) or ``host[:port]``."""
    host = as_text(value).strip()
    parts = urlsplit(host if "://" in host else f"http://{host}")
    if parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
        raise ValueError(value)
    if parts.path.strip("/") or parts.query or parts.fragment:
        raise ValueError(value)
    parts.port  # noqa: B018 (raises ValueError for a port out of range)
    return host


def write_concern(value: Any) -> Any:
    """MONGO_WRITE_CONCERN as the pipeline reads it (values.py raises SettingsError itself)."""
    return read_write_concern(BaseSettings({"MONGO_WRITE_CONCERN": value}))


def directory(value: Any) -> Path:
    """A directory this process can write in, made when missing as its user would make it: one
    that cannot be made or written in (``/dev/null/x``, ``/proc/x``, a read-only file system)
    is refused. Tried, not guessed: permission bits say nothing of /proc or /sys to root."""
    path = Path(as_text(value))
    if not str(value).strip():
        raise ValueError(value)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError:
        raise ValueError(value) from None
    return path


# The REDIS_PARAMS redis-py hands to socket.settimeout() as it connects (a number <= 0, or one
# that is no number, failed the crawl's first command with a traceback).
REDIS_TIMEOUTS = ("socket_timeout", "socket_connect_timeout")
# Seconds redis-py adds to the clock before each command (a string failed it with a traceback).
HEALTH_CHECK = "health_check_interval"


def redis_params(value: Any) -> dict[Any, Any]:
    params = as_dict(value)
    for name in REDIS_TIMEOUTS:
        timeout = params.get(name)
        if timeout is None:
            continue
        if not (isinstance(timeout, int | float) and as_float(timeout) > 0):
            raise ValueError(name)
        with socket.socket() as probe:  # no connection: what settimeout() takes (not 1e10)
            try:
                probe.settimeout(timeout)
            except OverflowError:
                raise ValueError(name) from None
    interval = params.get(HEALTH_CHECK, 0)
    if isinstance(interval, bool) or not isinstance(interval, int | float) or interval < 0:
        raise ValueError(HEALTH_CHECK)
    return params


def log_level(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if as_text(value) not in logging.getLevelNamesMapping():
        raise ValueError(value)
    return value


def log_file(value: Any) -> Path:
    """A file this process can append to, in a directory that exists (Scrapy's log handler
    makes no directory): opened as the handler will open it."""
    path = Path(as_text(value))
    if not str(value).strip() or path.is_dir():
        raise ValueError(value)
    try:
        with path.open("a", encoding="utf-8"):
            pass
    except OSError:
        raise ValueError(value) from None
    return path


def components(value: Any) -> dict[Any, Any]:
    """A component priority dict: import paths (or classes) to an order number or None."""
    parsed = as_dict(value)
    for path, order in parsed.items():
        if order is None:
            continue
        as_int(order)
        if isinstance(path, str):
            load_object(path)
    return parsed


def handlers(value: Any) -> dict[Any, Any]:
    """DOWNLOAD_HANDLERS: URL schemes to a handler's import path (or class), or None."""
    parsed = as_dict(value)
    for handler in parsed.values():
        if isinstance(handler, str):
            load_object(handler)
    return parsed


def resource_type(value: Any) -> str:
    name = as_text(value).strip()
    if name and name not in RESOURCE_TYPES:
        raise ValueError(value)
    return name


def mongo_database(value: Any) -> str:
    name = as_text(value)
    if not name or len(name.encode()) > 63 or any(c in name for c in '/\\. "$\0'):
        raise ValueError(value)
    return name


# --- the table: every setting of crawler/settings.py, and the others the project reads ----------

HTTP_STATUS = Rule("an HTTP status", within(as_int, 100, 599, False, False))
RATE = number(0)

RULES: dict[str, Rule] = {
    # Scrapy's, as the project sets them
    "BOT_NAME": text(empty=False),
    "SPIDER_MODULES": items(Rule("a module", as_text), "module names"),
    "NEWSPIDER_MODULE": text(empty=False),
    "SPIDER_LOADER_CLASS": text(empty=False),
    "COMMANDS_MODULE": text(empty=False),
    "TWISTED_REACTOR": choice("twisted.internet.asyncioreactor.AsyncioSelectorReactor"),
    "FEED_EXPORT_ENCODING": Rule("a text encoding such as utf-8", codecs.lookup),
    "FEED_URI_PARAMS": Rule("an importable function (package.module.name)", load_object, True),
    "META_COPY_WARN_SKIP_KEYS": items(Rule("a meta key", as_text), "meta keys"),
    "ROBOTSTXT_OBEY": flag(),
    "LOG_LEVEL": Rule(f"one of {', '.join(LOG_LEVELS)}", log_level),
    "LOG_FILE": Rule("a file this process can write, in a directory that exists", log_file, True),
    "TELNETCONSOLE_ENABLED": flag(),
    "REMOTE_CONTROL_ENABLED": flag(),
    "CONCURRENT_REQUESTS": integer(1),
    "CONCURRENT_REQUESTS_PER_DOMAIN": integer(1),
    "DOWNLOAD_DELAY": number(0),
    "DOWNLOAD_TIMEOUT": number(0, above=True),
    "DOWNLOAD_MAXSIZE": integer(0),
    "DOWNLOAD_WARNSIZE": integer(0),
    "DNSCACHE_ENABLED": flag(),
    "DNSCACHE_SIZE": integer(0),
    "AUTOTHROTTLE_ENABLED": flag(),
    "USER_AGENT": text(empty=False),
    "DOWNLOADER_MIDDLEWARES": Rule("a dict of loadable components to orders", components),
    "SPIDER_MIDDLEWARES": Rule("a dict of loadable components to orders", components),
    "ADDONS": Rule("a dict of loadable components to orders", components),
    "EXTENSIONS": Rule("a dict of loadable components to orders", components),
    "EXTENSIONS_BASE": Rule("a dict of loadable components to orders", components),
    "ITEM_PIPELINES": Rule("a dict of loadable components to orders", components),
    "DOWNLOAD_HANDLERS": Rule("a dict of URL schemes to loadable handlers", handlers),
    "SCHEDULER": import_path(),
    "RETRY_TIMES": integer(0),
    "RETRY_HTTP_CODES": items(HTTP_STATUS, "HTTP status codes (100-599)"),
    "AWS_ENDPOINT_URL": url("http", "https", optional=True),
    # bans, retries and politeness
    "RETRY_BACKOFF_BASE": number(1),
    "RETRY_BACKOFF_MAX": number(0, above=True),
    "RETRY_BACKOFF_JITTER": number(0, 1),
    "BAN_POLICY": choice("pause", "rotate", "stop"),
    "BAN_COOLDOWN": number(0),
    "BAN_COOLDOWN_MAX": number(0),  # and at least BAN_COOLDOWN (checked with the others)
    "BAN_MAX_TIMES": integer(0),
    "BAN_RULES": items(import_path(), "importable rule functions"),
    "FAILURE_PAUSE_RATIO": number(0, 1, below=True),
    "FAILURE_PAUSE_WINDOW": integer(10, 100_000),
    "HOST_BLOCK_START": number(0),
    "HOST_BLOCK_MAX": number(0),  # and at least HOST_BLOCK_START (checked where it is read)
    "HOST_BLOCK_FORGIVE": number(0, above=True),
    "HOST_MAX_EXCEPTIONS": integer(0),
    "RATE_LIMIT_EXIT": Rule('"" or "M/S": M answers (>= 1) in S seconds (> 0)', answers_per_window),
    "POLITENESS_RATE": RATE,
    "POLITENESS_BURST": number(1),
    "POLITENESS_RECOVERY": number(0, above=True),
    "POLITENESS_DOMAIN_RATES": mapping(
        "host or domain names (example.com: its hosts too) to rates >= 0",
        key=host_name,
        value=RATE.parse,
    ),
    "POLITENESS_CONCURRENCY": integer(0),
    "BIND_ADDRESSES": items(Rule("an IP address", ip_address), "IP addresses"),
    "PROXY_POOL": items(proxy_url(), "http(s):// proxy URLs"),
    # Redis, the frontier and start entries
    "REDIS_URL": redis_url(),
    "REDIS_CLUSTER": flag(optional=True),  # not set (settings built by hand): no cluster
    "REDIS_PARAMS": Rule(
        "a dict (or JSON object) of redis-py client arguments (its timeouts, "
        f"{' and '.join(REDIS_TIMEOUTS)}: a number of seconds > 0, or null; {HEALTH_CHECK}: "
        "a number of seconds >= 0)",
        redis_params,
        show=hidden,
    ),
    "FRONTIER_BATCH_SIZE": integer(1, 1000),
    "FRONTIER_LEASE_SECONDS": integer(5),
    "FRONTIER_FLUSH_INTERVAL": number(0, above=True),
    "DUPEFILTER_MODE": choice("bloom", "redisbloom", "exact", "none"),
    "DUPEFILTER_CAPACITY": integer(1000),
    "DUPEFILTER_ERROR_RATE": number(0, 1, above=True, below=True),
    "DUPEFILTER_LOCAL_CACHE": integer(0),
    "REDIS_START_URLS_KEY": key_template("name"),
    "START_INVALID_KEY": key_template("name"),
    "START_BATCH_SIZE": integer(1),
    "START_READ_AHEAD": integer(0),
    "START_ENTRY_MAX_BYTES": integer(1),
    "START_ENTRY_MAX_DEPTH": integer(1, 100),
    "ALLOWED_START_HOSTS": items(
        Rule("a host", start_host), "hosts: scheme://host[:port] (http or https) or host[:port]"
    ),
    "MAX_IDLE_TIME_BEFORE_CLOSE": integer(0),  # scrapy-redis's spiders take int() of it
    "IDLE_POLL_INTERVAL": number(0, above=True),
    "STATS_REDIS_KEY": key_template("spider"),
    # recrawl (crawler/recrawl/); MIN <= INITIAL <= MAX is checked with the others
    "RECRAWL_ENABLED": flag(),
    "RECRAWL_INITIAL_INTERVAL": number(0, above=True),
    "RECRAWL_MIN_INTERVAL": number(0, above=True),
    "RECRAWL_MAX_INTERVAL": number(0, above=True),
    "RECRAWL_JITTER": number(0, 1),
    "RECRAWL_POLL_INTERVAL": number(0, above=True),
    "RECRAWL_BATCH_SIZE": integer(1, 10_000),
    "RECRAWL_ABSENT_LIMIT": integer(0, 1000),
    # MongoDB
    "MONGO_URI": url("mongodb", "mongodb+srv"),
    "MONGO_DATABASE": Rule('a MongoDB database name (no /\\. "$ or spaces)', mongo_database),
    "MONGO_CONNECT_TIMEOUT_MS": integer(1),
    "MONGO_ANSWER_TIMEOUT_MS": integer(1),
    "MONGO_BATCH_SIZE": integer(1, 100_000),
    "MONGO_FLUSH_INTERVAL": number(0, above=True),
    "MONGO_MAX_PENDING": integer(1),
    "MONGO_RETRY_TIMES": integer(0),
    "MONGO_COLLECTIONS": mapping(
        'item class or spider names to "collection:unique key field" (or "")',
        value=parse_destination,
    ),
    "MONGO_SPILL_DIR": Rule("a writable directory path (created when missing)", directory),
    "MONGO_WRITE_CONCERN": Rule(
        "an acknowledged write concern such as {w: 1, j: true}", write_concern
    ),
    "MONGO_MAX_DOCUMENT_BYTES": integer(1024, 16 << 20),
    # explore and profiles
    "EXPLORE_BASE_URL": base_url(),
    "EXPLORE_PAGE_SIZE": integer(1, 30),
    "EXPLORE_MAX_PAGES": integer(0),
    "EXPLORE_POPULAR_MIN_LIKES": integer(0),
    "EXPLORE_POPULAR_MIN_FOLLOWERS": integer(0),
    "EXPLORE_HANDOFF_SPIDER": Rule(
        "a spider's name (letters, digits, _.-), or empty for no hand-off", spider_name
    ),
    "EXPLORE_HANDED_KEY": key_template("spider"),
    "EXPLORE_HANDOFF_TTL": number(0, above=True),
    "PROFILES_BASE_URL": base_url(),
    # fleet observability
    "STATS_PUBLISH_INTERVAL": number(0, above=True),
    "WORKER_HEARTBEAT_TTL": integer(1),
    "PROGRESS_INTERVAL": number(0),
    "DOMAIN_STATS_MAX": integer(0),
    "PACE_WINDOW": number(0, above=True),
    "METRICS_PORT": Rule("a port 1-65535, a range like 9410-9419, or 0 (off)", ports),
    "METRICS_HOST": Rule("an IP address or a name of this machine", listen_host),
    "FLEET_PAGE": choice("local", "all", "off"),
    # maps and the browser
    "MAPS_BASE_URL": base_url(),
    "MAPS_LANGUAGE": Rule(
        "English (en, or en-GB and the like): the spider reads the pages' English words",
        english_language,
    ),
    "MAPS_REGION": Rule("a region code of 2 letters (de, us), or empty", region_code),
    "MAPS_CONSENT": choice("reject", "accept"),
    "MAPS_MAX_RESULTS": integer(0),
    "MAPS_SCROLL_TIMEOUT": number(0, above=True),
    "MAPS_SCROLL_MAX_STALLS": integer(1),
    "MAPS_PLACES_WITH_BROWSER": flag(),
    "MAPS_BLOCKED_RESOURCE_TYPES": items(
        Rule("a resource type", resource_type),
        f"Playwright resource types ({', '.join(RESOURCE_TYPES)})",
    ),
    "MAPS_BROWSER_RESTART_PAGES": integer(0),
    "MAPS_BROWSER_DRAIN_SECONDS": integer(1),
    "PLAYWRIGHT_BROWSER_TYPE": choice("chromium", "firefox", "webkit"),
    "PLAYWRIGHT_LAUNCH_OPTIONS": mapping("Playwright launch options", show=hidden),
    "PLAYWRIGHT_PROCESS_REQUEST_HEADERS": Rule(
        "None or a function's import path", lambda v: v if callable(v) else load_object(v), True
    ),
    "PLAYWRIGHT_MAX_CONTEXTS": integer(1),
    "PLAYWRIGHT_MAX_PAGES_PER_CONTEXT": integer(1),
    "PLAYWRIGHT_DEFAULT_NAVIGATION_TIMEOUT": number(0),
    # links (crawler/spiders/links.py, crawler/links/)
    "LINKS_DEFAULT_SCHEME": choice("https", "http"),
    "LINKS_MAX_DEPTH": integer(0, 1000),
    "LINKS_MAX_PAGES": integer(0),
    "LINKS_SCOPE": choice("host", "domain", "any"),
    "LINKS_MAX_URL_LENGTH": integer(16),
    "LINKS_MAX_REPEATED_SEGMENTS": integer(1),
    "LINKS_MAX_CALENDAR_HOPS": integer(0),
    "LINKS_SITEMAPS": flag(),
    "LINKS_SITEMAP_MAX_URLS": integer(1),
    "LINKS_STATE_TTL": integer(60),
    "LINKS_ROBOTS_OBEY": flag(),
    "LINKS_ROBOTS_TTL": integer(1),
    "LINKS_ROBOTS_5XX_TRIES": integer(0),
    "LINKS_ROBOTS_CLAIM_SECONDS": integer(1),
    "LINKS_ROBOTS_MAX_BYTES": integer(1),
    "LINKS_ROBOTS_CACHE_BYTES": integer(0),
    "LINKS_STORE_BODY": flag(),
    "LINKS_BODY_MAX_BYTES": integer(1),
    "LINKS_RESOLVE": mapping("host names or suffixes to IP addresses", value=ip_address),
    # domains (crawler/spiders/domains.py, crawler/domains/)
    "DOMAINS_NAMESERVERS": items(Rule("a name server", nameserver), "name servers host[:port]"),
    "DOMAINS_DNS_TIMEOUT": number(0, above=True),
    "DOMAINS_DNS_RETRIES": integer(0, 10),
    "DOMAINS_DNS_CONCURRENCY": integer(1),
    "DOMAINS_PRIVATE_ADDRESSES": flag(),
    "DOMAINS_MAX_ADDRESSES": integer(1, 16),
    "DOMAINS_DOWNLOAD_TIMEOUT": number(0, above=True),
    "DOMAINS_TIMEOUT_RETRIES": integer(0, 10),
    "DOMAINS_MAX_REDIRECTS": integer(0, 20),
    "DOMAINS_HTTP_PORT": integer(1, 65535),
    "DOMAINS_HTTPS_PORT": integer(1, 65535),
    "DOMAINS_RATE": number(0),
    "DOMAINS_FLEET_RATE": number(0),
    "DOMAINS_BODY_BYTES": integer(1024),
    # autoscaling (crawler/observability/sizing.py)
    "AUTOSCALE_MIN_WORKERS": integer(0),
    "AUTOSCALE_MAX_WORKERS": integer(1),
    "AUTOSCALE_BACKLOG_SECONDS": number(0, above=True),
    "AUTOSCALE_WORKER_PACE": number(0, above=True),
    "AUTOSCALE_SAMPLE": integer(1),
    "AUTOSCALE_INTERVAL": number(0, above=True),
    "AUTOSCALE_COOLDOWN": number(0),
    # scrapy fleet (crawler/aws/config.py); not set means its default
    **dict.fromkeys(FLEET_TEXT, text(optional=True)),
    "FLEET_SECRETS": choice("ssm", "env", optional=True),
    "FLEET_SECURITY_GROUP_IDS": items(Rule("a group id", as_text), "group ids", optional=True),
    "FLEET_CRAWL_SETTINGS": mapping("setting names to values", optional=True, show=hidden),
    "FLEET_WORKER_GRACE": number(0, above=True, optional=True),
    "FLEET_START_FAILURES": integer(0, optional=True),
    "FLEET_START_BACKOFF": number(0, above=True, optional=True),
}

# Settings whose rule reads the machine it runs on (it imports a path, looks at a directory or
# resolves a name): a value given for other machines (FLEET_CRAWL_SETTINGS) is checked there,
# as each worker starts.
ON_THE_WORKER = frozenset(
    {
        *("DOWNLOADER_MIDDLEWARES", "SPIDER_MIDDLEWARES", "ADDONS", "EXTENSIONS"),
        *("EXTENSIONS_BASE", "ITEM_PIPELINES", "DOWNLOAD_HANDLERS", "SCHEDULER", "BAN_RULES"),
        *("MONGO_SPILL_DIR", "METRICS_HOST", "PLAYWRIGHT_PROCESS_REQUEST_HEADERS"),
        *("FEED_URI_PARAMS", "LOG_FILE"),
    }
)

# Settings Scrapy reads as it makes the crawler process, before any crawler: ``scrapy crawl``
# checks them first (crawler/commands/crawl.py), as Scrapy's logging set-up would fail on them
# with a traceback.
BEFORE_THE_CRAWLER = ("LOG_LEVEL", "LOG_FILE")
