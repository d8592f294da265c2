"""The domains sweep through a real DNS server: Debian's dnsmasq (devtools/dnsmasq.py), started
on the domains sandbox's loopback network with a zone written here, instead of the sandbox's
own DNS server. Names are given as real zones give them: A records, CNAME chains to a CDN's
edge, wildcards; AAAA-only names; NXDOMAIN; SERVFAIL from an upstream that answers so;
timeouts from dead and silent upstreams.

``make dnsmasq`` installs dnsmasq (``make test`` does it first); without it these tests are
skipped, saying so. ``DNSMASQ_SWEEP_DOMAINS`` sets the sweep's population (default 400);
``DNSMASQ_CONFUSION=<file>`` writes the sweep's confusion table there.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dns.message
import dns.query
import pytest
import redis

from crawler.config.values import NameServer
from crawler.domains.resolver import AsyncResolver, DnsError, DomainNotFound
from devtools.dnsmasq import Dnsmasq, DnsmasqMissing, Zone, dnsmasq_binary, start_dnsmasq
from devtools.services import free_port
from sandbox.domains import DomainsSandbox, SandboxThread
from sandbox.domains_population import FakeDomain, build_population
from tests.harness import Crawl, Mongo
from tests.test_domains import check_truth, stored, sweep_settings

POPULATION = int(os.environ.get("DNSMASQ_SWEEP_DOMAINS", "400"))
SHAPES = ("a", "cname", "wildcard")


@pytest.fixture(scope="module")
def dnsmasq_binary_path() -> str:
    try:
        return dnsmasq_binary()
    except DnsmasqMissing as exc:
        pytest.skip(f"{exc}: the tests through a real DNS server need it")


class World:
    """The sandbox, dnsmasq answering for its domains, and how each name is given."""

    def __init__(self, sandbox: DomainsSandbox, server: Dnsmasq, shapes: dict[str, str]):
        self.sandbox = sandbox
        self.server = server
        self.shapes = shapes


@pytest.fixture(scope="module")
def world(dnsmasq_binary_path: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    population = build_population(POPULATION, seed=11)
    runner = SandboxThread(DomainsSandbox(population, slow_seconds=15))
    sandbox = runner.start()
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # reads questions, never answers
    silent.bind(("127.0.0.1", 0))
    try:
        zone, shapes = zone_of(sandbox, dead_port=free_port(), silent_port=silent.getsockname()[1])
        server = start_dnsmasq(
            zone, f"{sandbox.net}53", free_port(), tmp_path_factory.mktemp("dnsmasq")
        )
        try:
            yield World(sandbox, server, shapes)
        finally:
            server.stop()
    finally:
        silent.close()
        runner.stop()


def zone_of(
    sandbox: DomainsSandbox, dead_port: int, silent_port: int
) -> tuple[Zone, dict[str, str]]:
    """The zone of the sandbox's domains, each given one way (its shape): an A record, a
    CNAME chain to a CDN edge, a wildcard, several A records in order; AAAA only; nothing
    (NXDOMAIN); an upstream that answers SERVFAIL (the sandbox's own server), a dead one or a
    silent one (timeouts)."""
    zone = Zone()
    shapes: dict[str, str] = {}
    edges: set[str] = set()
    for index, domain in enumerate(sandbox.domains.values()):
        behaviour = domain.behaviour
        if behaviour == "nxdomain":
            shapes[domain.name] = "nxdomain"
        elif behaviour == "no_address":
            zone.host(domain.hosts, f"fd00::{index:x}")
            shapes[domain.name] = "aaaa_only"
        elif behaviour == "servfail":
            host, _, port = sandbox.nameserver.partition(":")
            zone.upstream(domain.name, host, int(port))
            shapes[domain.name] = "upstream_servfail"
        elif behaviour == "silent":
            dead = index % 2 == 0
            zone.upstream(domain.name, "127.0.0.1", dead_port if dead else silent_port)
            shapes[domain.name] = "upstream_dead" if dead else "upstream_silent"
        else:
            shapes[domain.name] = shape_of(domain, SHAPES[index % len(SHAPES)], sandbox)
            give(zone, domain, shapes[domain.name], sandbox.addresses_of(domain), edges)
    return zone, shapes


def shape_of(domain: FakeDomain, drawn: str, sandbox: DomainsSandbox) -> str:
    """How a domain that has addresses is given: several A records, dead ones first, when it
    has several; never a wildcard when a name under it must have none."""
    if len(sandbox.addresses_of(domain)) > 1:
        return "addresses"
    if drawn == "wildcard" and domain.behaviour == "redirect_nxdomain":
        return "a"
    return drawn


def give(zone: Zone, domain: FakeDomain, shape: str, addresses: list[str], edges: set[str]) -> None:
    """The domain's records in ``zone``, given as ``shape`` (its own address is the last)."""
    address = addresses[-1]
    if shape == "addresses":
        zone.addresses(domain.name, addresses)
    elif shape == "a":
        zone.host(domain.hosts, address)
    elif shape == "wildcard":
        zone.wildcard(domain.name, address)
    else:
        edge = f"edge-{address.replace('.', '-')}.cdn.test"
        if edge not in edges:
            zone.host([edge], address)
            edges.add(edge)
        hop = f"{domain.name.split('.')[0]}.hop.cdn.test"
        zone.cname([hop], edge)
        zone.cname(domain.hosts, hop)


def resolver_of(server: Dnsmasq) -> AsyncResolver:
    host, port = server.nameserver.split(":")
    return AsyncResolver(
        [NameServer(host, int(port))],
        timeout=0.5,
        retries=1,
        concurrency=50,
        private_addresses=True,  # the sandbox's domains are on loopback
    )


def by_shape(world: World) -> dict[str, FakeDomain]:
    found: dict[str, FakeDomain] = {}
    for name, shape in world.shapes.items():
        found.setdefault(shape, world.sandbox.domains[name])
    return found


def test_the_resolver_reads_every_kind_of_answer_of_a_real_dns_server(world: World) -> None:
    examples = by_shape(world)
    assert set(examples) == {
        "a",
        "cname",
        "wildcard",
        "addresses",
        "aaaa_only",
        "nxdomain",
        "upstream_servfail",
        "upstream_dead",
        "upstream_silent",
    }

    async def run() -> None:
        resolver = resolver_of(world.server)
        for shape in ("a", "cname", "wildcard"):
            domain = examples[shape]
            address = world.sandbox.address_of(domain)
            assert await resolver.resolve(domain.name) == [address], shape
            assert await resolver.resolve(f"www.{domain.name}") == [address], shape
        several = examples["addresses"]
        assert await resolver.resolve(several.name) == world.sandbox.addresses_of(several)
        wildcard = examples["wildcard"].name
        assert await resolver.resolve(f"deep.under.{wildcard}") == [
            world.sandbox.address_of(examples["wildcard"])
        ]
        for shape in ("aaaa_only", "nxdomain"):
            with pytest.raises(DomainNotFound):
                await resolver.resolve(examples[shape].name)
        for shape in ("upstream_servfail", "upstream_dead", "upstream_silent"):
            with pytest.raises(DnsError):
                await resolver.resolve(examples[shape].name)
        assert resolver.counts["nxdomain"] == 1
        assert resolver.counts["no_address"] == 1

    asyncio.run(run())


def confusion(documents: dict[str, dict[str, Any]], world: World) -> Counter[tuple[str, str]]:
    """(truth class, stored class) -> domains."""
    return Counter(
        (domain.status, (documents.get(name) or {}).get("status", "(not stored)"))
        for name, domain in world.sandbox.domains.items()
    )


def confusion_table(table: Counter[tuple[str, str]]) -> str:
    truths = sorted({truth for truth, _ in table})
    stored_classes = sorted({got for _, got in table})
    width = max(len(name) for name in [*truths, *stored_classes, "truth \\ stored"]) + 1
    head = "".join(name.rjust(len(name) + 1) for name in stored_classes)
    lines = ["truth \\ stored".ljust(width) + head]
    for truth in truths:
        row = "".join(
            str(table.get((truth, got), ".")).rjust(len(got) + 1) for got in stored_classes
        )
        lines.append(truth.ljust(width) + row)
    return "\n".join(lines)


def test_the_sweep_through_a_real_dns_server_stores_every_class_right(
    redis_url: str, redis_client: redis.Redis, mongo: Mongo, world: World
) -> None:
    domains = list(world.sandbox.domains.values())
    for start in range(0, len(domains), 200):
        batch = {"domains": [domain.entry for domain in domains[start : start + 200]]}
        redis_client.lpush("domains:start_urls", json.dumps(batch))
    settings = sweep_settings(world.sandbox, DOMAINS_NAMESERVERS=world.server.nameserver)
    sweep = Crawl(redis_url, mongo, "http://127.0.0.1:9")

    result = sweep("domains", settings=settings)

    assert result.returncode == 0, result.stderr[-3000:]
    documents = stored(mongo)
    table = confusion(documents, world)
    text = confusion_table(table)
    if os.environ.get("DNSMASQ_CONFUSION"):
        right = sum(count for (truth, got), count in table.items() if truth == got)
        shapes = Counter(world.shapes.values())
        Path(os.environ["DNSMASQ_CONFUSION"]).write_text(
            f"{len(domains)} domains, {len(documents)} stored, {right} right"
            f" ({right / len(domains):.2%}); names given as {dict(shapes)}\n{text}\n"
        )
    assert len(documents) == len(domains), text
    check_truth(documents, domains)


def answer_of(server: Dnsmasq, name: str) -> list[str]:
    """The addresses the DNS server answers for ``name``, in its order."""
    question = dns.message.make_query(name, "A")
    answer = dns.query.udp(question, server.address, port=server.port, timeout=2)
    return [record.to_text() for records in answer.answer for record in records]


def first_dead(world: World) -> list[FakeDomain]:
    """A domain whose first address refuses connections and one whose first address drops
    them, the web host's address second (as the DNS server answers them: checked)."""
    examples = [
        next(d for d in world.sandbox.domains.values() if d.behaviour == behaviour)
        for behaviour in ("second_address", "filtered_first")
    ]
    for domain in examples:
        assert answer_of(world.server, domain.name) == world.sandbox.addresses_of(domain)
    return examples


def test_a_name_whose_first_address_is_dead_is_probed_at_the_next(
    redis_url: str, redis_client: redis.Redis, mongo: Mongo, world: World
) -> None:
    """Two A records, the first where nothing listens or where connections are dropped (a
    filtered port), the second the web host's: the domain is alive, answered by its second
    address (as a browser or curl finds it), at the first try."""
    domains = first_dead(world)
    before = Counter(world.sandbox.requests)
    redis_client.lpush("domains:start_urls", *(domain.name for domain in domains))
    settings = sweep_settings(world.sandbox, DOMAINS_NAMESERVERS=world.server.nameserver)

    result = Crawl(redis_url, mongo, "http://127.0.0.1:9")("domains", settings=settings)

    assert result.returncode == 0, result.stderr[-3000:]
    documents = stored(mongo)
    for domain in domains:
        document = documents[domain.name]
        assert (document["status"], document["code"], document["scheme"]) == ("alive", 200, "http")
        assert (document["address"], document["attempts"]) == (world.sandbox.web_ip, 1)
        assert world.sandbox.requests[domain.name] - before[domain.name] == 1


def test_no_more_addresses_are_tried_than_domains_max_addresses(
    redis_url: str, redis_client: redis.Redis, mongo: Mongo, world: World
) -> None:
    """DOMAINS_MAX_ADDRESSES = 1: only the first address is tried; the web host, second, is
    never asked, and the domains are classed by their first address."""
    domains = first_dead(world)
    before = Counter(world.sandbox.requests)
    redis_client.lpush("domains:start_urls", *(domain.name for domain in domains))
    settings = sweep_settings(
        world.sandbox, DOMAINS_NAMESERVERS=world.server.nameserver, DOMAINS_MAX_ADDRESSES=1
    )

    result = Crawl(redis_url, mongo, "http://127.0.0.1:9")("domains", settings=settings)

    assert result.returncode == 0, result.stderr[-3000:]
    documents = stored(mongo)
    refused, filtered = (documents[domain.name] for domain in domains)
    assert (refused["status"], refused["code"]) == ("refused", 0)
    assert (filtered["status"], filtered["code"]) == ("timeout", 0)
    assert filtered["http_error"].startswith("timeout: ")
    assert all(world.sandbox.requests[d.name] == before[d.name] for d in domains)
