"""Storage in MongoDB: the batched writer and its thread (``mongo``), the spill file that keeps
what MongoDB could not take (``spill``), where each item goes (``destinations``), change
tracking (``changes``), documents too large (``documents``) and write outcomes (``writes``).
The item pipelines Scrapy loads are in :mod:`crawler.pipelines`.
"""
