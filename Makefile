# fencewatch developer entry points. See docs/kafka-local.md.
#
#   make demo        venv + a local Kafka broker: file audit, live processor and split-brain demos
#   make test        venv + local Kafka and PostgreSQL, the whole suite, services stopped after
#                    (make test PYTEST_ARGS='tests/kafka -x' to narrow it)
#   make lint        ruff + mypy
#   make bench       every benchmark (bench/run_all.py) on a private broker and PostgreSQL:
#                    bench/results.json, docs/benchmarks.md and docs/development.md's table
#                    (make bench BENCH_ARGS='--only audit_bench' for one)
#   make test-faults the slow fault tests (@pytest.mark.faults), docs/reliability.md
#   make soak        the nemesis soak: a three-broker cluster, live workers, a steady producer
#                    and seeded random broker/worker faults, then findings against the audit
#                    (make soak SOAK_SEED=7 SOAK_MINUTES=5 SOAK_ENGINE=faust SOAK_WORKERS=3)
#   make test-containers  Docker for real: the image, the compose stack, and tests/kafka +
#                    tests/live on a testcontainers broker (scripts/docker-local makes an
#                    engine, Compose and the images available first)
#   make broker-start / broker-stop / broker-status   the long-lived dev broker in .run/kafka

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.fencewatch-installed
PYTEST_ARGS ?=
BENCH_ARGS ?=

# `native` always runs: the script itself checks whether the compiled modules
# exist and match their sources (cheap), and rebuilds only if not.
.PHONY: venv native tools test test-faults test-containers bench demo lint soak broker-start broker-stop broker-status

venv: $(STAMP) native

# The hot core modules (streams._native.NATIVE_MODULES) compiled with mypyc (in place, next
# to their sources); rebuilt whenever one is missing or was built from another
# version of its source. Without a C compiler fencewatch stays interpreted
# (FENCEWATCH_NATIVE=required makes that an error).
native: $(STAMP)
	@$(BIN)/python scripts/build-native --if-needed

# Reinstalls only when pyproject.toml changed since the last install.
$(STAMP): pyproject.toml
	@if [[ ! -x $(BIN)/python ]]; then \
	  echo "creating $(VENV)"; \
	  $(PYTHON) -m venv $(VENV) || { echo "python3 -m venv failed: install python3-venv (Debian/Ubuntu) and retry" >&2; exit 1; }; \
	fi
	$(BIN)/python -m pip install --disable-pip-version-check -q -e '.[dev]'
	@touch $@

# chromium, promtool and redis-server: installed as root on Debian/Ubuntu, else
# one line says what is missing and how to install it (before any test runs);
# etcd (tests/integrations/test_etcd_source.py) and the Temporal CLI (the Temporal
# integration's real server) built once with Go into the cache (scripts/etcd-local,
# scripts/temporal-local; a few minutes on a cold Go module cache), reused after.
tools:
	@scripts/test-tools
	@scripts/etcd-local build >/dev/null
	@scripts/temporal-local build >/dev/null

test: venv tools
	scripts/with-services -- $(BIN)/python -m pytest $(PYTEST_ARGS)

# The fault and volume tests too slow for `make test` (docs/reliability.md).
test-faults: venv
	scripts/with-services -- $(BIN)/python -m pytest -m faults $(PYTEST_ARGS)

# (a) the image built from the Dockerfile, (b) the compose stack up, fed and scraped,
# then down -v (tests/containers), (c) tests/kafka and tests/live on a testcontainers
# broker. An engine scripts/docker-local started is stopped after; containers the tests
# labelled (org.fencewatch.tests) are removed even after a failure, and any left fails
# the run. docs/kafka-local.md ("Docker").
CONTAINER_TESTS ?= tests/containers tests/kafka tests/live
test-containers: venv
	scripts/docker-local with -- bash -c '\
	  status=0; \
	  FENCEWATCH_TEST_CONTAINERS=1 FENCEWATCH_TEST_BROKER=testcontainers \
	    $(BIN)/python -m pytest $(CONTAINER_TESTS) $(PYTEST_ARGS) || status=$$?; \
	  left="$$(docker ps -aq --filter label=org.fencewatch.tests)"; \
	  if [[ -n "$$left" ]]; then \
	    echo "test-containers: removing containers the tests left: $$(echo $$left)" >&2; \
	    docker rm -f -v $$left >/dev/null; [[ $$status -ne 0 ]] || status=1; \
	  fi; \
	  exit $$status'

# The nemesis soak (docs/reliability.md, "Nemesis soak"): its own three-node cluster,
# stopped after; the seed is printed first, and a failure keeps the logs in .run/soak-*.
# An empty SOAK_SEED draws one.
SOAK_SEED ?=
SOAK_MINUTES ?= 20
SOAK_ENGINE ?= rdkafka
SOAK_WORKERS ?= 2
soak: venv
	$(BIN)/python scripts/soak $(if $(SOAK_SEED),--seed $(SOAK_SEED)) --minutes $(SOAK_MINUTES) \
	  --engine $(SOAK_ENGINE) --workers $(SOAK_WORKERS)

# Full JIT for the broker: C1-only (the test default) starts faster but
# would slow the broker side of the throughput figures.
bench: venv
	FENCEWATCH_KAFKA_JVM_OPTS="-XX:+UseG1GC" scripts/with-services -- \
	  $(BIN)/python bench/run_all.py $(BENCH_ARGS)

# The SPEC §5 fixture through the live processor, then the split-brain demo (two real
# workers, SIGSTOP past the lease, a fenced destination), on a throwaway local broker.
# Fails if either outcome is wrong; everything is stopped afterwards.
demo: venv
	scripts/with-services --no-postgres -- bash -c '\
	  $(BIN)/fencewatch topics create --bootstrap-servers "$$KAFKA_BOOTSTRAP" && \
	  $(BIN)/fencewatch audit --fail-on never examples/reference.jsonl && \
	  $(BIN)/fencewatch demo live --bootstrap-servers "$$KAFKA_BOOTSTRAP" && \
	  $(BIN)/fencewatch demo split-brain --bootstrap-servers "$$KAFKA_BOOTSTRAP"'

lint: venv
	$(BIN)/ruff check streams tests bench fencewatch
	$(BIN)/ruff format --check streams fencewatch tests bench scripts examples
	$(BIN)/mypy

broker-start:
	scripts/kafka-local start

broker-stop:
	scripts/kafka-local stop

broker-status:
	scripts/kafka-local status
