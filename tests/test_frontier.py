"""The frontier's Lua scripts, driven through ``Frontier`` against a real Redis."""

from __future__ import annotations

import hashlib
import itertools
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest
import redis
from redis.crc import key_slot
from scrapy import Request
from scrapy.utils.request import request_from_dict
from scrapy_playwright.page import PageMethod

from crawler.frontier import codec
from crawler.frontier.dupefilter import DupefilterConfig
from crawler.frontier.queue import Frontier, Pending, Popped
from crawler.keys import FrontierKeys
from devtools.services import free_port, start_redis
from tests import forkserver
from tests.harness import ROOT, Crawl, Sandbox, poll

SPIDER = "shop"
KEYS = FrontierKeys(SPIDER, f"{SPIDER}:start_urls")
LEASE = 30.0
SHORT_LEASE = 0.2


def fingerprint(url: str) -> bytes:
    return hashlib.sha1(url.encode()).digest()


def request(url: str, priority: int = 0, **extra: Any) -> dict[str, Any]:
    return {"url": url, "priority": priority, "dont_filter": False, "meta": {}, **extra}


def pending(
    url: str, priority: int = 0, *, dont_filter: bool = False, due: float = 0.0, **extra: Any
) -> Pending:
    record = request(url, priority, **extra)
    record["dont_filter"] = dont_filter
    return Pending(json.dumps(record), fingerprint(url), priority, dont_filter, due)


def urls(popped: Popped) -> list[str]:
    return [json.loads(data)["url"] for _, data in popped.leased]


def ids(popped: Popped) -> list[str]:
    return [lease_id for lease_id, _ in popped.leased]


def pop_until_leased(frontier: Frontier, count: int, worker: str) -> Popped:
    """Pop (with a long lease) until something is leased, as an idle worker does."""
    found: list[Popped] = []

    def attempt() -> bool:
        popped = frontier.pop(count, LEASE, worker)
        found.append(popped)
        return bool(popped.leased)

    poll(attempt)
    return found[-1]


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def owner(server: redis.Redis, lease_id: str) -> bytes | None:
    return cast("bytes | None", server.hget(KEYS.owner, lease_id))


def lease_deadline(server: redis.Redis, lease_id: str) -> float | None:
    return server.zscore(KEYS.leases, lease_id)


def records(server: redis.Redis, lease_id: str) -> dict[str, bool]:
    """Which per-request records exist for ``lease_id``."""
    return {
        "data": bool(server.hexists(KEYS.data, lease_id)),
        "owner": bool(server.hexists(KEYS.owner, lease_id)),
        "lease": lease_deadline(server, lease_id) is not None,
    }


@pytest.fixture
def frontier(redis_client: redis.Redis) -> Frontier:
    return Frontier(redis_client, KEYS, DupefilterConfig("exact"))


# --- order -----------------------------------------------------------------------------------


def test_higher_priority_first_and_fifo_within_a_priority(frontier: Frontier) -> None:
    frontier.schedule([pending("a0"), pending("b5", 5), pending("c0"), pending("d-400", -400)])
    frontier.schedule([pending("e-3", -3), pending("f5", 5), pending("g400", 400)])
    frontier.schedule([pending("h0"), pending("i400", 400), pending("j-3", -3)])
    frontier.schedule([pending("k120", 120), pending("l-400", -400), pending("m5", 5)])

    popped: list[str] = []
    while batch := urls(frontier.pop(3, LEASE, "w1")):
        popped.extend(batch)

    assert popped == [
        "g400", "i400", "k120", "b5", "f5", "m5", "a0", "c0", "h0", "e-3", "j-3", "d-400", "l-400",
    ]  # fmt: skip


def test_order_holds_after_a_long_run(frontier: Frontier, redis_client: redis.Redis) -> None:
    # After a trillion requests the queue scores are ~4e15 (priority) + ~1e12 (sequence): they
    # must stay exact, also when a released request goes back to the queue, or requests of one
    # priority would tie and be ordered by id as text ("1000000000000" before "999999999999").
    redis_client.set(KEYS.seq, 10**12 - 12)
    names = "abcdefghijkl"
    for name in names:
        frontier.schedule([pending(f"{name}-400", -400), pending(f"{name}400", 400)])
    expected = [f"{name}400" for name in names] + [f"{name}-400" for name in names]
    popped = frontier.pop(100, LEASE, "w1")
    assert urls(popped) == expected
    assert frontier.settle([("r", lease_id, "") for lease_id in ids(popped)], "w1", LEASE) == 24
    assert urls(frontier.pop(100, LEASE, "w1")) == expected


def test_any_integer_priority_orders_exactly(frontier: Frontier) -> None:
    # Each priority has its own list; the index of priorities is scored -priority, exact for
    # every integer up to 2**53, where priorities are clamped.
    big = 2**53
    frontier.schedule([pending("a", 10**6 - 1), pending("b", big - 1), pending("c", 10**6)])
    frontier.schedule([pending("d", 2**70), pending("e", -(2**70)), pending("f", -big + 1)])
    frontier.schedule([pending("g", big), pending("h", 10**6)])
    assert urls(frontier.pop(100, LEASE, "w1")) == ["d", "g", "b", "c", "h", "a", "f", "e"]


# --- leases ----------------------------------------------------------------------------------


def test_pop_leases_and_owner_ack_deletes(frontier: Frontier, redis_client: redis.Redis) -> None:
    frontier.schedule([pending("https://a/1")])
    before = time.time()
    popped = frontier.pop(10, LEASE, "w1")
    ((lease_id, data),) = popped.leased
    assert json.loads(data) == request("https://a/1")
    assert popped.queue_size == 0
    assert owner(redis_client, lease_id) == b"w1"
    deadline = lease_deadline(redis_client, lease_id)
    assert deadline is not None
    assert before + LEASE <= deadline <= time.time() + LEASE
    assert records(redis_client, lease_id) == dict.fromkeys(("data", "owner", "lease"), True)
    assert frontier.sizes()["leased"] == 1
    assert frontier.pop(10, LEASE, "w2").leased == []

    assert frontier.settle([("a", lease_id, "")], "w1", LEASE) == 1
    assert records(redis_client, lease_id) == dict.fromkeys(("data", "owner", "lease"), False)
    assert frontier.sizes()["leased"] == 0
    assert frontier.settle([("a", lease_id, "")], "w1", LEASE) == 0  # acked once only


@pytest.mark.parametrize("op", ["a", "r", "n", "d"])
def test_ops_of_another_worker_are_ignored(
    frontier: Frontier, redis_client: redis.Redis, op: str
) -> None:
    frontier.schedule([pending("https://a/1")])
    ((lease_id, _),) = frontier.pop(1, LEASE, "w1").leased
    deadline = lease_deadline(redis_client, lease_id)

    payload = json.dumps({"reason": "x"}) if op == "d" else ""
    assert frontier.settle([(op, lease_id, payload)], "w2", 3600) == 0

    assert owner(redis_client, lease_id) == b"w1"
    assert lease_deadline(redis_client, lease_id) == deadline
    assert records(redis_client, lease_id) == dict.fromkeys(("data", "owner", "lease"), True)
    assert frontier.sizes() == {
        "queue": 0, "leased": 1, "delayed": 0, "dead": 0, "start": 0, "start_leased": 0,
    }  # fmt: skip
    assert frontier.settle([(op, lease_id, payload)], "w1", LEASE) == 1


def test_release_returns_to_the_original_place(
    frontier: Frontier, redis_client: redis.Redis
) -> None:
    frontier.schedule([pending("a"), pending("b"), pending("c"), pending("x", 5)])
    first = frontier.pop(2, LEASE, "w1")
    assert urls(first) == ["x", "a"]

    released = [("r", lease_id, "") for lease_id in ids(first)]
    assert frontier.settle(released, "w1", LEASE) == 2
    for lease_id in ids(first):  # back in the queue: nothing of the lease is left
        assert records(redis_client, lease_id) == dict.fromkeys(("data", "owner", "lease"), False)
    assert frontier.sizes() == {
        "queue": 4, "leased": 0, "delayed": 0, "dead": 0, "start": 0, "start_leased": 0,
    }  # fmt: skip

    again = frontier.pop(10, LEASE, "w2")
    assert urls(again) == ["x", "a", "b", "c"]
    assert all(owner(redis_client, lease_id) == b"w2" for lease_id in ids(again))


def test_expired_leases_come_back_to_another_worker(
    frontier: Frontier, redis_client: redis.Redis
) -> None:
    frontier.schedule([pending("a"), pending("b", 1), pending("c")])
    first = frontier.pop(10, SHORT_LEASE, "w1")
    assert urls(first) == ["b", "a", "c"]

    retaken = pop_until_leased(frontier, 10, "w2")
    assert retaken.reclaimed == 3
    assert urls(retaken) == ["b", "a", "c"]  # same order, under new lease ids
    assert [data for _, data in retaken.leased] == [data for _, data in first.leased]
    assert all(owner(redis_client, lease_id) == b"w2" for lease_id in ids(retaken))

    # The first worker lost its leases: what it does with them now is ignored.
    assert frontier.settle([("a", lease_id, "") for lease_id in ids(first)], "w1", LEASE) == 0
    assert frontier.sizes()["leased"] == 3
    assert frontier.settle([("a", lease_id, "") for lease_id in ids(retaken)], "w2", LEASE) == 3
    assert frontier.sizes()["leased"] == 0


def test_renew_keeps_the_lease(frontier: Frontier, redis_client: redis.Redis) -> None:
    frontier.schedule([pending("a")])
    ((lease_id, _),) = frontier.pop(1, SHORT_LEASE, "w1").leased
    first_deadline = lease_deadline(redis_client, lease_id)
    assert first_deadline is not None

    assert frontier.settle([("n", lease_id, "")], "w1", LEASE) == 1
    renewed = lease_deadline(redis_client, lease_id)
    assert renewed is not None
    assert renewed >= time.time() + LEASE - 5

    # Other workers keep polling well past the first deadline and never get it.
    while time.time() < first_deadline + 0.3:
        popped = frontier.pop(10, LEASE, "w2")
        assert (popped.leased, popped.reclaimed) == ([], 0)
        time.sleep(0.02)
    assert owner(redis_client, lease_id) == b"w1"
    assert frontier.settle([("a", lease_id, "")], "w1", LEASE) == 1


# --- delayed requests ------------------------------------------------------------------------


def test_delayed_requests_wait_until_due(frontier: Frontier) -> None:
    due = time.time() + 0.5
    frontier.schedule([pending("now-1"), pending("later", 10, due=due), pending("now-2")])
    assert frontier.sizes()["queue"] == 2
    assert frontier.sizes()["delayed"] == 1

    popped = frontier.pop(1, LEASE, "w1")
    assert (urls(popped), popped.promoted) == (["now-1"], 0)

    # Housekeeping-only pops (count 0) until the delayed request is promoted.
    def promoted() -> int:
        count = frontier.pop(0, LEASE, "w1").promoted
        if count:
            assert time.time() >= due  # never promoted before it is due
        return count

    assert poll(promoted) == 1
    assert frontier.sizes()["delayed"] == 0
    # Promoted with its own priority: ahead of the older request of priority 0.
    assert urls(frontier.pop(10, LEASE, "w1")) == ["later", "now-2"]


# --- dead letters ----------------------------------------------------------------------------


def test_dead_letters_keep_request_and_failure(
    frontier: Frontier, redis_client: redis.Redis
) -> None:
    first = request("https://a/1", 3, meta={"retry_times": 2, "category": 5})
    second = request("https://a/2")
    frontier.schedule(
        [
            Pending(json.dumps(first), fingerprint("https://a/1"), 3),
            Pending(json.dumps(second), fingerprint("https://a/2")),
        ]
    )
    leased = frontier.pop(10, LEASE, "w1")
    failures = [
        {"reason": "http_500", "error": "500 Internal Server Error", "attempts": 3},
        {"reason": "timeout", "error": "took too long", "attempts": 1},
    ]
    ops = [
        ("d", lease_id, json.dumps(failure))
        for lease_id, failure in zip(ids(leased), failures, strict=True)
    ]
    assert frontier.settle(ops, "w1", LEASE) == 2

    for lease_id in ids(leased):
        assert records(redis_client, lease_id) == dict.fromkeys(("data", "owner", "lease"), False)
    assert frontier.sizes()["dead"] == 2
    assert frontier.dead_letters() == [  # newest first
        {"request": second, "failure": failures[1]},
        {"request": first, "failure": failures[0]},
    ]
    assert frontier.dead_letters(limit=1) == [{"request": second, "failure": failures[1]}]

    # Oldest first back to the queue, as dont_filter (its fingerprint was seen) without its
    # retry count; it leaves the dead list.
    assert frontier.requeue_dead(1).moved == 1
    assert frontier.dead_letters() == [{"request": second, "failure": failures[1]}]
    ((_, data),) = frontier.pop(10, LEASE, "w2").leased
    assert codec.loads(data) == {**first, "dont_filter": True, "meta": {"category": 5}}

    assert frontier.requeue_dead(10).moved == 1
    assert frontier.requeue_dead(10).moved == 0
    assert frontier.sizes()["dead"] == 0
    ((_, data),) = frontier.pop(10, LEASE, "w2").leased
    assert codec.loads(data) == {**second, "dont_filter": True}


def test_a_dead_letter_requeued_keeps_its_bytes_and_page_methods(frontier: Frontier) -> None:
    """A request as a spider makes it (bytes headers and body, a Playwright page method, a job)
    comes back from the dead letters as it was."""
    made = Request(
        "https://a/form",
        method="POST",
        body=b"\x00q=1",
        headers={"Accept": "text/html"},
        meta={"job": 7, "playwright_page_methods": [PageMethod("wait_for_timeout", 10)]},
    )
    record = codec.dumps(codec.request_record(made, None))
    frontier.schedule([Pending(record, fingerprint("https://a/form"))])
    ((lease_id, _),) = frontier.pop(1, LEASE, "w1").leased
    assert frontier.settle([("d", lease_id, json.dumps({"reason": "x"}))], "w1", LEASE) == 1
    assert frontier.requeue_dead(1).moved == 1
    ((_, data),) = frontier.pop(1, LEASE, "w2").leased
    again = request_from_dict(codec.loads(data))
    assert (again.method, again.body, again.headers.get("Accept")) == (
        "POST",
        made.body,
        b"text/html",
    )
    assert again.meta["job"] == 7
    (method,) = again.meta["playwright_page_methods"]
    assert (method.method, method.args) == ("wait_for_timeout", (10,))
    assert again.dont_filter


def test_a_dead_letter_that_cannot_be_read_back_is_named_and_left_the_others_requeued(
    frontier: Frontier, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    letters = [
        '{"request":{"u":"https://a/1"},"failure":{"reason":"x"}}',
        '{"request":{"u":"https://a/2","m":{"x":{"__bytes__":"abc"}}},"failure":{}}',
        "not json",
        '{"request":{"u":"https://a/3","m":{"p":{"__page_method__":{"m":1}}}},"failure":{}}',
        '{"request":{"u":"https://a/4","m":[1]},"failure":{}}',
        '{"request":{"u":"https://a/5"},"failure":{"reason":"y"}}',
    ]
    redis_client.lpush(frontier.keys.dead, *letters)  # the first pushed is the oldest
    with caplog.at_level("ERROR"):
        assert frontier.requeue_dead(10).moved == 2
    assert [codec.loads(data)["url"] for _, data in frontier.pop(10, LEASE, "w").leased] == [
        "https://a/1",
        "https://a/5",
    ]
    left = [
        raw.decode() for raw in cast(list[bytes], redis_client.lrange(frontier.keys.dead, 0, -1))
    ]
    assert left == letters[4:0:-1]
    assert sum("cannot be requeued" in record.message for record in caplog.records) == 4


# --- duplicate filter ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "filters"),
    [
        (DupefilterConfig("exact"), True),
        (DupefilterConfig("bloom", capacity=1000, error_rate=1e-6), True),
        (DupefilterConfig("none"), False),
    ],
    ids=["exact", "bloom", "none"],
)
def test_duplicate_filter_modes(
    redis_client: redis.Redis, config: DupefilterConfig, filters: bool
) -> None:
    frontier = Frontier(redis_client, KEYS, config)
    again = 0 if filters else 1
    assert frontier.schedule([pending("a"), pending("b")]) == [1, 1]
    assert frontier.schedule([pending("a")]) == [again]
    assert frontier.schedule([pending("c"), pending("c"), pending("b")]) == [1, again, again]
    # dont_filter always schedules, and does not mark the request as seen.
    assert frontier.schedule([pending("a", dont_filter=True)]) == [1]
    assert frontier.schedule([pending("d", dont_filter=True), pending("d")]) == [1, 1]
    assert frontier.schedule([pending("d")]) == [again]
    expected = 6 if filters else 10
    assert frontier.sizes()["queue"] == expected
    assert len(frontier.pop(100, LEASE, "w1").leased) == expected


def test_duplicate_filter_redisbloom(bloom_redis_url: str) -> None:
    client = redis.Redis.from_url(bloom_redis_url)
    client.flushdb()
    assert "bf" in {text(module[b"name"]) for module in cast(Any, client.module_list())}
    frontier = Frontier(client, KEYS, DupefilterConfig("redisbloom", 1000, 1e-4))
    assert frontier.schedule([pending("a"), pending("a"), pending("b")]) == [1, 0, 1]
    assert frontier.schedule([pending("a"), pending("a", dont_filter=True)]) == [0, 1]
    assert client.type(KEYS.dupefilter) == b"MBbloom--"
    # Past its first capacity the filter scales and still knows every URL it saw.
    batch = [pending(f"url{n}") for n in range(3000)]
    assert sum(frontier.schedule(batch)) >= 3000 - 5
    assert frontier.schedule(batch[:500]) == [0] * 500
    client.close()


# --- start entries ---------------------------------------------------------------------------


def entries(members: list[bytes]) -> list[bytes]:
    """The start entries of lease members ("<worker>:<time>:<n>\\n<entry>")."""
    return [member.split(b"\n", 1)[1] for member in members]


def holders(members: list[bytes]) -> list[bytes]:
    return [member.split(b":", 1)[0] for member in members]


def test_pop_start_leases_in_push_order(frontier: Frontier, redis_client: redis.Redis) -> None:
    redis_client.lpush(KEYS.start, "a", "b", "c")
    first = frontier.pop_start(2, LEASE, "w1")
    assert entries(first) == [b"a", b"b"]
    assert holders(first) == [b"w1", b"w1"]
    assert (frontier.sizes()["start"], frontier.sizes()["start_leased"]) == (1, 2)
    redis_client.lpush(KEYS.start, "d")
    second = frontier.pop_start(5, LEASE, "w2")
    assert entries(second) == [b"c", b"d"]
    assert frontier.pop_start(5, LEASE, "w2") == []

    frontier.ack_start([first[0], second[0]])
    leased: Any = redis_client.zrange(KEYS.start_leases, 0, -1)
    assert sorted(leased) == sorted([first[1], second[1]])
    frontier.ack_start([first[1], second[1]])
    assert (frontier.sizes()["start"], frontier.sizes()["start_leased"]) == (0, 0)


def test_equal_start_entries_are_leased_and_returned_separately(
    frontier: Frontier, redis_client: redis.Redis
) -> None:
    redis_client.lpush(KEYS.start, "same", "same")
    members = frontier.pop_start(2, SHORT_LEASE, "w1")
    assert entries(members) == [b"same", b"same"]
    assert len(set(members)) == 2
    assert poll(lambda: frontier.pop_start(0, LEASE, "w2") == [] and frontier.sizes()["start"] == 2)


def test_expired_start_leases_come_back_first(
    frontier: Frontier, redis_client: redis.Redis
) -> None:
    redis_client.lpush(KEYS.start, "a", "b", "c", "d")
    assert entries(frontier.pop_start(2, SHORT_LEASE, "w1")) == [b"a", b"b"]

    # Housekeeping-only pops (count 0) until the expired entries are back in the list.
    assert poll(lambda: frontier.pop_start(0, LEASE, "w2") == [] and frontier.sizes()["start"] == 4)
    assert frontier.sizes()["start_leased"] == 0

    retaken = entries(frontier.pop_start(3, LEASE, "w2"))
    assert sorted(retaken[:2]) == [b"a", b"b"]  # ahead of the untouched entries
    assert retaken[2:] == [b"c"]
    assert entries(frontier.pop_start(3, LEASE, "w2")) == [b"d"]


def test_acked_and_renewed_start_leases_stay(frontier: Frontier, redis_client: redis.Redis) -> None:
    redis_client.lpush(KEYS.start, "a", "b", "c")
    members = frontier.pop_start(3, SHORT_LEASE, "w1")
    assert entries(members) == [b"a", b"b", b"c"]
    frontier.ack_start([members[0]])
    frontier.renew_start([members[1]], LEASE, redis_client)
    renewed: Any = redis_client.zscore(KEYS.start_leases, members[1])
    assert renewed >= time.time() + LEASE - 5
    # Renewing does not resurrect an acked lease.
    frontier.renew_start([members[0]], LEASE, redis_client)

    assert poll(lambda: frontier.pop_start(0, LEASE, "w2") == [] and frontier.sizes()["start"] == 1)
    retaken = frontier.pop_start(10, LEASE, "w2")
    assert entries(retaken) == [b"c"]
    leased: Any = redis_client.zrange(KEYS.start_leases, 0, -1)
    assert sorted(leased) == sorted([members[1], retaken[0]])


# --- inspection and layout -------------------------------------------------------------------


def fill_every_key(frontier: Frontier, server: redis.Redis) -> None:
    """One request queued, one leased, one delayed, one dead; start entries queued and leased."""
    frontier.schedule([pending("leased", 2), pending("dead", 1), pending("queued")])
    frontier.schedule([pending("delayed", due=time.time() + 3600)])
    ((lease_id, _),) = frontier.pop(1, LEASE, "w1").leased
    ((dead_id, _),) = frontier.pop(1, LEASE, "w1").leased
    assert frontier.settle([("d", dead_id, json.dumps({"reason": "gone"}))], "w1", LEASE) == 1
    server.lpush(KEYS.start, "s1", "s2", "s3")
    assert entries(frontier.pop_start(1, LEASE, "w1")) == [b"s1"]
    assert owner(server, lease_id) == b"w1"


def test_sizes(frontier: Frontier, redis_client: redis.Redis) -> None:
    assert frontier.sizes() == dict.fromkeys(
        ("queue", "leased", "delayed", "dead", "start", "start_leased"), 0
    )
    fill_every_key(frontier, redis_client)
    assert frontier.sizes() == {
        "queue": 1, "leased": 1, "delayed": 1, "dead": 1, "start": 2, "start_leased": 1,
    }  # fmt: skip


EVERY_KEY = (
    KEYS.queues, f"{KEYS.queue_prefix}0", KEYS.leases, KEYS.owner, KEYS.data, KEYS.seq,
    KEYS.delayed, KEYS.dead,
    KEYS.dupefilter, f"{KEYS.dupefilter}:meta", f"{KEYS.dupefilter}:0", KEYS.start,
    KEYS.start_leases,
)  # fmt: skip


def write_every_key(server: redis.Redis) -> Frontier:
    """Exercise every script so that each key of the frontier exists (both filter layouts)."""
    frontier = Frontier(server, KEYS, DupefilterConfig("bloom", 1000, 1e-3))
    fill_every_key(frontier, server)
    Frontier(server, KEYS, DupefilterConfig("exact")).schedule([pending("exact")])
    names: Any = server.keys("*")
    assert sorted(names) == sorted(name.encode() for name in EVERY_KEY)
    return frontier


def test_keys_share_the_spider_hash_tag(redis_client: redis.Redis) -> None:
    write_every_key(redis_client)
    spider_slot = key_slot(SPIDER.encode())
    start_slot = key_slot(KEYS.start.encode())
    for name in EVERY_KEY:
        if name in (KEYS.start, KEYS.start_leases):
            assert key_slot(name.encode()) == start_slot, name
        else:
            assert name.startswith("{" + SPIDER + "}:"), name
            assert key_slot(name.encode()) == spider_slot, name


@pytest.fixture(scope="module")
def cluster_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[redis.Redis]:
    """A one-node Redis Cluster serving every slot: it refuses a command whose keys are in
    different slots, as a real cluster does."""
    port = free_port()
    # The bus port is explicit: the default (port + 10000) can be past 65535.
    server = start_redis(
        port,
        tmp_path_factory.mktemp("cluster"),
        "--cluster-enabled",
        "yes",
        "--cluster-port",
        str(free_port()),
    )
    client = redis.Redis(port=port)
    command: Any = client.execute_command
    try:
        command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        poll(lambda: b"cluster_state:ok" in command("CLUSTER", "INFO"))
        yield client
    finally:
        client.close()
        server.stop()


def test_scripts_run_on_redis_cluster(cluster_node: redis.Redis) -> None:
    frontier = write_every_key(cluster_node)
    command: Any = cluster_node.execute_command
    for name in EVERY_KEY:
        assert command("CLUSTER", "KEYSLOT", name) == key_slot(name.encode())
    ((lease_id, _),) = frontier.pop(1, LEASE, "w1").leased
    assert frontier.settle([("r", lease_id, "")], "w1", LEASE) == 1
    assert frontier.requeue_dead(1).moved == 1
    assert frontier.sizes()["queue"] == 3
    frontier.ack_start(frontier.pop_start(5, LEASE, "w1"))
    assert frontier.sizes()["start"] == 0


# --- batches ---------------------------------------------------------------------------------


def test_a_thousand_requests_in_one_call(redis_client: redis.Redis) -> None:
    frontier = Frontier(redis_client, KEYS, DupefilterConfig())  # the default Bloom filter
    names = [f"https://a/{number}" for number in range(1000)]
    assert frontier.schedule([pending(name) for name in names]) == [1] * 1000
    assert frontier.sizes()["queue"] == 1000

    popped: list[str] = []
    lease_ids: list[str] = []
    for remaining in (700, 400, 100, 0):
        batch = frontier.pop(300, LEASE, "w1")
        assert batch.queue_size == remaining
        popped.extend(urls(batch))
        lease_ids.extend(ids(batch))
    assert popped == names
    assert len(set(lease_ids)) == 1000
    assert frontier.sizes()["leased"] == 1000
    assert frontier.settle([("a", lease_id, "") for lease_id in lease_ids], "w1", LEASE) == 1000
    assert frontier.sizes()["leased"] == 0
    assert frontier.schedule([pending(name) for name in names]) == [0] * 1000


# --- closing -----------------------------------------------------------------------------------

PLAIN_SPIDER = """
import scrapy


class PlainSpider(scrapy.Spider):
    name = "plain"

    async def start(self):
        for number in range(3):
            yield scrapy.Request(f"{self.base}/@plain.user{number}", dont_filter=True)

    def parse(self, response):
        yield {"url": response.url}
"""


def test_a_plain_spider_closes_only_once_the_delayed_set_is_empty(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox, tmp_path: Path
) -> None:
    """A plain scrapy.Spider on the frontier scheduler, its requests waiting in the delayed set
    for their host's turns, fetches every page at the fleet's rate before it closes."""
    spider = tmp_path / "plain.py"
    spider.write_text(PLAIN_SPIDER)
    settings = {
        "POLITENESS_RATE": 0.4,
        "POLITENESS_BURST": 1,
        "CONCURRENT_REQUESTS": 4,
        "ITEM_PIPELINES": "{}",
    }
    command = [
        sys.executable,
        "-m",
        "scrapy",
        "runspider",
        str(spider),
        "-a",
        f"base={sandbox.url}",
    ]
    for name, value in settings.items():
        command += ["-s", f"{name}={value}"]
    done = forkserver.run(command, ROOT, crawl.env(), timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "(finished)" in done.stderr
    fetched = sandbox.admin("stats")["by_path"]
    assert {path: fetched.get(path) for path in (f"/@plain.user{n}" for n in range(3))} == {
        f"/@plain.user{n}": 1 for n in range(3)
    }
    # The pop gave each request its host's turn: none waited for a token in the worker, and
    # they went one per 2.5 s (0.4 per second, no burst), less what a loaded machine's reactor
    # may send one late and the next on time (0.44 s seen once with the whole suite running).
    assert int(redis_client.hget("{plain}:stats", "politeness/paced") or 0) == 3
    assert not redis_client.hexists("{plain}:stats", "politeness/deferred/rate")
    first = sandbox.admin("stats")["first_seen"]
    times = sorted(first[f"/@plain.user{n}"] for n in range(3))
    assert min(later - earlier for earlier, later in itertools.pairwise(times)) >= 2.5 - 0.5
    for name in ("queue", "leases", "delayed"):
        assert not redis_client.exists("{plain}:" + name), name


@pytest.mark.parametrize("mode", ["exact", "bloom"])
def test_a_seed_passes_a_link_that_found_its_url_first_but_not_itself(
    redis_client: redis.Redis, mode: str
) -> None:
    """A start entry is a seed: a link that found its URL first does not drop it (its crawl
    starts at depth 0 from it), the same seed pushed again is dropped, and a link to its URL
    after it is dropped as usual."""
    frontier = Frontier(redis_client, KEYS, DupefilterConfig(mode, 1000, 1e-6))
    home = "https://site.test/"

    def seed() -> Pending:
        return replace(pending(home), seed=True)

    assert frontier.schedule([pending(home)]) == [1]  # a link to it, first
    assert frontier.schedule([seed()]) == [1]  # the seed all the same
    assert frontier.schedule([seed()]) == [0]  # seeded before
    assert frontier.schedule([pending(home)]) == [0]  # a link after it
    assert frontier.schedule([seed(), pending("https://other.test/")]) == [0, 1]
    fresh = replace(pending("https://new.test/"), seed=True)
    assert frontier.schedule([fresh]) == [1]
    assert frontier.schedule([pending("https://new.test/")]) == [0]  # its URL is seen


def test_purge_deletes_every_key_of_the_spider_and_names_them(redis_client: redis.Redis) -> None:
    from scrapy.settings import Settings

    from crawler.control.purge import purge_spider

    settings = Settings({"REDIS_START_URLS_KEY": "%(name)s:start_urls"})
    redis_client.lpush(KEYS.start, "entry")
    redis_client.zadd(KEYS.start_leases, {"entry": 1})
    redis_client.set("{" + SPIDER + "}:stats", 1)
    redis_client.set("{other}:stats", 1)
    deleted = purge_spider(redis_client, settings, SPIDER)
    assert deleted == sorted([KEYS.start, KEYS.start_leases, "{" + SPIDER + "}:stats"])
    assert redis_client.keys("*") == [b"{other}:stats"]
