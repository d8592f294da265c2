"""A few hundred hostile start entries mixed with good ones, one real crawl per spider.

Every good entry is crawled and stored, every bad one is set aside in
``<spider>:start_urls:invalid`` with its reason, the start list and its leases end empty, the
worker exits 0, and nothing is fetched from any host but the sandbox (a second server on
another port counts every connection).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any, cast

import pytest
import redis

from crawler import settings as project_settings
from sandbox.data import ALL_CATEGORY
from sandbox.seed import build_dataset
from tests.harness import Crawl, Sandbox
from tests.test_hostile_data import LoopbackServer

pytestmark = pytest.mark.integration

DATASET = build_dataset()
PAGE_SIZE = 16
MAX_BYTES = project_settings.START_ENTRY_MAX_BYTES


@pytest.fixture
def trap() -> Iterator[LoopbackServer]:
    server = LoopbackServer(lambda path: ("text/html", b"<html>trap</html>"))
    yield server
    server.stop()


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def hostile_urls(base: str, trap: str, path: str) -> list[str]:
    """URLs a spider must not fetch: other schemes, hosts, ports, credentials, broken ones."""
    port, trap_port = _port(base), _port(trap)
    host = f"127.0.0.1:{port}"
    urls = [
        f"{trap}{path}",
        f"HTTP://127.0.0.1:{trap_port}{path}",
        f"https://{host}{path}",
        f"http://localhost:{port}{path}",
        f"http://localhost:{trap_port}{path}",
        f"http://127.0.0.2:{port}{path}",
        f"http://127.1:{port}{path}",
        f"http://0x7f.0.0.1:{trap_port}{path}",
        f"http://2130706433:{trap_port}{path}",
        f"http://127.0.0.1.:{port}{path}",
        f"http://[::1]:{trap_port}{path}",
        f"http://{host}@127.0.0.1:{trap_port}{path}",
        f"http://127.0.0.1:{trap_port}\\@{host}{path}",
        f"http://127.0.0.1:{trap_port}#@{host}{path}",
        f"http://127.0.0.1:{trap_port}?@{host}{path}",
        f"http://user:pw@{host}{path}",
        f"http://user@{host}{path}",
        f"http://:@{host}{path}",
        f"http://user:pw@127.0.0.1:{trap_port}{path}",
        f"http://[::1{path}",
        f"http://[127.0.0.1]{path}",
        f"http://127.0.0.1:99999{path}",
        f"http://127.0.0.1:-1{path}",
        f"http://127.0.0.1:x{path}",
        f"http://127.0.0.1:0{path}",
        f"http://127.0.0.1:{path}",
        f"http:///{path}",
        f"http:/{host}{path}",
        f"//{host}{path}",
        f"{base}{path}\x00",
        f"{base}/\t{path}",
        f"{base}{path} x",
        f"{base}/__admin__/reset",
        f"{base}/",
    ]
    for scheme in ("ftp", "file", "gopher", "ws", "wss", "data", "javascript", "mailto", "about"):
        urls.append(f"{scheme}://{host}{path}")
    return urls


def hostile_entries(base: str, trap: str, path: str, key: str) -> list[bytes]:
    """Entries every spider must set aside; ``key`` is the JSON key its entries use."""
    rng = random.Random(1999)
    urls = hostile_urls(base, trap, path)
    text = [*urls, *(json.dumps({"url": url}) for url in urls)]
    for depth in (9, 60, 1000, 5000):
        for opening, closing in (("[", "]"), ('{"url":', "}"), (f'{{"{key}":', "}")):
            text.append(opening * depth + "1" + closing * depth)
    text += [
        "x" * (MAX_BYTES + 1),
        json.dumps({key: "y" * MAX_BYTES}),
        f"{base}{path}?q={'z' * MAX_BYTES}",
        "",
        "   ",
        "\n\t",
        "{oops",
        '{"url": "x",}',
        "[1, 2]",
        '{"colour": "red"}',
        "{}",
    ]
    for code in [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F, 0x85, 0x9B]:
        text.append(f"ab{chr(code)}cd")
    for value in (None, True, False, 1.5, -1, 2**80, [], {}, ["x"], {"a": "x"}, "", "a b"):
        text += [json.dumps({key: value}), json.dumps({"url": value})]
    text += [f'{{"{key}": {number}}}' for number in ("1e999", "-1e999", "NaN", "Infinity")]
    text += [f'{{"url": {number}}}' for number in ("1e999", "NaN")]
    raw = [entry.encode() for entry in text]
    raw += [b"\xff\xfe", b"\xc3\x28", b"\xed\xa0\x80", b"cook\xffanna"]
    raw += [bytes([0xFF, *rng.randbytes(40)]) for _ in range(16)]
    return raw


def profiles_entries(base: str, trap: str) -> tuple[list[bytes], list[bytes], set[str]]:
    authors = [author.unique_id for author in DATASET.authors[:20]]
    forms = [
        "{u}",
        "@{u}",
        "  {u}  ",
        '{{"unique_id": "{u}"}}',
        '{{"unique_id": "@{u}"}}',
        '{{\n  "unique_id": "{u}"\n}}',
        "{base}/@{u}",
        "{base}/@{u}?lang=en",
        '{{"url": "{base}/@{u}"}}',
        "HTTP://127.0.0.1:{port}/@{u}",
    ]
    good = [
        forms[n % len(forms)].format(u=u, base=base, port=_port(base)).encode()
        for n, u in enumerate(authors)
    ]
    bad = hostile_entries(base, trap, "/@cook.anna", "unique_id")
    bad += [
        json.dumps({"unique_id": f"{authors[0]}\n"}).encode(),
        json.dumps({"unique_id": f"{authors[0]}\u0000"}).encode(),
        b"a" * 25,
        "\u00fcser".encode(),
        b"user/evil",
        b"@@x",
        f"{base}/@../../__admin__/reset".encode(),
        f"{base}/video/1".encode(),
        f"{base}/@".encode(),
    ]
    return good, bad, set(authors)


def explore_entries(base: str, trap: str) -> tuple[list[bytes], list[bytes], set[str]]:
    feed = f"{base}/api/explore/item_list/"
    good_text = [
        "1",
        '{"category": 2}',
        '{"category": "3", "max_pages": 1}',
        f"{feed}?categoryType=4&count={PAGE_SIZE}",
        f"HTTP://127.0.0.1:{_port(base)}/api/explore/item_list/?categoryType=5",
        json.dumps({"url": f"{base}/api/recommend/item_list/?count=5"}),
    ]
    expected = {video.id for cat in (1, 2, 3, 4, 5) for video in _first_page(cat, PAGE_SIZE)}
    expected |= {video.id for video in _first_page(ALL_CATEGORY, 5)}
    bad = hostile_entries(base, trap, "/api/recommend/item_list/", "category")
    bad += hostile_entries(base, trap, "/api/explore/item_list/?categoryType=2", "category")[:40]
    for value in ("9", "0", "-1", "1e999", "2.0", "\u0663", "1,2", "12345", "null"):
        bad += [value.encode(), json.dumps({"category": value}).encode()]
    for pages in ("-1", "1e999", "1.5", "true", '"2"', "10000000"):
        bad.append(f'{{"category": 2, "max_pages": {pages}}}'.encode())
    bad += [
        f"{feed}?categoryType=1e999".encode(),
        f"{feed}?categoryType=99".encode(),
        f"{base}/@someone".encode(),
    ]
    return [entry.encode() for entry in good_text], bad, expected


def _first_page(category: int, count: int) -> list[Any]:
    return list(DATASET.videos_by_category[category][:count])


def _mixed(good: list[bytes], bad: list[bytes]) -> list[bytes]:
    entries = good + bad
    random.Random(7).shuffle(entries)
    return entries


def _set_aside(client: redis.Redis, spider: str) -> list[dict[str, Any]]:
    raw = client.lrange(f"{spider}:start_urls:invalid", 0, -1)
    return [json.loads(record) for record in cast(list[bytes], raw)]


def _shown(raw: bytes) -> str:
    return raw.decode("utf-8", "backslashreplace")[:MAX_BYTES]


def _crawl_fuzzed(
    crawl: Crawl,
    client: redis.Redis,
    spider: str,
    entries: tuple[list[bytes], list[bytes], Any],
    trap: LoopbackServer,
) -> list[dict[str, Any]]:
    good, bad, _ = entries
    assert len(bad) >= 200
    client.lpush(f"{spider}:start_urls", *_mixed(good, bad))
    settings = {"EXPLORE_MAX_PAGES": 1, "EXPLORE_HANDOFF_SPIDER": "", "START_BATCH_SIZE": 50}
    result = crawl(spider, settings=settings, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Error caught on signal handler" not in result.stderr
    assert client.llen(f"{spider}:start_urls") == 0
    assert client.zcard("{" + f"{spider}:start_urls" + "}:leases") == 0
    assert trap.connections == 0, trap.paths
    records = _set_aside(client, spider)
    assert sorted(record["entry"] for record in records) == sorted(map(_shown, bad))
    assert all(record["reason"] for record in records)
    return records


def test_profiles_survive_hostile_entries(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox, trap: LoopbackServer
) -> None:
    entries = profiles_entries(sandbox.url, trap.url)
    _crawl_fuzzed(crawl, redis_client, "profiles", entries, trap)
    stored = set(crawl.mongo.db.profiles.distinct("unique_id"))
    assert stored == entries[2]
    served = sandbox.admin("stats")["by_path"]
    assert set(served) == {f"/@{unique_id}" for unique_id in entries[2]}


def test_explore_survives_hostile_entries(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox, trap: LoopbackServer
) -> None:
    entries = explore_entries(sandbox.url, trap.url)
    records = _crawl_fuzzed(crawl, redis_client, "explore", entries, trap)
    assert set(crawl.mongo.db.videos.distinct("video_id")) == entries[2]
    served = sandbox.admin("stats")["by_path"]
    assert all(path.startswith("/api/") for path in served), served
    assert sum(served.values()) == len(entries[0])
    reasons = {record["reason"].split(":")[0] for record in records}
    assert {"foreign_host", "credentials", "bad_url", "too_deep", "too_large"} <= reasons
    assert {"not_utf8", "control_characters", "unknown_category", "bad_max_pages"} <= reasons
