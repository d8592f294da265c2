"""Classify a response before the spider sees it: a ban, or fine.

Pure functions on status, headers, URL and body (TARGETS.md §4): no I/O, no crawler. The rules
look for what protection systems actually send, never for words a real page may contain: a
profile whose bio says "captcha" is data, a 403 with ``Server: AkamaiGHost`` is a ban.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from crawler.extractors import jsondata

BAN = "ban"
OK = "ok"


@dataclass(frozen=True)
class Verdict:
    """``kind`` "ban" or "ok", and the ``rule`` that decided; a 5xx is no ban: it is retried."""

    kind: str
    rule: str = ""

    @property
    def is_ban(self) -> bool:
        return self.kind == BAN


FINE = Verdict(OK)


@dataclass(frozen=True)
class Page:
    """What the rules look at: a plain view of a response."""

    status: int
    url: str
    headers: Mapping[str, str]  # lower-case names, decoded values (joined with ", ")
    body: bytes
    redirected: bool = False  # reached by a redirect (followed by a middleware or a browser)

    def header(self, name: str) -> str:
        return self.headers.get(name.lower(), "")

    @property
    def text(self) -> str:
        return self.body[:200_000].decode("utf-8", "replace")


Rule = Callable[[Page], Verdict | None]

# Hosts and paths of the captcha, login and "sorry" pages that bans send clients to. Only the
# host and the path are looked at, as whole path segments: a query or a user name ("/@captcha.fan",
# "?q=login") may hold any word.
CHALLENGE_HOSTS = frozenset({"sec.douban.com", "validate.perfdrive.com"})
CHALLENGE_PATH = re.compile(
    r"/(sorry|captcha|challenge|verify|blocked|distil_r_captcha)(?=[/.]|$)"
    r"|^/sec/a/?$|^/cdn-cgi/challenge-platform/",
    re.IGNORECASE,
)
# A login page: where a ban of a site that wants its visitors signed in sends them, and where
# a whole site's members-only pages send any visitor (a spider crawling whole sites leaves the
# rule out: ``login_redirect``).
LOGIN_PATH = re.compile(r"/(login|signin)(?=[/.]|$)", re.IGNORECASE)
# Cloudflare's challenge page loads its script from the challenge platform; normal pages of
# sites with bot detection load ``/cdn-cgi/challenge-platform/scripts/jsd/...`` too.
CLOUDFLARE_CHALLENGE_SCRIPT = re.compile(r"/cdn-cgi/challenge-platform/(?!(h/\w+/)?scripts/)")
JS_REDIRECT = re.compile(
    r"\blocation(\.href)?\s*=(?!=)|\blocation\.(replace|assign)\s*\(", re.IGNORECASE
)
# The URL a JS_REDIRECT sends the browser to, when written out as a string.
JS_TARGET = re.compile(
    r"""\blocation(?:\.href)?\s*=(?!=)\s*(["'])([^"'\\]*)\1(?=\s*(?:[;}<]|$))"""
    r"""|\blocation\.(?:replace|assign)\s*\(\s*(["'])([^"'\\]*)\3\s*\)""",
    re.IGNORECASE,
)
SCRIPT = re.compile(r"<script\b([^>]*)>(.*?)</script\s*>", re.IGNORECASE | re.DOTALL)
# Scripts that hold data, not code (a profile's JSON may quote any text).
DATA_SCRIPT = re.compile(r"""\btype\s*=\s*["']?application/(ld\+)?json""", re.IGNORECASE)
TAG = re.compile(r"<[^>]+>")
# A page that only sends the browser on: at most this many bytes, and fewer characters a reader
# sees ("Redirecting..."); the domains spider follows such pages (domains/page_redirect.py).
REDIRECT_PAGE_BYTES = 4096
REDIRECT_PAGE_TEXT = 80
# Feed and API status codes meaning "this client is not allowed" (TARGETS.md §1, §2).
JSON_BAN_CODES = frozenset({8, 10000, 10113, 10114})
# JSON bodies nested deeper than this are not read by the rules.
JSON_MAX_DEPTH = jsondata.MAX_DEPTH


def akamai(page: Page) -> Verdict | None:
    if page.status == 403 and (
        "akamaighost" in page.header("server").lower()
        or ("Access Denied" in page.text and "Reference #" in page.text)
    ):
        return Verdict(BAN, "akamai")
    return None


def perimeterx(page: Page) -> Verdict | None:
    """HUMAN (PerimeterX)'s block page: a 403 with its captcha (a normal page may load its
    client, with a 200)."""
    if page.status == 403 and (b"_pxAppId" in page.body or b"px-captcha" in page.body):
        return Verdict(BAN, "perimeterx")
    return None


def datadome(page: Page) -> Verdict | None:
    marked = (
        "datadome=" in page.header("set-cookie").lower()
        or page.header("x-datadome")
        or "captcha-delivery.com" in page.text
    )
    if page.status in (403, 429) and marked:
        return Verdict(BAN, "datadome")
    return None


def cloudflare(page: Page) -> Verdict | None:
    challenged = (
        page.header("cf-mitigated").lower() == "challenge"
        or CLOUDFLARE_CHALLENGE_SCRIPT.search(page.text)
        or "<title>Just a moment...</title>" in page.text
    )
    if page.status in (403, 429, 503) and challenged:
        return Verdict(BAN, "cloudflare")
    # Its own error pages (1020 access denied, 1010, 1015...): a site's 403 has no such markup.
    if page.status in (403, 429) and b'class="cf-error-code"' in page.body:
        return Verdict(BAN, "cloudflare")
    return None


# What bot protections send, and only they: (marker in the page's markup, a tag or a script,
# never its text, the body's size at most, rule). Akamai's interstitial and crypto challenge,
# Imperva (Incapsula) blocks, Sucuri's JS challenge, SiteGround's captcha. A page of prose may
# quote any of them: as text, it is no block.
PROTECTION_MARKERS = (
    (b"/_sec/cp_challenge/", 65536, "akamai"),
    (b"/_sec/verify?provider=interstitial", 65536, "akamai"),
    (b"/_Incapsula_Resource?CWUDNSAI=", 16384, "incapsula"),
    (b"sucuri_cloudproxy_js", 32768, "sucuri"),
    (b"/.well-known/sgcaptcha/", 16384, "sgcaptcha"),
)
# A block page says little else than its incident or support ID: at most BLOCK_PAGE_TEXT
# characters a reader sees, in a body of at most BLOCK_PAGE_BYTES (Imperva's, F5's default one).
# A page of prose that quotes one says more.
BLOCK_PAGE_PHRASES = (b"Incapsula incident ID", b"Your support ID is:")
BLOCK_PAGE_TEXT = 1000
BLOCK_PAGE_BYTES = 16384
STYLE = re.compile(r"<style\b[^>]*>.*?</style\s*>|<!--.*?-->", re.IGNORECASE | re.DOTALL)
# Statuses no normal page answers with: Shopify's 430 "Security Rejection", LinkedIn's 999.
BLOCK_STATUSES = frozenset({430, 999})


def protection_challenge(page: Page) -> Verdict | None:
    """A challenge or block page a bot protection sends, by its own header or markup."""
    if page.header("x-amzn-waf-action").lower() in ("challenge", "captcha"):
        return Verdict(BAN, "aws_waf")
    if "sec_cpt=" in page.header("set-cookie"):
        return Verdict(BAN, "akamai")
    if page.header("x-sucuri-block"):
        return Verdict(BAN, "sucuri")
    for marker, most, rule in PROTECTION_MARKERS:
        if len(page.body) <= most and marker in page.body and in_markup(page.text, marker):
            return Verdict(BAN, rule)
    if (said := block_page_text(page)) is not None:
        return Verdict(BAN, said)
    if page.status in BLOCK_STATUSES:
        return Verdict(BAN, f"http_{page.status}")
    return None


def in_markup(text: str, marker: bytes) -> bool:
    """Whether ``marker`` is in a tag (an attribute: an iframe's or a script's ``src``) or in a
    script's code, not in the text a reader sees (where a page quoting it has it)."""
    wanted = marker.decode()
    return any(wanted in code for _, code in SCRIPT.findall(text)) or any(
        wanted in tag for tag in TAG.findall(SCRIPT.sub(" ", text))
    )


def visible_text(text: str) -> str:
    """The text a reader sees: without tags, scripts, styles and comments, spaces collapsed."""
    return " ".join(TAG.sub(" ", SCRIPT.sub(" ", STYLE.sub(" ", text))).split())


def block_page_text(page: Page) -> str | None:
    """The rule whose block page this is by what it says, and says alone (BLOCK_PAGE_PHRASES)."""
    if len(page.body) > BLOCK_PAGE_BYTES or not any(p in page.body for p in BLOCK_PAGE_PHRASES):
        return None
    text = visible_text(page.text)
    if len(text) > BLOCK_PAGE_TEXT:
        return None
    if "Incapsula incident ID" in text:
        return "incapsula"
    rejected = "The requested URL was rejected" in text or in_markup(page.text, b"/TSPD/")
    return "f5" if rejected and "Your support ID is:" in text else None


def too_many_requests(page: Page) -> Verdict | None:
    return Verdict(BAN, "http_429") if page.status == 429 else None


def forbidden(page: Page) -> Verdict | None:
    return Verdict(BAN, "http_403") if page.status == 403 else None


def challenge_redirect(page: Page) -> Verdict | None:
    """A redirect to a captcha/sorry/verify page, or having landed on one by a redirect (a
    site's own verify page, asked for as such, is a page like any other)."""
    return _redirected_to(page, _challenge_url)


def login_redirect(page: Page) -> Verdict | None:
    """A redirect to a login page, or having landed on one by a redirect, as for
    :func:`challenge_redirect`."""
    return _redirected_to(page, _login_url)


def _redirected_to(page: Page, challenge: Callable[[str], bool]) -> Verdict | None:
    location = page.header("location")
    target = urljoin(page.url, location) if 300 <= page.status < 400 and location else ""
    if target and challenge(target) and not same_page(page.url, target):
        return Verdict(BAN, "challenge_redirect")  # not a page's own /login/ or https
    if page.status in (200, 403, 429, 503) and page.redirected and challenge(page.url):
        return Verdict(BAN, "challenge_page")
    return None


def empty_body(page: Page) -> Verdict | None:
    if page.status == 200 and not page.body.strip():
        return Verdict(BAN, "empty_body")
    return None


def javascript_redirect(page: Page) -> Verdict | None:
    """A 200 whose whole content is a script sending the browser elsewhere."""
    if page.status != 200 or len(page.body) > REDIRECT_PAGE_BYTES:
        return None
    text = page.text
    scripts = " ".join(
        code for attrs, code in SCRIPT.findall(text) if not DATA_SCRIPT.search(attrs)
    )
    visible = TAG.sub(" ", SCRIPT.sub(" ", text)).strip()
    short = len(visible) < REDIRECT_PAGE_TEXT
    if JS_REDIRECT.search(scripts) and short and not _own_redirect(page, scripts):
        return Verdict(BAN, "js_redirect")
    return None


def _own_redirect(page: Page, scripts: str) -> bool:
    """Whether every place the scripts send the browser to is a written-out URL of the page's
    own host that is no challenge page (a site's ``location.replace('/en/')``)."""
    targets = [m.group(2) if m.group(1) else m.group(4) for m in JS_TARGET.finditer(scripts)]
    if not targets or len(targets) != len(JS_REDIRECT.findall(scripts)):
        return False  # a target computed, not written out
    own = urlsplit(page.url).hostname
    urls = [urljoin(page.url, target) for target in targets]
    return all(
        urlsplit(u).hostname == own and not (_challenge_url(u) or _login_url(u)) for u in urls
    )


def json_error(page: Page) -> Verdict | None:
    """A JSON body whose status code says the client is not allowed."""
    if page.status != 200 or not page.body.lstrip().startswith(b"{"):
        return None
    try:
        # Measured before it is parsed: an error object is flat, a body nested deeper than
        # JSON_MAX_DEPTH is not one (and would take the parser's recursion to its limit).
        data = jsondata.loads(page.body.decode("utf-8", "replace"), JSON_MAX_DEPTH)
    except jsondata.MalformedData:
        return None
    if not isinstance(data, dict):
        return None
    codes = {data.get("statusCode"), data.get("status_code")}
    if any(jsondata.as_int(code) in JSON_BAN_CODES for code in codes):
        return Verdict(BAN, "json_error")
    return None


# The rules that know a bot protection's own pages by their headers and markup (not a site's own
# 403, nor a 429): the domains spider classes such an answer "challenged".
PROTECTION_RULES: tuple[Rule, ...] = (
    akamai,
    perimeterx,
    datadome,
    cloudflare,
    protection_challenge,
)
# In order: the first rule that decides wins.
DEFAULT_RULES: tuple[Rule, ...] = (
    *PROTECTION_RULES,
    too_many_requests,
    *(forbidden, challenge_redirect, login_redirect),
    *(empty_body, javascript_redirect, json_error),
)


def classify(page: Page, rules: Iterable[Rule] = DEFAULT_RULES) -> Verdict:
    for rule in rules:
        verdict = rule(page)
        if verdict is not None:
            return verdict
    return FINE


def same_page(url: str, other: str) -> bool:
    """Whether two URLs name one page but for the scheme, a trailing slash and the case of
    the path (``/Login`` and ``https://.../login/``)."""
    one, two = urlsplit(url.strip()), urlsplit(other.strip())
    same_host = (one.hostname or "") == (two.hostname or "")
    return same_host and one.path.rstrip("/").casefold() == two.path.rstrip("/").casefold()


def _challenge_url(url: str) -> bool:
    parts = urlsplit(url.strip())
    return parts.hostname in CHALLENGE_HOSTS or bool(CHALLENGE_PATH.search(parts.path))


def _login_url(url: str) -> bool:
    return bool(LOGIN_PATH.search(urlsplit(url.strip()).path))
