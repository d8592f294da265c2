"""The cloud-init script a worker boots with: install the project, run one spider in a loop, and
act on its exit status (3: report the ban and wait to be replaced; 0: power off; 2: stop, as
running again cannot help; 5: start again after RATE_LIMITED_PAUSE; else: start again), as
deploy/README.md describes. Secrets stay out of the script by default (read from SSM with the
instance's role). WORKER_HOME, WORKER_LOG and METADATA_URL, when set before it runs, move it off
EC2's paths (tests/test_userdata.py).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from crawler.aws.config import SECRET_MODES
from crawler.bans.policy import EXIT_BANNED
from crawler.bans.ratelimit import EXIT_RATE_LIMITED
from crawler.config.rules import EXIT_BAD_SETTING

SETTINGS_MODULE = "crawler.settings"
# Seconds a worker stopped by RATE_LIMIT_EXIT waits before it crawls again.
RATE_LIMITED_PAUSE = 300

TEMPLATE = """#!/bin/bash
set -u
WORKER_HOME=${{WORKER_HOME:-/opt/crawler}}
WORKER_LOG=${{WORKER_LOG:-/var/log/crawler-worker.log}}
METADATA_URL=${{METADATA_URL:-http://169.254.169.254}}
exec >>"$WORKER_LOG" 2>&1
stop() {{
  echo "crawler worker stopped: $1" >&2
  exit "$2"
}}
export HOME="$WORKER_HOME"
mkdir -p "$HOME" && cd "$HOME" || stop "cannot use $HOME" 1
export SCRAPY_SETTINGS_MODULE={settings_module}
TOKEN=$(curl -sS -X PUT "$METADATA_URL/latest/api/token" \\
  -H 'X-aws-ec2-metadata-token-ttl-seconds: 300')
metadata() {{
  curl -sS -H "X-aws-ec2-metadata-token: $TOKEN" "$METADATA_URL/latest/meta-data/$1"
}}
INSTANCE_ID=$(metadata instance-id)
AWS_DEFAULT_REGION=$(metadata placement/region)
export AWS_DEFAULT_REGION
VENV="$HOME/venv"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" || stop "python3 -m venv failed" 1
"$VENV/bin/pip" install --upgrade pip
"$VENV/bin/pip" install {install} || stop "pip install failed" 1
{secrets}
export MONGO_DATABASE={database}
while true; do
  "$VENV/bin/scrapy" crawl {spider}{settings}
  status=$?
  if [ "$status" -eq {banned} ]; then
    "$VENV/bin/python" -m crawler.aws.report {spider} --instance-id "$INSTANCE_ID"
    exit 0
  elif [ "$status" -eq 0 ]; then
    poweroff
    exit 0
  elif [ "$status" -eq {bad_setting} ]; then
    stop "scrapy crawl exited with status {bad_setting}: a usage error or an invalid \\
setting (see the error above); running it again cannot help" {bad_setting}
  elif [ "$status" -eq {rate_limited} ]; then
    echo "scrapy crawl exited with status {rate_limited}: only rate-limited answers; \
starting again in {rate_limited_pause} s"
    sleep {rate_limited_pause}
    continue
  fi
  echo "scrapy crawl exited with status $status; starting again in 10 s"
  sleep 10
done
"""


def _ssm(variable: str, parameter: str) -> str:
    return (
        f"{variable}=$(aws ssm get-parameter --with-decryption --name {shlex.quote(parameter)} "
        f"--query Parameter.Value --output text) \\\n"
        f"  || stop {shlex.quote(f'cannot read {variable} from SSM parameter {parameter}')} 1\n"
        f"export {variable}"
    )


def render(
    spider: str,
    install: str,
    *,
    secrets: str,
    ssm_names: Mapping[str, str],
    env_values: Mapping[str, str],
    database: str,
    crawl_settings: Mapping[str, str],
) -> str:
    """The user-data script of a worker of ``spider``: REDIS_URL and MONGO_URI read from the SSM
    parameters ``ssm_names`` (``secrets`` "ssm"), or ``env_values`` written into it ("env")."""
    if secrets not in SECRET_MODES:
        raise ValueError(f"secrets mode {secrets!r}: one of {SECRET_MODES}")
    if secrets == "ssm":
        lines = [_ssm(variable, ssm_names[variable]) for variable in ("REDIS_URL", "MONGO_URI")]
    else:
        lines = [
            f"export {variable}={shlex.quote(env_values[variable])}"
            for variable in ("REDIS_URL", "MONGO_URI")
        ]
    settings = "".join(
        f" -s {shlex.quote(f'{name}={value}')}" for name, value in crawl_settings.items()
    )
    return TEMPLATE.format(
        settings_module=SETTINGS_MODULE,
        install=shlex.quote(install),
        secrets="\n".join(lines),
        database=shlex.quote(database),
        spider=shlex.quote(spider),
        settings=settings,
        banned=EXIT_BANNED,
        bad_setting=EXIT_BAD_SETTING,
        rate_limited=EXIT_RATE_LIMITED,
        rate_limited_pause=RATE_LIMITED_PAUSE,
    )
