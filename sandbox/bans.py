"""What a banned client receives, one renderer per ban mode, and the challenge pages
those answers point to (``/sorry/index``, ``/sec/a``, ``/cdn-cgi/challenge-platform/``).

Each mode imitates one real protection: Akamai and DataDome 403s, the Cloudflare 503
challenge, Google's captcha redirect, Douban's JavaScript redirect, a plain 429, and the
"200 that is not the page" family (empty body, JSON error, page without its data, the feed's
status 0 answer without data).
"""

from __future__ import annotations

import html
import math
import random
import time
from collections.abc import Callable
from urllib.parse import urlencode

from aiohttp import web

from sandbox import markup
from sandbox.config import BAN_MODES
from sandbox.explore import compact_dumps, soft_block_body

RANDOM_MODE = "random"
CONCRETE_MODES: tuple[str, ...] = tuple(mode for mode in BAN_MODES if mode != RANDOM_MODE)
STATUS_VERIFY = 10000
STATUS_LOGIN_REQUIRED = 8
UNUSUAL_TRAFFIC = "Our systems have detected unusual traffic from your computer network"

Renderer = Callable[[web.Request, float], web.Response]


def is_api_path(path: str) -> bool:
    """Tell whether ``path`` is a JSON API path rather than an HTML page."""
    return path.startswith("/api/")


class BanResponder:
    """Builds the answer for a banned client; tokens and random modes come from a seeded RNG."""

    def __init__(self, seed: int) -> None:
        self.reseed(seed)
        self._renderers: dict[str, Renderer] = {
            "403": self.akamai,
            "datadome": self.datadome,
            "cloudflare": self.cloudflare,
            "captcha_redirect": self.captcha_redirect,
            "js_redirect": self.js_redirect,
            "429": self.too_many_requests,
            "empty": self.empty,
            "json_error": self.json_error,
            "no_data": self.no_data,
            "soft_block": self.soft_block,
        }

    def reseed(self, seed: int) -> None:
        """Restart the random sequence from ``seed``."""
        self._rng = random.Random(seed)

    def respond(self, request: web.Request, mode: str, remaining: float) -> web.Response:
        """Return the ban answer of ``mode``; ``remaining`` is the ban's time left in seconds."""
        if mode == RANDOM_MODE:
            mode = self._rng.choice(CONCRETE_MODES)
        return self._renderers[mode](request, remaining)

    def token(self, length: int = 16) -> str:
        """Return a hex token drawn from the seeded RNG."""
        return f"{self._rng.getrandbits(length * 4):0{length}x}"

    def akamai(self, request: web.Request, remaining: float) -> web.Response:
        """Akamai: 403 "Access Denied" with ``Server: AkamaiGHost``."""
        reference = f"18.{self.token(8)}.{int(time.time())}.{self.token(8)}"
        body = (
            "<HTML><HEAD>\n<TITLE>Access Denied</TITLE>\n</HEAD><BODY>\n"
            "<H1>Access Denied</H1>\n \n"
            f'You don\'t have permission to access "{html.escape(str(request.url))}" '
            "on this server.<P>\n"
            f"Reference #{reference}\n</BODY>\n</HTML>\n"
        )
        headers = {"Server": "AkamaiGHost", "Mime-Version": "1.0", "Cache-Control": "no-store"}
        return web.Response(status=403, text=body, content_type="text/html", headers=headers)

    def datadome(self, request: web.Request, remaining: float) -> web.Response:
        """DataDome: 403 with a ``datadome`` cookie and the captcha-delivery loader."""
        cookie = self.token(32)
        body = (
            "<html><head><title>tiktok.com</title></head>"
            '<body style="margin:0"><p id="cmsg">Please enable JS and disable any ad blocker</p>'
            "<script data-cfasync=\"false\">var dd={'rt':'c','cid':'"
            f"{self.token(24)}','hsh':'{self.token(16)}','t':'fe','s':43337,'e':'{cookie}',"
            "'host':'geo.captcha-delivery.com'}</script>"
            '<script data-cfasync="false" src="https://ct.captcha-delivery.com/c.js"></script>'
            "</body></html>"
        )
        response = web.Response(status=403, text=body, content_type="text/html")
        response.headers["X-DataDome"] = "protected"
        response.set_cookie("datadome", cookie, max_age=31536000, path="/", samesite="Lax")
        return response

    def cloudflare(self, request: web.Request, remaining: float) -> web.Response:
        """Cloudflare: 503 "Just a moment..." managed challenge."""
        ray = self.token(16)
        body = (
            '<!DOCTYPE html><html lang="en-US"><head><title>Just a moment...</title>'
            '<meta name="robots" content="noindex,nofollow"></head><body>'
            '<div class="main-wrapper" role="main"><div class="main-content">'
            '<noscript><span id="challenge-error-text">Enable JavaScript and cookies to continue'
            "</span></noscript></div></div>"
            f"<script>(function(){{window._cf_chl_opt={{cRay:'{ray}',cType:'managed'}};"
            "var a=document.createElement('script');"
            f"a.src='/cdn-cgi/challenge-platform/h/g/orchestrate/chl_page/v1?ray={ray}';"
            "document.getElementsByTagName('head')[0].appendChild(a);}());</script>"
            "</body></html>"
        )
        headers = {
            "Server": "cloudflare",
            "cf-mitigated": "challenge",
            "CF-RAY": f"{ray}-AMS",
            "Cache-Control": "private, max-age=0, no-store, no-cache, must-revalidate",
        }
        return web.Response(status=503, text=body, content_type="text/html", headers=headers)

    def captcha_redirect(self, request: web.Request, remaining: float) -> web.Response:
        """Google: 302 to ``/sorry/index?continue=<original>&q=<token>``."""
        query = urlencode({"continue": str(request.url), "q": self.token(32)})
        location = f"{request.scheme}://{request.host}/sorry/index?{query}"
        return web.Response(status=302, headers={"Location": location})

    def js_redirect(self, request: web.Request, remaining: float) -> web.Response:
        """Douban: a 200 whose body is only a script sending the browser to ``/sec/a``."""
        query = urlencode({"c": self.token(32), "r": str(request.url)})
        target = f"{request.scheme}://{request.host}/sec/a?{query}"
        body = (
            '<script>var d=[navigator.platform,navigator.userAgent,navigator.vendor].join("|");'
            f'window.location.href="{target}";</script>'
        )
        return web.Response(text=body, content_type="text/html")

    def too_many_requests(self, request: web.Request, remaining: float) -> web.Response:
        """A plain 429 with ``Retry-After`` set to the ban's remaining seconds."""
        retry_after = str(max(1, math.ceil(remaining)))
        body = "<html><body><h1>429 Too Many Requests</h1></body></html>"
        headers = {"Retry-After": retry_after}
        return web.Response(status=429, text=body, content_type="text/html", headers=headers)

    def empty(self, request: web.Request, remaining: float) -> web.Response:
        """A 200 with an empty body and the content type the real answer would have."""
        content_type = "application/json" if is_api_path(request.path) else "text/html"
        return web.Response(body=b"", content_type=content_type, charset="utf-8")

    def json_error(self, request: web.Request, remaining: float) -> web.Response:
        """A 200 "verify" answer: JSON status 10000 for the API, a captcha page otherwise."""
        if is_api_path(request.path):
            return _api_error(STATUS_VERIFY, "verify")
        detail = {"statusCode": STATUS_VERIFY, "statusMsg": "verify", "userInfo": {}}
        body = (
            '<div id="tiktok-verify-page" class="tiktok-verify-page captcha-verify-container">'
            '<p>Verify to continue:</p><div class="captcha_verify_img--wrapper"></div></div>'
        )
        scripts = markup.universal_data_script(detail)
        text = markup.page("Security Check | TikTok", body=body, scripts=scripts)
        return web.Response(text=text, content_type="text/html")

    def no_data(self, request: web.Request, remaining: float) -> web.Response:
        """A 200 that looks like the page but lacks its data (JSON status 8 for the API)."""
        if is_api_path(request.path):
            return _api_error(STATUS_LOGIN_REQUIRED, "login required")
        text = markup.page("TikTok - Make Your Day", body='<div data-e2e="user-page"></div>')
        return web.Response(text=text, content_type="text/html")

    def soft_block(self, request: web.Request, remaining: float) -> web.Response:
        """The real feed's answer to a blocked IP or a stale session: status 0 and no data
        (no ``itemList``, no ``hasMore``); a page without its data otherwise."""
        if is_api_path(request.path):
            body = compact_dumps(soft_block_body())
            return web.Response(text=body, content_type="application/json")
        return self.no_data(request, remaining)


class ChallengePages:
    """The pages ban answers send clients to; they are never rate-limited."""

    def register(self, router: web.UrlDispatcher) -> None:
        """Add the challenge routes to ``router``."""
        router.add_get("/sorry/index", self.sorry)
        router.add_get("/sec/a", self.douban_verify)
        router.add_get("/cdn-cgi/challenge-platform/{tail:.*}", self.cloudflare_script)

    async def sorry(self, request: web.Request) -> web.Response:
        """Google's captcha page: 429 with a form and the "unusual traffic" notice."""
        target = html.escape(request.query.get("continue", ""))
        token = html.escape(request.query.get("q", ""))
        body = (
            f"<html><head><title>{target}</title></head><body>"
            '<div style="max-width:400px;"><form id="captcha-form" action="index" method="post">'
            '<div id="recaptcha" class="g-recaptcha" data-callback="submitCallback"'
            ' data-sitekey="6LfwuyUTAAAAAOAmoS0fdqijC2PbbdH4"></div>'
            f'<input type="hidden" name="q" value="{token}">'
            f'<input type="hidden" name="continue" value="{target}"></form>'
            f"<div><b>About this page</b><br><br>{UNUSUAL_TRAFFIC}. This page checks to see if "
            "it&#39;s really you sending the requests, and not a robot.<br><br>"
            f"IP address: {html.escape(request.remote or '')}<br>URL: {target}</div></div>"
            "</body></html>"
        )
        return web.Response(status=429, text=body, content_type="text/html")

    async def douban_verify(self, request: web.Request) -> web.Response:
        """Douban's verification page that the JavaScript redirect leads to."""
        target = html.escape(request.query.get("r", ""))
        body = (
            "<!DOCTYPE html><html><head><title>Verify</title></head><body>"
            '<div id="content"><p>Unusual requests were detected from your IP address. '
            "Please verify to continue.</p>"
            '<form action="/sec/c" method="post"><input type="hidden" name="r" '
            f'value="{target}"><div id="tcaptcha"></div><button type="submit">Verify</button>'
            "</form></div></body></html>"
        )
        return web.Response(text=body, content_type="text/html")

    async def cloudflare_script(self, request: web.Request) -> web.Response:
        """The challenge script the Cloudflare page loads (a harmless stub)."""
        return web.Response(text="void 0;", content_type="application/javascript")


def _api_error(status: int, message: str) -> web.Response:
    body = {"statusCode": status, "status_code": status, "status_msg": message, "itemList": []}
    return web.json_response(body, dumps=compact_dumps)
