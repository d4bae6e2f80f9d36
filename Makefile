# ATF for Django: the two README commands and a few helpers.
#
#   make test    venv + requirements-dev.txt, Redis, PostgreSQL, Chromium; then the whole suite
#   make demo    venv + requirements.txt (the runtime only), Redis; then the whole system on
#                SQLite (Ctrl-C stops it, and the services it started)
#
# Settings come from the environment (or `make VAR=value`) and reach every command below:
# REDIS_URL, DATABASE_URL, ATF_TEST_DATABASE_NAME, ATF_QUEUE_PREFIX, ATF_DEMO_PORT, PYTEST_ARGS,
# TEST_WORKERS, ATF_TEST_REDIS_DATABASES.

SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV := .venv
PYTHON := $(VENV)/bin/python
ATF_DEMO_PORT ?= 8000
DEMO_ARGS ?=
PYTEST_ARGS ?=
# test, test-matrix: pytest processes the suite runs on at once (pytest-xdist); empty: one per
# 4 cores, at most 8, and one process below 8 cores (scripts/run_suite.py); 0: one process
TEST_WORKERS ?=
CHAOS_ARGS ?=
BENCH_ARGS ?=
# test-matrix: the combinations to run (all by default), e.g. MATRIX="py3.13-dj6.1"
MATRIX ?=
# test-matrix: a pytest marker expression that picks the tests each combination runs (empty:
# all), e.g. MATRIX_MARKS="not drill" (.ci/run; the markers: pytest.ini, docs/testing.md)
MATRIX_MARKS ?=

# No `export` line: make passes variables from the environment and the command line to every
# recipe as they are, and leaves unset ones unset (tests/settings.py then picks its defaults).

SUITE_WORKERS := $(if $(TEST_WORKERS),--workers $(TEST_WORKERS))

# PostgreSQL for the demo only when DATABASE_URL asks for it; the default is SQLite.
DEMO_SERVICES := redis $(if $(filter postgres%,$(DATABASE_URL)),postgres)

.PHONY: help venv dev-venv test demo chaos lint clean bench docs fuzz test-matrix test-full-size

help:
	@echo "make test    create .venv, start Redis/PostgreSQL if needed, run the whole test suite"
	@echo "make test-matrix  the whole suite on Python 3.11 + Django 5.2, 3.12 + 6.0, 3.13 + 6.1"
	@echo "             (a venv each in var/matrix; MATRIX=\"py3.13-dj6.1\" picks some; see docs/testing.md)"
	@echo "make demo    create .venv, start Redis if needed, run API + console + consumer + worker"
	@echo "             on http://127.0.0.1:$(ATF_DEMO_PORT)/ (ATF_DEMO_PORT), scheduling demo tasks"
	@echo "make chaos   long chaos run: 100,000 tasks, faults every few seconds, then the checks"
	@echo "             (python -m tests.chaos long \$$CHAOS_ARGS; see docs/chaos.md)"
	@echo "make bench   install the peers into bench/.venv-peers, then the side-by-side benchmark"
	@echo "             (python -m bench.run \$$BENCH_ARGS, e.g. BENCH_ARGS=--quick; see docs/benchmarks.md)"
	@echo "             the sharded store: BENCH_ARGS=\"--systems atf --shards 1,2,3\" (root: CPU quotas)"
	@echo "make test-full-size  the sharded store's journeys at full size: 30,000 tasks over REST,"
	@echo "             a gate over 5,000, a backlog of 10,000, 32 remote workers (3-4 minutes)"
	@echo "make fuzz    stateful fuzzing of the REST API by two teams: ATF_FUZZ_CASES (10,000), then a quarter as many at once"
	@echo "             requests; prints cases, 5xx and cross-team observations"
	@echo "make lint    ruff check, then mypy over the packages and the project (mypy.ini)"
	@echo "make docs    build the documentation site into var/site (mkdocs build --strict)"
	@echo "make clean   remove caches and collected static files (rm atf.sqlite3 resets the demo)"

# The runtime (requirements.txt) for the demo; the runtime, tests and tools for the rest.
venv:
	@scripts/ensure_venv.sh requirements.txt

dev-venv:
	@scripts/ensure_venv.sh requirements-dev.txt

test: dev-venv
	@$(PYTHON) scripts/ensure_services.py redis postgres chromium promtool pgbouncer standby iproute2
	@$(PYTHON) scripts/run_suite.py $(SUITE_WORKERS) -- $(PYTEST_ARGS)
	@echo "==> the store's contract suite, chains, the rollup of outcomes and the testing helpers again on SQLite"
	@mkdir -p var && DATABASE_URL=sqlite:///$(CURDIR)/var/test-smoke.sqlite3 \
	  $(VENV)/bin/pytest -m sqlite -q tests/integration/tasks_core/test_store.py tests/integration/tasks_core/test_chains.py \
	  tests/integration/tasks_core/test_outcomes.py tests/integration/tasks_core/test_latency_rollup.py \
	  tests/integration/workers/test_testing_helpers.py
	@$(MAKE) --no-print-directory docs

# One virtualenv per supported Python and Django (scripts/test_matrix.py finds the interpreters
# and says in one line which combinations it could not run).
test-matrix: dev-venv
	@$(PYTHON) scripts/ensure_services.py redis postgres chromium
	@$(PYTHON) scripts/test_matrix.py $(SUITE_WORKERS) $(MATRIX) -- \
	  $(if $(MATRIX_MARKS),-m "$(MATRIX_MARKS)") $(PYTEST_ARGS)

# The services it started (never one that was already running) stop with the demo.
demo: venv
	@ATF_DEMO=1 $(PYTHON) scripts/ensure_services.py $(DEMO_SERVICES) -- \
	  $(PYTHON) manage.py atf_demo --port $(ATF_DEMO_PORT) $(DEMO_ARGS)

chaos: dev-venv
	@$(PYTHON) scripts/ensure_services.py redis postgres iproute2 standby
	@ATF_DEMO=1 $(PYTHON) -m tests.chaos long $(CHAOS_ARGS)

bench: dev-venv
	@$(PYTHON) scripts/ensure_services.py redis postgres
	@bench/setup_peers.sh
	@bench/.venv-peers/bin/python -m bench.run $(BENCH_ARGS)

# The site goes to var/site (mkdocs.yml); --strict fails on a broken link or an unlisted page
# (never add --quiet: it hides the warnings from --strict, which then passes anyway).
docs: dev-venv
	@echo "==> the documentation site (mkdocs build --strict into var/site)"
	@NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# The suite runs these journeys small (tests/integration/tasks_core/test_shards.py: FULL).
test-full-size: dev-venv
	@$(PYTHON) scripts/ensure_services.py redis postgres
	@ATF_FULL_SIZE=1 $(VENV)/bin/pytest tests/integration/tasks_core/test_shards.py -q -o timeout=1800 \
	  -k "spread_evenly or paused_while or remote_workers_drain or mixed_backlog or holds_at_most" $(PYTEST_ARGS)

fuzz: dev-venv
	@$(PYTHON) scripts/ensure_services.py redis postgres
	@ATF_FUZZ_CASES=$${ATF_FUZZ_CASES:-10000} $(VENV)/bin/pytest tests/integration/tasks_api/test_api_fuzz.py \
	  tests/integration/tasks_api/test_api_fuzz_concurrent.py \
	  -q -s -p no:logging -o timeout=0 $(PYTEST_ARGS)

# mypy reads mypy.ini: which packages it checks, the Django/DRF plugins and the settings module.
lint: dev-venv
	@echo "==> ruff check ."
	@$(VENV)/bin/ruff check .
	@echo "==> mypy (mypy.ini)"
	@$(VENV)/bin/mypy

clean:
	rm -rf staticfiles .ruff_cache .pytest_cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +
