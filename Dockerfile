# One image for every worker (`scrapy crawl <spider>`), the fleet commands (`scrapy status`,
# `scrapy frontier`) and Scrapyd. Build from the repository root: `docker build -t crawler .`
FROM python:3.12-slim-bookworm

# Chromium from Debian for spiders rendered through scrapy-playwright; such spiders launch it with
# PLAYWRIGHT_LAUNCH_OPTIONS = {"executable_path": "/usr/bin/chromium"}. tini passes SIGTERM on to
# Scrapy, which stops taking work, flushes MongoDB batches and releases its leases.
RUN apt-get update \
    && apt-get install -y --no-install-recommends chromium tini \
    && rm -rf /var/lib/apt/lists/*

# SCRAPY_SETTINGS_MODULE makes the installed package the Scrapy project in any working directory
# (a Kubernetes workingDir, `docker run -w`), without scrapy.cfg.
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SCRAPY_SETTINGS_MODULE=crawler.settings \
    MONGO_SPILL_DIR=/var/lib/crawler/spill

WORKDIR /app
COPY pyproject.toml setup.py README.md scrapy.cfg ./
COPY crawler ./crawler
RUN pip install . "scrapyd>=1.6"
COPY deploy/scrapyd/scrapyd.conf /etc/scrapyd/scrapyd.conf

RUN useradd --create-home --uid 10001 crawler \
    && mkdir -p /var/lib/crawler/spill /var/lib/scrapyd \
    && chown -R crawler /var/lib/crawler /var/lib/scrapyd
USER crawler

# 6800: Scrapyd; 9410: Prometheus metrics of a worker started with METRICS_PORT=9410.
EXPOSE 6800 9410
ENTRYPOINT ["tini", "--"]
CMD ["scrapy", "list"]
