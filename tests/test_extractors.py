"""Extractors on the shapes TARGETS.md describes (sandbox pages are covered in test_crawl)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from crawler.extractors.explore import (
    FeedBlocked,
    FeedError,
    parse_feed,
    popular_author,
    video_fields,
)
from crawler.extractors.profiles import parse_profile_page, profile_fields
from sandbox.data import build_dataset
from sandbox.profiles import render_profile, render_shell


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
        "digg_count": 12,
        "play_count": 1000,
        "share_count": 2,
        "comment_count": 3,
        "collect_count": 4,
    }


def test_video_fields_fall_back_to_string_stats() -> None:
    item = _video(likes=7)
    del item["stats"]
    assert video_fields(item, None)["digg_count"] == 7


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
