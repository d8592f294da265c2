"""The profiles spider: status codes it does not know (one user's answer, never a ban) and the
exact counts of statsV2 over the rounded stats."""

from __future__ import annotations

from typing import Any, cast

import pytest
import redis
from scrapy import Request
from scrapy.http import HtmlResponse
from scrapy.utils.test import get_crawler

from crawler import settings as project_settings
from crawler.spiders.profiles import ProfilesSpider
from sandbox import markup
from sandbox.seed import build_dataset
from tests.harness import Crawl, Sandbox, dead_letters

BASE = "http://127.0.0.1:9"


def _spider(**settings: Any) -> ProfilesSpider:
    # The project's settings with its extensions named off: they reach Redis when they start.
    defaults = {name: getattr(project_settings, name) for name in dir(project_settings)}
    defaults = {name: value for name, value in defaults.items() if name.isupper()}
    defaults["EXTENSIONS"] = dict.fromkeys(project_settings.EXTENSIONS)
    crawler = get_crawler(
        ProfilesSpider, settings_dict={**defaults, "PROFILES_BASE_URL": BASE, **settings}
    )
    spider = ProfilesSpider.from_crawler(crawler)
    crawler.spider = spider
    return spider


def _status_page(code: Any) -> bytes:
    detail = {"statusCode": code, "statusMsg": "", "userInfo": {}}
    return markup.page("@some.user | TikTok", scripts=markup.universal_data_script(detail)).encode()


def _response(body: bytes, request: Request | None = None) -> HtmlResponse:
    url = f"{BASE}/@some.user"
    return HtmlResponse(url, body=body, request=request or Request(url))


@pytest.mark.parametrize(("code", "name"), [(10201, "10201"), (10204, "10204"), ("x", "other")])
def test_an_unknown_status_is_retried_then_given_up_never_a_ban(code: Any, name: str) -> None:
    """A status code not in the table (10201 is seen on user pages) answers for that one user:
    it was a ban of the whole domain (with BAN_POLICY pause, 30 minutes for the fleet, five
    times, per such user)."""
    spider = _spider(RETRY_TIMES=1)
    page = _response(_status_page(code))
    assert spider.ban_rule(page) is None
    (retry,) = spider.parse_profile(page, "some.user")
    assert isinstance(retry, Request)
    assert retry.meta["retry_times"] == 1
    assert list(spider.parse_profile(_response(page.body, retry), "some.user")) == []
    stats = spider.crawler.stats
    assert stats is not None
    assert stats.get_value(f"profiles/unknown_status/{name}") == 2
    assert stats.get_value(f"retry/reason_count/profile_status_{name}") == 1


@pytest.mark.parametrize("code", [10000, 10113, 10114])
def test_the_known_ban_codes_are_still_bans(code: int) -> None:
    assert _spider().ban_rule(_response(_status_page(code))) in {
        "profile_captcha",
        "profile_challenge",
    }


def _stats(client: redis.Redis) -> dict[str, str]:
    raw = cast(dict[bytes, bytes], client.hgetall("{profiles}:stats"))
    return {key.decode(): value.decode() for key, value in raw.items()}


@pytest.mark.integration
def test_a_crawl_gives_up_an_unknown_status_for_its_user_alone(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox
) -> None:
    """The sandbox answers /@status.10201 with statusCode 10201: that user is given up as a dead
    letter naming the code, the others are stored, the domain never banned."""
    ok = next(a for a in build_dataset().authors if (a.state, a.layout) == ("ok", "universal"))
    settings = {
        "RETRY_TIMES": 1,
        "RETRY_BACKOFF_MAX": 0.1,
        # Were the page taken for a ban, it would be given up after one short pause.
        "BAN_COOLDOWN": 0.5,
        "BAN_MAX_TIMES": 1,
    }
    users = f"users=status.10201,{ok.unique_id},thechef319"
    result = crawl("profiles", "-a", users, settings=settings)
    assert result.returncode == 0, result.stderr[-3000:]

    statuses = {doc["unique_id"]: doc["status"] for doc in crawl.mongo.db.profiles.find()}
    assert statuses == {ok.unique_id: "ok", "thechef319": "banned"}
    dead = dead_letters(redis_client, "profiles")
    assert list(dead) == [f"{sandbox.url}/@status.10201"]
    failure = dead[f"{sandbox.url}/@status.10201"]
    assert failure["reason"] == "retries_exhausted:profile_status_10201"
    assert "10201" in failure["error"]
    stats = _stats(redis_client)
    assert stats["profiles/unknown_status/10201"] == "2"
    assert "ban/count" not in stats
    assert sandbox.admin("stats")["by_path"]["/@status.10201"] == 2


@pytest.mark.integration
def test_a_crawl_stores_the_exact_counts_not_the_rounded_ones(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox
) -> None:
    """The sandbox rounds a page's ``stats`` as the web does (22609 is 22600) and keeps the
    exact counts in ``statsV2``: the stored profile has the exact ones."""
    authors = [
        a
        for a in build_dataset().authors
        if (a.state, a.layout) == ("ok", "universal")
        and a.stats.follower_count >= 10_000
        and a.stats.follower_count % 100
    ][:2]
    result = crawl("profiles", "-a", "users=" + ",".join(a.unique_id for a in authors))
    assert result.returncode == 0, result.stderr[-3000:]
    stored = {doc["unique_id"]: doc for doc in crawl.mongo.db.profiles.find({}, {"_id": 0})}
    assert set(stored) == {a.unique_id for a in authors}
    for author in authors:
        doc = stored[author.unique_id]
        assert doc["follower_count"] == author.stats.follower_count
        assert doc["following_count"] == author.stats.following_count
        assert doc["heart_count"] == author.stats.heart_count
        assert doc["video_count"] == author.stats.video_count
        assert doc["digg_count"] == author.stats.digg_count
        assert doc["friend_count"] == author.stats.friend_count
