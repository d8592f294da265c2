"""Pages that quote a ban are pages: the ban rules read what a protection sends (its markup, a
block page that says its incident ID and little else), not what a page of prose says about it;
and the rules meant for the explore and profiles APIs (an empty answer, JSON status code 8)
are left out of whole-site crawls."""

from __future__ import annotations

import html
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scrapy import Request
from scrapy.http import HtmlResponse

from crawler.bans.policy import page_of
from crawler.bans.rules import BLOCK_PAGE_TEXT, Verdict, classify
from crawler.spiders.links import LinksSpider
from crawler.spiders.profiles import ProfilesSpider
from tests.test_ban_rules import _middleware

BLOG = "https://blog.example/2024/05/on-bot-protections"
# What protections' block pages hold, as a page about them quotes it.
QUOTED = (
    "Request unsuccessful. Incapsula incident ID: 877000150135537484-71232307281772228",
    '<iframe src="/_Incapsula_Resource?CWUDNSAI=9&incident_id=1-2"></iframe>',
    "The requested URL was rejected. Please consult with your administrator. "
    "Your support ID is: 4045223310930217765",
    '<meta http-equiv="refresh" content="0;/.well-known/sgcaptcha/?r=%2F">',
    "var sucuri_cloudproxy_js='';",
    '<iframe id="sec-cpt-if" src="/_sec/cp_challenge/ak-challenge-4-4.htm"></iframe>',
)
INCAPSULA_BLOCK = (
    '<html style="height:100%"><head><META NAME="ROBOTS" CONTENT="NOINDEX, NOFOLLOW">'
    '<meta name="viewport" content="initial-scale=1.0"></head><body style="margin:0px;'
    'height:100%"><iframe id="main-iframe" src="/_Incapsula_Resource?CWUDNSAI=9&xinfo=8-1'
    '&incident_id=877000150135537484-71232307281772228&edet=12&mth=GET" frameborder=0 '
    'width="100%" height="100%">Request unsuccessful. Incapsula incident ID: '
    "877000150135537484-71232307281772228</iframe></body></html>"
)
INCAPSULA_TEXT_ONLY = (
    "<html><head><title>Request unsuccessful</title><style>body{font:13px Arial}</style>"
    "</head><body><p>Request unsuccessful. Incapsula incident ID: 1-2</p></body></html>"
)
F5_BLOCK = (
    "<html><head><title>Request Rejected</title></head><body>The requested URL was rejected. "
    "Please consult with your administrator.<br><br>Your support ID is: 4045223310930217765"
    '<br><br><a href="javascript:history.back();">[Go Back]</a></body></html>'
)


def page(body: str, url: str = BLOG, status: int = 200) -> HtmlResponse:
    return HtmlResponse(url, status=status, body=body.encode(), request=Request(url))


def article(paragraphs: list[str], quote: str) -> str:
    """A blog post: its paragraphs, with ``quote`` escaped as a page shows code, in the middle."""
    middle = len(paragraphs) // 2
    shown = f"<pre><code>{html.escape(quote)}</code></pre>"
    body = "".join(f"<p>{text}</p>" for text in paragraphs[:middle]) + shown
    body += "".join(f"<p>{text}</p>" for text in paragraphs[middle:])
    return f"<html><head><title>On bot protections</title></head><body>{body}</body></html>"


WORDS = st.text(st.characters(codec="ascii", categories=["L"]), min_size=1, max_size=12)
SENTENCE = st.lists(WORDS, min_size=5, max_size=30).map(lambda words: " ".join(words) + ".")
PROSE = st.lists(SENTENCE, min_size=1, max_size=20).map(
    lambda paragraphs: paragraphs * (BLOCK_PAGE_TEXT // len(" ".join(paragraphs)) + 1)
)


@given(paragraphs=PROSE, quote=st.sampled_from(QUOTED))
def test_prose_that_quotes_a_block_page_is_no_ban(paragraphs: list[str], quote: str) -> None:
    """A page of prose (more than a block page says) quoting a protection's block page, in its
    text or as code, is a page for every spider; and it is, as the plain quote, between
    paragraphs that say more."""
    assert classify(page_of(page(article(paragraphs, quote)))).kind == "ok"
    plain = "".join(f"<p>{text}</p>" for text in paragraphs) + f"<p>{html.escape(quote)}</p>"
    assert classify(page_of(page(f"<html><body>{plain}</body></html>"))).kind == "ok"


@given(
    block=st.sampled_from(
        [(INCAPSULA_BLOCK, "incapsula"), (INCAPSULA_TEXT_ONLY, "incapsula"), (F5_BLOCK, "f5")]
    ),
    status=st.sampled_from([200, 403, 503]),
    padding=st.text(st.sampled_from(" \n\t"), max_size=2000),
)
def test_a_real_block_page_is_still_a_ban(
    block: tuple[str, str], status: int, padding: str
) -> None:
    body, rule = block
    found = classify(page_of(page(padding + body + padding, status=status)))
    assert found == Verdict("ban", rule)


@pytest.mark.parametrize(
    ("body", "api_rule"),
    [
        pytest.param("", "empty_body", id="empty"),
        pytest.param("  \n", "empty_body", id="blank"),
        pytest.param(json.dumps({"status_code": 8, "status_msg": "no item"}), "json_error", id="8"),
        pytest.param(json.dumps({"statusCode": 10000}), "json_error", id="10000"),
    ],
)
def test_an_empty_page_or_api_json_is_a_page_of_a_site_but_a_ban_of_the_apis(
    body: str, api_rule: str
) -> None:
    """``links`` crawls any site: an empty page, or JSON saying status 8, is that page's answer
    there; from the explore and profiles APIs, their way of refusing a client."""
    assert _middleware(LinksSpider).bans.classify(page(body)) == Verdict("ok")
    url = "https://www.tiktok.com/@some.user"
    assert _middleware(ProfilesSpider).bans.classify(page(body, url)) == Verdict("ban", api_rule)
