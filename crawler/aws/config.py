"""The ``FLEET_*`` settings, read in one place with their defaults."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from crawler.config import check_worker_settings, setting
from crawler.fleet.backoff import Backoff

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

SECRET_MODES = ("ssm", "env")
# What workers run with unless FLEET_CRAWL_SETTINGS says otherwise (its names are set over it):
# a banned worker exits (3) for ``scrapy fleet rotate`` to replace it.
CRAWL_DEFAULTS = {"BAN_POLICY": "stop"}


@dataclass(frozen=True)
class FleetConfig:
    """How ``scrapy fleet`` launches workers: FLEET_* and AWS_ENDPOINT_URL (docs/settings.md)."""

    name: str
    region: str | None
    ami: str
    instance_type: str
    install: str
    secrets: str
    ssm_redis_url: str
    ssm_mongo_uri: str
    iam_instance_profile: str
    subnet_id: str
    key_name: str
    security_group_ids: tuple[str, ...]
    crawl_settings: dict[str, str]
    endpoint_url: str | None
    mongo_database: str
    worker_grace: float = 900.0
    start_backoff: Backoff = field(default_factory=Backoff)  # FLEET_START_FAILURES, _BACKOFF

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> FleetConfig:
        """FLEET_* as their rules read them (SettingsError naming a bad one)."""
        crawl_settings = {**CRAWL_DEFAULTS, **(setting(settings, "FLEET_CRAWL_SETTINGS") or {})}
        groups = setting(settings, "FLEET_SECURITY_GROUP_IDS") or ()
        return cls(
            name=str(settings.get("FLEET_NAME") or "crawler"),
            region=settings.get("FLEET_REGION") or None,
            ami=str(settings.get("FLEET_AMI") or ""),
            instance_type=str(settings.get("FLEET_INSTANCE_TYPE") or "t3.small"),
            install=str(settings.get("FLEET_INSTALL") or ""),
            secrets=setting(settings, "FLEET_SECRETS") or "ssm",
            ssm_redis_url=str(settings.get("FLEET_SSM_REDIS_URL") or "/crawler/REDIS_URL"),
            ssm_mongo_uri=str(settings.get("FLEET_SSM_MONGO_URI") or "/crawler/MONGO_URI"),
            iam_instance_profile=str(settings.get("FLEET_IAM_INSTANCE_PROFILE") or ""),
            subnet_id=str(settings.get("FLEET_SUBNET_ID") or ""),
            key_name=str(settings.get("FLEET_KEY_NAME") or ""),
            security_group_ids=tuple(str(group).strip() for group in groups),
            crawl_settings={str(k): _setting_text(v) for k, v in crawl_settings.items()},
            endpoint_url=settings.get("AWS_ENDPOINT_URL") or None,
            mongo_database=str(settings.get("MONGO_DATABASE") or "crawler"),
            worker_grace=setting(settings, "FLEET_WORKER_GRACE") or 900.0,
            start_backoff=Backoff.from_settings(settings),
        )

    def check_crawl_settings(self) -> None:
        """Read each of ``crawl_settings`` by its setting's rule, as a worker will from ``-s``:
        a bad one is a SettingsError naming it before instances are launched, not an exit 2 on
        each of them (running, and billed, until someone looks). Rules that read the machine
        (ON_THE_WORKER: an import, a directory, a name) are left to the workers."""
        check_worker_settings(self.crawl_settings, "FLEET_CRAWL_SETTINGS[{name!r}]")


def _setting_text(value: Any) -> str:
    """A value as ``-s NAME=VALUE`` gives it to a worker, as Scrapy's settings read it back:
    text as it is, a list comma-separated, a dict as JSON, a number or a flag as Python
    writes it."""
    if isinstance(value, list | tuple):
        return ",".join(str(item) for item in value)
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)
