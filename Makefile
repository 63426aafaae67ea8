# make test: lint, the docs site, and the whole suite against real PostgreSQL, Redis (with Sentinel)
# and RabbitMQ started by the tests themselves.
# The server binaries come from the machine (apt packages postgresql, redis-server, redis-sentinel,
# rabbitmq-server; .ci/run installs them when run as root).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# A hung test must fail the run, not hang it. Six test processes (pytest-xdist), each with its
# own PostgreSQL and Redis (and RabbitMQ node, booted when a test first needs it): the tests with
# services spend most of their time waiting on the processes they start, so six share 2 cores.
# On an Intel Xeon (2 cores, nothing else running) four took 590 to 600 s of pytest, with the
# cores idle a third of the time; six took 534 s, and 462 to 493 s once each process also started
# cheaper (tests/integration/celery_command.py, the pytest settings below), with the cores busy
# about 85% of the time: more processes would only queue for them.
# The tests are handed out one at a time, longest first (tests/conftest.py), so that no long run
# starts last.
PYTEST_FLAGS ?= -n 6 --dist load --maxschedchunk 1 --timeout=900 --durations=40

.PHONY: venv check-services test lint docs demo election-demo service-demo migration-demo

venv: $(STAMP)

$(STAMP): pyproject.toml setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -e '.[dev,docs]'
	touch $@

# Fails early, naming the apt packages to install, when a server binary is missing.
check-services:
	$(PYTHON) -m tests.services check

# CQ_REQUIRE_SERVICES=1: tests/conftest.py turns a skipped integration test into a failure.
# The package and the tests are byte-compiled first: the suite starts hundreds of Python processes
# (beats, workers, CLI calls), and where PYTHONDONTWRITEBYTECODE is set (as on the machines this
# project is developed on) each of them would otherwise compile every module it imports again.
# For the same reason pytest runs with PYTHONDONTWRITEBYTECODE unset: pytest keeps the test
# modules it rewrites (for its assert messages) only where bytecode may be written, and each of
# its seven processes rewrote all of them again, about 4.5 of the 7 CPU-seconds its collection
# took.
test: check-services venv
	$(PY) -m compileall -q -j 0 celery_quartz tests bench examples
	CQ_REQUIRE_SERVICES=1 env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest tests $(PYTEST_FLAGS)
	$(MAKE) lint
	$(MAKE) docs

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The documentation site in site/, strict: a broken link or anchor, a page missing from the nav's
# targets, or an API reference that does not resolve fails the build.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# Three schedulers and a worker on SQLite and Celery's filesystem broker (no servers), one
# scheduler killed halfway, then what fired where and a summary.
demo: venv
	cd examples/quickstart && ../../$(PY) demo.py

# Two non-clustered schedulers under the PostgreSQL election (a throwaway server from the machine's
# binaries), the leader killed, the standby taking over, then what ran.
election-demo: venv
	cd examples/election && ../../$(PY) demo.py

# A small service on a three-node cluster (three schedulers, three workers; SQLite and the
# filesystem broker): reports on a Helsinki cron, a re-index one at a time cluster-wide, an ingest
# pinned to one worker, a flaky call retried with backoff; then what ran where and a verdict.
service-demo: venv
	cd examples/service && ../../$(PY) demo.py

# A django-celery-beat schedule moved into celery-quartz with the importer (SQLite and the
# filesystem broker): dry run, import, import again, the triggers listed, one fired by beat.
migration-demo: venv
	cd examples/django-migration && ../../$(PY) demo.py
