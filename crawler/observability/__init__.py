"""See the fleet: shared stats, worker heartbeats, Prometheus metrics and progress.

``FleetMonitor`` (the extension) publishes each worker's stats deltas to ``{spider}:stats``,
counts them per minute, keeps a heartbeat per worker and serves ``/metrics`` (prometheus_client)
and the fleet page (:mod:`crawler.observability.page`); ``scrapy status`` (``crawler/commands/
status.py``) reads it all back through :mod:`crawler.observability.report`.
Metric names are documented in :mod:`crawler.observability.metrics`.
"""

from crawler.observability.monitor import FleetMonitor

__all__ = ["FleetMonitor"]
