"""The fleet's EC2 side through boto3 (synchronous: only ``scrapy fleet`` calls it, never a crawl).

Every instance carries the tags ``crawler:fleet`` (FLEET_NAME), ``crawler:spider`` and
``crawler:market`` ("spot" or "on-demand"), so the fleet is found and rebuilt from EC2 alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from crawler.aws.config import FleetConfig
from crawler.aws.userdata import render

FLEET_TAG = "crawler:fleet"
SPIDER_TAG = "crawler:spider"
MARKET_TAG = "crawler:market"
LIVE_STATES = ("pending", "running", "stopping", "stopped")


@dataclass(frozen=True)
class Instance:
    """One worker instance as EC2 describes it."""

    id: str
    spider: str
    state: str
    instance_type: str
    market: str
    image: str
    public_ip: str
    private_ip: str
    launched: str

    @classmethod
    def from_aws(cls, raw: Mapping[str, Any]) -> Instance:
        tags = {tag["Key"]: tag["Value"] for tag in raw.get("Tags", [])}
        return cls(
            id=raw["InstanceId"],
            spider=tags.get(SPIDER_TAG, ""),
            state=raw["State"]["Name"],
            instance_type=raw.get("InstanceType", ""),
            market=tags.get(MARKET_TAG, "on-demand"),
            image=raw.get("ImageId", ""),
            public_ip=raw.get("PublicIpAddress", ""),
            private_ip=raw.get("PrivateIpAddress", ""),
            launched=str(raw.get("LaunchTime", "")),
        )

    def to_json(self) -> dict[str, str]:
        return dict(self.__dict__)


class Fleet:
    """Launch, list and terminate the workers of one fleet."""

    def __init__(self, config: FleetConfig, client: Any = None) -> None:
        import boto3  # here, not at import: every ``scrapy`` command loads this module's command

        self.config = config
        self.ec2: Any = client or boto3.session.Session().client(
            "ec2", region_name=config.region, endpoint_url=config.endpoint_url
        )

    def user_data(self, spider: str, install: str, secrets: str, env: Mapping[str, str]) -> str:
        config = self.config
        return render(
            spider,
            install,
            secrets=secrets,
            ssm_names={"REDIS_URL": config.ssm_redis_url, "MONGO_URI": config.ssm_mongo_uri},
            env_values=env,
            database=config.mongo_database,
            crawl_settings=config.crawl_settings,
        )

    def launch(
        self,
        spider: str,
        count: int,
        *,
        user_data: str,
        spot: bool = False,
        instance_type: str | None = None,
        ami: str | None = None,
    ) -> list[Instance]:
        """Start ``count`` workers of ``spider``; on-demand, or one-time spot requests."""
        config = self.config
        image = ami or config.ami
        if not image:
            raise ValueError("no image: give --ami or set FLEET_AMI")
        market = "spot" if spot else "on-demand"
        tags = [
            {"Key": "Name", "Value": f"{config.name}-{spider}"},
            {"Key": FLEET_TAG, "Value": config.name},
            {"Key": SPIDER_TAG, "Value": spider},
            {"Key": MARKET_TAG, "Value": market},
        ]
        params: dict[str, Any] = {
            "ImageId": image,
            "InstanceType": instance_type or config.instance_type,
            "MinCount": count,
            "MaxCount": count,
            "UserData": user_data,
            "InstanceInitiatedShutdownBehavior": "terminate",
            "MetadataOptions": {"HttpTokens": "required"},
            "TagSpecifications": [{"ResourceType": "instance", "Tags": tags}],
        }
        if spot:
            params["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {
                    "SpotInstanceType": "one-time",
                    "InstanceInterruptionBehavior": "terminate",
                },
            }
        if config.iam_instance_profile:
            params["IamInstanceProfile"] = {"Name": config.iam_instance_profile}
        if config.subnet_id:
            params["SubnetId"] = config.subnet_id
        if config.security_group_ids:
            params["SecurityGroupIds"] = list(config.security_group_ids)
        if config.key_name:
            params["KeyName"] = config.key_name
        answer = self.ec2.run_instances(**params)
        return [Instance.from_aws(raw) for raw in answer["Instances"]]

    def instances(self, spider: str | None = None) -> list[Instance]:
        """The fleet's instances that are not terminated (of one spider if given)."""
        filters = [
            {"Name": f"tag:{FLEET_TAG}", "Values": [self.config.name]},
            {"Name": "instance-state-name", "Values": list(LIVE_STATES)},
        ]
        if spider:
            filters.append({"Name": f"tag:{SPIDER_TAG}", "Values": [spider]})
        found: list[Instance] = []
        for page in self.ec2.get_paginator("describe_instances").paginate(Filters=filters):
            for reservation in page["Reservations"]:
                found.extend(Instance.from_aws(raw) for raw in reservation["Instances"])
        return sorted(found, key=lambda instance: (instance.spider, instance.launched, instance.id))

    def terminate(self, instance_ids: list[str]) -> None:
        if instance_ids:
            self.ec2.terminate_instances(InstanceIds=instance_ids)
