"""Integration tests of the sandbox site, run against a real server process on a free port."""

from __future__ import annotations

import http.client
import json
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from email.message import Message
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from sandbox.config import (
    ConfigError,
    RateLimitConfig,
    SandboxConfig,
    config_from_dict,
    merge_config,
)
from sandbox.data import ALL_CATEGORY, CATEGORIES, rounded_count
from sandbox.profiles import rounded_stats, sigi_beside_app_context
from sandbox.ratelimit import RateLimiter, Verdict
from sandbox.seed import build_dataset
from sandbox.stats import path_key

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 20.0
PRIMARY = "127.0.0.1"
SECONDARY = "127.0.0.2"
EXPLORE = "/api/explore/item_list/"
RECOMMEND = "/api/recommend/item_list/"
UNIVERSAL_RE = re.compile(
    r'<script id="__UNIVERSAL_DATA_FOR_REHYDRATION__" type="application/json">(.*?)</script>', re.S
)
SIGI_RE = re.compile(r'<script id="SIGI_STATE" type="application/json">(.*?)</script>', re.S)
ITEM_KEYS = {"id", "desc", "createTime", "author", "authorStats", "stats", "statsV2"}
STAT_KEYS = {"diggCount", "playCount", "shareCount", "commentCount", "collectCount"}


@dataclass
class Reply:
    """One HTTP answer."""

    status: int
    headers: Message
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Site:
    """A running sandbox process and a tiny HTTP client for it."""

    process: subprocess.Popen[str]
    host: str
    port: int

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def request(
        self, method: str, path: str, body: bytes | None = None, source: str = PRIMARY
    ) -> Reply:
        conn = http.client.HTTPConnection(
            self.host, self.port, timeout=10, source_address=(source, 0)
        )
        try:
            conn.request(method, path, body=body)
            response = conn.getresponse()
            return Reply(response.status, response.headers, response.read())
        finally:
            conn.close()

    def get(self, path: str, source: str = PRIMARY) -> Reply:
        return self.request("GET", path, source=source)

    def post_json(self, path: str, data: object) -> Reply:
        return self.request("POST", path, body=json.dumps(data).encode())

    def configure(self, update: dict[str, Any]) -> dict[str, Any]:
        reply = self.post_json("/__admin__/config", update)
        assert reply.status == 200, reply.text
        config: dict[str, Any] = reply.json()
        return config

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = self.get("/__admin__/stats").json()
        return stats


def start_sandbox(*extra: str, stderr: IO[str] | int = subprocess.PIPE) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "sandbox", "--host", PRIMARY, "--port", "0", *extra]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr, text=True)


def read_listen_line(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], START_TIMEOUT)
    if not ready:
        process.kill()
        pytest.fail("sandbox did not report its address in time")
    return process.stdout.readline().strip()


def stop_sandbox(process: subprocess.Popen[str], signum: int = signal.SIGTERM) -> int:
    process.send_signal(signum)
    try:
        return process.wait(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail("condition not met before the deadline")
        time.sleep(0.01)


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    log = tmp_path_factory.mktemp("sandbox") / "sandbox.log"
    with log.open("w") as stderr:
        process = start_sandbox("--log-level", "INFO", stderr=stderr)
    line = read_listen_line(process)
    match = re.fullmatch(r"sandbox listening on http://([\d.]+):(\d+)", line)
    assert match, f"unexpected first line: {line!r}"
    yield Site(process, match.group(1), int(match.group(2)))
    assert stop_sandbox(process) == 0


@pytest.fixture(autouse=True)
def clean_site(site: Site) -> None:
    site.configure(SandboxConfig().to_dict())
    assert site.request("POST", "/__admin__/reset").status == 200


@pytest.fixture(scope="session")
def dataset_doc(site: Site) -> dict[str, Any]:
    doc: dict[str, Any] = site.get("/__admin__/dataset").json()
    return doc


def explore_path(category: int | str | None = None, **params: object) -> str:
    query: dict[str, object] = {"aid": 1988, "count": 16, "cursor": 0}
    if category is not None:
        query["categoryType"] = category
    query.update(params)
    return f"{EXPLORE}?{urlencode(query)}"


def crawl_feed(site: Site, path_for: Callable[[str], str]) -> list[str]:
    ids: list[str] = []
    cursor = "0"
    for _ in range(100):
        body = site.get(path_for(cursor)).json()
        assert body["statusCode"] == 0
        ids += [item["id"] for item in body["itemList"]]
        if not body["hasMore"]:
            return ids
        cursor = body["cursor"]
    pytest.fail("feed never ended")


def profile_data(text: str) -> dict[str, Any]:
    match = UNIVERSAL_RE.search(text)
    assert match, "no rehydration script"
    data: dict[str, Any] = json.loads(match.group(1))
    detail: dict[str, Any] = data["__DEFAULT_SCOPE__"]["webapp.user-detail"]
    return detail


def author_where(doc: dict[str, Any], **fields: object) -> dict[str, Any]:
    for author in doc["authors"]:
        if all(author[key] == value for key, value in fields.items()):
            found: dict[str, Any] = author
            return found
    pytest.fail(f"no author with {fields}")


def enable_bans(site: Site, mode: str, max_requests: int = 3, ban: float = 30.0) -> None:
    site.configure(
        {
            "rate_limit": {
                "enabled": True,
                "max_requests": max_requests,
                "window_seconds": 60.0,
                "ban_seconds": ban,
                "ban_mode": mode,
            }
        }
    )


def exhaust(site: Site, path: str, times: int = 3, source: str = PRIMARY) -> None:
    for _ in range(times):
        assert site.get(path, source=source).status == 200


# --- explore feed ---------------------------------------------------------------------------


@pytest.mark.parametrize("category", [*CATEGORIES, ALL_CATEGORY])
def test_explore_paging_covers_category_once(
    site: Site, dataset_doc: dict[str, Any], category: int
) -> None:
    ids = crawl_feed(site, lambda cursor: explore_path(category, cursor=cursor))
    expected = dataset_doc["videos_by_category"][str(category)]
    assert ids == expected
    assert len(set(ids)) == len(ids)


def test_all_category_merges_every_video(dataset_doc: dict[str, Any]) -> None:
    merged = dataset_doc["videos_by_category"][str(ALL_CATEGORY)]
    assert sorted(merged) == sorted(video["id"] for video in dataset_doc["videos"])


def test_recommend_lists_every_category(site: Site, dataset_doc: dict[str, Any]) -> None:
    def path_for(cursor: str) -> str:
        return f"{RECOMMEND}?from_page=fyp&count=30&cursor={cursor}"

    ids = crawl_feed(site, path_for)
    assert ids == dataset_doc["videos_by_category"][str(ALL_CATEGORY)]


def test_first_page_shape(site: Site) -> None:
    reply = site.get(explore_path(1))
    assert reply.headers["Content-Type"].startswith("application/json")
    body = reply.json()
    assert body["statusCode"] == body["status_code"] == 0
    assert body["status_msg"] == ""
    assert body["cursor"] == "16"
    assert body["hasMore"] is True
    assert isinstance(body["extra"]["now"], int)
    assert "impr_id" in body["log_pb"]
    item = body["itemList"][0]
    assert set(item) == ITEM_KEYS
    assert set(item["stats"]) == STAT_KEYS
    exact = {key: int(value) for key, value in item["statsV2"].items()}
    assert item["stats"] == {key: rounded_count(value) for key, value in exact.items()}
    assert set(item["author"]) == {
        "id",
        "uniqueId",
        "nickname",
        "secUid",
        "verified",
        "privateAccount",
    }
    assert set(item["authorStats"]) == {
        "followerCount",
        "followingCount",
        "heart",
        "heartCount",
        "videoCount",
        "diggCount",
    }


def test_feed_stats_are_rounded_as_the_app_shows_them() -> None:
    assert [rounded_count(n) for n in (9_999, 22_609, 22_650, 1_776_621)] == [
        9_999,
        22_600,
        22_700,
        1_800_000,
    ]


def test_count_is_clamped(site: Site) -> None:
    big = site.get(explore_path(2, count=100)).json()
    assert len(big["itemList"]) == 30
    assert big["cursor"] == "30"
    small = site.get(explore_path(2, count=0)).json()
    assert len(small["itemList"]) == 1


def test_extra_params_are_ignored(site: Site) -> None:
    plain = site.get(explore_path(3, cursor=16)).json()
    noisy = site.get(
        explore_path(
            3, cursor=16, app_name="tiktok_web", region="US", msToken="abc", **{"X-Bogus": "z"}
        )
    ).json()
    assert [i["id"] for i in noisy["itemList"]] == [i["id"] for i in plain["itemList"]]
    assert noisy["cursor"] == plain["cursor"]


def test_cursor_past_the_end(site: Site) -> None:
    body = site.get(explore_path(4, cursor=10_000)).json()
    assert body["statusCode"] == 0
    assert body["itemList"] == []
    assert body["hasMore"] is False


@pytest.mark.parametrize(
    ("path", "status", "message"),
    [
        (explore_path(None), 10201, "invalid categoryType"),
        (explore_path(9), 10201, "invalid categoryType"),
        (explore_path("music"), 10201, "invalid categoryType"),
        (explore_path(1, cursor="abc"), 10101, "invalid params"),
        (explore_path(1, count="ten"), 10101, "invalid params"),
        (f"{RECOMMEND}?cursor=-5", 10101, "invalid params"),
    ],
)
def test_feed_errors_are_200_with_status(site: Site, path: str, status: int, message: str) -> None:
    reply = site.get(path)
    assert reply.status == 200
    assert reply.json() == {
        "statusCode": status,
        "status_code": status,
        "status_msg": message,
        "itemList": [],
        "hasMore": False,
    }


# --- profile pages --------------------------------------------------------------------------


def test_profile_universal_layout(site: Site, dataset_doc: dict[str, Any]) -> None:
    author = author_where(dataset_doc, layout="universal", state="ok")
    reply = site.get(f"/@{author['uniqueId']}")
    assert reply.status == 200
    assert reply.headers["Content-Type"].startswith("text/html")
    detail = profile_data(reply.text)
    assert detail["statusCode"] == 0
    user = detail["userInfo"]["user"]
    assert user["uniqueId"] == author["uniqueId"]
    assert user["secUid"].startswith("MS4wLjABAAAA")
    assert detail["userInfo"]["stats"] == rounded_stats(author["stats"])
    assert detail["userInfo"]["statsV2"] == author["statsV2"]
    assert "<title>" in reply.text
    assert "SIGI_STATE" not in reply.text


@pytest.mark.parametrize("beside_app_context", [False, True])
def test_profile_sigi_layout(
    site: Site, dataset_doc: dict[str, Any], beside_app_context: bool
) -> None:
    """Older-layout pages, half of them with a rehydration script holding only the app's
    context (no user detail) before the ``SIGI_STATE`` that holds the user."""
    author = next(
        author
        for author in dataset_doc["authors"]
        if (author["layout"], author["state"]) == ("sigi", "ok")
        and sigi_beside_app_context(author["uniqueId"]) == beside_app_context
    )
    unique_id = author["uniqueId"]
    text = site.get(f"/@{unique_id}").text
    universal = UNIVERSAL_RE.search(text)
    if beside_app_context:
        assert universal
        assert json.loads(universal.group(1))["__DEFAULT_SCOPE__"].keys() == {"webapp.app-context"}
        assert universal.start() < text.index('<script id="SIGI_STATE"')
    else:
        assert universal is None
    match = SIGI_RE.search(text)
    assert match
    state = json.loads(match.group(1))
    assert state["UserPage"]["uniqueId"] == unique_id
    assert state["UserModule"]["users"][unique_id]["uniqueId"] == unique_id
    assert state["UserModule"]["stats"][unique_id] == author["stats"]


def test_the_counts_modes_answer_counts_null_or_leave_them_out(
    site: Site, dataset_doc: dict[str, Any]
) -> None:
    """``counts_mode`` "null" answers every count of a feed's videos and of a profile null in
    each copy, "absent" leaves the copies out; the rest of the answer is as ever."""
    universal = author_where(dataset_doc, layout="universal", state="ok")["uniqueId"]
    sigi = author_where(dataset_doc, layout="sigi", state="ok")["uniqueId"]
    shown = site.get(explore_path(2)).json()["itemList"][0]
    site.configure({"counts_mode": "null"})
    item = site.get(explore_path(2)).json()["itemList"][0]
    assert item == shown | {"stats": dict.fromkeys(STAT_KEYS), "statsV2": dict.fromkeys(STAT_KEYS)}
    info = profile_data(site.get(f"/@{universal}").text)["userInfo"]
    assert set(info["stats"].values()) == set(info["statsV2"].values()) == {None}
    state = json.loads(SIGI_RE.findall(site.get(f"/@{sigi}").text)[0])
    assert set(state["UserModule"]["stats"][sigi].values()) == {None}
    site.configure({"counts_mode": "absent"})
    item = site.get(explore_path(2)).json()["itemList"][0]
    assert item == {key: value for key, value in shown.items() if key not in ("stats", "statsV2")}
    assert profile_data(site.get(f"/@{universal}").text)["userInfo"].keys() == {"user"}
    state = json.loads(SIGI_RE.findall(site.get(f"/@{sigi}").text)[0])
    assert "stats" not in state["UserModule"]


def test_layout_share(dataset_doc: dict[str, Any]) -> None:
    sigi = sum(author["layout"] == "sigi" for author in dataset_doc["authors"])
    assert 0.05 <= sigi / len(dataset_doc["authors"]) <= 0.15


def test_embedded_json_is_escaped(site: Site, dataset_doc: dict[str, Any]) -> None:
    tricky = [a for a in dataset_doc["authors"] if "</script>" in a["signature"]]
    author = next(a for a in tricky if a["state"] == "ok" and a["layout"] == "universal")
    text = site.get(f"/@{author['uniqueId']}").text
    assert profile_data(text)["userInfo"]["user"]["signature"] == author["signature"]


@pytest.mark.parametrize(
    ("state", "status"), [("missing", 10202), ("banned", 10221), ("private", 10222)]
)
def test_profile_status_pages(
    site: Site, dataset_doc: dict[str, Any], state: str, status: int
) -> None:
    if state == "missing":
        unique_id = "no.such_user_42"
    else:
        unique_id = author_where(dataset_doc, state=state)["uniqueId"]
    reply = site.get(f"/@{unique_id}")
    assert reply.status == 200
    detail = profile_data(reply.text)
    assert detail["statusCode"] == status
    assert detail["statusMsg"]
    assert "stats" not in detail["userInfo"]
    if state == "private":
        user = detail["userInfo"]["user"]
        assert user == {"uniqueId": unique_id, "nickname": user["nickname"], "privateAccount": True}
    else:
        assert detail["userInfo"] == {}


def test_profile_with_a_status_code_of_its_own(site: Site) -> None:
    reply = site.get("/@status.10201")
    assert reply.status == 200
    assert profile_data(reply.text) == {"statusCode": 10201, "statusMsg": "", "userInfo": {}}


def test_avatar_is_an_image(site: Site, dataset_doc: dict[str, Any]) -> None:
    author = dataset_doc["authors"][0]
    reply = site.get(author["avatarLarger"])
    assert reply.status == 200
    assert reply.body.startswith(b"\x89PNG\r\n\x1a\n")
    assert site.get("/avatar/123.jpeg").status == 404


# --- bans -----------------------------------------------------------------------------------


def banned_reply(site: Site, mode: str, path: str) -> Reply:
    enable_bans(site, mode)
    exhaust(site, path)
    return site.get(path)


def check_403(site: Site, reply: Reply) -> None:
    assert reply.status == 403
    assert reply.headers["Server"] == "AkamaiGHost"
    assert "<H1>Access Denied</H1>" in reply.text
    assert "Reference #18." in reply.text


def check_datadome(site: Site, reply: Reply) -> None:
    assert reply.status == 403
    assert reply.headers["Set-Cookie"].startswith("datadome=")
    assert "captcha-delivery" in reply.text


def check_cloudflare(site: Site, reply: Reply) -> None:
    assert reply.status == 503
    assert reply.headers["cf-mitigated"] == "challenge"
    assert "Just a moment..." in reply.text
    assert "/cdn-cgi/challenge-platform/" in reply.text


def check_captcha_redirect(site: Site, reply: Reply) -> None:
    assert reply.status == 302
    location = urlsplit(reply.headers["Location"])
    assert location.path == "/sorry/index"
    query = parse_qs(location.query)
    assert urlsplit(query["continue"][0]).path.startswith("/@")
    assert query["q"][0]
    sorry = site.get(f"{location.path}?{location.query}")
    assert sorry.status == 429
    assert "Our systems have detected unusual traffic from your computer network" in sorry.text
    assert 'id="captcha-form"' in sorry.text


def check_js_redirect(site: Site, reply: Reply) -> None:
    assert reply.status == 200
    assert reply.headers["Content-Type"].startswith("text/html")
    text = reply.text
    assert text.startswith("<script>")
    assert text.endswith("</script>")
    match = re.search(r'window\.location\.href="([^"]+)"', text)
    assert match
    target = urlsplit(match.group(1))
    assert target.netloc == f"{site.host}:{site.port}"
    assert target.path == "/sec/a"
    assert urlsplit(parse_qs(target.query)["r"][0]).path.startswith("/@")
    assert site.get(f"{target.path}?{target.query}").status == 200


def check_429(site: Site, reply: Reply) -> None:
    assert reply.status == 429
    assert 1 <= int(reply.headers["Retry-After"]) <= 30


def check_empty_page(site: Site, reply: Reply) -> None:
    assert reply.status == 200
    assert reply.body == b""
    assert reply.headers["Content-Type"].startswith("text/html")


def check_json_error_page(site: Site, reply: Reply) -> None:
    assert reply.status == 200
    assert "tiktok-verify-page" in reply.text
    assert profile_data(reply.text)["statusCode"] == 10000


def check_no_data_page(site: Site, reply: Reply) -> None:
    assert reply.status == 200
    assert "<html" in reply.text
    assert "__UNIVERSAL_DATA_FOR_REHYDRATION__" not in reply.text
    assert "SIGI_STATE" not in reply.text


PAGE_BAN_CHECKS: dict[str, Callable[[Site, Reply], None]] = {
    "403": check_403,
    "datadome": check_datadome,
    "cloudflare": check_cloudflare,
    "captcha_redirect": check_captcha_redirect,
    "js_redirect": check_js_redirect,
    "429": check_429,
    "empty": check_empty_page,
    "json_error": check_json_error_page,
    "no_data": check_no_data_page,
}


@pytest.mark.parametrize("mode", list(PAGE_BAN_CHECKS))
def test_ban_mode_on_profile_pages(site: Site, dataset_doc: dict[str, Any], mode: str) -> None:
    path = f"/@{author_where(dataset_doc, state='ok')['uniqueId']}"
    PAGE_BAN_CHECKS[mode](site, banned_reply(site, mode, path))
    PAGE_BAN_CHECKS[mode](site, site.get(path))
    other = site.get(path, source=SECONDARY)
    assert other.status == 200
    assert profile_data(other.text)["statusCode"] == 0
    bans = site.stats()["bans"]
    assert bans["issued"] == 1
    assert bans["active"] == [PRIMARY]
    assert bans["by_client"] == {PRIMARY: 2}


@pytest.mark.parametrize(("mode", "status_code"), [("json_error", 10000), ("no_data", 8)])
def test_ban_mode_on_api_is_json(site: Site, mode: str, status_code: int) -> None:
    reply = banned_reply(site, mode, explore_path(1))
    assert reply.status == 200
    body = reply.json()
    assert body["statusCode"] == body["status_code"] == status_code
    assert body["itemList"] == []
    assert site.get(explore_path(1), source=SECONDARY).json()["statusCode"] == 0


def test_empty_ban_on_api_keeps_json_content_type(site: Site) -> None:
    reply = banned_reply(site, "empty", explore_path(1))
    assert reply.status == 200
    assert reply.body == b""
    assert reply.headers["Content-Type"].startswith("application/json")


def test_random_ban_mode_is_seeded(site: Site) -> None:
    def statuses() -> list[int]:
        enable_bans(site, "random", max_requests=1)
        site.request("POST", "/__admin__/reset")
        exhaust(site, explore_path(1), times=1)
        return [site.get(explore_path(1)).status for _ in range(20)]

    first = statuses()
    assert len(set(first)) >= 2
    assert statuses() == first


def test_rate_limit_counts_api_and_profiles_together(
    site: Site, dataset_doc: dict[str, Any]
) -> None:
    enable_bans(site, "429", max_requests=2)
    author = author_where(dataset_doc, state="ok")
    assert site.get(explore_path(1)).status == 200
    for path in ("/healthz", "/__admin__/config", author["avatarLarger"], "/sorry/index"):
        site.get(path)
    assert site.get(f"/@{author['uniqueId']}").status == 200
    assert site.get(explore_path(5)).status == 429
    assert site.get("/healthz").status == 200


def test_ban_expires(site: Site) -> None:
    enable_bans(site, "403", max_requests=1, ban=0.3)
    exhaust(site, explore_path(1), times=1)
    assert site.get(explore_path(1)).status == 403
    wait_until(lambda: site.get(explore_path(1)).status == 200)
    assert site.stats()["bans"]["active"] == []


def test_reset_lifts_bans(site: Site) -> None:
    reply = banned_reply(site, "403", explore_path(1))
    assert reply.status == 403
    site.request("POST", "/__admin__/reset")
    assert site.get(explore_path(1)).status == 200


# --- faults ---------------------------------------------------------------------------------


def test_error_fault(site: Site) -> None:
    site.configure({"faults": {"error_rate": 1.0, "error_status": 500}})
    reply = site.get(explore_path(1))
    assert reply.status == 500
    assert reply.body
    assert site.get("/healthz").status == 200
    assert site.stats()["faults"]["error"] == 1


def test_default_error_status_is_503(site: Site) -> None:
    site.configure({"faults": {"error_rate": 1.0}})
    assert site.get(explore_path(1)).status == 503


def test_slow_fault(site: Site) -> None:
    site.configure({"faults": {"slow_rate": 1.0, "slow_seconds": 0.3}})
    started = time.monotonic()
    assert site.get(explore_path(1)).status == 200
    assert time.monotonic() - started >= 0.3
    assert site.stats()["faults"]["slow"] == 1


def test_drop_fault(site: Site) -> None:
    site.configure({"faults": {"drop_rate": 1.0}})
    with pytest.raises((http.client.HTTPException, ConnectionError)):
        site.get(explore_path(1))
    stats = site.stats()
    assert stats["faults"]["drop"] == 1
    assert stats["by_status"] == {"0": 1}


def test_latency(site: Site) -> None:
    site.configure({"latency_ms": 250})
    started = time.monotonic()
    sent = time.time()
    site.get(explore_path(1))
    assert time.monotonic() - started >= 0.25
    (entry,) = site.stats()["requests"]
    # Stamped as it arrived, and as it was answered: the latency between (tests count
    # arrivals at the server).
    assert sent <= entry["arrived"] < sent + 0.2
    assert entry["t"] - entry["arrived"] >= 0.25


# --- admin ----------------------------------------------------------------------------------


def test_stats_by_client_and_path(site: Site, dataset_doc: dict[str, Any]) -> None:
    unique_id = author_where(dataset_doc, state="ok")["uniqueId"]
    site.get(f"{EXPLORE}?categoryType=1&count=16&cursor=0&msToken=a&aid=1988")
    site.get(f"{EXPLORE}?aid=1988&cursor=0&count=16&categoryType=1&msToken=b&X-Bogus=c")
    site.get(f"/@{unique_id}?lang=en", source=SECONDARY)
    site.get("/__admin__/config")
    stats = site.stats()
    api_key = f"{EXPLORE}?aid=1988&categoryType=1&count=16&cursor=0"
    page_key = f"/@{unique_id}"
    assert stats["total"] == 3
    assert stats["by_path"] == {api_key: 2, page_key: 1}
    assert stats["by_client"] == {PRIMARY: 2, SECONDARY: 1}
    assert stats["by_client_path"] == {PRIMARY: {api_key: 2}, SECONDARY: {page_key: 1}}
    assert stats["by_status"] == {"200": 3}
    assert set(stats["first_seen"]) == {api_key, page_key}
    assert [entry["client"] for entry in stats["requests"]] == [PRIMARY, PRIMARY, SECONDARY]
    assert stats["requests"][2]["path"] == f"{page_key}?lang=en"
    assert stats["requests"][2]["status"] == 200
    assert stats["bans"] == {"issued": 0, "responses": 0, "active": [], "by_client": {}}
    assert stats["faults"] == {"error": 0, "slow": 0, "drop": 0}


def test_reset_clears_counters(site: Site) -> None:
    site.get(explore_path(1))
    assert site.stats()["total"] == 1
    site.request("POST", "/__admin__/reset")
    stats = site.stats()
    assert stats["total"] == 0
    assert stats["requests"] == []


def test_config_merge_and_validation(site: Site) -> None:
    default = site.get("/__admin__/config").json()
    assert default == SandboxConfig().to_dict()
    merged = site.configure({"rate_limit": {"max_requests": 5}})
    assert merged["rate_limit"]["max_requests"] == 5
    assert merged["rate_limit"]["ban_mode"] == default["rate_limit"]["ban_mode"]
    assert merged["faults"] == default["faults"]
    for update, key in [
        ({"rate_limit": {"nope": 1}}, "rate_limit.nope"),
        ({"rate_limit": {"max_requests": "5"}}, "rate_limit.max_requests"),
        ({"rate_limit": {"ban_mode": "teapot"}}, "rate_limit.ban_mode"),
        ({"faults": {"error_rate": 2}}, "faults.error_rate"),
        ({"faults": 3}, "faults"),
        ({"latency": 1}, "latency"),
        ({"counts_mode": "zero"}, "counts_mode"),
    ]:
        reply = site.post_json("/__admin__/config", update)
        assert reply.status == 400
        assert reply.json()["key"] == key
    assert site.request("POST", "/__admin__/config", body=b"{").status == 400
    assert site.get("/__admin__/config").json() == merged


def test_healthz(site: Site) -> None:
    reply = site.get("/healthz")
    assert (reply.status, reply.text) == (200, "ok")


def test_cli_reads_config_file(tmp_path: Path) -> None:
    config = tmp_path / "sandbox.json"
    config.write_text(json.dumps({"rate_limit": {"enabled": True, "ban_mode": "cloudflare"}}))
    process = start_sandbox("--config", str(config), "--seed", "3")
    try:
        line = read_listen_line(process)
        host, port = line.rsplit("/", 1)[1].split(":")
        other = Site(process, host, int(port))
        assert other.get("/__admin__/config").json()["rate_limit"]["ban_mode"] == "cloudflare"
        assert other.get("/__admin__/dataset").json()["seed"] == 3
    finally:
        assert stop_sandbox(process) == 0


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_cli_stops_cleanly_on_signal(signum: int) -> None:
    process = start_sandbox()
    assert read_listen_line(process).startswith("sandbox listening on http://127.0.0.1:")
    assert stop_sandbox(process, signum) == 0


def test_cli_reports_busy_port(site: Site) -> None:
    command = [sys.executable, "-m", "sandbox", "--host", site.host, "--port", str(site.port)]
    result = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=START_TIMEOUT, check=False
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert "cannot listen" in result.stderr


def test_cli_rejects_bad_config(tmp_path: Path) -> None:
    config = tmp_path / "bad.json"
    config.write_text(json.dumps({"rate_limit": {"ban_mode": "teapot"}}))
    process = start_sandbox("--config", str(config))
    _, stderr = process.communicate(timeout=START_TIMEOUT)
    assert process.returncode == 2
    assert "rate_limit.ban_mode" in stderr


# --- dataset --------------------------------------------------------------------------------


def test_dataset_is_deterministic(dataset_doc: dict[str, Any]) -> None:
    assert build_dataset(7).to_json() == build_dataset(7).to_json()
    assert build_dataset(8).to_json() != build_dataset(7).to_json()
    assert dataset_doc == json.loads(json.dumps(build_dataset(7).to_json()))


def test_dataset_shape() -> None:
    dataset = build_dataset(7)
    assert dataset.categories == CATEGORIES
    assert all(len(dataset.videos_by_category[cat]) == 55 for cat in CATEGORIES)
    assert len({video.id for video in dataset.videos}) == len(dataset.videos)
    assert all(re.fullmatch(r"\d{19}", video.id) for video in dataset.videos)
    for author in dataset.authors:
        assert re.fullmatch(r"\d{19}", author.id)
        assert re.fullmatch(r"[a-z0-9_.]{4,20}", author.unique_id)
        assert author.sec_uid.startswith("MS4wLjABAAAA")
    assert len(dataset.authors_by_unique_id) == len(dataset.authors)


def test_popularity_rules_both_matter() -> None:
    dataset = build_dataset(7)
    authors = dataset.authors
    followed = {a.unique_id for a in authors if a.stats.follower_count >= 10_000}
    assert 0.12 <= len(followed) / len(authors) <= 0.20
    viral = [v for v in dataset.videos if v.stats.digg_count >= 250_000]
    assert 0.03 <= len(viral) / len(dataset.videos) <= 0.07
    viral_only = {v.author.unique_id for v in viral} - followed
    assert len(viral_only) > len(viral) / 2
    popular = dataset.popular_authors()
    assert popular == followed | {v.author.unique_id for v in viral}
    states = {dataset.authors_by_unique_id[uid].state for uid in popular}
    assert {"private", "banned"} <= states


def test_popular_authors_by_category() -> None:
    dataset = build_dataset(7)
    everyone = dataset.popular_authors()
    by_category = set().union(*(dataset.popular_authors(categories=[c]) for c in CATEGORIES))
    assert by_category == everyone
    assert dataset.popular_authors(categories=[ALL_CATEGORY]) == everyone


# --- units ----------------------------------------------------------------------------------


def test_merge_config_rejects_bool_for_int() -> None:
    with pytest.raises(ConfigError) as error:
        merge_config(SandboxConfig(), {"rate_limit": {"max_requests": True}})
    assert error.value.key == "rate_limit.max_requests"
    assert config_from_dict({"faults": {"slow_seconds": 1}}).faults.slow_seconds == 1.0


def test_path_key_normalizes_api_queries() -> None:
    assert path_key(EXPLORE, "cursor=0&msToken=x&aid=1988") == f"{EXPLORE}?aid=1988&cursor=0"
    assert path_key("/@someone", "lang=en") == "/@someone"


def test_rate_limiter_sliding_window() -> None:
    now = [0.0]
    limiter = RateLimiter(
        RateLimitConfig(enabled=True, max_requests=2, window_seconds=10.0),
        clock=lambda: now[0],
    )
    assert [limiter.check("a") for _ in range(2)] == [Verdict.ALLOWED] * 2
    now[0] = 11.0
    assert [limiter.check("a") for _ in range(2)] == [Verdict.ALLOWED] * 2
    assert limiter.check("a") is Verdict.BANNED_NOW
    assert limiter.check("a") is Verdict.BANNED
    assert limiter.check("b") is Verdict.ALLOWED
    now[0] = 11.0 + 1800.0
    assert limiter.check("a") is Verdict.ALLOWED
