"""``scrapy fleet`` when AWS cannot be used: one line, no traceback. No region is a usage error
(exit 2); a cloud that does not answer or refuses is exit 1, nothing launched."""

from __future__ import annotations

import os
from pathlib import Path

from devtools.services import free_port
from tests.harness import scrapy


def _env(home: Path, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FLEET_"))}
    (home / "aws").mkdir(exist_ok=True)
    empty = home / "aws" / "config"
    empty.write_text("")
    return {**env, "HOME": str(home), "AWS_CONFIG_FILE": str(empty),
            "AWS_SHARED_CREDENTIALS_FILE": str(empty), **more}  # fmt: skip


def test_fleet_list_without_a_region_says_so_in_one_line(tmp_path: Path) -> None:
    done = scrapy("fleet", "list", env=_env(tmp_path))
    assert done.returncode == 2, done.stderr[-2000:]
    assert "no AWS region: set FLEET_REGION" in done.stderr
    assert "Traceback" not in done.stderr


def test_fleet_list_when_the_cloud_does_not_answer_says_so_in_one_line(tmp_path: Path) -> None:
    env = _env(
        tmp_path,
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ACCESS_KEY_ID="test",
        AWS_SECRET_ACCESS_KEY="test",
        AWS_MAX_ATTEMPTS="1",
    )
    unreachable = f"http://127.0.0.1:{free_port()}"
    done = scrapy("fleet", "list", "-s", f"AWS_ENDPOINT_URL={unreachable}", env=env)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "AWS refused: Could not connect to the endpoint URL" in done.stderr
    assert "Traceback" not in done.stderr
