"""A command's output read by a reader that stops early (``scrapy frontier links | head``) ends
there quietly, exit status 1, as a command-line tool's does: no traceback, no "Exception
ignored" at exit."""

from __future__ import annotations

import os
import subprocess

import pytest
import redis

from tests import forkserver
from tests.harness import ROOT, Crawl


@pytest.mark.parametrize(
    "args",
    [("frontier", "links"), ("frontier", "links", "dead"), ("status", "profiles")],
)
def test_output_to_a_closed_pipe_ends_quietly(
    crawl: Crawl, redis_client: redis.Redis, args: tuple[str, ...]
) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line: every write fails with EPIPE
    try:
        done = subprocess.run(
            [*forkserver.SCRAPY, *args],
            cwd=ROOT,
            env=crawl.env(),
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write)
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stderr == ""
