"""How the tests are shared among pytest-xdist workers (``pytest -n N``, xdist's ``--dist load``).

Each worker takes the next unit of work from one queue whenever it runs short
(:class:`Scheduling`). A unit is one test, or every test of a module in GROUPED, whose tests
share a server or a build of their module's own: one worker sets it up once, instead of each
worker that happens to run one of them. :func:`reorder` queues the units longest first (the
seconds in SLOWEST, a module's being its tests' sum), so that the long ones start at once and
short ones fill the end. Without xdist, the order is left alone; any other ``--dist`` is
xdist's own.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from xdist.scheduler import LoadScopeScheduling

# Modules whose tests share a fixture of module scope that starts a server or builds something:
# a moto server, the user-data wheel and virtualenv, password-protected Redis and MongoDB, the
# domains sandbox and dnsmasq, a Redis Cluster.
GROUPED = {
    "tests/test_aws.py",
    "tests/test_cluster.py",
    "tests/test_domains.py",
    "tests/test_domains_dnsmasq.py",
    "tests/test_secrets.py",
    "tests/test_userdata.py",
}

# Modules (or single tests) that measure what a busy machine skews, marked ``timed`` (conftest):
# ``make unit`` runs them apart, the other tests beside them only on the CPU time they leave
# idle (SCHED_IDLE, devtools/beside.py). Side by side with the other tests at the same
# priority, the elastic autoscaler's (then up to 8 crawl processes at once) starved the domains
# sweeps' reactors past their probes' timeouts (alive domains stored as timeouts), the
# recrawl's hot documents past their freshness and the breaker test's hosts below their rate;
# and the many-hosts server (a thread of the test's process) stamped a batch of arrivals 0.12 s
# late, so three hosts' next requests looked 0.88 s after their previous ones at 1/s.
# The autoscaler's test, which alone keeps both cores busy most of the time, runs first with no
# other timed test beside it (marker ``alone``); the others, each using about half a core at
# most, then run in three lanes, one unit each, so that at most three of them run at once
# (``-n 3``): the domain sweeps, a crawl delay, a polite crawl's round trips and a resume;
# freshness, the breaker's rates, 4 workers on many hosts and another resume; the many-hosts
# rates, DNS, the fleet bound by politeness and a Redis outage (about 100-130 s each). The
# untimed tests run beside all of them.
_ALONE = "timed-alone: starts up to 5 crawl processes"
_SWEEPS = "timed-lane-1: domain sweeps, a crawl delay, a polite crawl's round trips"
_RATES = "timed-lane-2: freshness, a breaker's rates, 4 workers on many hosts"
_HOSTS = "timed-lane-3: many hosts' rates, a real DNS server, a politeness-bound fleet, Redis out"
_MANY_HOSTS = "tests/test_politeness_many_hosts.py::"
_HELD_UP = "test_a_request_held_up_on_its_way_still_reaches_its_host_on_time"
_PAUSED = (
    "tests/test_pause.py::test_a_paused_fleet_sends_nothing_loses_nothing_and_closes_after_resume"
)
SHARED_UNITS = {
    "tests/test_autoscale.py::test_the_local_autoscaler_scales_out_and_in_and_loses_nothing": (
        _ALONE
    ),
    "tests/test_autoscale.py": _HOSTS,
    "tests/test_domains.py": _SWEEPS,
    "tests/test_domains_dnsmasq.py": _HOSTS,
    "tests/test_recrawl.py::test_hot_documents_are_revisited_often_and_stay_fresh_"
    "cold_ones_rarely": _RATES,
    "tests/test_host_breaker.py::test_a_host_answering_429_is_blocked_with_doubling_steps_and_"
    "the_others_keep_their_rate": _RATES,
    # Crawl-delay spacing of 0.3 s, stamped at the sandbox: with 8 test processes beside it, one
    # arrival came 0.79 s after the one before and the next 0.11 s after it.
    "tests/test_links.py::test_crawl_delay_is_kept_per_host": _SWEEPS,
    # A polite crawl's token takes, one a page and one more for a request held back: starved
    # beside the other tests, its worker held back 37 of 30 pages' requests again.
    "tests/test_round_trips.py::test_a_polite_crawl_talks_to_redis_about_once_a_page": _SWEEPS,
    # Requests waiting in the ban middleware for their next token when Redis goes: the worker
    # must fetch faster than the rate (5/s). Starved beside the autoscaler's test, it fetched
    # slower, no request waited for a token, and the outage found none.
    "tests/test_redis_outage.py::test_redis_killed_and_restarted_mid_crawl_loses_nothing": _HOSTS,
    # Turns at 10/s handed out in order: a pop more than one interval (0.1 s) late gives its
    # turn up, and the request goes behind the host's others.
    "tests/test_pacing.py::test_turns_are_handed_out_when_they_come": _HOSTS,
    # The fleet goes on within 2 s of a resume, stamped at the sandbox: starved beside the
    # autoscaler's test, the first request after one came 2.06 s later.
    f"{_PAUSED}[one_killed_while_paused]": _SWEEPS,
    f"{_PAUSED}[all_resume]": _RATES,
    _MANY_HOSTS + "test_scope_any_takes_every_seed_at_depth_0_and_fetches_a_page_again_only_"
    "nearer": _HOSTS,
    # 100 hosts at 0.25/s, spacing stamped at the sandbox (a thread of the test's process): with
    # 8 test processes beside it, four hosts' arrivals were stamped together 0.45 s late, and
    # their next ones looked 3.54 s after them (0.9 / RATE is 3.6 s).
    f"{_MANY_HOSTS}test_workers_keep_every_host_busy_and_none_early[2]": _HOSTS,
    f"{_MANY_HOSTS}test_workers_keep_every_host_busy_and_none_early[4]": _RATES,
    **{
        f"{_MANY_HOSTS}{_HELD_UP}[{where}]": _HOSTS
        for where in ("before_the_gate", "after_the_gate", "slow_first_connection")
    },
}

# Seconds each took in a full run (5 workers on 2 busy cores); only their ratios matter. A test
# not named here counts for DEFAULT.
SLOWEST = {
    "tests/test_spill_unlinked.py::"
    "test_a_worker_whose_spill_directory_is_removed_in_an_outage_loses_nothing_to_a_kill": 20,
    "tests/test_spill_unlinked.py::"
    "test_a_spill_directory_removed_while_the_worker_waits_is_made_again_before_a_kill": 20,
    "tests/test_spill_unlinked.py::"
    "test_a_file_put_in_place_of_the_spill_directory_leaves_the_batch_unacknowledged": 20,
    "tests/test_links_jobs.py::"
    "test_a_sites_sitemap_pages_carry_its_job_and_a_cancel_stops_them": 18,
    "tests/test_autoscale.py::test_the_local_autoscaler_scales_out_and_in_and_loses_nothing": 35,
    "tests/test_pause.py::test_any_sequence_of_pause_resume_kill_and_start_loses_nothing": 64,
    "tests/test_recrawl.py::"
    "test_hot_documents_are_revisited_often_and_stay_fresh_cold_ones_rarely": 60,
    "tests/test_jobs.py::"
    "test_any_sequence_of_job_pause_resume_cancel_and_kill_loses_nothing_else": 52,
    "tests/test_domains.py::test_any_mix_of_hosts_is_stored_as_each_host_behaves": 40,
    "tests/test_redis_outage.py::test_redis_killed_and_restarted_mid_crawl_loses_nothing": 35,
    "tests/test_chaos.py::test_workers_redis_and_mongodb_faults_lose_nothing": 33,
    "tests/test_host_breaker.py::"
    "test_a_host_answering_429_is_blocked_with_doubling_steps_and_the_others_keep_their_rate": 30,
    "tests/test_jobs.py::"
    "test_a_paused_job_waits_while_the_other_goes_on_and_ends_whole_after_resume": 28,
    "tests/test_politeness_many_hosts.py::test_workers_keep_every_host_busy_and_none_early[4]": 27,
    "tests/test_chains.py::"
    "test_feeds_outnumbering_their_hosts_turns_wait_in_the_outbox_and_lose_nothing": 27,
    "tests/test_politeness_many_hosts.py::test_workers_keep_every_host_busy_and_none_early[2]": 27,
    "tests/test_pause.py::"
    "test_a_paused_fleet_sends_nothing_loses_nothing_and_closes_after_resume[one_killed_"
    "while_paused]": 26,
    "tests/test_host_breaker.py::"
    "test_unreachable_hosts_and_unavailable_robots_are_dead_lettered_then_requeued": 25,
    "tests/test_pause.py::"
    "test_a_paused_fleet_sends_nothing_loses_nothing_and_closes_after_resume[all_resume]": 23,
    "tests/test_fleet_page.py::"
    "test_the_page_shows_what_status_shows_and_unban_lets_the_crawl_finish": 21,
    "tests/test_jobs.py::test_two_jobs_cancel_one_mid_crawl_and_the_other_completes": 19,
    "tests/test_autoscale.py::test_a_politeness_bound_web_never_gets_a_second_worker": 18,
    "tests/test_links.py::test_a_host_cooling_down_waits_without_losing_its_robots": 18,
    "tests/test_domains.py::test_state_does_not_grow_with_the_domains_swept": 17,
    "tests/test_round_trips.py::test_a_polite_crawl_talks_to_redis_about_once_a_page": 17,
    "tests/test_secrets.py::test_credentials_work_and_passwords_stay_hidden": 16,
    "tests/test_links.py::test_a_slow_host_and_a_banning_host_hold_up_nobody": 16,
    "tests/test_chains.py::test_a_worker_killed_mid_chain_loses_no_page": 16,
    "tests/test_demo.py::test_the_demo_leaves_an_exported_fleet_untouched": 16,
    "tests/test_aws.py::test_fleet_launch_list_rotate_and_scale_to_zero": 16,
    "tests/test_aws.py::test_fleet_launch_by_deadline_and_autoscale_toward_the_workers_wanted": 16,
    "tests/test_domains_dnsmasq.py::"
    "test_the_sweep_through_a_real_dns_server_stores_every_class_right": 15,
    "tests/test_scaling.py::test_a_million_queued_requests_take_the_documented_bytes": 14,
    "tests/test_chains.py::test_two_workers_read_feeds_on_turns_taken_ahead_at_the_hosts_pace": 14,
    "tests/test_failure_pause.py::"
    "test_a_job_whose_host_answers_only_errors_pauses_itself_and_the_other_goes_on": 14,
    "tests/test_deploy.py::test_scrapyd_deploy_schedule_and_store": 13,
    "tests/test_domains.py::test_a_100k_line_csv_is_read_as_the_sweep_goes": 12,
    "tests/test_observability.py::test_status_and_metrics_of_two_workers_match_the_sandbox": 12,
    "tests/test_recrawl.py::test_revisits_survive_a_killed_worker": 12,
    "tests/test_failure_pause.py::"
    "test_a_site_answering_only_errors_pauses_the_crawl_until_resumed": 12,
    "tests/test_crawl.py::test_failed_downloads_become_dead_letters_that_can_be_requeued": 12,
    "tests/test_domains.py::test_two_workers_share_the_fleet_rate": 11,
    "tests/test_domains.py::test_a_worker_killed_mid_sweep_loses_nothing": 11,
    "tests/test_pause.py::test_pause_and_resume_commands_and_status": 11,
    "tests/test_secrets.py::test_proxy_and_query_passwords_stay_hidden": 11,
    "tests/test_fleet.py::test_redis_restart_mid_crawl_loses_nothing": 11,
    "tests/test_userdata.py::"
    "test_user_data_installs_the_project_and_crawls_outside_the_checkout": 11,
    "tests/test_domains_units.py::"
    "test_a_100k_line_csv_goes_through_the_spider_in_little_memory": 11,
    "tests/test_domains.py::test_start_entries_are_read_while_a_slow_domain_waits": 10,
    "tests/test_fleet.py::test_a_killed_worker_loses_nothing": 10,
    "tests/test_links.py::test_a_killed_worker_loses_nothing": 10,
    "tests/test_links.py::test_every_allowed_page_stored_once_and_nothing_forbidden_requested": 10,
    "tests/test_fleet.py::test_a_stop_signal_releases_leases_at_once[SIGTERM]": 10,
    "tests/test_fleet.py::test_a_stop_signal_releases_leases_at_once[SIGINT]": 10,
    "tests/test_jobs.py::test_a_jobs_max_pages_holds_for_a_chain_of_feed_pages": 10,
    "tests/test_scrapy_redis.py::test_example_crawler_loses_nothing_when_a_worker_is_killed": 10,
    "tests/test_pipeline.py::test_the_plain_form_stores_what_the_pipeline_form_stores": 10,
    "tests/test_pipeline.py::test_mongodb_stopped_mid_crawl_loses_nothing": 10,
    "tests/test_pause.py::test_a_paused_idle_fleet_stays_open_and_shows_why": 9,
    "tests/test_maps.py::test_listing_consent_and_single_match": 9,
    "tests/test_bans.py::test_transient_errors_slow_answers_and_dropped_connections": 9,
    "tests/test_bans.py::test_ban_modes_end_with_every_profile_stored[json_error]": 8,
    "tests/test_bans.py::test_two_workers_share_one_rate": 8,
    "tests/test_bans.py::test_ban_modes_end_with_every_profile_stored[captcha_redirect]": 8,
    "tests/test_observability.py::test_a_killed_worker_leaves_status_within_its_heartbeat_ttl": 8,
    "tests/test_jobs.py::test_every_page_and_item_made_from_an_entry_carries_its_job": 8,
    "tests/test_aws.py::"
    "test_the_ec2_autoscale_loop_follows_the_work_and_rides_out_a_cloud_that_went_away": 8,
    "tests/test_hostile_responses.py::test_compressed_profile_pages_and_feeds_are_stored": 7,
    "tests/test_services.py::test_up_is_idempotent_and_down_stops": 7,
    "tests/test_userdata.py::test_a_banned_worker_reads_ssm_secrets_and_reports_its_instance": 7,
    "tests/test_bans.py::test_ban_modes_end_with_every_profile_stored[429]": 7,
    "tests/test_frontier.py::test_a_plain_spider_closes_only_once_the_delayed_set_is_empty": 7,
    "tests/test_plan.py::test_scrapy_fleet_plan": 7,
    "tests/test_maps.py::test_block_page_is_a_ban_and_its_page_is_closed": 7,
    "tests/test_bans.py::test_rotate_policy_cools_down_only_the_banned_address": 7,
    "tests/test_maps.py::test_one_batch_searches_store_every_place": 7,
    "tests/test_browser.py::"
    "test_a_browser_page_over_download_maxsize_is_a_dead_letter_and_the_crawl_goes_on": 5,
    "tests/test_browser.py::"
    "test_a_host_the_browser_cannot_reach_is_blocked_then_marked_unreachable[dropped]": 4,
    "tests/test_browser.py::"
    "test_a_host_the_browser_cannot_reach_is_blocked_then_marked_unreachable[refused]": 4,
    "tests/test_links.py::test_crawl_delay_is_kept_per_host": 6,
    "tests/test_fleet.py::"
    "test_a_paused_crawl_lets_the_autoscaler_stop_its_workers_and_resumes_whole": 12,
    "tests/test_host_concurrency.py::test_two_workers_share_each_hosts_slots": 6,
    "tests/test_crawl.py::test_recrawl_updates_without_duplicates": 6,
    "tests/test_errback_items.py::"
    "test_an_errbacks_item_held_in_the_pipelines_keeps_its_lease_through_a_kill": 11,
    "tests/test_local_starts.py::"
    "test_local_workers_that_exit_at_once_hold_the_starts_and_it_is_said": 5,
    "tests/test_hostile_responses.py::test_a_retry_after_of_ten_years_is_capped": 6,
    "tests/test_own_spider.py::test_the_guide_spider_runs_as_written": 6,
    "tests/test_frontier_marker.py::test_a_redis_restarted_empty_mid_crawl_is_reported": 6,
    "tests/test_jobs.py::test_a_jobs_max_pages_holds_for_the_fleet": 6,
    "tests/test_pipeline.py::test_a_hung_mongodb_spills_the_batch_instead_of_holding_it": 6,
    "tests/test_cluster.py::test_settings_choose_the_cluster_client": 6,
    "tests/test_cluster.py::test_explore_then_profiles_on_the_cluster": 6,
    "tests/test_crawl.py::test_closing_worker_keeps_the_shared_queue": 6,
    "tests/test_plan.py::test_a_plan_without_a_measured_pace_calibrates_with_one_worker": 5,
    "tests/test_links.py::test_scope_any_spreads_over_hosts_and_traps_stay_bounded": 5,
    "tests/test_fleet_page.py::"
    "test_the_served_page_follows_fleet_page_and_answers_only_its_own_name": 5,
    "tests/test_secrets.py::test_crawl_over_tls_with_a_password": 5,
    "tests/test_start_feed.py::"
    "test_an_entry_that_cannot_be_set_aside_is_not_acked_and_comes_back": 5,
    "tests/test_crawl.py::test_explore_then_profiles[None]": 5,
    "tests/test_scrapy_redis.py::"
    "test_requests_sent_back_under_scrapy_redis_scheduler_are_kept_and_wait_until_due": 6,
    "tests/test_links_depth.py::"
    "test_ordinary_pages_shaped_like_api_bans_do_not_stop_a_whole_site_crawl": 6,
    "tests/test_own_spider.py::test_a_make_request_from_data_of_ones_own_keeps_its_dont_filter": 5,
    "tests/test_recrawl_moves.py::"
    "test_a_page_moved_for_good_is_revisited_at_its_new_address_only": 13,
    **{
        "tests/test_recrawl_moves.py::test_a_page_away_from_its_address_is_revisited_less_and_"
        f"less_then_no_more[{case}]": 12
        for case in ("gone-404", "moved-for-now-302")
    },
    "tests/test_recrawl_moves.py::test_a_page_gone_for_good_is_not_revisited_again": 8,
    **{
        "tests/test_recrawl_moves.py::test_a_page_whose_host_does_not_answer_is_revisited_less_"
        f"and_less_then_no_more[{case}]": 20
        for case in ("refused-after-retries", "marked-by-the-breaker")
    },
    "tests/test_maps_stall.py::test_a_stalled_search_is_tried_again_until_its_list_ends": 15,
    "tests/test_maps_stall.py::"
    "test_a_search_that_always_stalls_is_a_dead_letter_with_what_it_found_stored": 10,
    "tests/test_recrawl_moves.py::"
    "test_a_place_gone_from_the_map_is_revisited_less_and_less_then_no_more": 8,
}
DEFAULT = 1.0


def timed(nodeid: str) -> bool:
    """Whether the test measures something a busy machine skews (a rate, freshness, a probe's
    timeout): ``make unit`` runs these apart, the others beside them only on idle CPU time
    (marker ``timed``)."""
    return unit(nodeid) in (_ALONE, _SWEEPS, _RATES, _HOSTS)


def alone(nodeid: str) -> bool:
    """Whether the test keeps the machine's cores busy: ``make unit`` runs it before the other
    timed tests, with no other timed test beside it (marker ``alone``)."""
    return unit(nodeid) == _ALONE


def unit(nodeid: str) -> str:
    """The unit of work a test belongs to: its own or its module's SHARED_UNITS name, its module
    if GROUPED, else itself."""
    module = nodeid.split("::", 1)[0]
    for name in (nodeid, module):
        if name in SHARED_UNITS:
            return SHARED_UNITS[name]
    return module if module in GROUPED else nodeid


class Scheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist has no type hints
    """xdist's scheduling by scope, the scope being :func:`unit`, in the collection's order
    (which :func:`reorder` made longest first) rather than the biggest scopes first."""

    def __init__(self, config: pytest.Config, log: object = None) -> None:
        super().__init__(config, log)
        config.option.loadscopereorder = False

    def _split_scope(self, nodeid: str) -> str:
        return unit(nodeid)


def reorder(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Queue the units longest first, each unit's tests together."""
    if int(getattr(config, "workerinput", {}).get("workercount", 0)) < 2:
        return
    units: defaultdict[str, list[pytest.Item]] = defaultdict(list)
    for item in items:
        units[unit(item.nodeid)].append(item)
    ordered = sorted(
        units.values(), key=lambda tests: -sum(SLOWEST.get(i.nodeid, DEFAULT) for i in tests)
    )
    items[:] = [item for tests in ordered for item in tests]
