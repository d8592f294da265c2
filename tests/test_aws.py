"""AWS against moto in server mode over real HTTP: S3 feed export and ``scrapy fleet``."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import boto3
import pytest
import redis
from scrapy.settings import Settings

from crawler.aws.config import FleetConfig
from crawler.aws.engine import Ec2Workers
from crawler.aws.instances import FLEET_TAG, Fleet
from crawler.aws.report import report_banned
from crawler.config import setting
from crawler.config.rules import SettingsError
from crawler.config.table import ON_THE_WORKER, RULES
from crawler.connection import reply_text
from crawler.fleet.measure import beats_by_host
from crawler.recrawl.store import Revisit, RevisitStore
from devtools.services import ServerProcess, start_server
from sandbox.seed import build_dataset
from tests import forkserver
from tests.harness import ROOT, Crawl, background, on_free_port, poll, scrapy

pytestmark = pytest.mark.integration

DATASET = build_dataset()
INSTALL = "git+https://git.example/crawler.git@v1.0"


def _moto(log: Path) -> Callable[[int], ServerProcess]:
    """Starts a moto server on a loopback port, its output appended to ``log``."""

    def start(port: int) -> ServerProcess:
        command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
        return start_server("moto", command, port, log)

    return start


def _env(port: int) -> dict[str, str]:
    """The environment that points boto3 (and Scrapy) at the moto server on ``port``."""
    return {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    }


@pytest.fixture(scope="module")
def aws_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A moto server on loopback and the environment that points boto3 (and Scrapy) at it."""
    server = on_free_port(_moto(tmp_path_factory.mktemp("moto") / "moto.log"))
    yield _env(server.port)
    server.stop()


def _client(aws_env: dict[str, str], service: str) -> Any:
    return boto3.session.Session(
        aws_access_key_id=aws_env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=aws_env["AWS_SECRET_ACCESS_KEY"],
        region_name=aws_env["AWS_DEFAULT_REGION"],
    ).client(service, endpoint_url=aws_env["AWS_ENDPOINT_URL"])


def test_crawl_exports_its_items_to_s3(crawl: Crawl, aws_env: dict[str, str]) -> None:
    s3 = _client(aws_env, "s3")
    s3.create_bucket(Bucket="exports")
    users = [author.unique_id for author in DATASET.authors[:4]]
    feeds = {"s3://exports/profiles-%(time)s.jsonl": {"format": "jsonlines"}}
    result = forkserver.run(
        crawl.command(
            "profiles", "-a", f"users={','.join(users)}", settings={"FEEDS": json.dumps(feeds)}
        ),
        ROOT,
        {**crawl.env(), **aws_env},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    objects = s3.list_objects_v2(Bucket="exports").get("Contents", [])
    assert len(objects) == 1, result.stderr[-3000:]
    key = objects[0]["Key"]
    assert key.startswith("profiles-")
    assert key.endswith(".jsonl")
    assert sorted(item["unique_id"] for item in _lines(s3, "exports", key)) == sorted(users)
    stored = {doc["unique_id"] for doc in crawl.mongo.db.profiles.find()}
    assert stored == set(users)
    # The key names no worker: a fleet's workers starting in the same second would share it.
    assert "s3://exports/profiles-%(time)s.jsonl has no %(worker)s" in result.stderr


def test_workers_starting_together_export_to_keys_of_their_own(
    crawl: Crawl, aws_env: dict[str, str], tmp_path: Path
) -> None:
    """Two workers of a fleet started in the same second: ``%(time)s`` alone gave both one key,
    and the last upload replaced the other's items."""
    s3 = _client(aws_env, "s3")
    s3.create_bucket(Bucket="fleet-exports")
    feeds = {"s3://fleet-exports/profiles-%(time)s-%(worker)s.jsonl": {"format": "jsonlines"}}
    halves = [DATASET.authors[:6], DATASET.authors[6:12]]
    with ExitStack() as running:
        workers = [
            running.enter_context(
                background(
                    crawl.command(
                        "profiles",
                        "-a",
                        "users=" + ",".join(author.unique_id for author in half),
                        settings={"FEEDS": json.dumps(feeds)},
                    ),
                    {**crawl.env(), **aws_env},
                    tmp_path / f"worker{number}.log",
                )
            )
            for number, half in enumerate(halves)
        ]
        for worker in workers:
            assert worker.wait(120) == 0
    keys = [obj["Key"] for obj in s3.list_objects_v2(Bucket="fleet-exports")["Contents"]]
    assert len(keys) == 2, keys  # an empty feed is stored too (FEED_STORE_EMPTY)
    exported = [item["unique_id"] for key in keys for item in _lines(s3, "fleet-exports", key)]
    assert sorted(exported) == sorted(author.unique_id for half in halves for author in half)
    for number in range(2):
        assert "has no %(worker)s" not in (tmp_path / f"worker{number}.log").read_text()


def _lines(s3: Any, bucket: str, key: str) -> list[dict[str, Any]]:
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode()
    return [json.loads(line) for line in body.splitlines()]


def _fleet(
    env: dict[str, str], *args: str, settings: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    command = ["fleet", *args]
    for name, value in {"FLEET_INSTALL": INSTALL, **(settings or {})}.items():
        command += ["-s", f"{name}={value}"]
    return scrapy(*command, env=env)


def _json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode in (0, 2), result.stderr[-3000:]
    return json.loads(result.stdout)


def _user_data(ec2: Any, instance_id: str) -> str:
    answer = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
    return base64.b64decode(answer["UserData"]["Value"]).decode()


def test_fleet_launch_list_rotate_and_scale_to_zero(
    crawl: Crawl, redis_client: redis.Redis, aws_env: dict[str, str], tmp_path: Path
) -> None:
    ec2 = _client(aws_env, "ec2")
    # An Amazon Linux 2 image of the cloud's own (asked by name: the whole list of Amazon's
    # images is some 1,300, which moto takes seconds of CPU to answer).
    amazon_linux = [{"Name": "name", "Values": ["amzn2-ami-hvm-*"]}]
    ami = ec2.describe_images(Owners=["amazon"], Filters=amazon_linux)["Images"][0]["ImageId"]
    password = "hunter2-secret"
    env = {
        **crawl.env(),
        **aws_env,
        # What a worker would get: the launching side has credentials the user data must not carry.
        "MONGO_URI": f"mongodb://crawler:{password}@mongo.internal/",
    }
    settings = {"FLEET_NAME": f"test-{tmp_path.name[-12:]}"}

    launched = _json(
        _fleet(env, "launch", "profiles", "--count", "2", "--ami", ami, "--json", settings=settings)
    )
    assert len(launched) == 2
    assert {i["spider"] for i in launched} == {"profiles"}
    assert {i["market"] for i in launched} == {"on-demand"}
    script = _user_data(ec2, launched[0]["id"])
    assert script.startswith("#!/bin/bash")
    assert 'scrapy" crawl profiles -s BAN_POLICY=stop' in script
    assert f'pip" install {INSTALL}' in script
    assert "--name /crawler/REDIS_URL" in script
    assert "--name /crawler/MONGO_URI" in script
    assert password not in script
    syntax = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr

    spot = _json(
        _fleet(
            env,
            "launch",
            "explore",
            "--spot",
            "--instance-type",
            "t3.micro",
            "--ami",
            ami,
            "--secrets",
            "env",
            "--json",
            settings=settings,
        )
    )
    assert [(i["spider"], i["market"], i["instance_type"]) for i in spot] == [
        ("explore", "spot", "t3.micro")
    ]
    # --secrets env is the explicit opt-in to copy the launching environment into user data.
    assert f"export MONGO_URI=mongodb://crawler:{password}@mongo.internal/" in _user_data(
        ec2, spot[0]["id"]
    )

    listed = _json(_fleet(env, "list", "--json", settings=settings))
    assert {i["id"] for i in listed} == {i["id"] for i in launched + spot}
    assert {
        i["id"] for i in _json(_fleet(env, "list", "profiles", "--json", settings=settings))
    } == {i["id"] for i in launched}

    # A worker stopped by a ban (exit status 3) runs this from its user data.
    banned = launched[0]["id"]
    report = subprocess.run(
        [sys.executable, "-m", "crawler.aws.report", "profiles", "--instance-id", banned],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert report.returncode == 0, report.stderr
    assert redis_client.hexists("{profiles}:fleet:banned", banned)

    typo = _fleet(env, "rotate", "profiles", settings={**settings, "FLEET_SECRETS": "SSM"})
    assert typo.returncode == 2
    assert "FLEET_SECRETS" in typo.stderr
    rotated = _json(_fleet(env, "rotate", "profiles", "--json", settings=settings))
    assert rotated["terminated"] == [banned]
    (replacement,) = rotated["launched"]
    assert password not in _user_data(ec2, replacement["id"])
    assert replacement["id"] != banned
    assert replacement["image"] == ami
    assert replacement["public_ip"] != launched[0]["public_ip"]
    assert not redis_client.exists("{profiles}:fleet:banned")
    profiles = {
        i["id"] for i in _json(_fleet(env, "list", "profiles", "--json", settings=settings))
    }
    assert profiles == {launched[1]["id"], replacement["id"]}
    state = ec2.describe_instances(InstanceIds=[banned])["Reservations"][0]["Instances"][0]["State"]
    assert state["Name"] in ("shutting-down", "terminated")

    # Work left in the frontier: nothing is terminated.
    redis_client.lpush("profiles:start_urls", "some.user")
    waiting = _json(_fleet(env, "scale-to-zero", "profiles", "--json", settings=settings))
    assert waiting == {"spider": "profiles", "pending": {"start": 1}, "terminated": []}
    redis_client.delete("profiles:start_urls")
    # A revisit due: only a worker hands it to the frontier, so the fleet is not drained; one
    # due later does not hold it.
    revisits = RevisitStore(redis_client, "profiles")
    revisits.add([Revisit("ab" * 16, time.time() - 5, '{"u": "https://site.example/"}')])
    waiting = _json(_fleet(env, "scale-to-zero", "profiles", "--json", settings=settings))
    assert waiting == {"spider": "profiles", "pending": {"revisits_due": 1}, "terminated": []}
    revisits.add([Revisit("ab" * 16, time.time() + 3600, '{"u": "https://site.example/"}')])
    # Items a killed worker spilled wait on its disk: terminating it would lose them.
    spill = json.dumps(["ip-10-0-0-7", "/var/spill/profiles-4242-0123abcd.jsonl"])
    redis_client.hset("{profiles}:spilled", spill, json.dumps({"items": 30, "at": time.time()}))
    waiting = _json(_fleet(env, "scale-to-zero", "profiles", "--json", settings=settings))
    assert waiting == {"spider": "profiles", "pending": {"spilled_items": 30}, "terminated": []}
    redis_client.delete("{profiles}:spilled")
    drained = _json(_fleet(env, "scale-to-zero", "profiles", "--json", settings=settings))
    assert sorted(drained["terminated"]) == sorted(profiles)
    assert drained["pending"] == {}
    assert _json(_fleet(env, "list", "profiles", "--json", settings=settings)) == []
    assert [i["id"] for i in _json(_fleet(env, "list", "--json", settings=settings))] == [
        spot[0]["id"]
    ]


def test_fleet_settings_are_read_by_their_rules_and_reach_a_worker_as_it_reads_them() -> None:
    """FLEET_CRAWL_SETTINGS is set over BAN_POLICY=stop, its values written so that the
    worker's own rules read them back; a bad FLEET_* value is refused, naming it."""
    crawl_settings = {
        "RETRY_HTTP_CODES": [500, 502],
        "POLITENESS_DOMAIN_RATES": {"a.com": 0.2},
        "MAX_IDLE_TIME_BEFORE_CLOSE": 600,
    }
    given = {"FLEET_CRAWL_SETTINGS": json.dumps(crawl_settings)}
    config = FleetConfig.from_settings(
        Settings({**given, "FLEET_SECURITY_GROUP_IDS": "sg-a, sg-b"})
    )
    assert config.crawl_settings["BAN_POLICY"] == "stop"
    assert config.security_group_ids == ("sg-a", "sg-b")
    for name, value in crawl_settings.items():
        assert setting(Settings({name: config.crawl_settings[name]}), name) == value, name
    for bad in ({"FLEET_SECRETS": "SSM"}, {"FLEET_CRAWL_SETTINGS": '{"BAN_POLICY": "stop",}'}):
        with pytest.raises(SettingsError, match=next(iter(bad))):
            FleetConfig.from_settings(Settings(bad))
    # A value a worker would refuse (each instance exiting 2, and billed) is refused before a
    # launch; one only the workers can judge (a component they install, a name they resolve)
    # is left to them.
    for name, value in (("BAN_POLICY", "halt"), ("MAX_IDLE_TIME_BEFORE_CLOSE", "soon")):
        given = {"FLEET_CRAWL_SETTINGS": json.dumps({name: value})}
        config = FleetConfig.from_settings(Settings(given))  # list and scale-to-zero go on
        with pytest.raises(SettingsError, match=rf"FLEET_CRAWL_SETTINGS\['{name}'\] = {value}"):
            config.check_crawl_settings()
    theirs = {"ITEM_PIPELINES": {"their_plugin.Pipeline": 300}, "METRICS_HOST": "worker.lan"}
    given = {"FLEET_CRAWL_SETTINGS": json.dumps(theirs)}
    FleetConfig.from_settings(Settings(given)).check_crawl_settings()
    assert set(RULES) >= ON_THE_WORKER


def test_fleet_launch_needs_an_install_target(aws_env: dict[str, str], crawl: Crawl) -> None:
    result = _fleet(
        {**crawl.env(), **aws_env},
        "launch",
        "profiles",
        "--ami",
        "ami-1",
        settings={"FLEET_INSTALL": ""},
    )
    assert result.returncode != 0
    assert "FLEET_INSTALL" in result.stderr + result.stdout
    none = _fleet(
        {**crawl.env(), **aws_env}, "launch", "profiles", "--ami", "ami-1", "--count", "0"
    )
    assert none.returncode == 2
    assert "--count must be at least 1" in none.stderr


def _beat(client: redis.Redis, spider: str, host: str, pages_per_min: float) -> None:
    """A live worker's heartbeat on ``host`` (what the fleet monitor writes)."""
    worker = f"{host}:1:abc"
    client.hset(
        f"{{{spider}}}:workers:{worker}",
        mapping={"worker": worker, "host": host, "pid": 1, "pages_per_min": pages_per_min},
    )
    client.zadd(f"{{{spider}}}:workers", {worker: time.time() + 60})


def _ids(env: dict[str, str], settings: dict[str, str]) -> set[str]:
    return {i["id"] for i in _json(_fleet(env, "list", "profiles", "--json", settings=settings))}


def test_fleet_launch_by_deadline_and_autoscale_toward_the_workers_wanted(
    crawl: Crawl, redis_client: redis.Redis, aws_env: dict[str, str], tmp_path: Path
) -> None:
    ec2 = _client(aws_env, "ec2")
    ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    env = {**crawl.env(), **aws_env}
    settings = {"FLEET_NAME": f"plan-{tmp_path.name[-12:]}", "POLITENESS_RATE": "0"}
    # 72,000 pages in an hour at 10 pages per worker-second (none measured yet): 2 workers.
    planned = _fleet(env, "launch", "profiles", "--deadline", "1h", "--pages", "72000",
                     "--ami", ami, "--json", settings=settings)  # fmt: skip
    assert len(_json(planned)) == 2
    assert "workers     2" in planned.stderr

    # One worker per start entry (10 pages/s x 0.1 s of backlog each), at most 8: the API's
    # host unpaced (at its default rate its user names would want one worker whatever their
    # number: they all go to that host).
    settings = {
        "FLEET_NAME": f"auto-{tmp_path.name[-12:]}",
        "AUTOSCALE_BACKLOG_SECONDS": "0.1",
        "AUTOSCALE_WORKER_PACE": "10",
        "POLITENESS_RATE": "0",
    }
    entries = [json.dumps({"unique_id": f"u{n}"}) for n in range(3)]
    redis_client.lpush("profiles:start_urls", *entries)
    step = _json(_fleet(env, "autoscale", "profiles", "--once", "--json", "--ami", ami,
                        "--cooldown", "3600", settings=settings))  # fmt: skip
    assert (step["wanted"], step["running"], len(step["started"])) == (3, 0, 3)
    live = {i["id"]: i for i in _json(_fleet(env, "list", "profiles", "--json", settings=settings))}
    assert set(live) == set(step["started"])
    busy = sorted(live)[1]
    _beat(redis_client, "profiles", "ip-" + live[busy]["private_ip"].replace(".", "-"), 42.0)

    # Less work: the surplus waits out the cool-down (counted from the launch, an earlier run).
    redis_client.delete("profiles:start_urls")
    redis_client.lpush("profiles:start_urls", entries[0])
    waiting = _json(_fleet(env, "autoscale", "profiles", "--once", "--json", "--ami", ami,
                           "--cooldown", "3600", settings=settings))  # fmt: skip
    assert (waiting["wanted"], waiting["running"], waiting["stopped"]) == (1, 3, [])
    assert waiting["waiting"] > 3500
    # Cool-down over: the idle instances go first, the busy one stays.
    shrunk = _json(_fleet(env, "autoscale", "profiles", "--once", "--json", "--ami", ami,
                          "--cooldown", "0", settings=settings))  # fmt: skip
    assert sorted(shrunk["stopped"]) == sorted(set(live) - {busy})
    assert _ids(env, settings) == {busy}
    # No work left: no worker wanted.
    redis_client.delete("profiles:start_urls")
    done = _json(_fleet(env, "autoscale", "profiles", "--once", "--json", "--ami", ami,
                        "--cooldown", "0", settings=settings))  # fmt: skip
    assert (done["wanted"], done["stopped"]) == (0, [busy])
    assert _ids(env, settings) == set()


def test_fleet_launch_by_deadline_launches_at_most_the_most_workers_allowed(
    crawl: Crawl, aws_env: dict[str, str], tmp_path: Path
) -> None:
    """72,000 pages in a minute at 10 pages per worker-second (none measured yet) would take
    120 workers: ``--max 3`` (or AUTOSCALE_MAX_WORKERS) launches 3, and says the deadline
    cannot be met with them."""
    ec2 = _client(aws_env, "ec2")
    ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    env = {**crawl.env(), **aws_env}
    settings = {"FLEET_NAME": f"most-{tmp_path.name[-12:]}", "POLITENESS_RATE": "0"}
    deadline = ["--deadline", "60s", "--pages", "72000", "--ami", ami, "--json"]
    capped = _fleet(env, "launch", "profiles", *deadline, "--max", "3", settings=settings)
    assert len(_json(capped)) == 3
    assert "workers     3" in capped.stderr
    assert "the deadline cannot be met with 3 workers" in capped.stderr
    assert "it needs 120" in capped.stderr
    assert len(_ids(env, settings)) == 3
    settings = {**settings, "AUTOSCALE_MAX_WORKERS": "2"}
    by_setting = _fleet(env, "launch", "profiles", *deadline, settings=settings)
    assert len(_json(by_setting)) == 2
    assert len(_ids(env, settings)) == 5


def _project_settings(**values: str) -> Settings:
    settings = Settings()
    settings.setmodule("crawler.settings", priority="project")
    settings.setdict(values, priority="cmdline")
    return settings


def test_an_instance_whose_heartbeat_names_its_host_in_full_is_not_idle(
    redis_client: redis.Redis, aws_env: dict[str, str], tmp_path: Path
) -> None:
    """Amazon Linux 2023 names a host ``ip-10-0-1-5.ec2.internal`` (resource-based naming
    ``i-0abc.us-west-2.compute.internal``): a worker reporting pages under either makes its
    instance busy, so it is not stopped first as idle."""
    ec2 = _client(aws_env, "ec2")
    ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    settings = _project_settings(
        FLEET_NAME=f"names-{tmp_path.name[-12:]}", AWS_ENDPOINT_URL=aws_env["AWS_ENDPOINT_URL"]
    )
    fleet = Fleet(FleetConfig.from_settings(settings), client=ec2)
    by_ip, by_id, silent = fleet.launch("profiles", 3, user_data="#!/bin/bash", ami=ami)
    _beat(redis_client, "profiles", f"ip-{by_ip.private_ip.replace('.', '-')}.ec2.internal", 42.0)
    _beat(redis_client, "profiles", f"{by_id.id}.us-west-2.compute.internal", 7.0)
    rates = lambda: beats_by_host(redis_client, settings, "profiles")  # noqa: E731
    engine = Ec2Workers(fleet, "profiles", {}, rates, redis_client, 900.0)
    idle = {member.id: member.idle for member in engine.members()}
    assert idle == {by_ip.id: False, by_id.id: False, silent.id: True}


def test_autoscale_replaces_an_instance_whose_worker_quit(
    crawl: Crawl, redis_client: redis.Redis, aws_env: dict[str, str], tmp_path: Path
) -> None:
    """An instance left up with no worker (banned and reported, or silent past
    FLEET_WORKER_GRACE: a failed install, an exit status 2) is not a live member: it is
    terminated at once, cool-down or not, and replaced while workers are wanted; one still
    booting, or beating, or that beat within the grace, is kept."""
    ec2 = _client(aws_env, "ec2")
    ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    env = {**crawl.env(), **aws_env}
    settings = {
        "FLEET_NAME": f"gone-{tmp_path.name[-12:]}",
        "AUTOSCALE_BACKLOG_SECONDS": "0.1",
        "AUTOSCALE_WORKER_PACE": "10",
        "POLITENESS_RATE": "0",  # the API host unpaced: workers follow the entries
    }

    def look(grace: float) -> Any:
        return _json(_fleet(env, "autoscale", "profiles", "--once", "--json", "--ami", ami,
                            "--cooldown", "3600", settings={**settings,
                            "FLEET_WORKER_GRACE": str(grace)}))  # fmt: skip

    redis_client.lpush(
        "profiles:start_urls", *(json.dumps({"unique_id": f"u{n}"}) for n in range(3))
    )
    first = look(3600)
    assert (first["wanted"], first["running"], len(first["started"])) == (3, 0, 3)
    live = {i["id"]: i for i in _json(_fleet(env, "list", "profiles", "--json", settings=settings))}
    busy, banned, silent = sorted(live)
    _beat(redis_client, "profiles", "ip-" + live[busy]["private_ip"].replace(".", "-"), 42.0)
    report_banned(redis_client, "profiles", banned)

    # The banned one goes at once; the silent one is still within its grace (booting).
    replaced = look(3600)
    assert replaced["gone"] == [banned]
    assert (replaced["running"], len(replaced["started"]), replaced["stopped"]) == (2, 1, [])
    (new,) = replaced["started"]
    assert _ids(env, settings) == {busy, silent, new}
    assert not redis_client.hexists("{profiles}:fleet:banned", banned)

    # Past a (short) grace, every instance without a heartbeat is gone: the beating one stays.
    silenced = look(0.001)
    assert sorted(silenced["gone"]) == sorted([silent, new])
    assert (silenced["running"], len(silenced["started"])) == (1, 2)
    assert _ids(env, settings) == {busy, *silenced["started"]}

    # A worker seen beating and now between two runs (no heartbeat) is kept within the grace.
    redis_client.delete("{profiles}:workers")
    kept = look(3600)
    assert (kept["gone"], kept["started"], kept["stopped"]) == ([], [], [])
    assert kept["running"] == 3
    assert {reply_text(key) for key in redis_client.hkeys("{profiles}:fleet:seen")} == {busy}


def _running(ec2: Any, fleet: str) -> set[str]:
    """The ids of the fleet's instances not terminated."""
    found = ec2.describe_instances(
        Filters=[
            {"Name": f"tag:{FLEET_TAG}", "Values": [fleet]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ]
    )
    return {i["InstanceId"] for r in found["Reservations"] for i in r["Instances"]}


def test_the_ec2_autoscale_loop_follows_the_work_and_rides_out_a_cloud_that_went_away(
    crawl: Crawl, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """``scrapy fleet autoscale`` as a loop (no ``--once``): it launches toward the workers
    wanted as work comes, keeps looking while the EC2 API does not answer (each failed look said
    on stderr), launches again on the cloud that came back, terminates the fleet once the work
    is gone, and exits 0 at SIGTERM."""
    start = _moto(tmp_path / "moto.log")
    cloud = on_free_port(start)
    aws = _env(cloud.port)
    ec2 = _client(aws, "ec2")
    ami = ec2.describe_images(Filters=[{"Name": "name", "Values": ["amzn2-ami-hvm-*"]}])
    ami_id = ami["Images"][0]["ImageId"]
    fleet = f"loop-{tmp_path.name[-12:]}"
    settings = {
        "FLEET_NAME": fleet,
        "FLEET_INSTALL": INSTALL,
        "AUTOSCALE_BACKLOG_SECONDS": "0.1",
        "AUTOSCALE_WORKER_PACE": "10",
        "POLITENESS_RATE": "0",  # the API host unpaced: workers follow the entries
        "AUTOSCALE_INTERVAL": "0.5",
    }
    command = [sys.executable, "-m", "scrapy", "fleet", "autoscale", "profiles", "--json"]
    command += ["--ami", ami_id, "--cooldown", "0"]
    for name, value in settings.items():
        command += ["-s", f"{name}={value}"]
    stderr = tmp_path / "autoscale.err"
    with open(stderr, "wb") as errors:
        loop = subprocess.Popen(
            command, cwd=ROOT, env={**crawl.env(), **aws}, stdout=subprocess.DEVNULL,
            stderr=errors,
        )  # fmt: skip
    try:
        redis_client.lpush(
            "profiles:start_urls", *(json.dumps({"unique_id": f"u{n}"}) for n in range(3))
        )
        poll(lambda: len(_running(ec2, fleet)) == 3, 60, "3 instances launched")
        cloud.stop()
        poll(lambda: b"look failed, will look again" in stderr.read_bytes(), 30, "a failed look")
        assert loop.poll() is None  # still looking
        cloud = start(cloud.port)  # the cloud back, empty: the fleet is launched again
        poll(lambda: len(_running(ec2, fleet)) == 3, 60, "3 instances launched again")
        redis_client.delete("profiles:start_urls")
        poll(lambda: not _running(ec2, fleet), 60, "the fleet terminated")
        loop.terminate()
        assert loop.wait(30) == 0, stderr.read_text()[-3000:]
    finally:
        if loop.poll() is None:
            loop.kill()
        cloud.stop()
