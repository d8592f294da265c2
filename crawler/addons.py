"""The project's add-on (Scrapy's ``ADDONS``): a run's component dict adds to the spider's.

Scrapy replaces a dict setting given at a higher priority: ``-s DOWNLOADER_MIDDLEWARES=...``,
Scrapyd's ``setting=``, or a spider's ``custom_settings`` would drop every middleware and
extension the project runs on (the leases, the send gate, the settings check). So
each component of the project's dicts and of the spider's ``custom_settings`` (the spider's
order wins) that the run's dict does not name is put back at its order; a spider's own dict
adds to the project's in the same way. A run turns one off by naming it with
``None``, as in Scrapy's ``*_BASE`` dicts. ``ADDONS`` itself is read before any add-on runs:
``scrapy crawl`` puts the project's add-on back into an ``ADDONS`` given for a run or by a
spider (:func:`keep_project_addon`), unless it is named with ``None``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from scrapy.utils.python import global_object_name

from crawler import settings as project

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

# ITEM_PIPELINES is not among them: a run that gives its own pipelines means them (``{}``: store
# nothing), and the settings check refuses pipelines that leave named collections unstored.
COMPONENT_DICTS = ("DOWNLOADER_MIDDLEWARES", "SPIDER_MIDDLEWARES", "EXTENSIONS")


class ProjectComponents:
    """Puts back what a run's component dict left out of the spider's (module docstring)."""

    def __init__(self, spider_settings: Mapping[str, Any]) -> None:
        self.spider_settings = spider_settings

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ProjectComponents:
        return cls(getattr(crawler.spidercls, "custom_settings", None) or {})

    def update_settings(self, settings: BaseSettings) -> None:
        for name in COMPONENT_DICTS:
            # A spider's own dict adds to the project's too: it would drop every component
            # the project runs on, the settings check that would say so among them.
            own: Mapping[Any, int | None] = self.spider_settings.get(name) or {}
            wanted = {**_by_path(getattr(project, name)), **_by_path(own)}
            kept = keep_components(settings, name, wanted)
            if kept:
                logger.info(
                    "%s given for this run: kept %s (name one with null to turn it off)",
                    name,
                    ", ".join(sorted(kept)),
                )


def keep_project_addon(settings: BaseSettings) -> None:
    """Put the project's add-on back into an ``ADDONS`` that leaves it out (given with ``-s``,
    Scrapyd's ``setting=`` or a spider's ``custom_settings``), saying so."""
    if kept := keep_components(settings, "ADDONS", project.ADDONS):
        logger.info(
            "ADDONS given for this run: kept %s (name it with null to turn it off)",
            ", ".join(kept),
        )


def keep_components(
    settings: BaseSettings, name: str, wanted: Mapping[Any, int | None]
) -> list[str]:
    """Add each of ``wanted`` (path or class: order) that the ``name`` dict does not name, at
    the dict's own priority; the paths of those added (not those added as None). Scrapy's
    ``setdefault_in_component_priority_dict`` would import every key of the run's dict to
    compare them: names are compared here, so a path that does not load is left to the
    settings check, which names it."""
    current = settings.getdict(name)
    named = {_path(key) for key in current}
    missing = {path: order for key, order in wanted.items() if (path := _path(key)) not in named}
    if missing:
        settings.set(name, {**current, **missing}, settings.getpriority(name) or 0)
    return [path for path, order in missing.items() if order is not None]


def _by_path(components: Mapping[Any, int | None]) -> dict[str, int | None]:
    return {_path(key): order for key, order in components.items()}


def _path(key: Any) -> str:
    return key if isinstance(key, str) else global_object_name(key)
