"""The tests' forked ``scrapy`` commands behave as ``python -m scrapy`` started afresh does."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests import forkserver
from tests.harness import ROOT, poll, scrapy


def _fresh(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*forkserver.SCRAPY, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("database", ["first", "second"])
def test_each_command_reads_its_own_environment(database: str) -> None:
    env = {**os.environ, "MONGO_DATABASE": database}
    forked = scrapy("settings", "--get", "MONGO_DATABASE", env=env)
    assert forked.returncode == 0, forked.stderr
    assert forked.stdout.strip() == database
    assert forked.stdout == _fresh("settings", "--get", "MONGO_DATABASE", env=env).stdout


def test_a_failing_command_has_the_same_status_and_message_as_a_fresh_one() -> None:
    env = dict(os.environ)
    forked = scrapy("crawl", "no-such-spider", env=env)
    fresh = _fresh("crawl", "no-such-spider", env=env)
    assert forked.returncode == fresh.returncode != 0
    assert forked.stderr.splitlines()[-1] == fresh.stderr.splitlines()[-1]
    assert "no-such-spider" in forked.stderr


@pytest.mark.parametrize(
    ("signal_number", "status"),
    [(signal.SIGKILL, -signal.SIGKILL), (signal.SIGINT, 0), (signal.SIGABRT, -signal.SIGABRT)],
)
def test_a_forked_command_is_a_process_of_its_own_that_a_signal_ends(
    tmp_path: Path, signal_number: int, status: int
) -> None:
    command = [*forkserver.SCRAPY, "status", "--serve", "0", "-s", "REDIS_URL=redis://127.0.0.1:1"]
    if not forkserver.forkable(command, ROOT, os.environ):
        pytest.skip("CRAWLER_TEST_FORK=0: no command is forked")
    log = tmp_path / "out"
    with open(log, "wb") as out:
        served = forkserver.start(command, ROOT, dict(os.environ), out, out)
        assert isinstance(served, forkserver.Forked)
        assert forkserver.SERVER.process is not None
        assert served.pid not in (os.getpid(), forkserver.SERVER.process.pid)
        assert served.poll() is None
        # The command says where it serves once its reactor runs, and handles SIGINT.
        poll(lambda: b"Fleet page at http://" in log.read_bytes(), what="the page's address")
        served.send_signal(signal_number)
        assert served.wait(30) == status, log.read_text()
        assert served.poll() == status
    if signal_number == signal.SIGABRT:  # its threads' stacks, for a test to show (dump_stacks)
        assert "(most recent call first)" in log.read_text()
