"""Extensions: the settings check (a bad setting stops the crawl before the engine is built,
under any runner) and the fleet monitor (shared stats in ``{spider}:stats``, worker heartbeats,
Prometheus metrics and the progress line), from :mod:`crawler.settings_check` and
:mod:`crawler.observability`."""

from crawler.observability import FleetMonitor
from crawler.settings_check import SettingsCheck

__all__ = ["FleetMonitor", "SettingsCheck"]
