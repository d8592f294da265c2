"""Extensions: the fleet monitor (shared stats in ``{spider}:stats``, worker heartbeats,
Prometheus metrics and the progress line), from :mod:`crawler.observability`."""

from crawler.observability import FleetMonitor

__all__ = ["FleetMonitor"]
