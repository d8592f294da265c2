"""`python -m devtools.services` starts private servers once, reports them and stops them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pymongo
import pytest
import redis

from devtools.services import free_port, port_open
from tests.harness import ROOT


def _services(
    action: str, state_dir: Path, *ports: int, **env: str
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "devtools.services", action, "--state-dir", str(state_dir)]
    if ports:
        command += ["--redis-port", str(ports[0]), "--mongo-port", str(ports[1])]
    environment = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "MONGO_URI")}
    return subprocess.run(
        command, cwd=ROOT, env={**environment, **env}, capture_output=True, text=True, timeout=120
    )


def test_up_is_idempotent_and_down_stops(tmp_path: Path) -> None:
    ports = (free_port(), free_port())
    try:
        first = _services("up", tmp_path, *ports)
        assert first.returncode == 0, first.stderr
        assert first.stdout.count("started") == 2
        second = _services("up", tmp_path, *ports)
        assert second.stdout.count("already running") == 2

        assert redis.Redis(port=ports[0]).ping()
        client: pymongo.MongoClient[dict[str, object]] = pymongo.MongoClient(port=ports[1])
        assert client.admin.command("ping")["ok"] == 1
        client.close()
        status = _services("status", tmp_path)
        assert f"127.0.0.1:{ports[0]}" in status.stdout
        assert f"127.0.0.1:{ports[1]}" in status.stdout
    finally:
        stopped = _services("down", tmp_path)
    assert stopped.stdout.count("stopped") == 2
    assert not port_open(ports[0])
    assert not port_open(ports[1])
    assert _services("status", tmp_path).stdout.count("down") == 2


def test_environment_urls_mean_nothing_is_started(tmp_path: Path) -> None:
    ports = (free_port(), free_port())
    result = _services(
        "up", tmp_path, *ports, REDIS_URL="redis://example:6379", MONGO_URI="mongodb://example"
    )
    assert result.returncode == 0
    assert result.stdout.count("nothing started") == 2
    assert not port_open(ports[0])


def test_a_taken_port_is_a_clear_error(tmp_path: Path, redis_url: str) -> None:
    taken = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    result = _services("up", tmp_path, taken, free_port())
    assert result.returncode == 1
    assert f"port {taken} is taken" in result.stderr
    _services("down", tmp_path)


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path: Path) -> None:
    assert not list(tmp_path.glob("*.pid"))
