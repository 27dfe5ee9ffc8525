# cdcsync: every target works on a fresh machine; the first `make up` installs.
SHELL := /bin/bash
STATE := $(shell python3 -c 'import sys; sys.path.insert(0, "deploy/local"); import stack; print(stack.STATE)')
VENV  := $(STATE)/venv
PY    := $(VENV)/bin/python
STACK := python3 deploy/local/stack.py

.PHONY: help install up down status demo test test-unit test-integration test-chaos chaos lint bench clean-state

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 20

install:  ## install Debian packages, jars (Maven) and the Python env, once
	@bash deploy/local/install.sh

up: install  ## start the local stack (a no-op when it already runs)
	@$(STACK) up

down:  ## stop exactly the processes `make up` started
	@$(STACK) down

status:  ## state, port and memory of every component
	@$(STACK) status

demo: up  ## stack up, sample database loaded, connectors applied; prints where to look
	@$(PY) deploy/local/demo.py

test: up  ## unit + integration + chaos tests against the real stack (the long fault scenarios: make chaos)
	@$(PY) -m pytest tests/unit tests/integration tests/chaos -m "not long" -p no:cacheprovider -ra --durations=30

test-unit: install  ## unit tests only (no services)
	@$(PY) -m pytest tests/unit -p no:cacheprovider -q

test-integration: up
	@$(PY) -m pytest tests/integration -p no:cacheprovider -ra

chaos: up  ## every fault scenario, the long ones included (the whole kill -9 matrix, a sink down 10 minutes, ...)
	@CDCSYNC_CHAOS_OUTAGE_S=$${CDCSYNC_CHAOS_OUTAGE_S:-600} CDCSYNC_CHAOS_STOP_S=$${CDCSYNC_CHAOS_STOP_S:-120} \
		$(PY) -m pytest tests/chaos -p no:cacheprovider -ra
	@$(PY) -m pytest tests/integration -m long -p no:cacheprovider -ra

test-chaos: chaos

lint: install  ## ruff and mypy
	@$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check . && $(VENV)/bin/mypy

bench: up  ## benchmarks (not part of `make test`): followers, freshness read back from the stores, a 1M-row bootstrap into each store, the daemon's memory on a wide backlog, the warehouse MERGE, its cost by table size, its source, a batch of several tables, adaptive execution and log checkpoints, the Redis publish, a publish of many small tables, Delta auto compaction, the warehouse's table upkeep, a Spark driver's cold start, the WAL that REPLICA IDENTITY FULL costs, verify's memory as a table grows, the CPU of its background pass, a follower's catch-up on a Spark cluster by partitions and workers, and the document follower against PGSync (fill, fan-out, steady child changes, memory)
	@$(PY) -m bench && $(PY) -m bench.freshness && $(PY) -m bench.bootstrap --sinks search,cache,warehouse && $(PY) -m bench.memory && $(PY) -m bench.delta_merge && $(PY) -m bench.delta_merge_scale && $(PY) -m bench.delta_source && $(PY) -m bench.delta_tables && $(PY) -m bench.delta_adaptive && $(PY) -m bench.delta_checkpoint && $(PY) -m bench.redis_publish && $(PY) -m bench.publish && $(PY) -m bench.delta_compaction --files 50,2000,8000 && $(PY) -m bench.delta_upkeep && $(PY) -m bench.jvm_start && $(PY) -m bench.replica_identity && $(PY) -m bench.verify_memory --sinks search,cache,warehouse && $(PY) -m bench.verify_pace && $(PY) -m bench.partitions && $(PY) -m bench.documents

clean-state: down  ## delete the state directory (data, logs, caches)
	rm -rf $(STATE)
