"""Drop items that miss a required field, with the reason, before anything is stored."""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import DropItem

from crawler.items import STORED_ITEM_CLASSES

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector


@cache
def required_fields(item_class: type) -> tuple[str, ...]:
    """Fields a stored item must have: the dataclass fields without a default."""
    return tuple(
        field.name
        for field in dataclasses.fields(item_class)
        if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
    )


class ValidationPipeline:
    """Drops stored items whose required fields are None (or whose unique key is empty).

    Counted as ``validation/dropped/missing_<field>``; the drop reason names the item and fields.
    """

    def __init__(self, stats: StatsCollector) -> None:
        self.stats = stats

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ValidationPipeline:
        assert crawler.stats is not None
        return cls(crawler.stats)

    def process_item(self, item: Any) -> Any:
        if not isinstance(item, STORED_ITEM_CLASSES):
            return item
        missing = [name for name in required_fields(type(item)) if getattr(item, name) is None]
        if getattr(item, item.unique_key) == "" and item.unique_key not in missing:
            missing.append(item.unique_key)
        if missing:
            for name in missing:
                self.stats.inc_value(f"validation/dropped/missing_{name}")
            raise DropItem(f"{type(item).__name__} is missing {', '.join(missing)}")
        return item
