"""Ban rules on real Scrapy responses, through the path BanMiddleware takes (TARGETS.md §4).

Every way the real targets ban must be caught under the right rule name, and pages that only
look like bans (a bio that says "captcha", a plain redirect, a 404, a 503 without a challenge,
JSON saying "user not found") must not be.
"""

from __future__ import annotations

import asyncio
import html
import json
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from scrapy import Request, Spider
from scrapy.http import Headers, HtmlResponse, Response, TextResponse
from scrapy.responsetypes import responsetypes
from scrapy.utils.test import get_crawler

from crawler import settings as project_settings
from crawler.bans.policy import page_of
from crawler.bans.rules import Page, Verdict, classify
from crawler.middlewares import BanMiddleware
from crawler.spiders.explore import ExploreSpider
from crawler.spiders.profiles import ProfilesSpider
from sandbox import markup
from sandbox.bans import BanResponder, ChallengePages

PROFILE = "https://www.tiktok.com/@some.user"
FEED = "https://www.tiktok.com/api/explore/item_list/?aid=1988&count=16&cursor=0&categoryType=2"
MAPS = "https://www.google.com/maps/search/shop+near+00501?hl=en"
DOUBAN = "https://movie.douban.com/subject/1292052/"
SORRY = "https://www.google.com/sorry/index?continue=https://www.google.com/maps/search/shop&q=EgQ"
SEC_DOUBAN = "https://sec.douban.com/a?c=4d1f0e&r=https%3A%2F%2Fmovie.douban.com%2Fsubject%2F1%2F"
JSON = "application/json; charset=utf-8"

HeaderMap = dict[str, str | list[str]]


# --- responses ------------------------------------------------------------------------------


def response(
    status: int,
    body: str | bytes = b"",
    url: str = PROFILE,
    headers: HeaderMap | None = None,
    cls: type[Response] = HtmlResponse,
) -> Response:
    data = body.encode() if isinstance(body, str) else body
    return cls(url, status=status, headers=headers, body=data, request=Request(url))


def landed(status: int, body: str, url: str, origin: str = PROFILE) -> Response:
    """A page a redirect from ``origin`` led to (followed before the ban rules read it)."""
    return HtmlResponse(url, status=status, body=body.encode(), request=Request(origin))


def redirect(status: int, location: str, url: str = PROFILE) -> Response:
    return response(status, url=url, headers={"Location": location}, cls=Response)


def feed_json(data: object, status: int = 200) -> Response:
    body = json.dumps(data)
    return response(status, body, FEED, {"Content-Type": JSON}, TextResponse)


def _user(signature: str, unique_id: str = "some.user") -> dict[str, Any]:
    return {
        "id": "6811111111111111111",
        "uniqueId": unique_id,
        "nickname": "Some User",
        "signature": signature,
        "verified": False,
        "secUid": "MS4wLjABAAAA" + "q" * 52,
        "privateAccount": False,
        "region": "US",
        "avatarLarger": "https://p16-sign-va.tiktokcdn.com/avatar.jpeg",
        "createTime": 1590000000,
    }


STATS = {
    "followerCount": 15200,
    "followingCount": 310,
    "heart": 480000,
    "heartCount": 480000,
    "videoCount": 212,
    "diggCount": 9100,
    "friendCount": 40,
}


def _videos(unique_id: str, count: int) -> str:
    return "".join(
        f'<div data-e2e="user-post-item"><a href="/@{unique_id}/video/73000000000000{n:05d}">'
        f'<img alt="video {n} by {unique_id}" src="/cover/{n}.jpeg"><strong>{n * 917}</strong>'
        "</a></div>"
        for n in range(count)
    )


def profile_page(signature: str, layout: str = "universal", unique_id: str = "some.user") -> str:
    """A profile page with content around it, as a browser gets it (layout "sigi+app": the
    rehydration script with only the app's context before the SIGI_STATE holding the user)."""
    user = _user(signature, unique_id)
    if layout == "universal":
        detail = {"statusCode": 0, "statusMsg": "", "userInfo": {"user": user, "stats": STATS}}
        script = markup.universal_data_script(detail)
    else:
        state = {
            "UserModule": {"users": {unique_id: user}, "stats": {unique_id: STATS}},
            "UserPage": {"uniqueId": unique_id},
        }
        script = markup.data_script(markup.SIGI_STATE_ID, state)
        if layout == "sigi+app":
            script = markup.app_context_script() + script
    body = (
        f'<div data-e2e="user-page"><h1 data-e2e="user-title">{unique_id}</h1>'
        f'<h2 data-e2e="user-bio">{html.escape(signature)}</h2>'
        f'<div data-e2e="user-post-item-list">{_videos(unique_id, 30)}</div></div>'
    )
    return markup.page(f"Some User (@{unique_id}) | TikTok", body=body, scripts=script)


def compact_profile_page(signature: str, status: int = 0) -> str:
    """A profile page whose content is all in its data script (the client renders the rest)."""
    info = {"user": _user(signature), "stats": STATS} if status == 0 else {}
    detail = {"statusCode": status, "statusMsg": "", "userInfo": info}
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<title>@some.user | TikTok</title></head><body><div id="app"></div>'
        f"{markup.universal_data_script(detail)}"
        '<script src="/static/js/webapp-desktop.js" defer></script></body></html>'
    )


def captcha_page(code: int = 10000, verify_markup: bool = True) -> str:
    body = (
        '<div id="tiktok-verify-page" class="captcha-verify-container">'
        '<p>Verify to continue:</p><div class="captcha_verify_img--wrapper"></div></div>'
        if verify_markup
        else ""
    )
    detail = {"statusCode": code, "statusMsg": "verify", "userInfo": {}}
    scripts = markup.universal_data_script(detail)
    return markup.page("Security Check | TikTok", body=body, scripts=scripts)


def _feed_item(n: int, desc: str) -> dict[str, Any]:
    return {
        "id": f"730000000000000{n:04d}",
        "desc": desc,
        "createTime": 1700000000 + n,
        "author": {"id": str(n), "uniqueId": f"author.{n}", "nickname": "A", "secUid": "MS4w"},
        "authorStats": {"followerCount": 12, "heartCount": 40, "videoCount": 3},
        "stats": {"diggCount": 5, "playCount": 90, "shareCount": 1, "commentCount": 2},
    }


CONTENT_FEED = {
    "statusCode": 0,
    "status_code": 0,
    "status_msg": "",
    "cursor": "16",
    "hasMore": True,
    "itemList": [
        _feed_item(1, "how I beat every captcha #tech"),
        _feed_item(2, "verify your account? it's a scam, login only on the app"),
        _feed_item(3, "Access Denied: my landlord's new door lock"),
    ],
}

AKAMAI_BODY = (
    "<HTML><HEAD>\n<TITLE>Access Denied</TITLE>\n</HEAD><BODY>\n<H1>Access Denied</H1>\n \n"
    'You don\'t have permission to access "http&#58;&#47;&#47;www&#46;tiktok&#46;com&#47;" '
    "on this server.<P>\nReference #18.2c3f1002.1718000000.1a2b3c4d\n</BODY>\n</HTML>\n"
)
DATADOME_BODY = (
    '<html><head><title>tiktok.com</title></head><body style="margin:0">'
    "<script data-cfasync=\"false\">var dd={'rt':'c','cid':'AHrlqAAAAAMA','hsh':'2211F5',"
    "'t':'fe','s':43337,'host':'geo.captcha-delivery.com'}</script>"
    '<script data-cfasync="false" src="https://ct.captcha-delivery.com/c.js"></script>'
    "</body></html>"
)
DATADOME_COOKIE = "datadome=4bZ~k0_zRe0Fz; Max-Age=31536000; Domain=.tiktok.com; Path=/"
CLOUDFLARE_SCRIPT = (
    "<script>(function(){window._cf_chl_opt={cRay:'8a1b2c3d4e5f6a7b',cType:'managed'};"
    "var a=document.createElement('script');"
    "a.src='/cdn-cgi/challenge-platform/h/b/orchestrate/chl_page/v1?ray=8a1b2c3d4e5f6a7b';"
    "document.getElementsByTagName('head')[0].appendChild(a);}());</script>"
)
# What Cloudflare's bot detection adds to ordinary pages of the sites it protects.
CLOUDFLARE_DETECTION_SCRIPT = (
    "<script>(function(){var d=document.createElement('script');"
    "d.src='/cdn-cgi/challenge-platform/scripts/jsd/main.js';"
    "document.getElementsByTagName('head')[0].appendChild(d);})();</script>"
)
DOUBAN_JS_REDIRECT = (
    '<script>var d=[navigator.platform,navigator.userAgent,navigator.vendor].join("|");'
    f'window.location.href="{SEC_DOUBAN}";</script>'
)
ARTICLE = "".join(
    f"<p>Paragraph {n}: the shop opens at nine, the bakery next door at seven.</p>"
    for n in range(80)
)
ANALYTICS = (
    "<script>(function(){if(!window.location.hash){window.location.hash='#top';}"
    "window.dataLayer=window.dataLayer||[];dataLayer.push({event:'pageview'});})();</script>"
)


# --- the project's rules, as BanMiddleware runs them ------------------------------------------


def _json_error_cases() -> list[Any]:
    return [
        pytest.param(
            feed_json({key: value, "status_msg": "", "itemList": []}),
            "json_error",
            id=f"{key}={value!r}",
        )
        for code in (8, 10000, 10113, 10114)
        for key in ("statusCode", "status_code")
        for value in (code, str(code))
    ]


BANS = [
    pytest.param(
        response(403, AKAMAI_BODY, headers={"Server": "AkamaiGHost", "Mime-Version": "1.0"}),
        "akamai",
        id="akamai",
    ),
    pytest.param(response(403, AKAMAI_BODY), "akamai", id="akamai-body-only"),
    pytest.param(
        response(403, "<html>Forbidden</html>", headers={"Server": "AkamaiGHost"}),
        "akamai",
        id="akamai-server-only",
    ),
    pytest.param(
        response(403, DATADOME_BODY, headers={"Set-Cookie": [DATADOME_COOKIE, "lang=en"]}),
        "datadome",
        id="datadome-cookie",
    ),
    pytest.param(
        response(403, "<html></html>", headers={"X-DataDome": "protected"}),
        "datadome",
        id="datadome-header",
    ),
    pytest.param(response(403, DATADOME_BODY), "datadome", id="datadome-captcha-delivery"),
    pytest.param(
        response(429, DATADOME_BODY, headers={"X-DataDome": "protected", "Retry-After": "60"}),
        "datadome",
        id="datadome-429",
    ),
    pytest.param(
        response(503, "<html><head><title>Just a moment...</title></head><body></body></html>"),
        "cloudflare",
        id="cloudflare-just-a-moment",
    ),
    pytest.param(
        response(
            503, "<html></html>", headers={"cf-mitigated": "challenge", "Server": "cloudflare"}
        ),
        "cloudflare",
        id="cloudflare-cf-mitigated",
    ),
    pytest.param(
        response(503, f"<html><body>{CLOUDFLARE_SCRIPT}</body></html>"),
        "cloudflare",
        id="cloudflare-challenge-platform",
    ),
    pytest.param(
        response(403, "<html></html>", headers={"cf-mitigated": "Challenge"}),
        "cloudflare",
        id="cloudflare-403",
    ),
    pytest.param(
        response(429, "<h1>429 Too Many Requests</h1>", headers={"Retry-After": "120"}),
        "http_429",
        id="429-retry-after",
    ),
    pytest.param(response(429, b"", cls=Response), "http_429", id="429"),
    pytest.param(response(403, "<html><body>Forbidden</body></html>"), "http_403", id="403"),
    pytest.param(redirect(302, SORRY, MAPS), "challenge_redirect", id="302-google-sorry"),
    pytest.param(
        redirect(307, "/sorry/index?continue=https://www.google.com/maps&q=EgQ", MAPS),
        "challenge_redirect",
        id="307-relative-sorry",
    ),
    pytest.param(redirect(302, SEC_DOUBAN, DOUBAN), "challenge_redirect", id="302-douban-sec"),
    pytest.param(redirect(301, SEC_DOUBAN, DOUBAN), "challenge_redirect", id="301-douban-sec"),
    pytest.param(
        redirect(302, "https://www.tiktok.com/login?redirect_url=https%3A%2F%2Fwww.tiktok.com%2F"),
        "challenge_redirect",
        id="302-tiktok-login",
    ),
    pytest.param(
        redirect(302, "https://accounts.douban.com/passport/login?redirect=https%3A%2F%2F", DOUBAN),
        "challenge_redirect",
        id="302-douban-login",
    ),
    pytest.param(
        redirect(307, "https://geo.captcha-delivery.com/captcha/?initialCid=AHrlqAAAAAMA"),
        "challenge_redirect",
        id="307-captcha",
    ),
    pytest.param(
        landed(200, "<html><form id='captcha-form'></form></html>", SORRY),
        "challenge_page",
        id="200-on-google-sorry",
    ),
    pytest.param(
        landed(200, "<html><div id='tcaptcha'></div></html>", SEC_DOUBAN),
        "challenge_page",
        id="200-on-douban-sec",
    ),
    pytest.param(response(200, DOUBAN_JS_REDIRECT, DOUBAN), "js_redirect", id="js-href-douban"),
    pytest.param(
        response(
            200, f'<html><head><script>location.replace("{SEC_DOUBAN}")</script></head></html>'
        ),
        "js_redirect",
        id="js-location-replace",
    ),
    pytest.param(
        response(200, f"<script>\n  window.location = '{SEC_DOUBAN}';\n</script><p>Loading</p>"),
        "js_redirect",
        id="js-location-assign",
    ),
    pytest.param(response(200, b""), "empty_body", id="empty-html"),
    pytest.param(response(200, b"", cls=Response), "empty_body", id="empty-untyped"),
    pytest.param(response(200, b" \r\n\t \n"), "empty_body", id="whitespace-html"),
    pytest.param(
        response(200, b"", FEED, {"Content-Type": JSON}, TextResponse),
        "empty_body",
        id="empty-json",
    ),
    pytest.param(
        response(200, b"\n  \n", FEED, {"Content-Type": JSON}, TextResponse),
        "empty_body",
        id="whitespace-json",
    ),
    *_json_error_cases(),
]

NOT_BANS = [
    *(
        pytest.param(response(200, profile_page(bio, layout)), "ok", "", id=f"{layout}-bio-{bio}")
        for layout in ("universal", "sigi")
        for bio in (
            "solving captcha for fun",
            "Access Denied (Reference #1) is my band",
            "Just a moment...",
            '<script>window.location.href="https://linktr.ee/some.user";</script>',
        )
    ),
    pytest.param(
        response(200, compact_profile_page('window.location.href="https://linktr.ee/x"')),
        "ok",
        "",
        id="compact-profile-bio-location-href",
    ),
    pytest.param(
        response(200, compact_profile_page("location.replace(my heart)")),
        "ok",
        "",
        id="compact-profile-bio-location-replace",
    ),
    pytest.param(
        response(
            200,
            profile_page("I solve captchas", unique_id="captcha.login"),
            "https://www.tiktok.com/@captcha.login",
        ),
        "ok",
        "",
        id="user-named-captcha-login",
    ),
    pytest.param(feed_json(CONTENT_FEED), "ok", "", id="feed-mentions-captcha-verify"),
    pytest.param(
        feed_json({"statusCode": 10202, "statusMsg": "user does not exist", "userInfo": {}}),
        "ok",
        "",
        id="json-10202-user-not-found",
    ),
    pytest.param(
        feed_json({"statusCode": "0", "status_code": 0, "itemList": []}), "ok", "", id="json-0"
    ),
    pytest.param(
        redirect(301, "https://www.tiktok.com/@some.user?lang=en"), "ok", "", id="301-lang"
    ),
    pytest.param(redirect(302, "/@some.user?lang=en"), "ok", "", id="302-relative-lang"),
    pytest.param(
        redirect(301, PROFILE, "http://www.tiktok.com/@some.user"), "ok", "", id="301-http-https"
    ),
    pytest.param(
        redirect(302, "https://www.tiktok.com/@captcha.fan"), "ok", "", id="302-to-user-captcha"
    ),
    pytest.param(
        redirect(
            301,
            "https://www.tiktok.com/search?q=captcha+login+verify&next=/sorry/",
            "http://www.tiktok.com/search?q=captcha+login+verify&next=/sorry/",
        ),
        "ok",
        "",
        id="301-query-with-challenge-words",
    ),
    pytest.param(
        redirect(302, "https://www.tiktok.com/tag/verifyme"), "ok", "", id="302-tag-verifyme"
    ),
    pytest.param(
        response(404, "<html><body><h1>Couldn't find this account</h1></body></html>"),
        "ok",
        "",
        id="404",
    ),
    pytest.param(
        response(404, b"", "https://www.tiktok.com/login/old", cls=Response),
        "ok",
        "",
        id="404-on-login-path",
    ),
    pytest.param(response(500, "<h1>Internal Server Error</h1>"), "ok", "", id="500"),
    pytest.param(
        response(502, "<html><body>Bad Gateway</body></html>", headers={"Server": "nginx"}),
        "ok",
        "",
        id="502",
    ),
    pytest.param(response(503, b"", cls=Response), "ok", "", id="503-empty"),
    pytest.param(
        response(
            503,
            f"<html><body><h1>Down for maintenance</h1>{CLOUDFLARE_DETECTION_SCRIPT}</body></html>",
            headers={"Server": "cloudflare", "CF-RAY": "8a1b2c3d4e5f6a7b-AMS"},
        ),
        "ok",
        "",
        id="503-behind-cloudflare-bot-detection",
    ),
    pytest.param(
        response(200, f"<html><head>{ANALYTICS}</head><body>{ARTICLE}</body></html>"),
        "ok",
        "",
        id="big-page-location-hash",
    ),
    pytest.param(
        response(200, f"<html><head>{ANALYTICS}</head><body><p>Opening hours</p></body></html>"),
        "ok",
        "",
        id="small-page-location-hash",
    ),
    pytest.param(
        response(
            200,
            "<html><script>var geolocation=navigator.geolocation;"
            "if(window.location.href=='about:blank'){dataLayer.push(1)}</script>"
            "<p>Opening hours</p></html>",
        ),
        "ok",
        "",
        id="small-page-reads-location",
    ),
    pytest.param(
        response(
            200,
            f"<html><head><title>Shop</title>{CLOUDFLARE_DETECTION_SCRIPT}</head>"
            "<body><p>Opening hours</p></body></html>",
        ),
        "ok",
        "",
        id="200-with-cloudflare-bot-detection",
    ),
]


AKAMAI_INTERSTITIAL = (
    '<html><head><meta http-equiv="refresh" content="5; URL=\'/?bm-verify=AAQ\'"></head>'
    '<body><script>var i = 12; var j = i + Number("34");'
    'fetch("/_sec/verify?provider=interstitial", {method: "POST"})</script></body></html>'
)
PROTECTIONS = [
    pytest.param(
        response(202, "", headers={"x-amzn-waf-action": "challenge"}), "aws_waf", id="aws-waf-202"
    ),
    pytest.param(
        response(405, "<html>captcha</html>", headers={"x-amzn-waf-action": "captcha"}),
        "aws_waf",
        id="aws-waf-405",
    ),
    pytest.param(response(200, AKAMAI_INTERSTITIAL), "akamai", id="akamai-interstitial"),
    pytest.param(
        response(
            428,
            '<iframe id="sec-cpt-if" src="/_sec/cp_challenge/ak-challenge-4-4.htm"></iframe>',
            headers={"Set-Cookie": "sec_cpt=ABC~1; path=/"},
        ),
        "akamai",
        id="akamai-crypto-challenge",
    ),
    pytest.param(
        response(
            200,
            '<html><iframe src="/_Incapsula_Resource?CWUDNSAI=9&incident_id=1-2">'
            "Request unsuccessful. Incapsula incident ID: 1-2</iframe></html>",
        ),
        "incapsula",
        id="incapsula-block",
    ),
    pytest.param(
        response(
            200,
            "<html><title>You are being redirected...</title><script>var s={},u,c,U,r,i,l=0,"
            "a,e=eval,w=String.fromCharCode,sucuri_cloudproxy_js='',S='cz0n';</script></html>",
            headers={"Server": "Sucuri/Cloudproxy"},
        ),
        "sucuri",
        id="sucuri-js-challenge",
    ),
    pytest.param(
        response(
            200,
            "<html><head><title>Request Rejected</title></head><body>The requested URL was "
            "rejected. Please consult with your administrator.<br><br>Your support ID is: "
            "4045223310930217765</body></html>",
        ),
        "f5",
        id="f5-asm-block",
    ),
    pytest.param(
        response(202, '<meta http-equiv="refresh" content="0;/.well-known/sgcaptcha/?r=%2F">'),
        "sgcaptcha",
        id="siteground-captcha",
    ),
    pytest.param(
        redirect(302, "https://validate.perfdrive.com/ab12/?ssa=1&ssk=botmanager_support"),
        "challenge_redirect",
        id="radware-redirect",
    ),
    pytest.param(response(430, "Security Rejection"), "http_430", id="shopify-430"),
    pytest.param(response(999, ""), "http_999", id="linkedin-999"),
    pytest.param(
        landed(503, "<html>Our systems have detected unusual traffic</html>", SORRY),
        "challenge_page",
        id="google-sorry-503",
    ),
]


@pytest.mark.parametrize(("page", "rule"), [*BANS, *PROTECTIONS])
def test_bans_are_caught_by_the_right_rule(page: Response, rule: str) -> None:
    """Each ban page, those of bot protections by what only they send among them."""
    verdict = classify(page_of(page))
    assert (verdict.kind, verdict.rule) == ("ban", rule)


@pytest.mark.parametrize(
    "page",
    [
        pytest.param(redirect(301, "/login/", "https://blog.example/login"), id="login-slash"),
        pytest.param(
            response(200, "<script>window.location.replace('/en/')</script>", "https://s.example/"),
            id="own-js-redirect",
        ),
        pytest.param(
            response(
                200,
                '<script>location.href = "https://s.example/home";</script>',
                "https://s.example/",
            ),
            id="own-js-href",
        ),
        pytest.param(
            redirect(301, "https://blog.example/help/verify", "http://blog.example/help/verify"),
            id="verify-to-https",
        ),
        pytest.param(
            response(
                200,
                '<script src="/_Incapsula_Resource?SWJIYLWA=719d&ns=1&cb=1"></script>'
                + "<p>"
                + "A normal page. " * 20
                + "</p>",
            ),
            id="incapsula-injected-script",
        ),
    ],
)
def test_protection_scripts_and_a_sites_own_redirects_are_not_bans(page: Response) -> None:
    """A protection's script loaded by a normal page, a site's /login/ or https redirect of its
    own challenge-shaped page, a site's own home page sending the browser to its /en/."""
    assert classify(page_of(page)).kind == "ok"


def test_a_login_page_sending_to_a_captcha_and_a_computed_js_target_are_bans() -> None:
    to_captcha = redirect(302, "/captcha?r=1", "https://blog.example/login")
    assert classify(page_of(to_captcha)) == Verdict("ban", "challenge_redirect")
    computed = '<script>location = "/?security_verify_data=" + stringToHex(screen)</script>'
    page = response(200, computed, "https://s.example/")
    assert classify(page_of(page)) == Verdict("ban", "js_redirect")
    asked = Request("https://blog.example/login/", meta={"redirect_urls": ["http://e.test/x"]})
    asked.meta["redirect_urls"] = ["http://blog.example/login"]  # its own page, by https
    slash = HtmlResponse(asked.url, body=b"<html><form></form></html>", request=asked)
    assert classify(page_of(slash)).kind == "ok"


@pytest.mark.parametrize(
    "path", ["/login", "/users/signin/", "/account/verify", "/blog/challenge", "/sorry"]
)
def test_a_sites_own_login_or_verify_page_is_a_page_unless_a_redirect_led_there(
    path: str,
) -> None:
    """A link to a site's own login (or verify, challenge...) page answers 200: a page like
    any other; the same page reached by a redirect from another is a ban's challenge."""
    url = f"https://blog.example{path}"
    assert classify(page_of(response(200, "<html><form></form></html>", url))).kind == "ok"
    redirected = landed(200, "<html><form></form></html>", url, "https://blog.example/post/1")
    assert classify(page_of(redirected)) == Verdict("ban", "challenge_page")


@pytest.mark.parametrize(("page", "kind", "rule"), NOT_BANS)
def test_lookalikes_are_not_bans(page: Response, kind: str, rule: str) -> None:
    verdict = classify(page_of(page))
    assert (verdict.kind, verdict.rule) == (kind, rule)


# --- the spiders' own rules, with the project's rules before them -------------------------


def _settings() -> dict[str, Any]:
    defaults = {
        name: getattr(project_settings, name) for name in dir(project_settings) if name.isupper()
    }
    base = {
        "EXPLORE_BASE_URL": "https://www.tiktok.com",
        "PROFILES_BASE_URL": "https://www.tiktok.com",
    }
    return {**defaults, **base}


def _middleware(spidercls: type[Spider]) -> BanMiddleware:
    crawler = get_crawler(spidercls, settings_dict=_settings())
    crawler.spider = crawler._create_spider()
    return BanMiddleware.from_crawler(crawler)


@pytest.fixture(scope="module")
def middlewares() -> dict[str, BanMiddleware]:
    return {cls.name: _middleware(cls) for cls in (ProfilesSpider, ExploreSpider)}


@pytest.fixture(scope="module")
def verdict(middlewares: dict[str, BanMiddleware]) -> Callable[[str, Response], tuple[str, str]]:
    def check(spider: str, page: Response) -> tuple[str, str]:
        found = middlewares[spider].bans.classify(page)
        return found.kind, found.rule

    return check


def test_a_rule_left_out_by_a_name_no_rule_has_is_refused() -> None:
    from crawler.spiders.links import LinksSpider

    class Misspelt(LinksSpider):
        ban_rules_left_out = ("forbiden",)

    with pytest.raises(ValueError, match="forbiden"):
        _middleware(Misspelt)


def test_a_sites_own_403_is_a_links_pages_error_but_a_protections_403_a_ban() -> None:
    """The links spider crawls any site: its private file's 403 is that page's error (not a
    block of the whole domain); a protection's 403 is a ban for it as for any spider."""
    from crawler.spiders.links import LinksSpider

    links = _middleware(LinksSpider).bans
    private = response(403, "<Error><Code>AccessDenied</Code></Error>", "https://s3.example/x")
    assert links.classify(private).kind == "ok"
    assert _middleware(ProfilesSpider).bans.classify(private) == Verdict("ban", "http_403")
    blocked = response(403, '<div id="px-captcha"></div><script>window._pxAppId="PX1"</script>')
    assert links.classify(blocked) == Verdict("ban", "perimeterx")
    cloudflare = response(
        403, "<title>Just a moment...</title>", headers={"cf-mitigated": "challenge"}
    )
    assert links.classify(cloudflare).is_ban
    denied = response(
        403,
        '<div id="cf-error-details"><h1><span>Error</span><span class="cf-error-code">1020'
        "</span></h1><h2>Access denied</h2></div>",
        headers={"Server": "cloudflare", "CF-RAY": "8a1b2c3d4e5f-FRA"},
    )
    assert links.classify(denied) == Verdict("ban", "cloudflare")  # Cloudflare's 1020


@pytest.mark.parametrize(
    ("target", "links_kind"),
    [
        ("/login?next=/account", "ok"),  # a members-only page: that page's answer
        ("/Users/SignIn/", "ok"),
        ("/sorry/index?continue=/account", "ban"),  # a block's page
        ("https://geo.captcha-delivery.com/captcha/?initialCid=x", "ban"),
    ],
)
def test_a_sites_redirect_to_its_login_is_a_links_pages_answer_but_a_ban_elsewhere(
    target: str, links_kind: str
) -> None:
    """The links spider crawls whole sites: a link to a members-only page that sends to the
    site's login is that page's answer, not a block of the whole domain (it cooled the site down
    at each such link); for the other spiders a login redirect is still a ban."""
    from crawler.spiders.links import LinksSpider

    redirected = redirect(302, target, "https://blog.example/account")
    assert _middleware(LinksSpider).bans.classify(redirected).kind == links_kind
    assert _middleware(ProfilesSpider).bans.classify(redirected) == Verdict(
        "ban", "challenge_redirect"
    )
    login_page = landed(
        200, "<html><form></form></html>", f"https://blog.example{target}", "https://blog.example/a"
    )
    if links_kind == "ok":
        assert _middleware(LinksSpider).bans.classify(login_page).kind == "ok"


def test_a_redirect_to_the_same_path_in_another_case_is_the_pages_own() -> None:
    """``/Challenge`` sent to ``/challenge/``: the site's own spelling of the page, no block."""
    assert (
        classify(page_of(redirect(301, "/challenge/", "https://s.example/Challenge"))).kind == "ok"
    )


SPIDER_CASES = [
    pytest.param("profiles", response(200, captcha_page()), "ban", "profile_captcha", id="captcha"),
    pytest.param(
        "profiles",
        response(200, captcha_page(verify_markup=False)),
        "ban",
        "profile_captcha",
        id="universal-data-10000",
    ),
    pytest.param(
        "profiles",
        response(200, markup.page("TikTok", body='<div id="tiktok-verify-page"></div>')),
        "ban",
        "profile_captcha",
        id="verify-page-without-data",
    ),
    pytest.param(
        "profiles",
        response(200, captcha_page(10113, verify_markup=False)),
        "ban",
        "profile_challenge",
        id="universal-data-10113",
    ),
    pytest.param(
        "profiles",
        response(200, captcha_page(10114, verify_markup=False)),
        "ban",
        "profile_challenge",
        id="universal-data-10114",
    ),
    pytest.param(
        "profiles",
        response(200, markup.page("TikTok - Make Your Day", body=_videos("some.user", 30))),
        "ban",
        "profile_blocked",
        id="no-data-script",
    ),
    pytest.param(
        "profiles",
        response(200, profile_page("captcha? Access Denied. Just a moment...")),
        "ok",
        "",
        id="profile-universal",
    ),
    pytest.param(
        "profiles",
        response(200, profile_page("verify me", layout="sigi")),
        "ok",
        "",
        id="profile-sigi",
    ),
    pytest.param(
        "profiles",
        response(200, profile_page("verify me", layout="sigi+app")),
        "ok",
        "",
        id="profile-sigi-beside-app-context",
    ),
    *(
        pytest.param(
            "profiles", response(200, compact_profile_page("", code)), "ok", "", id=f"status-{code}"
        )
        for code in (10202, 10221, 10222, 10201, 10204)
    ),
    pytest.param(
        "profiles",
        response(200, compact_profile_page('window.location.href="https://linktr.ee/x"')),
        "ok",
        "",
        id="compact-profile",
    ),
    pytest.param("profiles", response(503, b"", cls=Response), "ok", "", id="503"),
    pytest.param(
        "explore",
        response(200, "<html><body>Please wait</body></html>", FEED),
        "ban",
        "feed_not_json",
        id="feed-html",
    ),
    pytest.param(
        "explore",
        response(200, "[]", FEED, {"Content-Type": JSON}, TextResponse),
        "ban",
        "feed_not_json",
        id="feed-json-list",
    ),
    pytest.param(
        "explore",
        feed_json({"statusCode": 10201, "status_msg": "Please verify you are human"}),
        "ban",
        "feed_captcha",
        id="feed-verify-message",
    ),
    pytest.param("explore", response(200, b"", FEED), "ban", "empty_body", id="feed-empty"),
    pytest.param("explore", feed_json(CONTENT_FEED), "ok", "", id="feed-content"),
    pytest.param(
        "explore",
        feed_json({"statusCode": 10201, "status_msg": "category not available"}),
        "ok",
        "",
        id="feed-error-not-ban",
    ),
]


@pytest.mark.parametrize(("spider", "page", "kind", "rule"), SPIDER_CASES)
def test_spider_rules(
    verdict: Callable[[str, Response], tuple[str, str]],
    spider: str,
    page: Response,
    kind: str,
    rule: str,
) -> None:
    assert verdict(spider, page) == (kind, rule)


@pytest.mark.parametrize(
    ("page", "rule"),
    [
        pytest.param(response(200, b"", FEED), "feed_empty_body", id="empty"),
        pytest.param(response(200, b"  \n", FEED), "feed_empty_body", id="whitespace"),
        pytest.param(response(200, b"", FEED, cls=Response), "feed_empty_body", id="untyped"),
        pytest.param(response(200, "<html>Loading</html>", FEED), "feed_not_json", id="html"),
        pytest.param(response(200, '"blocked"', FEED), "feed_not_json", id="json-string"),
        pytest.param(feed_json({"statusCode": 8, "status_msg": ""}), "feed_login_required", id="8"),
        pytest.param(
            feed_json({"status_code": "10000", "status_msg": "verify"}), "feed_captcha", id="10000"
        ),
    ],
)
def test_explore_ban_rule(middlewares: dict[str, BanMiddleware], page: Response, rule: str) -> None:
    spider = middlewares["explore"].crawler.spider
    assert isinstance(spider, ExploreSpider)
    assert spider.ban_rule(page) == rule


@pytest.mark.parametrize(
    ("spider", "page"),
    [
        pytest.param("profiles", redirect(301, f"{PROFILE}?lang=en"), id="profiles-301-lang"),
        pytest.param(
            "profiles",
            redirect(301, PROFILE, "http://www.tiktok.com/@some.user"),
            id="profiles-301-https",
        ),
        pytest.param("explore", redirect(302, f"{FEED}&region=US", FEED), id="explore-302"),
    ],
)
def test_plain_redirects_pass_the_spider_rules(
    verdict: Callable[[str, Response], tuple[str, str]], spider: str, page: Response
) -> None:
    assert verdict(spider, page) == ("ok", "")


# --- what the sandbox sends for each ban mode --------------------------------------------------


def _from_sandbox(answer: web.StreamResponse, url: str, origin: str | None = None) -> Response:
    """A Scrapy response built from a sandbox answer, of the class the downloader would pick."""
    assert isinstance(answer, web.Response)
    headers = Headers()
    for name, value in answer.headers.items():
        headers.appendlist(name, value)
    for morsel in answer.cookies.values():
        headers.appendlist("Set-Cookie", morsel.OutputString())
    body = answer.body if isinstance(answer.body, bytes) else b""
    cls = responsetypes.from_args(headers=headers, url=url, body=body)
    request = Request(origin or url)
    return cls(url, status=answer.status, headers=headers, body=body, request=request)


def _sandbox_answer(mode: str, path: str) -> Response:
    request = make_mocked_request("GET", path, headers={"Host": "www.tiktok.com"})
    answer = BanResponder(seed=7).respond(request, mode, remaining=42.5)
    return _from_sandbox(answer, f"https://www.tiktok.com{path}")


SANDBOX_RULES = {
    "403": "akamai",
    "datadome": "datadome",
    "cloudflare": "cloudflare",
    "captcha_redirect": "challenge_redirect",
    "js_redirect": "js_redirect",
    "429": "http_429",
    "empty": "empty_body",
}


@pytest.mark.parametrize(
    ("mode", "rule"),
    [*SANDBOX_RULES.items(), ("json_error", "profile_captcha"), ("no_data", "profile_blocked")],
)
def test_sandbox_profile_bans(
    verdict: Callable[[str, Response], tuple[str, str]], mode: str, rule: str
) -> None:
    assert verdict("profiles", _sandbox_answer(mode, "/@some.user")) == ("ban", rule)


@pytest.mark.parametrize(
    ("mode", "rule"),
    [*SANDBOX_RULES.items(), ("json_error", "json_error"), ("no_data", "json_error")],
)
def test_sandbox_feed_bans(
    verdict: Callable[[str, Response], tuple[str, str]], mode: str, rule: str
) -> None:
    path = FEED.removeprefix("https://www.tiktok.com")
    assert verdict("explore", _sandbox_answer(mode, path)) == ("ban", rule)


@pytest.mark.parametrize(
    ("path", "handler", "status", "rule"),
    [
        ("/sorry/index?continue=https://www.tiktok.com/@x&q=EgQ", "sorry", 429, "http_429"),
        ("/sec/a?c=4d1f0e&r=https://www.tiktok.com/@x", "douban_verify", 200, "challenge_page"),
    ],
)
def test_sandbox_challenge_pages(path: str, handler: str, status: int, rule: str) -> None:
    request = make_mocked_request("GET", path, headers={"Host": "www.tiktok.com"})
    answer = asyncio.run(getattr(ChallengePages(), handler)(request))
    page = _from_sandbox(answer, f"https://www.tiktok.com{path}", PROFILE)  # redirected there
    assert page.status == status
    verdict = classify(page_of(page))
    assert (verdict.kind, verdict.rule) == ("ban", rule)


def shop_outage_rule(page: Page) -> Verdict | None:
    """A rule a project adds through BAN_RULES: this shop's own block page."""
    return Verdict("ban", "shop_block") if b"Temporarily unavailable for you" in page.body else None


def test_rules_from_settings_come_first() -> None:
    defaults = {n: getattr(project_settings, n) for n in dir(project_settings) if n.isupper()}
    defaults["BAN_RULES"] = [f"{__name__}.shop_outage_rule"]
    crawler = get_crawler(settings_dict=defaults)
    middleware = BanMiddleware.from_crawler(crawler)
    page = HtmlResponse(
        "https://shop.example/item/1",
        body=b"<p>Temporarily unavailable for you</p>",
        request=Request("https://shop.example/item/1"),
    )
    assert middleware.bans.classify(page) == Verdict("ban", "shop_block")


@pytest.mark.parametrize(
    "body",
    [
        b'{"statusCode": 0, "data": ' + b'{"a": ' * 100_000 + b"0" + b"}" * 100_001,
        b'{"statusCode": 10000, "data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b"{" * 1_000_000,
    ],
    ids=["deep-object", "deep-array-with-ban-code", "unclosed"],
)
def test_deeply_nested_json_is_judged_without_recursing(body: bytes) -> None:
    page = Page(200, "https://www.tiktok.com/api/explore/item_list/", {}, body)
    assert classify(page) == Verdict("ok")


@pytest.mark.parametrize(
    "code", [b"1e999", b"-1e999", b"1e308", b"10000.5", b"true", b"null", b'"1e999"']
)
def test_json_status_codes_of_any_value_are_judged(code: bytes) -> None:
    body = b'{"statusCode": ' + code + b', "itemList": []}'
    page = Page(200, "https://www.tiktok.com/api/explore/item_list/", {}, body)
    assert classify(page) == Verdict("ok")
