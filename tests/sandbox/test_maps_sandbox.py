"""The sandbox's map pages over HTTP: feed batches, single-match redirect, consent, block."""

from __future__ import annotations

import json
from typing import Any
from urllib.error import HTTPError
from urllib.parse import urlencode, urlsplit
from urllib.request import HTTPRedirectHandler, Request, build_opener

import pytest
from parsel import Selector

from crawler.extractors.maps import END_OF_LIST as SPIDER_END_OF_LIST
from crawler.extractors.maps import pin_from_url, place_fields
from crawler.spiders.maps import FEED_LINKS
from sandbox.maps import ASSET_SIZES, END_OF_LIST
from sandbox.places import build_places
from tests.harness import Sandbox

PLACES = build_places()


class _NoRedirect(HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _get(
    url: str, data: bytes | None = None, cookie: str = ""
) -> tuple[int, dict[str, str], bytes]:
    request = Request(url, data=data, headers={"Cookie": cookie} if cookie else {})
    try:
        with build_opener(_NoRedirect).open(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_places_are_deterministic() -> None:
    assert build_places() == PLACES
    assert len(PLACES.search("shop near 00501")) == 23
    assert len(PLACES.search("Pharmacy  near 00544")) == 1
    assert PLACES.search("bakery near 01001") == ()


def test_admin_lists_the_place_ids_of_every_search(sandbox_server: Sandbox) -> None:
    searches = sandbox_server.admin("maps/searches")
    assert searches["shop near 00501"] == [p.place_id for p in PLACES.search("shop near 00501")]
    assert searches["bakery near 01001"] == []
    assert len(searches) == 20
    assert sum(len(ids) for ids in searches.values()) == len(PLACES.by_id) == 184


def test_search_page_is_a_shell_with_heavy_resources(sandbox_server: Sandbox) -> None:
    status, _, body = _get(f"{sandbox_server.url}/maps/search/shop+near+00501?hl=en")
    text = body.decode()
    assert status == 200
    assert 'role="feed"' in text
    assert "hfpxzc" not in text, "results come from JavaScript"
    assert "/mapfiles/fonts/" in text
    assert "/mapfiles/media/" in text
    status, _, font = _get(f"{sandbox_server.url}/mapfiles/fonts/GoogleSans.woff2")
    assert (status, len(font)) == (200, ASSET_SIZES["font"])


def test_feed_batches_cover_every_place_once(sandbox_server: Sandbox) -> None:
    query, offset, links, batches = "shop near 00501", 0, [], 0
    while True:
        params = urlencode({"q": query, "offset": offset})
        status, _, body = _get(f"{sandbox_server.url}/maps/api/feed?{params}")
        assert status == 200
        data = json.loads(body)
        batches += 1
        html = f'<div role="feed">{data["html"]}</div>'
        # The links the spider's script reads (FEED_LINKS), in order.
        feed = Selector(text=html).css(f"{FEED_LINKS}::attr(href)").getall()
        links += [place_fields("", link)["place_id"] for link in feed]
        offset = data["next"]
        if data["end"]:
            assert SPIDER_END_OF_LIST in html  # what the spider waits for
            break
        assert END_OF_LIST not in html
    assert batches == 4
    assert sorted(links) == sorted(place.place_id for place in PLACES.search(query))


def test_single_match_redirects_to_its_place_page(sandbox_server: Sandbox) -> None:
    (place,) = PLACES.search("pharmacy near 00544")
    status, headers, _ = _get(f"{sandbox_server.url}/maps/search/pharmacy%20near%2000544")
    assert status == 302
    assert headers["Location"] == place.path
    assert pin_from_url(headers["Location"]) == (place.latitude, place.longitude)
    status, _, body = _get(f"{sandbox_server.url}{place.path}")
    assert status == 200
    assert place_fields(body.decode(), place.path)["name"] == place.name


def test_consent_interstitial(sandbox_server: Sandbox) -> None:
    url = f"{sandbox_server.url}/maps/search/shop+near+00501?hl=en&gl=de"
    status, headers, _ = _get(url)
    assert status == 302
    assert urlsplit(headers["Location"]).path == "/consent/m"
    status, _, body = _get(f"{sandbox_server.url}{headers['Location']}")
    assert status == 200
    assert b"Before you continue" in body
    form = urlencode({"continue": url, "set_eom": "true"}).encode()
    status, headers, _ = _get(f"{sandbox_server.url}/consent/save", data=form)
    assert status == 302
    assert headers["Location"] == url
    assert "SOCS=rejected" in headers["Set-Cookie"]
    assert _get(url, cookie="SOCS=rejected")[0] == 200


@pytest.mark.parametrize("query", ["unusual+traffic+near+00501"])
def test_unusual_traffic_block(sandbox_server: Sandbox, query: str) -> None:
    status, headers, _ = _get(f"{sandbox_server.url}/maps/search/{query}")
    assert status == 302
    assert urlsplit(headers["Location"]).path == "/sorry/index"
    status, _, body = _get(f"{sandbox_server.url}{headers['Location']}")
    assert status == 429
    assert b"unusual traffic" in body


def test_a_search_with_no_match_says_so_without_a_feed(sandbox_server: Sandbox) -> None:
    status, _, body = _get(f"{sandbox_server.url}/maps/search/bakery+near+01001?hl=en")
    assert status == 200
    assert "Google Maps can't find bakery near 01001" in body.decode()
    assert not Selector(text=body.decode()).css('div[role="feed"]')


def _batches(sandbox: Sandbox, query: str, count: int) -> list[dict[str, Any]]:
    """The feed's first ``count`` batches of ``query`` after its search page was loaded."""
    _get(f"{sandbox.url}/maps/search/{query.replace(' ', '+')}")
    batches, offset = [], 0
    for _ in range(count):
        params = urlencode({"q": query, "offset": offset})
        batches.append(json.loads(_get(f"{sandbox.url}/maps/api/feed?{params}")[2]))
        offset = batches[-1]["next"]
    return batches


def test_a_stalled_search_stops_growing_for_its_stalled_loads_only(sandbox: Sandbox) -> None:
    """Google's softer block: after one batch the feed answers nothing more, and no end,
    for the next two loads of the search; the third gets the whole list."""
    query = "shop near 00501"
    sandbox.admin("maps/stall", {"query": query, "after": 1, "searches": 2})
    for _ in range(2):
        first, *rest = _batches(sandbox, query, 4)
        assert first["html"]
        assert not first["end"]
        assert all(batch == {"html": "", "next": first["next"], "end": False} for batch in rest)
    whole = _batches(sandbox, query, 4)
    assert whole[-1]["end"]
    assert all(batch["html"] for batch in whole)


def _feed_links(sandbox: Sandbox, query: str) -> list[str]:
    """Every place link of the feed of ``query``, in order."""
    links, offset = [], 0
    while True:
        params = urlencode({"q": query, "offset": offset})
        data = json.loads(_get(f"{sandbox.url}/maps/api/feed?{params}")[2])
        feed = Selector(text=f'<div role="feed">{data["html"]}</div>')
        links += feed.css(f"{FEED_LINKS}::attr(href)").getall()
        offset = data["next"]
        if data["end"]:
            return links


def test_overlapping_searches_list_shared_places_under_links_of_their_own(
    sandbox: Sandbox,
) -> None:
    """``maps_overlap``: a search lists the places of the postal codes beside its own too, each
    linked with the search's viewport; every such link serves the place's page."""
    assert _feed_links(sandbox, "shop near 01002")[0] == PLACES.search("shop near 01002")[0].path
    sandbox.admin("config", {"maps_overlap": True})
    near = {code: _feed_links(sandbox, f"shop near {code}") for code in ("01001", "01002", "01003")}
    ids = {
        code: [place_fields("", link)["place_id"] for link in links] for code, links in near.items()
    }
    own = {code: [p.place_id for p in PLACES.search(f"shop near {code}")] for code in near}
    assert ids["01002"] == own["01002"] + own["01001"] + own["01003"]
    assert ids["01003"] == own["01003"] + own["01002"]
    searches = sandbox.admin("maps/searches")
    assert all(searches[f"shop near {code}"] == ids[code] for code in near)
    shared = own["01002"][0]
    links = [near[code][ids[code].index(shared)] for code in near]
    assert len(set(links)) == 3, "each search links the place its own way"
    place = PLACES.by_id[shared]
    for link in links:
        status, _, body = _get(f"{sandbox.url}{link}")
        assert status == 200
        fields = place_fields(body.decode(), link)
        assert (fields["place_id"], fields["name"]) == (shared, place.name)
        assert (fields["latitude"], fields["longitude"]) == (place.latitude, place.longitude)
