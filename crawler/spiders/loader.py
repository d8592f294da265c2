"""The project's spider loader (SPIDER_LOADER_CLASS): a spider is looked for first in the module
named after it, and only then in every module of SPIDER_MODULES.

Scrapy's loader imports every spider module of the project before it runs one spider, so a
``scrapy crawl profiles`` worker would import the domains spider's DNS library, the links
spider's public-suffix list and the maps spider's browser glue, and pay for it at every start.
This one takes ``<module>.<name>`` for each module of SPIDER_MODULES first (``profiles`` from
``crawler.spiders.profiles``) when it holds a spider of that name; any other spider, and every
listing (``scrapy list``, ``scrapy status`` without a spider), loads them all as Scrapy does,
with Scrapy's warning about duplicate names.
"""

from __future__ import annotations

import builtins
import importlib
import importlib.util
from typing import TYPE_CHECKING

from scrapy.spiderloader import SpiderLoader as ScrapySpiderLoader
from scrapy.utils.spider import iter_spider_classes

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.settings import BaseSettings


class SpiderLoader(ScrapySpiderLoader):
    def __init__(self, settings: BaseSettings) -> None:
        self._settings = settings
        self._all_loaded = False
        self._own: dict[str, type[Spider]] = {}
        self.spider_modules = settings.getlist("SPIDER_MODULES")
        self.warn_only = settings.getbool("SPIDER_LOADER_WARN_ONLY")

    def _load_all(self) -> None:
        if not self._all_loaded:
            super().__init__(self._settings)  # Scrapy's: every module, duplicates warned of
            self._all_loaded = True

    def load(self, spider_name: str) -> type[Spider]:
        if not self._all_loaded:
            own = self._own.get(spider_name) or self._from_own_module(spider_name)
            if own is not None:
                self._own[spider_name] = own
                return own
            self._load_all()
        return super().load(spider_name)

    def list(self) -> list[str]:
        self._load_all()
        return super().list()

    def find_by_request(self, request: Request) -> builtins.list[str]:
        self._load_all()
        return super().find_by_request(request)

    def _from_own_module(self, name: str) -> type[Spider] | None:
        """The spider ``name`` of the module ``<a module of SPIDER_MODULES>.<name>``, if one
        holds it. Any trouble importing it is left to the full load, which reports it as
        Scrapy does (or only warns, with SPIDER_LOADER_WARN_ONLY)."""
        for package in self.spider_modules:
            module_name = f"{package}.{name}"
            try:
                if importlib.util.find_spec(module_name) is None:
                    continue
                module = importlib.import_module(module_name)
            except Exception:
                return None
            for spider in iter_spider_classes(module):
                if spider.name == name:
                    return spider
        return None
