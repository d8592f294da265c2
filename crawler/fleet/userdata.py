"""The cloud-init script a worker boots with: install the project, run one spider, report bans.

Secrets stay out of the script by default: it reads REDIS_URL and MONGO_URI from SSM parameters
(SecureString) with the instance's role. The crawl runs as a loop: exit status 3 (banned, with
BAN_POLICY=stop) is written to Redis by ``python -m crawler.fleet.report`` and the worker waits
for ``scrapy fleet rotate`` to replace it; status 0 (the spider's work is done, with
MAX_IDLE_TIME_BEFORE_CLOSE) powers the instance off, which terminates it; anything else starts
the crawl again after a pause.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from crawler.commands.crawl import EXIT_BANNED

TEMPLATE = """#!/bin/bash
set -u
exec >>/var/log/crawler-worker.log 2>&1
export HOME=/opt/crawler
mkdir -p "$HOME" && cd "$HOME"
TOKEN=$(curl -sS -X PUT http://169.254.169.254/latest/api/token \\
  -H 'X-aws-ec2-metadata-token-ttl-seconds: 300')
INSTANCE_ID=$(curl -sS -H "X-aws-ec2-metadata-token: $TOKEN" \\
  http://169.254.169.254/latest/meta-data/instance-id)
export AWS_DEFAULT_REGION=$(curl -sS -H "X-aws-ec2-metadata-token: $TOKEN" \\
  http://169.254.169.254/latest/meta-data/placement/region)
python3 -m venv "$HOME/venv"
"$HOME/venv/bin/pip" install --upgrade pip
"$HOME/venv/bin/pip" install {install}
{secrets}
export MONGO_DATABASE={database}
while true; do
  "$HOME/venv/bin/scrapy" crawl {spider}{settings}
  status=$?
  if [ "$status" -eq {banned} ]; then
    "$HOME/venv/bin/python" -m crawler.fleet.report {spider} --instance-id "$INSTANCE_ID"
    exit 0
  elif [ "$status" -eq 0 ]; then
    poweroff
    exit 0
  fi
  sleep 10
done
"""


def _ssm(variable: str, parameter: str) -> str:
    return (
        f"export {variable}=$(aws ssm get-parameter --with-decryption --name "
        f"{shlex.quote(parameter)} --query Parameter.Value --output text)"
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
    """The user-data script of a worker of ``spider``.

    ``secrets`` "ssm": REDIS_URL and MONGO_URI come from the SSM parameters named in
    ``ssm_names``; "env": ``env_values`` are written into the script as they are.
    """
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
        install=shlex.quote(install),
        secrets="\n".join(lines),
        database=shlex.quote(database),
        spider=shlex.quote(spider),
        settings=settings,
        banned=EXIT_BANNED,
    )
