"""Deployment paths: Scrapyd, Zyte Scrapy Cloud, containers and settings precedence.

Scrapyd runs for real on a free loopback port and its job crawls the sandbox into MongoDB. The
container files cannot run here (no Docker engine), so they are parsed and checked against the
code: spider names from `scrapy list`, environment variables crawler/settings.py reads, commands.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode
from urllib.request import Request, urlopen

import pytest
import yaml

from devtools.services import free_port
from sandbox.seed import build_dataset
from tests.harness import ROOT, SPILL_DIR, Mongo, Sandbox, closed_port, scrapy

BIN = Path(sys.executable).parent
# What an egg build needs from the working tree (setup.py reads pyproject.toml and README.md).
PROJECT_FILES = ("scrapy.cfg", "setup.py", "pyproject.toml", "README.md", "scrapinghub.yml")
PROJECT_DIRS = ("crawler", "sandbox", "devtools", "deploy/zyte")
SETTINGS_ENV = re.compile(r"""os\.environ\.get\(\s*["']([A-Z_]+)["']""")


def _load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _load_yaml_all(path: Path) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


@pytest.fixture(scope="module")
def spiders() -> set[str]:
    result = scrapy("list")
    assert result.returncode == 0, result.stderr
    return set(result.stdout.split())


@pytest.fixture(scope="module")
def settings_env() -> set[str]:
    """Environment variables crawler/settings.py reads."""
    return set(SETTINGS_ENV.findall((ROOT / "crawler" / "settings.py").read_text()))


def _project_copy(dest: Path) -> Path:
    """The project as a deploy tool sees it, away from the working tree (builds write there)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in PROJECT_FILES:
        shutil.copy2(ROOT / name, dest / name)
    for name in PROJECT_DIRS:
        shutil.copytree(
            ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    return dest


def _egg_entry_points(egg: Path) -> configparser.ConfigParser:
    with zipfile.ZipFile(egg) as archive:
        entry_points = configparser.ConfigParser()
        entry_points.read_string(archive.read("EGG-INFO/entry_points.txt").decode())
    return entry_points


def _assert_egg_holds_the_project(egg: Path) -> None:
    with zipfile.ZipFile(egg) as archive:
        names = set(archive.namelist())
    modules = (
        "settings.py",
        "spiders/explore.py",
        "pipelines.py",
        "middlewares.py",
        "storage/mongo.py",
        "frontier/scripts/pop.lua",
        "bans/scripts/breaker.lua",
    )
    for module in modules:
        assert f"crawler/{module}" in names
    # Only the crawler ships: the sandbox, the dev tools, the benchmarks and the tests stay home.
    for home in ("tests/", "sandbox/", "devtools/", "bench/"):
        assert not any(name.startswith(home) for name in names), home
    assert _egg_entry_points(egg)["scrapy"]["settings"] == "crawler.settings"


# --- Scrapyd -------------------------------------------------------------------------------------


class Scrapyd:
    def __init__(self, url: str) -> None:
        self.url = url

    def get(self, endpoint: str, **params: str) -> Any:
        with urlopen(f"{self.url}{endpoint}?{urlencode(params)}", timeout=30) as response:
            return json.loads(response.read())

    def post(self, endpoint: str, data: list[tuple[str, str]]) -> Any:
        request = Request(f"{self.url}{endpoint}", data=urlencode(data).encode(), method="POST")
        with urlopen(request, timeout=30) as response:
            return json.loads(response.read())


def _scrapyd_conf(workdir: Path, port: int) -> Path:
    """deploy/scrapyd/scrapyd.conf with this test's port, directories and a short poll."""
    conf = configparser.ConfigParser()
    conf.read(ROOT / "deploy" / "scrapyd" / "scrapyd.conf")
    section = conf["scrapyd"]
    section.update(
        bind_address="127.0.0.1",
        http_port=str(port),
        poll_interval="0.2",
        logs_dir=str(workdir / "logs"),
        eggs_dir=str(workdir / "eggs"),
        dbs_dir=str(workdir / "dbs"),
    )
    path = workdir / "scrapyd.conf"
    with path.open("w") as handle:
        conf.write(handle)
    return path


def _wait_until(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except OSError:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.fixture
def scrapyd_env(redis_url: str, mongo: Mongo) -> dict[str, str]:
    """Scrapyd's environment: every job inherits it. MONGO_DATABASE is a decoy that the
    job's ``setting=`` must override."""
    env = dict(os.environ)
    env.update(
        REDIS_URL=redis_url,
        MONGO_URI=mongo.uri,
        MONGO_DATABASE=f"{mongo.database}_env",
        MONGO_SPILL_DIR=str(SPILL_DIR),
    )
    return env


@pytest.fixture
def scrapyd(tmp_path: Path, scrapyd_env: dict[str, str]) -> Iterator[Scrapyd]:
    workdir = tmp_path / "scrapyd"
    workdir.mkdir()
    port = free_port()
    _scrapyd_conf(workdir, port)
    log = (workdir / "scrapyd.out").open("w")
    process = subprocess.Popen(
        [str(BIN / "scrapyd"), "--pidfile="],
        cwd=workdir,
        env=scrapyd_env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = Scrapyd(f"http://127.0.0.1:{port}/")
    try:
        _wait_until(
            lambda: process.poll() is None and server.get("daemonstatus.json")["status"] == "ok",
            30,
            "scrapyd to answer",
        )
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _deploy(tmp_path: Path, scrapyd: Scrapyd, env: dict[str, str]) -> None:
    """What a user runs: build the egg from the working tree and upload it to the target."""
    project = _project_copy(tmp_path / "project")
    deployed = subprocess.run(
        [str(BIN / "scrapyd-deploy"), "production", "--version", "r1"],
        cwd=project,
        env={**env, "SCRAPYD_URL": scrapyd.url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert deployed.returncode == 0, deployed.stderr
    assert json.loads(deployed.stdout)["status"] == "ok"


def _wait_finished(scrapyd: Scrapyd, jobs: set[str], timeout: float) -> None:
    def finished() -> bool:
        listed = scrapyd.get("listjobs.json", project="crawler")
        return jobs <= {entry["id"] for entry in listed["finished"]}

    _wait_until(finished, timeout, f"jobs {sorted(jobs)} to finish")


@pytest.mark.integration
def test_scrapyd_deploy_schedule_and_store(
    tmp_path: Path,
    scrapyd: Scrapyd,
    scrapyd_env: dict[str, str],
    redis_client: Any,
    mongo: Mongo,
    sandbox: Sandbox,
) -> None:
    _deploy(tmp_path, scrapyd, scrapyd_env)
    assert scrapyd.get("listprojects.json")["projects"] == ["crawler"]
    _assert_egg_holds_the_project(tmp_path / "scrapyd" / "eggs" / "crawler" / "r1.egg")
    listed = scrapyd.get("listspiders.json", project="crawler")["spiders"]
    assert {"explore", "profiles"} <= set(listed)

    users = sorted(build_dataset().authors_by_unique_id)[:3]
    scheduled = scrapyd.post(
        "schedule.json",
        [
            ("project", "crawler"),
            ("spider", "profiles"),
            ("users", ",".join(users)),
            ("setting", f"PROFILES_BASE_URL={sandbox.url}"),
            ("setting", "MAX_IDLE_TIME_BEFORE_CLOSE=1"),
            ("setting", "POLITENESS_RATE=0"),
            ("setting", f"MONGO_DATABASE={mongo.database}"),
        ],
    )
    assert scheduled["status"] == "ok", scheduled
    job = scheduled["jobid"]
    _wait_finished(scrapyd, {job}, 60)
    log = (tmp_path / "scrapyd" / "logs" / "crawler" / "profiles" / f"{job}.log").read_text()
    assert "'finish_reason': 'finished'" in log, log[-3000:]

    stored = {doc["unique_id"] for doc in mongo.db.profiles.find({}, {"unique_id": 1})}
    assert stored == set(users)
    # Scrapyd's `setting=` wins over the environment Scrapyd passes to its jobs.
    decoy = mongo.client[f"{mongo.database}_env"]
    assert decoy.profiles.count_documents({}) == 0
    mongo.client.drop_database(decoy.name)


# A job that cannot start: its setting= (a port that refuses connections for {port}), its exit
# status and the ERROR line its log holds.
BAD_STARTS = (
    (
        "REDIS_URL=redis://127.0.0.1:{port}/0",
        1,
        "Redis at redis://127.0.0.1:{port}/0 is unreachable",
    ),
    (
        "MONGO_URI=mongodb://127.0.0.1:{port}/",
        1,
        "MongoDB at mongodb://127.0.0.1:{port}/ is unavailable",
    ),
    ("MONGO_BATCH_SIZE=-1", 2, "MONGO_BATCH_SIZE = -1: must be an integer from 1 to 100000"),
    ("LOG_LEVEL=LOUD", 2, "LOG_LEVEL = LOUD: must be one of CRITICAL, ERROR, "),
)


@pytest.mark.integration
def test_scrapyd_job_that_cannot_start_logs_one_error_line(
    tmp_path: Path, scrapyd: Scrapyd, scrapyd_env: dict[str, str]
) -> None:
    """Each job ends at once, its own log holding one ERROR line and no traceback; Scrapyd's
    log says its exit status."""
    _deploy(tmp_path, scrapyd, scrapyd_env)
    jobs: dict[str, tuple[str, int, str]] = {}
    with closed_port() as port:
        for value, status, expected in BAD_STARTS:
            scheduled = scrapyd.post(
                "schedule.json",
                [
                    ("project", "crawler"),
                    ("spider", "profiles"),
                    ("setting", value.format(port=port)),
                    ("setting", "MONGO_CONNECT_TIMEOUT_MS=500"),
                ],
            )
            jobs[scheduled["jobid"]] = (value, status, expected.format(port=port))
        _wait_finished(scrapyd, set(jobs), 60)
    scrapyd_log = (tmp_path / "scrapyd" / "scrapyd.out").read_text()
    for job, (value, status, expected) in jobs.items():
        log = (tmp_path / "scrapyd" / "logs" / "crawler" / "profiles" / f"{job}.log").read_text()
        errors = [line for line in log.splitlines() if " ERROR: " in line]
        assert len(errors) == 1, (value, log[-3000:])
        assert "Traceback" not in log, (value, log[-3000:])
        assert f" ERROR: Crawl not started: {expected}" in errors[0], value
        died = f"Process died: exitstatus={status} project='crawler' spider='profiles' job='{job}'"
        assert died in scrapyd_log, value


def test_scrapy_cfg_deploy_targets_take_the_url_from_the_environment() -> None:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ROOT / "scrapy.cfg")
    assert cfg["deploy"]["project"] == "crawler"
    assert cfg["deploy:production"]["url"] == "${SCRAPYD_URL}"
    assert cfg["deploy:local"]["url"].startswith("http://127.0.0.1:6800")
    for section in cfg.sections():
        assert not {"username", "password"} & set(cfg[section]), section


def test_scrapyd_conf_keeps_items_out_of_feeds() -> None:
    conf = configparser.ConfigParser()
    conf.read(ROOT / "deploy" / "scrapyd" / "scrapyd.conf")
    section = conf["scrapyd"]
    assert section["items_dir"] == ""
    assert section["password"] == ""
    assert int(section["http_port"]) == 6800
    assert float(section["poll_interval"]) > 0


# --- Zyte Scrapy Cloud ---------------------------------------------------------------------------


def test_shub_builds_an_egg_with_the_project_and_its_settings(tmp_path: Path) -> None:
    project = _project_copy(tmp_path / "project")
    home = tmp_path / "home"
    home.mkdir()
    egg = tmp_path / "crawler.egg"
    env = {
        **os.environ,
        "HOME": str(home),
        # shub wants a key even to build; a dummy one shows it is read from the environment.
        "SHUB_APIKEY": "0" * 32,
    }
    result = subprocess.run(
        [str(BIN / "shub"), "deploy", "1", "--build-egg", str(egg)],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    _assert_egg_holds_the_project(egg)


def test_scrapinghub_yml_names_stack_and_requirements_and_no_secrets() -> None:
    text = (ROOT / "scrapinghub.yml").read_text()
    config = yaml.safe_load(text)
    assert config["stacks"]["default"].startswith("scrapy:")
    assert "apikey" not in text.lower().replace("shub_apikey", "")
    assert not re.search(r"(redis|mongodb)://", text)

    requirements = ROOT / config["requirements"]["file"]
    listed = {
        re.split(r"[<>=!~\[ ]", line, maxsplit=1)[0].lower()
        for line in requirements.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    runtime = {
        re.split(r"[<>=!~\[ ]", dep, maxsplit=1)[0].lower()
        for dep in pyproject["project"]["dependencies"]
    }
    # Scrapy comes with the stack.
    assert listed == runtime - {"scrapy"}
    stack_scrapy = config["stacks"]["default"].split(":")[1]
    scrapy_spec = next(d for d in pyproject["project"]["dependencies"] if d.startswith("scrapy>"))
    minimum = re.search(r">=\s*([\d.]+)", scrapy_spec)
    assert minimum is not None
    as_tuple = [int(part) for part in stack_scrapy.split("-")[0].split(".")[:2]]
    assert as_tuple >= [int(part) for part in minimum.group(1).split(".")[:2]]


# --- Containers ----------------------------------------------------------------------------------


def test_dockerfile_installs_the_project_chromium_and_scrapyd() -> None:
    text = (ROOT / "Dockerfile").read_text()
    instructions = re.sub(r"\\\n", " ", text)
    assert re.search(r"^FROM python:3\.1[1-9]", instructions, re.M)
    assert re.search(r"apt-get install [^\n]*\bchromium\b", instructions)
    assert re.search(r"^RUN pip install \. ", instructions, re.M)
    assert "scrapyd" in instructions
    assert re.search(r"^COPY deploy/scrapyd/scrapyd\.conf /etc/scrapyd/scrapyd\.conf", text, re.M)
    for copied in re.findall(r"^COPY (?!--)(.+) \S+$", text, re.M):
        for source in copied.split():
            assert (ROOT / source).exists(), source
    assert re.search(r"^USER (?!root)", text, re.M)
    entrypoint = re.search(r"^ENTRYPOINT (.+)$", text, re.M)
    assert entrypoint is not None
    assert json.loads(entrypoint.group(1))[0] == "tini"


def _dockerfile_env() -> dict[str, str]:
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    pairs = " ".join(re.findall(r"^ENV (.+)$", text, re.M))
    return dict(pair.split("=", 1) for pair in pairs.split())


def test_the_installed_package_is_the_scrapy_project_in_any_directory(tmp_path: Path) -> None:
    """No scrapy.cfg where workers run: the image, the EC2 user data and the docs name the
    settings module, the same one the egg's entry point names."""
    from crawler.aws.userdata import SETTINGS_MODULE

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["entry-points"]["scrapy"]["settings"] == SETTINGS_MODULE
    assert _dockerfile_env()["SCRAPY_SETTINGS_MODULE"] == SETTINGS_MODULE
    for doc in ("README.md", "deploy/README.md"):
        assert f"SCRAPY_SETTINGS_MODULE={SETTINGS_MODULE}" in (ROOT / doc).read_text(), doc
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPY_")}
    listed = subprocess.run(
        [sys.executable, "-m", "scrapy", "list"],
        cwd=tmp_path,
        env={**env, "SCRAPY_SETTINGS_MODULE": SETTINGS_MODULE},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    assert {"explore", "profiles"} <= set(listed.stdout.split())


def _compose() -> dict[str, Any]:
    return dict(_load_yaml(ROOT / "docker-compose.yml"))


def test_compose_runs_every_spider_with_replicas_redis_mongo_and_scrapyd(
    spiders: set[str], settings_env: set[str]
) -> None:
    services = _compose()["services"]
    assert {"redis", "mongo", "scrapyd"} <= set(services)
    assert spiders <= set(services)
    for spider in spiders:
        service = services[spider]
        assert service["command"] == ["scrapy", "crawl", spider]
        assert service["deploy"]["replicas"] >= 1
        assert service["build"] == "."
        assert service["stop_grace_period"] == "90s"
    for name, service in services.items():
        if name in {"redis", "mongo"}:
            continue
        env = service["environment"]
        assert {"REDIS_URL", "MONGO_URI", "MONGO_DATABASE"} <= set(env), name
        assert set(env) <= settings_env, name
        assert env["REDIS_URL"].startswith("redis://redis:")
        assert env["MONGO_URI"].startswith("mongodb://mongo:")
    assert services["scrapyd"]["command"][0] == "scrapyd"


def _k8s() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted((ROOT / "deploy" / "k8s").glob("*.yaml")):
        docs += [{**doc, "_file": path.name} for doc in _load_yaml_all(path)]
    return docs


def _grace_needed() -> int:
    """In-flight downloads finish within DOWNLOAD_TIMEOUT; then batches flush, leases go back."""
    from crawler import settings

    return int(settings.DOWNLOAD_TIMEOUT) + 30


def test_k8s_has_a_deployment_per_spider_reading_config_and_secret(
    spiders: set[str], settings_env: set[str]
) -> None:
    docs = _k8s()
    kustomization = next(doc for doc in docs if doc.get("kind") == "Kustomization")
    applied = [doc for doc in docs if doc["_file"] in kustomization["resources"]]
    deployments = {doc["metadata"]["name"]: doc for doc in applied if doc["kind"] == "Deployment"}
    assert set(deployments) == {f"crawler-{spider}" for spider in spiders}
    config = next(doc for doc in applied if doc["kind"] == "ConfigMap")
    secret = next(doc for doc in docs if doc["kind"] == "Secret")
    # The Secret in the repository is an example only, never applied.
    assert secret["_file"] not in kustomization["resources"]
    assert set(secret["stringData"]) == {"REDIS_URL", "MONGO_URI"}
    assert all("CHANGE-ME" in value for value in secret["stringData"].values())
    assert set(config["data"]) | set(secret["stringData"]) <= settings_env
    assert not {"REDIS_URL", "MONGO_URI"} & set(config["data"])

    for spider in spiders:
        deployment = deployments[f"crawler-{spider}"]
        spec = deployment["spec"]
        pod = spec["template"]["spec"]
        assert (
            spec["selector"]["matchLabels"].items()
            <= spec["template"]["metadata"]["labels"].items()
        )
        assert spec["replicas"] >= 1
        assert pod["terminationGracePeriodSeconds"] >= _grace_needed()
        (container,) = pod["containers"]
        assert container["command"] == ["scrapy", "crawl", spider]
        sources = container["envFrom"]
        assert {"configMapRef": {"name": config["metadata"]["name"]}} in sources
        assert {"secretRef": {"name": secret["metadata"]["name"]}} in sources
        assert {"cpu", "memory"} <= set(container["resources"]["requests"])
        metrics_port = int(config["data"]["METRICS_PORT"])
        assert {"name": "metrics", "containerPort": metrics_port} in container["ports"]
        annotations = spec["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/port"] == str(metrics_port)
        mounts = {mount["mountPath"] for mount in container["volumeMounts"]}
        assert config["data"]["MONGO_SPILL_DIR"] in mounts


# --- Settings precedence -------------------------------------------------------------------------


def _setting(name: str, env: dict[str, str], *args: str) -> str:
    base = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "MONGO_DATABASE"}}
    result = scrapy("settings", "--get", name, *args, env={**base, **env})
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.parametrize("console", ["TELNETCONSOLE_ENABLED", "REMOTE_CONTROL_ENABLED"])
def test_workers_expose_no_console(console: str) -> None:
    assert _setting(console, {}) == "False"


@pytest.mark.parametrize(
    ("name", "env", "args", "expected"),
    [
        pytest.param("MONGO_DATABASE", {}, (), "crawler", id="settings.py"),
        pytest.param(
            "REDIS_URL",
            {"REDIS_URL": "redis://env.example:6379/3"},
            (),
            "redis://env.example:6379/3",
            id="env-over-settings.py",
        ),
        pytest.param("MONGO_DATABASE", {"MONGO_DATABASE": "from_env"}, (), "from_env", id="env-db"),
        pytest.param(
            "MONGO_DATABASE",
            {"MONGO_DATABASE": "from_env"},
            ("-s", "MONGO_DATABASE=from_cli"),
            "from_cli",
            id="dash-s-over-env",
        ),
        pytest.param(
            "REDIS_URL",
            {"REDIS_URL": "redis://env.example:6379/3"},
            ("-s", "REDIS_URL=redis://cli.example:6379/4"),
            "redis://cli.example:6379/4",
            id="dash-s-over-env-redis",
        ),
    ],
)
def test_settings_precedence(
    name: str, env: dict[str, str], args: tuple[str, ...], expected: str
) -> None:
    assert _setting(name, env, *args) == expected


def test_keda_scales_each_spider_on_the_workers_its_work_allows(spiders: set[str]) -> None:
    from crawler import settings
    from crawler.observability.metrics import sizing_metrics

    base = {doc["metadata"]["name"]: doc for doc in _k8s() if doc.get("kind") == "Deployment"}
    keda = ROOT / "deploy" / "k8s" / "keda"
    kustomization = _load_yaml(keda / "kustomization.yaml")
    assert kustomization["resources"] == ["../", "sizing.yaml", "scaledobjects.yaml"]
    scaled = {doc["metadata"]["name"]: doc for doc in _load_yaml_all(keda / "scaledobjects.yaml")}
    assert {doc["kind"] for doc in scaled.values()} == {"ScaledObject"}
    assert set(scaled) == set(base) == {f"crawler-{spider}" for spider in spiders}
    gauges = {family.name for family in sizing_metrics({})}
    assert "crawler_workers_wanted" in gauges
    # A Deployment's worker never closes when idle: KEDA decides when it goes.
    assert settings.MAX_IDLE_TIME_BEFORE_CLOSE == 0
    for name, doc in scaled.items():
        spec, spider = doc["spec"], name.removeprefix("crawler-")
        assert doc["apiVersion"] == "keda.sh/v1alpha1"
        assert spec["scaleTargetRef"] == {"name": name}
        assert spec["minReplicaCount"] == 0
        assert spec["maxReplicaCount"] == settings.AUTOSCALE_MAX_WORKERS
        assert spec["cooldownPeriod"] >= spec["pollingInterval"] > 0
        _assert_wanted_trigger(spec["triggers"], spider)
        pod = base[name]["spec"]["template"]["spec"]
        assert pod["terminationGracePeriodSeconds"] >= _grace_needed()
        (container,) = pod["containers"]
        assert container["command"] == ["scrapy", "crawl", spider]

    (exporter,) = _load_yaml_all(keda / "sizing.yaml")
    pod = exporter["spec"]["template"]
    assert exporter["spec"]["replicas"] == 1
    (container,) = pod["spec"]["containers"]
    assert container["command"][:4] == ["scrapy", "status", "--serve", "9400"]
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == "9400"
    assert {"name": "metrics", "containerPort": 9400} in container["ports"]


def _assert_wanted_trigger(triggers: list[dict[str, Any]], spider: str) -> None:
    (trigger,) = triggers
    assert trigger["type"] == "prometheus"
    assert trigger["metricType"] == "AverageValue"
    metadata = trigger["metadata"]
    # KEDA's CRDs take a trigger's metadata as a map of strings (a number would be refused).
    assert all(isinstance(value, str) for value in metadata.values())
    assert set(trigger) <= {"type", "metricType", "metadata", "name", "authenticationRef"}
    assert metadata["query"] == f'max(crawler_workers_wanted{{spider="{spider}"}})'
    assert metadata["threshold"] == "1"
    assert metadata["activationThreshold"] == "0"
    assert metadata["serverAddress"].startswith("http")


def test_keda_scaled_job_example_completes_when_the_fleet_is_idle(spiders: set[str]) -> None:
    keda = ROOT / "deploy" / "k8s" / "keda"
    (job,) = _load_yaml_all(keda / "scaledjob-links.example.yaml")
    assert job["kind"] == "ScaledJob"
    assert (
        "scaledjob-links.example.yaml" not in _load_yaml(keda / "kustomization.yaml")["resources"]
    )
    template = job["spec"]["jobTargetRef"]["template"]["spec"]
    assert template["restartPolicy"] == "Never"
    assert template["terminationGracePeriodSeconds"] >= _grace_needed()
    (container,) = template["containers"]
    command = container["command"]
    assert command[:3] == ["scrapy", "crawl", "links"]
    assert "links" in spiders
    idle = [part for part in command if part.startswith("MAX_IDLE_TIME_BEFORE_CLOSE=")]
    assert idle
    assert int(idle[0].split("=")[1]) > 0
    _assert_wanted_trigger(job["spec"]["triggers"], "links")
