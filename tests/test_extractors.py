"""Extractors on the shapes TARGETS.md describes (sandbox pages are covered in test_crawl)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.extractors import jsondata
from crawler.extractors.explore import (
    FeedBlocked,
    FeedError,
    parse_feed,
    popular_author,
    video_fields,
)
from crawler.extractors.jsondata import FieldReader, MalformedData, TooDeep
from crawler.extractors.profiles import parse_profile_page, profile_fields
from sandbox.profiles import render_profile, render_shell
from sandbox.seed import build_dataset


def _video(video_id: str = "7301", likes: int = 10, followers: int = 5) -> dict[str, Any]:
    return {
        "id": video_id,
        "desc": "a dance #fyp",
        "createTime": 1700000000,
        "author": {
            "id": "66",
            "uniqueId": "dancer.one",
            "nickname": "D",
            "secUid": "MS4w",
            "verified": False,
            "privateAccount": False,
        },
        "authorStats": {
            "followerCount": followers,
            "followingCount": 3,
            "heart": 9,
            "heartCount": 9,
            "videoCount": 4,
            "diggCount": 1,
        },
        "stats": {
            "diggCount": likes,
            "playCount": 1000,
            "shareCount": 2,
            "commentCount": 3,
            "collectCount": 4,
        },
        "statsV2": {
            "diggCount": str(likes),
            "playCount": "1000",
            "shareCount": "2",
            "commentCount": "3",
            "collectCount": "4",
        },
    }


def _feed(**overrides: Any) -> str:
    feed = {
        "statusCode": 0,
        "status_code": 0,
        "status_msg": "",
        "cursor": "16",
        "hasMore": True,
        "extra": {"now": 1},
        "log_pb": {"impr_id": "x"},
        "itemList": [_video()],
    }
    feed.update(overrides)
    return json.dumps(feed)


def test_feed_page_gives_items_and_cursor() -> None:
    page = parse_feed(_feed())
    assert page.cursor == "16"
    assert page.has_more is True
    assert [item["id"] for item in page.items] == ["7301"]


def test_video_fields() -> None:
    assert video_fields(_video(likes=12), category=2) == {
        "video_id": "7301",
        "description": "a dance #fyp",
        "created_at": 1700000000,
        "author_id": "66",
        "author_unique_id": "dancer.one",
        "category": 2,
        "categories": [2],
        "digg_count": 12,
        "play_count": 1000,
        "share_count": 2,
        "comment_count": 3,
        "collect_count": 4,
    }


def test_video_fields_fall_back_to_string_stats() -> None:
    item = _video(likes=7)
    del item["stats"]
    fields = video_fields(item, None)  # a feed without a category: none to list
    assert (fields["digg_count"], fields["category"], fields["categories"]) == (7, None, [])


def test_a_popular_author_is_found_by_the_newer_counts_too() -> None:
    """An item whose counts come only as statsV2 / authorStatsV2 (strings): its likes and
    followers are read as the stored video's are."""
    item = {"author": {"uniqueId": "big.star"}, "statsV2": {"diggCount": "900000"}}
    assert video_fields(item, 3)["digg_count"] == 900_000
    assert popular_author(item, 250_000, 10_000) == "big.star"
    followed = {"author": {"uniqueId": "big.star"}, "authorStatsV2": {"followerCount": "20000"}}
    assert popular_author(followed, 250_000, 10_000) == "big.star"


@pytest.mark.parametrize(
    ("likes", "followers", "popular"),
    [(250_000, 0, True), (249_999, 9_999, False), (0, 10_000, True)],
)
def test_popular_author_rules(likes: int, followers: int, popular: bool) -> None:
    author = popular_author(_video(likes=likes, followers=followers), 250_000, 10_000)
    assert (author == "dancer.one") is popular


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("", "empty_body"),
        ("<html><script>window.location.href='/sec'</script></html>", "not_json"),
        ("[]", "not_json"),
        ("null", "not_json"),
        (_feed(statusCode=8, status_code=8, status_msg="login required"), "login_required"),
        (_feed(statusCode=10000, status_code=10000, status_msg="verify"), "captcha"),
        (_feed(statusCode=1, status_code=1, status_msg="Please solve the captcha"), "captcha"),
    ],
)
def test_blocks_are_not_data(body: str, reason: str) -> None:
    with pytest.raises(FeedBlocked) as raised:
        parse_feed(body)
    assert raised.value.reason == reason


def test_other_errors_are_final() -> None:
    with pytest.raises(FeedError, match="10201"):
        parse_feed(_feed(statusCode=10201, status_code=10201, status_msg="invalid categoryType"))


USER = {
    "id": "6600",
    "uniqueId": "cook.anna",
    "nickname": "Anna",
    "signature": "recipes",
    "verified": True,
    "secUid": "MS4wLjABAAAA",
    "privateAccount": False,
    "region": "US",
    "avatarLarger": "https://cdn/a.jpeg",
    "createTime": 1500000000,
}
STATS = {
    "followerCount": 12000,
    "followingCount": 10,
    "heart": 500,
    "heartCount": 500,
    "videoCount": 42,
    "diggCount": 7,
    "friendCount": 3,
}


def _page(script_id: str, data: dict[str, Any]) -> str:
    payload = json.dumps(data).replace("</", "<\\/")
    return (
        f'<html><head><title>x</title></head><body><div id="app"></div>'
        f'<script id="{script_id}" type="application/json">{payload}</script></body></html>'
    )


def _universal(status: int, info: dict[str, Any]) -> str:
    detail = {"statusCode": status, "statusMsg": "", "userInfo": info}
    return _page(
        "__UNIVERSAL_DATA_FOR_REHYDRATION__", {"__DEFAULT_SCOPE__": {"webapp.user-detail": detail}}
    )


def test_universal_layout() -> None:
    page = parse_profile_page(_universal(0, {"user": USER, "stats": STATS}))
    fields = profile_fields(page, "cook.anna")
    assert page.status == "ok"
    assert page.layout == "universal"
    assert fields["unique_id"] == "cook.anna"
    assert fields["follower_count"] == 12000
    assert fields["heart_count"] == 500
    assert fields["verified"] is True
    assert fields["region"] == "US"


ROUNDED = {**STATS, "followerCount": 1800000, "heartCount": 22600, "heart": 22600}
EXACT = {"followerCount": "1776621", "heartCount": "22609", "heart": "22609", "diggCount": "7"}


@pytest.mark.parametrize("layout", ["universal", "sigi", "next_data"])
def test_exact_stats_v2_are_preferred_field_by_field(layout: str) -> None:
    """The web rounds ``stats`` (22609 is 22600); ``statsV2`` holds the exact counts as
    strings: they win where they are numbers, ``stats`` fills the rest."""
    if layout == "universal":
        html = _universal(0, {"user": USER, "stats": ROUNDED, "statsV2": EXACT})
    elif layout == "sigi":
        module = {
            "users": {"cook.anna": USER},
            "stats": {"cook.anna": ROUNDED},
            "statsV2": {"cook.anna": EXACT},
        }
        html = _page("SIGI_STATE", {"UserModule": module})
    else:
        info = {"user": USER, "stats": ROUNDED, "statsV2": EXACT}
        html = _page("__NEXT_DATA__", {"props": {"pageProps": {"userInfo": info}}})
    fields = profile_fields(parse_profile_page(html, "cook.anna"), "cook.anna")
    assert fields["follower_count"] == 1776621
    assert fields["heart_count"] == 22609
    assert (fields["video_count"], fields["digg_count"]) == (42, 7)


def test_a_stats_v2_value_that_is_no_number_falls_back_to_stats() -> None:
    exact = {"followerCount": "1.8M", "heartCount": None, "friendCount": "many"}
    without_friends = {key: value for key, value in ROUNDED.items() if key != "friendCount"}
    page = parse_profile_page(
        _universal(0, {"user": USER, "stats": without_friends, "statsV2": exact})
    )
    reader = FieldReader()
    fields = profile_fields(page, "cook.anna", reader)
    assert (fields["follower_count"], fields["heart_count"]) == (1800000, 22600)
    assert fields["friend_count"] is None
    assert reader.bad == ["friend_count"]
    only_v2 = parse_profile_page(_universal(0, {"user": USER, "statsV2": EXACT}))
    assert profile_fields(only_v2, "cook.anna")["follower_count"] == 1776621


def test_sigi_state_layout() -> None:
    html = _page(
        "SIGI_STATE", {"UserModule": {"users": {"cook.anna": USER}, "stats": {"cook.anna": STATS}}}
    )
    page = parse_profile_page(html, "cook.anna")
    assert (page.status, page.layout) == ("ok", "sigi")
    assert profile_fields(page, "cook.anna")["video_count"] == 42


def test_next_data_layout() -> None:
    html = _page(
        "__NEXT_DATA__", {"props": {"pageProps": {"userInfo": {"user": USER, "stats": STATS}}}}
    )
    page = parse_profile_page(html)
    assert (page.status, page.layout) == ("ok", "next_data")
    assert profile_fields(page, "cook.anna")["nickname"] == "Anna"


@pytest.mark.parametrize(
    ("code", "status"), [(10202, "not_found"), (10221, "banned"), (10222, "private")]
)
def test_user_states_are_stored_not_retried(code: int, status: str) -> None:
    page = parse_profile_page(_universal(code, {}))
    assert page.status == status
    assert not page.is_block
    assert profile_fields(page, "gone.user") == {
        "unique_id": "gone.user",
        "status": status,
        "layout": "universal",
    }


@pytest.mark.parametrize(
    ("code", "name"), [(10201, "10201"), ("10204", "10204"), ("busy", "other"), (2**40, "other")]
)
def test_an_unknown_status_is_the_users_answer_not_a_block(code: Any, name: str) -> None:
    """A status code not in the table (10201 is seen on user pages) says something about that
    user the spider cannot read: kept with its code, never a block (a ban of the whole site)."""
    detail = {"statusCode": code, "statusMsg": "", "userInfo": {}}
    page = parse_profile_page(
        _page(
            "__UNIVERSAL_DATA_FOR_REHYDRATION__",
            {"__DEFAULT_SCOPE__": {"webapp.user-detail": detail}},
        )
    )
    assert (page.status, page.is_block, page.code_name) == ("unknown_status", False, name)
    sigi = parse_profile_page(_page("SIGI_STATE", {"UserPage": {"statusCode": code}}))
    assert (sigi.status, sigi.is_block, sigi.code_name) == ("unknown_status", False, name)


def test_an_unknown_status_gives_way_to_a_layout_holding_the_user_or_a_verify_page() -> None:
    unknown = {"__DEFAULT_SCOPE__": {"webapp.user-detail": {"statusCode": 10201}}}
    sigi = {"UserModule": {"users": {"cook.anna": USER}, "stats": {"cook.anna": STATS}}}
    html = _scripts(("__UNIVERSAL_DATA_FOR_REHYDRATION__", unknown), ("SIGI_STATE", sigi))
    assert parse_profile_page(html, "cook.anna").status == "ok"
    verify = _scripts(("__UNIVERSAL_DATA_FOR_REHYDRATION__", unknown)).replace(
        "<body>", '<body><div id="tiktok-verify-page"></div>'
    )
    assert parse_profile_page(verify).status == "captcha"


@pytest.mark.parametrize(
    ("html", "status"),
    [
        (_universal(10000, {}), "captcha"),
        (_universal(10114, {}), "challenge"),
        ('<html><body><div id="tiktok-verify-page">slide</div></body></html>', "captcha"),
        ("<html><body>nothing here</body></html>", "blocked"),
        ("", "blocked"),
    ],
)
def test_blocks_are_recognised(html: str, status: str) -> None:
    page = parse_profile_page(html)
    assert page.status == status
    assert page.is_block


def test_page_mentioning_captcha_in_a_bio_is_data() -> None:
    user = {**USER, "signature": "I design captcha puzzles; tiktok-verify-page fan"}
    page = parse_profile_page(_universal(0, {"user": user, "stats": STATS}))
    assert page.status == "ok"


def test_every_sandbox_profile_page_parses_to_its_author() -> None:
    dataset = build_dataset()
    for author in dataset.authors:
        page = parse_profile_page(render_profile(author.unique_id, author), author.unique_id)
        fields = profile_fields(page, author.unique_id)
        assert page.status == author.state, author.unique_id
        assert page.layout == author.layout
        if author.state == "ok":
            assert fields["user_id"] == author.id
            assert fields["signature"] == author.signature
            assert fields["follower_count"] == author.stats.follower_count
            assert fields["heart_count"] == author.stats.heart_count


def test_sandbox_page_of_a_missing_user() -> None:
    page = parse_profile_page(render_profile("nobody.here", None), "nobody.here")
    assert page.status == "not_found"


def test_sandbox_shell_without_data_is_a_block() -> None:
    assert parse_profile_page(render_shell("someone")).is_block


# --- hostile data: one bad value costs that value, never the page ---------------------------

INF = float("inf")


def test_overflowing_numbers_cost_only_their_field() -> None:
    item = _video()
    del item["statsV2"]  # the exact copy, read first, would stand in for the bad counts
    item["createTime"] = INF
    item["stats"]["diggCount"] = 2**70
    item["stats"]["playCount"] = 1.5
    item["stats"]["shareCount"] = True
    reader = FieldReader()
    fields = video_fields(item, 2, reader)
    assert fields["created_at"] is None
    assert fields["digg_count"] is None
    assert fields["play_count"] is None
    assert fields["share_count"] is None
    assert fields["comment_count"] == 3
    assert sorted(reader.bad) == ["created_at", "digg_count", "play_count", "share_count"]


def test_feed_with_1e999_parses() -> None:
    body = _feed(statusCode=1e999).replace("1700000000", "1e999")
    page = parse_feed(body)
    assert video_fields(page.items[0], None)["created_at"] is None


@pytest.mark.parametrize(
    "body",
    [
        _feed()[:-40],
        '{"statusCode": 0, "itemList": [',
        "[" * 50_000,
        '{"itemList": ' + "[" * 50_000 + "]" * 50_000 + "}",
        "oops",
    ],
)
def test_malformed_feed_is_not_a_block(body: str) -> None:
    with pytest.raises(MalformedData):
        parse_feed(body)


def test_feed_values_of_the_wrong_type() -> None:
    items = [_video("1"), {"id": True}, {"id": INF}, {"id": ["x"]}, "junk", {"id": " 1"}]
    page = parse_feed(_feed(itemList=items, cursor={"a": 1}, hasMore="false"))
    assert [item["id"] for item in page.items] == ["1"]
    assert page.cursor is None
    assert page.has_more is False
    assert sorted(page.bad_fields) == ["cursor", "hasMore", *["id"] * 5]
    assert parse_feed(_feed(itemList={"id": "1"})).bad_fields == ("itemList",)


@pytest.mark.parametrize("unique_id", [True, None, 12, "two words", "a\n", "x" * 25, ["a"]])
def test_popular_author_needs_a_username(unique_id: Any) -> None:
    item = _video(likes=10**9)
    item["author"]["uniqueId"] = unique_id
    assert popular_author(item, 1, 1) is None


def test_profile_values_of_the_wrong_type() -> None:
    user = {**USER, "uniqueId": None, "verified": "false", "createTime": 2**70, "nickname": 5}
    stats = {**STATS, "followerCount": INF, "videoCount": "42"}
    page = parse_profile_page(_universal(0, {"user": user, "stats": stats}))
    reader = FieldReader()
    fields = profile_fields(page, "cook.anna", reader)
    assert fields["unique_id"] == "cook.anna"
    assert (fields["verified"], fields["created_at"], fields["nickname"]) == (None, None, None)
    assert fields["follower_count"] is None
    assert fields["video_count"] == 42
    assert fields["heart_count"] == 500
    assert sorted(reader.bad) == ["created_at", "follower_count", "nickname", "verified"]


@pytest.mark.parametrize("unique_id", [True, 7, "cook.anna\n", "none such", ""])
def test_profile_unique_id_is_a_username_or_the_one_asked_for(unique_id: Any) -> None:
    page = parse_profile_page(_universal(0, {"user": {**USER, "uniqueId": unique_id}}))
    reader = FieldReader()
    assert profile_fields(page, "asked.for", reader)["unique_id"] == "asked.for"
    assert reader.bad == ["unique_id"]


def test_sigi_layout_with_odd_keys() -> None:
    data = {"UserModule": {"users": {"a.b": USER}}, "UserPage": {"uniqueId": ["a.b"]}}
    page = parse_profile_page(_page("SIGI_STATE", data), "A.B")  # a URL's case is not the name's
    assert (page.status, page.user["id"]) == ("ok", "6600")


@pytest.mark.parametrize(
    ("layout", "data", "status"),
    [
        ("SIGI_STATE", {"UserModule": {"users": {"other": USER}}}, "not_found"),
        ("SIGI_STATE", {}, "blocked"),
        ("SIGI_STATE", {"UserPage": {"statusCode": 10000}}, "captcha"),
        ("SIGI_STATE", {"UserPage": {"statusCode": 10202}}, "not_found"),
        ("SIGI_STATE", {"UserModule": {"users": {}}, "UserPage": {"statusCode": 0}}, "blocked"),
        (
            "__UNIVERSAL_DATA_FOR_REHYDRATION__",
            {"__DEFAULT_SCOPE__": {"webapp.user-detail": {"statusCode": 0}}},
            "blocked",
        ),
        ("__NEXT_DATA__", {"props": {"pageProps": {"statusCode": 0, "userInfo": {}}}}, "blocked"),
    ],
)
def test_a_page_without_the_users_data_is_never_stored_as_their_profile(
    layout: str, data: dict[str, Any], status: str
) -> None:
    """A page holding another user only, no user, or a status of its own: never "ok" (whose
    empty fields would overwrite a stored profile), never another user's data for the one
    asked for."""
    page = parse_profile_page(_page(layout, data), "wanted")
    assert page.status == status


APP_CONTEXT_ONLY = {"__DEFAULT_SCOPE__": {"webapp.app-context": {"language": "en"}}}


def _scripts(*scripts: tuple[str, dict[str, Any]]) -> str:
    body = "".join(
        f'<script id="{script_id}" type="application/json">{json.dumps(data)}</script>'
        for script_id, data in scripts
    )
    return f"<html><body>{body}</body></html>"


@pytest.mark.parametrize(
    "universal",
    [
        APP_CONTEXT_ONLY,
        {"__DEFAULT_SCOPE__": {"webapp.user-detail": {"statusCode": 0, "userInfo": {}}}},
    ],
    ids=["app-context-only", "detail-without-user"],
)
def test_a_layout_without_the_user_gives_way_to_the_next_that_has_it(
    universal: dict[str, Any],
) -> None:
    """The rehydration script holding only the app's context (or an empty user detail) beside
    a SIGI_STATE holding the user: the user's page, read from SIGI_STATE; the first script
    found made it a block, a ban of the whole domain."""
    sigi = {
        "UserModule": {"users": {"cook.anna": USER}, "stats": {"cook.anna": STATS}},
        "UserPage": {"uniqueId": "cook.anna", "statusCode": 0},
    }
    html = _scripts(("__UNIVERSAL_DATA_FOR_REHYDRATION__", universal), ("SIGI_STATE", sigi))
    for asked in ("cook.anna", None):  # None: as the ban rule reads it
        page = parse_profile_page(html, asked)
        assert (page.status, page.layout, page.is_block) == ("ok", "sigi", False)
    assert profile_fields(page, "cook.anna")["follower_count"] == 12000


def test_a_page_where_no_layout_has_the_user_is_still_a_block() -> None:
    html = _scripts(
        ("__UNIVERSAL_DATA_FOR_REHYDRATION__", APP_CONTEXT_ONLY),
        ("SIGI_STATE", {"UserModule": {"users": {}}}),
    )
    assert parse_profile_page(html, "cook.anna").status == "blocked"
    verify = html.replace("<body>", '<body><div id="tiktok-verify-page"></div>')
    assert parse_profile_page(verify, "cook.anna").status == "captcha"


@pytest.mark.parametrize(
    "script",
    [
        "[" * 50_000,
        '{"__DEFAULT_SCOPE__": ' + '{"a": ' * 5000 + "1" + "}" * 5001,
        '{"__DEFAULT_SCOPE__": {"webapp.user-detail": {"statusCode": 0',
        '{"__DEFAULT_SCOPE__": {"webapp.user-detail": {"statusCode": 1e999',
    ],
)
def test_malformed_data_script_is_not_a_block(script: str) -> None:
    html = f'<html><script id="__UNIVERSAL_DATA_FOR_REHYDRATION__">{script}</script></html>'
    with pytest.raises(MalformedData):
        parse_profile_page(html)


@pytest.mark.parametrize(("depth", "too_deep"), [(64, False), (65, True)])
def test_response_depth_limit(depth: int, too_deep: bool) -> None:
    text = '{"a": ' * depth + '"[{"' + "}" * depth
    if too_deep:
        with pytest.raises(TooDeep):
            jsondata.loads(text)
    else:
        assert jsondata.loads(text)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.sampled_from([INF, -INF, 2**64, "1e999", "-5", "12"])
    | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children)
    ),
    max_leaves=6,
)
VIDEO_KEYS = ("desc", "createTime", "author", "stats", "statsV2", "authorStats")


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(VIDEO_KEYS), JSON_VALUES), st.sampled_from(list(_video())))
def test_any_feed_item_gives_typed_fields(values: dict[str, Any], key: str) -> None:
    item = {**_video(), **values}
    body = json.dumps({"statusCode": 0, "itemList": [item], "cursor": values.get(key)})
    for video in parse_feed(body).items:
        fields = video_fields(video, 2)
        assert all(isinstance(fields[name], str | None) for name in ("description", "author_id"))
        counts = [value for name, value in fields.items() if name.endswith(("_count", "_at"))]
        assert all(value is None or type(value) is int for value in counts)
        popular_author(video, 0, 0)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.sampled_from([*USER, "bogus"]), JSON_VALUES),
    st.dictionaries(st.sampled_from([*STATS, "bogus"]), JSON_VALUES),
    st.sampled_from(["universal", "sigi"]),
)
def test_any_profile_gives_typed_fields(
    user: dict[str, Any], stats: dict[str, Any], layout: str
) -> None:
    user, stats = {**USER, **user}, {**STATS, **stats}
    if layout == "universal":
        html = _universal(0, {"user": user, "stats": stats})
    else:
        module = {"users": {"cook.anna": user}, "stats": {"cook.anna": stats}}
        html = _page("SIGI_STATE", {"UserModule": module})
    fields = profile_fields(parse_profile_page(html, "cook.anna"), "cook.anna")
    assert isinstance(fields["unique_id"], str)
    for name, value in fields.items():
        if name.endswith(("_count", "_at")):
            assert value is None or type(value) is int
        elif name in ("verified", "private"):
            assert value is None or type(value) is bool
        else:
            assert value is None or isinstance(value, str)
