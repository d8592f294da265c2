"""`make demo` with a real fleet's settings exported: it never touches that fleet."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.request import urlopen

import pytest
import redis
from bson import json_util

from devtools.services import pid_alive
from tests.harness import ROOT, Mongo

pytestmark = pytest.mark.integration

FLEET_STATS = {"item_scraped_count": "326", "downloader/request_count": "400"}
SPILLED = {
    "collection": "videos",
    "filter": {"video_id": "spilled-1"},
    "update": {"$set": {"video_id": "spilled-1", "desc": "waits for MongoDB"}},
}


def _fill_fleet(client: redis.Redis, mongo: Mongo, spill_dir: Path) -> None:
    """What a running fleet holds: frontier, start entries, stats, stored items, a spill file."""
    client.lpush("explore:start_urls", json.dumps({"category": 5, "max_pages": 3}))
    client.lpush("profiles:start_urls", "some.user", "@other.user")
    for spider in ("explore", "profiles"):
        for name, value in FLEET_STATS.items():
            client.hset("{" + spider + "}:stats", name, value)
    client.rpush("{profiles}:queue:0", json.dumps({"u": "https://example/@x"}))
    client.zadd("{profiles}:queues", {"0": 0})
    client.sadd("{explore}:handed_authors", "some.user")
    client.rpush("explore:start_urls:invalid", json.dumps({"entry": "x", "reason": "bad"}))
    mongo.db.videos.insert_one({"video_id": "fleet-1", "desc": "stored by the fleet"})
    mongo.db.profiles.insert_one({"unique_id": "some.user", "status": "ok"})
    spill_dir.mkdir()
    (spill_dir / "explore-999999.jsonl").write_text(json_util.dumps(SPILLED) + "\n")


def _redis_snapshot(client: redis.Redis) -> dict[str, Any]:
    keys = sorted(client.scan_iter(count=1000))
    return {
        "keyspace": client.info("keyspace"),
        "keys": {key: (client.dump(key), client.pttl(key)) for key in keys},
    }


def _mongo_snapshot(mongo: Mongo) -> dict[str, Any]:
    return {
        "databases": sorted(mongo.client.list_database_names()),
        "documents": {
            name: list(mongo.db[name].find().sort("_id"))
            for name in sorted(mongo.db.list_collection_names())
        },
    }


def _fleet_environment(redis_url: str, mongo: Mongo, spill_dir: Path) -> dict[str, str]:
    """A shell as the README's "Running it for real" leaves it."""
    return {
        **os.environ,
        "REDIS_URL": redis_url,
        "MONGO_URI": mongo.uri,
        "MONGO_DATABASE": mongo.database,
        "MONGO_SPILL_DIR": str(spill_dir),
        "SCRAPY_SETTINGS_MODULE": "crawler.settings",
    }


def _demo(state_dir: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "devtools.demo", "--quick", "--state-dir", str(state_dir)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def _demo_watching_its_page(
    state_dir: Path, env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], str]:
    """The demo, and its fleet page as fetched while the demo ran."""
    command = [sys.executable, "-m", "devtools.demo", "--quick", "--state-dir", str(state_dir)]
    with subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        assert process.stdout is not None
        lines: list[str] = []
        for line in process.stdout:
            lines.append(line)
            if "fleet page at " in line:
                break
        assert lines, process.stderr
        assert "fleet page at " in lines[-1], "".join(lines)
        url = lines[-1].split("fleet page at ")[1].split()[0]
        assert url.startswith("http://127.0.0.1:"), url
        with urlopen(url, timeout=30) as response:
            page = response.read().decode()
        out, err = process.communicate(timeout=180)
    stdout = "".join(lines) + out
    return subprocess.CompletedProcess(command, process.returncode, stdout, err), page


def test_the_demo_leaves_an_exported_fleet_untouched(
    redis_url: str, redis_client: redis.Redis, mongo: Mongo, tmp_path: Path
) -> None:
    spill_dir = tmp_path / "fleet-spill"
    _fill_fleet(redis_client, mongo, spill_dir)
    redis_before, mongo_before = _redis_snapshot(redis_client), _mongo_snapshot(mongo)
    spilled_before = sorted(path.read_text() for path in spill_dir.iterdir())

    result, page = _demo_watching_its_page(
        tmp_path / "demo", _fleet_environment(redis_url, mongo, spill_dir)
    )

    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert _redis_snapshot(redis_client) == redis_before
    assert _mongo_snapshot(mongo) == mongo_before
    assert sorted(path.read_text() for path in spill_dir.iterdir()) == spilled_before
    # The demo crawled on its own servers, and stopped them.
    videos = re.search(r"videos\s+(\d+) documents", result.stdout)
    assert videos is not None, result.stdout
    assert int(videos.group(1)) > 0
    places = re.search(r"places\s+(\d+) documents", result.stdout)
    assert places is not None, result.stdout
    assert int(places.group(1)) > 0
    # Its fleet page showed every spider while it ran (the page is served by the demo's own
    # process, which has exited): the seeded ones in full, profiles in full or, before explore
    # handed it work, on the line of idle spiders.
    for spider in ("explore", "maps"):
        assert f'<section id="{spider}">' in page
    idle = page.partition('<p class="idle" id="idle">')[2]
    assert '<section id="profiles">' in page or "<b>profiles</b> (never ran)" in idle
    assert "start entry set aside: 'not-a-category'" in result.stdout
    # By pid, not by port: a server of a test running in parallel may listen there by now.
    pids = [int(pid) for pid in re.findall(r"started \(pid (\d+)\) on port \d+", result.stdout)]
    assert len(pids) == 2
    assert not any(pid_alive(pid) for pid in pids)
    assert not list((tmp_path / "demo").glob("*.pid"))
    assert any((tmp_path / "demo" / "mongodb-data").iterdir())


def test_the_demo_refuses_while_a_server_runs_on_its_state_directory(tmp_path: Path) -> None:
    state_dir = (tmp_path / "demo").resolve()
    state_dir.mkdir()
    # A live process recorded there, as `python -m devtools.services up --state-dir` leaves it.
    (state_dir / "mongodb.pid").write_text(f"{os.getpid()} 27017\n")
    result = _demo(state_dir, dict(os.environ))
    assert result.returncode == 1
    assert f"mongodb (pid {os.getpid()}, port 27017) runs on {state_dir}" in result.stderr
    assert "python -m devtools.services down --state-dir" in result.stderr
    assert not (state_dir / "mongodb-data").exists()
