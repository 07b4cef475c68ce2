# The README's two commands: `make run` and `make test`. Both set themselves up on a fresh
# machine (a virtualenv in .venv with herald installed editable, plus the test tools).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DATA_DIR ?= data
PYTEST_ARGS ?=
# `make typecheck TYPECHECK_PATHS="storage tests/storage"` checks only those (default: all).
TYPECHECK_PATHS ?=

.PHONY: install system-deps run test test-slow lint format typecheck bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,spark]'
	$(PY) tools/editable_spark_path.py
	touch $@

install: $(VENV)/.installed

## Start the broker with its default plugins and a store in ./data.
run: install
	$(VENV)/bin/herald run --data-dir $(DATA_DIR)

## Debian packages the tests run as real programs (chromium, mosquitto-clients, etcd-server).
system-deps:
	sh tools/system-deps

## Lint, format check and type check, then the whole default test tier.
test: install system-deps
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) tools/typecheck.py
	$(PY) -m pytest -q -m "not slow" $(PYTEST_ARGS)

## The long tier: crash loops, fuzzing, soaks.
test-slow: install system-deps
	$(PY) -m pytest -q -m slow $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

## mypy over the tree under its import names ([tool.mypy] in pyproject.toml; tools/typecheck.py).
typecheck: install
	$(PY) tools/typecheck.py $(TYPECHECK_PATHS)

## Micro-benchmarks, then herald-only end-to-end runs at quick settings (JSON on stdout);
## the peer comparisons are in docs/PERFORMANCE.md.
bench: install
	$(PY) benchmarks/kernel.py
	$(PY) benchmarks/topic_routing.py
	$(PY) benchmarks/amqp_codec.py
	$(PY) benchmarks/stomp_codec.py
	$(PY) benchmarks/mqtt_codec.py
	$(PY) benchmarks/amqp_throughput.py --messages 4000 --repeat 1 --seconds 1
	$(PY) benchmarks/mqtt_throughput.py --messages 4000 --repeat 1 --seconds 1
	$(PY) benchmarks/stomp_throughput.py --messages 4000 --repeat 1 --seconds 1

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis .mypy_cache .typecheck
