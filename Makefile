# The README's two commands: `make demo` and `make test`. Both build the virtualenv first: uv
# installs it (its downloads in parallel; pip where uv cannot be had, as behind an index that only
# pip's configuration names). Nothing is compiled ahead: a module is compiled the first time it
# is imported (most of the virtualenv never is), and `make test` caches what it compiles.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench services-up services-down clean chromium dnsmasq promtool

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv && $(BIN)/uv pip install --quiet --python $(BIN)/python -e '.[dev]' \
		|| $(BIN)/python -m pip install --quiet --no-compile -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP) chromium
	$(BIN)/python -m devtools.demo

# `make test` is `make lint`, `make typecheck` and `make unit`, with mypy run as the first of
# unit's timed steps: the untimed tests start beside it at once (a failing mypy leaves the timed
# tests out, and its status is make test's).
test: lint chromium dnsmasq promtool
	$(BESIDE) $(BIN)/mypy --then $(TIMED) --idle $(UNTIMED)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

# The tests run in PYTEST_WORKERS processes (pytest-xdist), each with its own Redis, MongoDB and
# sandbox: most of a test's time is spent waiting on real crawls, so more workers than cores
# pay: 8 on 2 cores, as the scrapy commands they run are forked (tests/forkserver.py) and
# cost little CPU to start. PYTEST_WORKERS=0 runs them in one process; PYTEST_ARGS adds pytest
# arguments. A worker takes the next test from one queue, the longest first, and the tests that
# share a server or a build of their module's own go to one worker together
# (tests/slowest_first.py).
# Bytecode is cached even where the environment sets PYTHONDONTWRITEBYTECODE: some 200 crawl
# processes would each compile the project again, and pytest rewrite every test module.
# The tests that measure what a busy machine skews (rates, freshness, probe timeouts: marker
# `timed`, tests/slowest_first.py) run apart from each other: the one that keeps the cores busy
# (marker `alone`) first, by itself; then the rest in TIMED_WORKERS lanes (each test about half
# a core at most). The other tests run beside them from the start, on the CPU time they leave
# idle (SCHED_IDLE, devtools/beside.py).
# A step that PYTEST_ARGS leaves without a test (pytest's exit status 5) is not a failure.
PYTEST_WORKERS ?= 8
TIMED_WORKERS ?= 3
PYTEST := env PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest
BESIDE := $(BIN)/python -m devtools.beside --ok 5
TIMED := $(PYTEST) -m "timed and alone" $(PYTEST_ARGS) \
	--then $(PYTEST) -n $(TIMED_WORKERS) -m "timed and not alone" $(PYTEST_ARGS)
UNTIMED := $(PYTEST) -n $(PYTEST_WORKERS) -m "not timed" $(PYTEST_ARGS)
unit: $(STAMP) chromium dnsmasq promtool
	$(BESIDE) $(TIMED) --idle $(UNTIMED)

bench: $(STAMP) chromium
	@for script in bench/[a-z]*.py; do echo "== $$script"; $(BIN)/python $$script || exit 1; done

# Debian's Chromium, the maps spider's browser (installed with apt-get when missing).
chromium:
	scripts/ensure-tool.sh chromium CHROMIUM_PATH chromium

# Debian's dnsmasq, the real DNS server the domains tests sweep through (apt-get when missing).
dnsmasq:
	scripts/ensure-tool.sh dnsmasq DNSMASQ_PATH dnsmasq-base  # the binary, not the service

# Debian's promtool, which runs the alert rules' unit tests (apt-get when missing).
promtool:
	scripts/ensure-tool.sh promtool PROMTOOL_PATH --no-install-recommends prometheus

services-up: $(STAMP)
	$(BIN)/python -m devtools.services up

services-down: $(STAMP)
	$(BIN)/python -m devtools.services down

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis *.egg-info
