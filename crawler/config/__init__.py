"""Reading settings once, with errors that name the setting."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import NotConfigured
from scrapy.utils.conf import build_component_list
from scrapy.utils.misc import load_object

from crawler.config.rules import base_url, integer
from crawler.config.table import ON_THE_WORKER, RULES

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


def setting(settings: BaseSettings, name: str) -> Any:
    """A setting read by its rule (config/table.py), or SettingsError naming it and the rule."""
    return RULES[name].read(name, settings.get(name))


def setting_int(settings: BaseSettings, name: str, minimum: int, maximum: int | None = None) -> int:
    """An integer setting within bounds, or SettingsError naming it."""
    return int(integer(minimum, maximum).read(name, settings.get(name)))


def enabled_components(settings: BaseSettings, name: str) -> list[Any]:
    """The components a component dict (``name`` with its _BASE) turns on, loaded, in order."""
    return [
        load_object(entry) if isinstance(entry, str) else entry
        for entry in build_component_list(settings.getwithbase(name))
    ]


def switched_off(component: type, reason: str) -> NotConfigured:
    """The NotConfigured a component raises when its setting leaves it off, said at DEBUG (Scrapy
    logs it at WARNING, but a component off by default is nothing to act on)."""
    logging.getLogger(component.__module__).debug(
        "Disabled %s.%s: %s", component.__module__, component.__qualname__, reason
    )
    return NotConfigured()


def validate_base_url(settings: BaseSettings, name: str) -> str:
    """An http(s) scheme-and-host setting without a trailing slash, or SettingsError naming it."""
    return str(base_url().read(name, settings.get(name)))


def check_worker_settings(given: Mapping[str, str], label: str = "-s {name}") -> None:
    """Read each setting of ``given`` (names to text, as ``-s NAME=VALUE`` gives a worker) by
    its rule, before workers are started with them: a bad one is a SettingsError naming it
    (``label``), not an exit 2 of each worker. Rules that read the machine (ON_THE_WORKER: an
    import, a directory, a name) are left to the workers."""
    for name, text in given.items():
        if name in RULES and name not in ON_THE_WORKER:
            RULES[name].read(label.format(name=name), text)
