"""The slowest tests start first, one group per pytest-xdist worker.

``--dist worksteal`` hands each worker a contiguous share of the collection and lets idle
workers steal from the end of the others' shares; a long test that happens to start last
makes the whole run wait for it. :func:`reorder` puts the tests known to be slow at the head
of the shares, spread so that every worker's slow group takes about as long; the rest keep
their order. Without xdist, the order is left alone.
"""

from __future__ import annotations

import pytest

# Seconds each took in a full run (4 workers on 2 busy cores, less where a test was made
# shorter since); only their ratios matter.
SLOWEST = {
    "tests/test_aws.py::test_fleet_launch_list_rotate_and_scale_to_zero": 150,
    "tests/test_chaos.py::test_workers_redis_and_mongodb_faults_lose_nothing": 50,
    "tests/test_fleet_page.py::"
    "test_the_page_shows_what_status_shows_and_unban_lets_the_crawl_finish": 20,
    "tests/test_recrawl.py::"
    "test_hot_documents_are_revisited_often_and_stay_fresh_cold_ones_rarely": 55,
    "tests/test_links.py::test_two_workers_fetch_robots_once_per_host": 20,
    "tests/test_scaling.py::test_a_million_queued_requests_take_the_documented_bytes": 37,
    "tests/test_links.py::test_every_allowed_page_stored_once_and_nothing_forbidden_requested": 46,
    "tests/test_secrets.py::test_credentials_work_and_passwords_stay_hidden": 46,
    "tests/test_cluster.py::test_explore_then_profiles_on_the_cluster": 44,
    "tests/test_hostile_responses.py::test_compressed_profile_pages_and_feeds_are_stored": 42,
    "tests/test_demo.py::test_the_demo_leaves_an_exported_fleet_untouched": 34,
    "tests/test_domains.py::test_state_does_not_grow_with_the_domains_swept": 25,
    "tests/test_crawl.py::test_failed_downloads_become_dead_letters_that_can_be_requeued": 35,
    "tests/test_secrets.py::test_proxy_and_query_passwords_stay_hidden": 33,
    "tests/test_scrapy_redis.py::"
    "test_the_example_crawler_on_the_project_bases_reads_its_own_key": 31,
    "tests/test_pipeline.py::test_mongodb_stopped_mid_crawl_loses_nothing": 29,
}


def reorder(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order ``items`` so that each xdist worker's first share starts with its slow group."""
    workers = int(getattr(config, "workerinput", {}).get("workercount", 0))
    slow = sorted((i for i in items if i.nodeid in SLOWEST), key=lambda i: -SLOWEST[i.nodeid])
    if workers < 2 or not slow:
        return
    groups: list[list[pytest.Item]] = [[] for _ in range(workers)]
    loads = [0] * workers
    for item in slow:  # the longest first, each to the least loaded group
        least = loads.index(min(loads))
        groups[least].append(item)
        loads[least] += SLOWEST[item.nodeid]
    rest = [item for item in items if item.nodeid not in SLOWEST]
    ordered: list[pytest.Item] = []
    left = len(items)
    for index, group in enumerate(groups):
        share = left // (workers - index)  # what worksteal first sends the index-th worker
        left -= share
        fill = max(0, share - len(group))
        ordered += group + rest[:fill]
        rest = rest[fill:]
    items[:] = ordered + rest
