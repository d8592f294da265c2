"""The fleet monitor of the domains spider, without FleetMonitor's per-domain counters: a sweep
touches every domain once, so they would grow with the list (20,000 domains, some 60,000 hash
fields and series). The spider counts its own bounded ``domains/status/<class>``.
"""

from __future__ import annotations

from crawler.observability.monitor import FleetMonitor


class DomainsFleetMonitor(FleetMonitor):
    # Off: the signals they count from are not connected (a receiver called for each request
    # and each item, to do nothing, is CPU a sweep's worker spends for nothing).
    per_domain_counters = False
