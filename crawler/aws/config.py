"""The ``FLEET_*`` settings, read in one place with their defaults."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

SECRET_MODES = ("ssm", "env")


@dataclass(frozen=True)
class FleetConfig:
    """How ``scrapy fleet`` launches workers.

    FLEET_NAME (str, default "crawler"): tag value that marks this fleet's instances.
    FLEET_REGION (str, default: boto3's, from AWS_REGION, AWS_DEFAULT_REGION or the profile).
    FLEET_AMI (str): image of new workers (any Linux with python3 >= 3.11, pip, curl, aws CLI).
    FLEET_INSTANCE_TYPE (str, default "t3.small").
    FLEET_INSTALL (str): what ``pip install`` installs on a worker: a wheel URL, a
      ``git+https://...@tag`` URL or a package spec.
    FLEET_SECRETS (str, default "ssm"): "ssm" reads REDIS_URL and MONGO_URI on the worker from
      the SSM parameters FLEET_SSM_REDIS_URL and FLEET_SSM_MONGO_URI (default
      "/crawler/REDIS_URL", "/crawler/MONGO_URI"); "env" writes the launching environment's
      values into the user data (readable by anyone allowed ec2:DescribeInstanceAttribute).
    FLEET_IAM_INSTANCE_PROFILE, FLEET_SUBNET_ID, FLEET_KEY_NAME (str, default ""),
    FLEET_SECURITY_GROUP_IDS (list, default []): passed to RunInstances when set.
    FLEET_CRAWL_SETTINGS (dict, default {"BAN_POLICY": "stop"}): ``-s`` settings of the workers'
      ``scrapy crawl``; BAN_POLICY=stop makes a banned worker exit with status 3 and report it.
    AWS_ENDPOINT_URL (Scrapy's setting, default: boto3's, e.g. env AWS_ENDPOINT_URL): the EC2
      endpoint, for EC2-compatible APIs.
    """

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

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> FleetConfig:
        crawl_settings = settings.getdict("FLEET_CRAWL_SETTINGS", {"BAN_POLICY": "stop"})
        return cls(
            name=str(settings.get("FLEET_NAME") or "crawler"),
            region=settings.get("FLEET_REGION") or None,
            ami=str(settings.get("FLEET_AMI") or ""),
            instance_type=str(settings.get("FLEET_INSTANCE_TYPE") or "t3.small"),
            install=str(settings.get("FLEET_INSTALL") or ""),
            secrets=str(settings.get("FLEET_SECRETS") or "ssm"),
            ssm_redis_url=str(settings.get("FLEET_SSM_REDIS_URL") or "/crawler/REDIS_URL"),
            ssm_mongo_uri=str(settings.get("FLEET_SSM_MONGO_URI") or "/crawler/MONGO_URI"),
            iam_instance_profile=str(settings.get("FLEET_IAM_INSTANCE_PROFILE") or ""),
            subnet_id=str(settings.get("FLEET_SUBNET_ID") or ""),
            key_name=str(settings.get("FLEET_KEY_NAME") or ""),
            security_group_ids=tuple(settings.getlist("FLEET_SECURITY_GROUP_IDS")),
            crawl_settings={str(k): str(v) for k, v in crawl_settings.items()},
            endpoint_url=settings.get("AWS_ENDPOINT_URL") or None,
            mongo_database=str(settings.get("MONGO_DATABASE") or "crawler"),
        )
