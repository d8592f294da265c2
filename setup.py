"""Egg builds for Scrapyd (``scrapyd-deploy``) and Zyte Scrapy Cloud (``shub deploy``).

Both tools build the project with ``setup.py bdist_egg``; metadata, packages and the ``scrapy``
entry point (the settings module Scrapyd and Scrapy Cloud load for every job) come from
pyproject.toml.
"""

from setuptools import setup

setup()
