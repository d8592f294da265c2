"""See the fleet (docs/observability.md): shared stats, worker heartbeats, Prometheus metrics
(every name in :mod:`crawler.observability.metrics`), the fleet page and the progress line.
"""

from crawler.observability.monitor import FleetMonitor

__all__ = ["FleetMonitor"]
