"""Custom scrapy commands: `scrapy frontier` (queue, dead letters, requeue, purge) and
`scrapy status` (the fleet at a glance)."""

from __future__ import annotations

import argparse

from scrapy.commands import ScrapyHelpFormatter


class LayoutKeepingFormatter(argparse.RawDescriptionHelpFormatter, ScrapyHelpFormatter):
    """Scrapy's help layout, with a command's description printed as written: its examples
    stay one per line instead of being folded into one paragraph."""


def keep_description_layout(parser: argparse.ArgumentParser) -> None:
    """Called from a command's ``add_options``: Scrapy built the parser, this sets how its
    description is printed."""
    parser.formatter_class = LayoutKeepingFormatter
