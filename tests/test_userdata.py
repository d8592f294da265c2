"""The EC2 user data of ``scrapy fleet launch``, run with bash outside the checkout.

The script runs as rendered, with only what needs AWS or the internet replaced: WORKER_HOME and
WORKER_LOG point into a temporary directory, METADATA_URL at a local stand-in for the instance
metadata service, ``poweroff`` on PATH only says it was called, SSM is a moto server (the real
``aws`` CLI talks to it) and pip has no index: the worker's virtualenv already holds the
dependencies (those of .venv), and FLEET_INSTALL is a wheel built from a copy of the project.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import boto3
import pytest
import redis

from crawler.aws.userdata import render
from devtools.services import free_port, start_server
from sandbox.seed import build_dataset
from tests.harness import ROOT, Mongo, Sandbox

pytestmark = pytest.mark.integration

USERS = sorted(build_dataset().authors_by_unique_id)[:3]
INSTANCE_ID = "i-0123456789abcdef0"
TOKEN = "metadata-token"
REGION = "us-east-1"
POWEROFF = "poweroff: the instance stops here"
PROJECT_FILES = ("pyproject.toml", "setup.py", "README.md")
PROJECT_DIRS = ("crawler", "sandbox")
# The console scripts ``pip install`` would have written into the worker's virtualenv.
ENTRY_POINTS = {"pip": ("pip._internal.cli.main", "main"), "scrapy": ("scrapy.cmdline", "execute")}


class _Metadata(BaseHTTPRequestHandler):
    """IMDSv2: a token from PUT /latest/api/token, then GETs that present it."""

    answers: ClassVar[dict[str, str]] = {
        "instance-id": INSTANCE_ID,
        "placement/region": "us-east-1",
    }

    def do_PUT(self) -> None:
        self._answer(200 if self.path == "/latest/api/token" else 404, TOKEN)

    def do_GET(self) -> None:
        if self.headers.get("X-aws-ec2-metadata-token") != TOKEN:
            self._answer(401, "")
            return
        answer = self.answers.get(self.path.removeprefix("/latest/meta-data/"))
        self._answer(200 if answer else 404, answer or "")

    def _answer(self, status: int, body: str) -> None:
        self.send_response(status)
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def metadata_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metadata)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project as a wheel, built from a copy (a build writes into its source tree)."""
    copy = tmp_path_factory.mktemp("project")
    for name in PROJECT_FILES:
        shutil.copy2(ROOT / name, copy / name)
    for name in PROJECT_DIRS:
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheels")
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(copy)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    (built,) = out.glob("crawler-*.whl")
    return built


@pytest.fixture(scope="module")
def worker_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A worker's home outside the checkout, its virtualenv holding the project's dependencies
    (those of .venv) but not the project, which the user data installs."""
    home = tmp_path_factory.mktemp("worker-home")
    venv = home / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    # A bare path line: the .pth files of .venv (its editable install of the checkout) stay out.
    (site / "site-packages" / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"])
    python = venv / "bin" / "python"
    for name, (module, function) in ENTRY_POINTS.items():
        script = venv / "bin" / name
        script.write_text(
            f"#!{python}\nimport sys\nfrom {module} import {function}\nsys.exit({function}())\n"
        )
        script.chmod(0o755)
    assert ROOT.resolve() not in home.resolve().parents
    return home


@pytest.fixture(scope="module")
def shims(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``poweroff`` that only says it was called, ahead of the real one on PATH."""
    directory = tmp_path_factory.mktemp("shims")
    poweroff = directory / "poweroff"
    poweroff.write_text(f"#!/bin/sh\necho '{POWEROFF}'\n")
    poweroff.chmod(0o755)
    return directory


@dataclass
class Worker:
    """Runs a rendered user-data script with bash the way cloud-init would, locally."""

    home: Path
    wheel: Path
    env: dict[str, str]

    def script(self, redis_url: str, mongo: Mongo, secrets: str, **settings: Any) -> str:
        env_values = {"REDIS_URL": redis_url, "MONGO_URI": mongo.uri}
        return render(
            "profiles",
            str(self.wheel),
            secrets=secrets,
            ssm_names={"REDIS_URL": "/crawler/REDIS_URL", "MONGO_URI": "/crawler/MONGO_URI"},
            env_values=env_values if secrets == "env" else {},
            database=mongo.database,
            crawl_settings={"BAN_POLICY": "stop", **{k: str(v) for k, v in settings.items()}},
        )

    def run(
        self, script: str, log: Path, timeout: float = 90, env: dict[str, str] | None = None
    ) -> int:
        path = log.with_suffix(".sh")
        path.write_text(script)
        process = subprocess.Popen(
            ["bash", str(path)],
            cwd=log.parent,
            env={**self.env, "WORKER_LOG": str(log), **(env or {})},
            start_new_session=True,
        )
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            message = f"the worker still runs after {timeout} s:\n{log.read_text()[-3000:]}"
            raise AssertionError(message) from None


@pytest.fixture
def worker(worker_home: Path, wheel: Path, shims: Path, metadata_url: str) -> Worker:
    kept = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("REDIS_", "MONGO_", "SCRAPY_", "PYTHON", "VIRTUAL_ENV"))
    }
    env = {
        **kept,
        "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}",
        "WORKER_HOME": str(worker_home),
        "METADATA_URL": metadata_url,
        # No index: the dependencies are in the virtualenv already.
        "PIP_NO_INDEX": "1",
    }
    assert shutil.which("poweroff", path=env["PATH"]) == str(shims / "poweroff")
    return Worker(worker_home, wheel, env)


def _crawl_settings(sandbox: Sandbox) -> dict[str, Any]:
    return {
        "PROFILES_BASE_URL": sandbox.url,
        "MAX_IDLE_TIME_BEFORE_CLOSE": 1,
        "POLITENESS_RATE": 0,
    }


def test_user_data_installs_the_project_and_crawls_outside_the_checkout(
    worker: Worker, redis_url: str, redis_client: redis.Redis, mongo: Mongo, sandbox: Sandbox
) -> None:
    redis_client.lpush("profiles:start_urls", *USERS)
    script = worker.script(redis_url, mongo, "env", **_crawl_settings(sandbox))
    log = worker.home.parent / "crawl.log"
    status = worker.run(script, log)
    text = log.read_text()
    assert status == 0, text[-3000:]
    assert POWEROFF in text
    stored = {doc["unique_id"] for doc in mongo.db.profiles.find({}, {"unique_id": 1})}
    assert stored == set(USERS), text[-3000:]
    # No console that runs code in the worker: neither telnet nor Scrapy's RemoteControl.
    extensions = text[text.index("Enabled extensions:") : text.index("Overridden settings:")]
    assert "FleetMonitor" in extensions
    assert "RemoteControl" not in extensions
    assert "TelnetConsole" not in extensions
    assert "Remote control HTTP server" not in text
    # The crawl used the installed package, not the checkout.
    installed = subprocess.run(
        [str(worker.home / "venv" / "bin" / "python"), "-c", "import crawler; print(crawler)"],
        cwd=worker.home,
        env=worker.env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert str(worker.home / "venv") in installed.stdout


def test_an_invalid_setting_stops_the_worker_instead_of_retrying(
    worker: Worker, redis_url: str, redis_client: redis.Redis, mongo: Mongo, sandbox: Sandbox
) -> None:
    settings = {**_crawl_settings(sandbox), "MONGO_BATCH_SIZE": -1}
    log = worker.home.parent / "invalid.log"
    status = worker.run(worker.script(redis_url, mongo, "env", **settings), log, timeout=60)
    text = log.read_text()
    assert status == 2, text[-3000:]
    assert text.count("Crawl not started: MONGO_BATCH_SIZE = -1") == 1
    assert "crawler worker stopped: scrapy crawl exited with status 2" in text
    assert POWEROFF not in text


@pytest.fixture(scope="module")
def aws_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A moto server for SSM and the environment that points the ``aws`` CLI at it."""
    if shutil.which("aws") is None:
        pytest.skip("no aws CLI")
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    server = start_server("moto", command, port, log)
    yield {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    }
    server.stop()


def _put_parameters(aws_env: dict[str, str], values: dict[str, str]) -> None:
    ssm = boto3.session.Session(
        aws_access_key_id=aws_env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=aws_env["AWS_SECRET_ACCESS_KEY"],
        region_name=REGION,
    ).client("ssm", endpoint_url=aws_env["AWS_ENDPOINT_URL"])
    for name, value in values.items():
        ssm.put_parameter(Name=name, Value=value, Type="SecureString", Overwrite=True)


def test_a_banned_worker_reads_ssm_secrets_and_reports_its_instance(
    worker: Worker,
    aws_env: dict[str, str],
    redis_url: str,
    redis_client: redis.Redis,
    mongo: Mongo,
    sandbox: Sandbox,
) -> None:
    _put_parameters(aws_env, {"/crawler/REDIS_URL": redis_url, "/crawler/MONGO_URI": mongo.uri})
    ban = {"enabled": True, "max_requests": 2, "window_seconds": 60, "ban_mode": "403"}
    sandbox.admin("config", {"rate_limit": {**ban, "ban_seconds": 60}})
    users = sorted(build_dataset().authors_by_unique_id)[:12]
    redis_client.lpush("profiles:start_urls", *(json.dumps({"unique_id": u}) for u in users))
    settings = {**_crawl_settings(sandbox), "CONCURRENT_REQUESTS": 1}
    script = worker.script(redis_url, mongo, "ssm", **settings)
    assert redis_url not in script
    log = worker.home.parent / "banned.log"
    status = worker.run(script, log, env=aws_env)
    text = log.read_text()
    assert status == 0, text[-3000:]
    assert f"reported {INSTANCE_ID} of profiles as banned" in text
    assert POWEROFF not in text
    assert redis_client.hexists("{profiles}:fleet:banned", INSTANCE_ID)
