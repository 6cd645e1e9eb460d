# dlc-airflow: the two commands a new user needs are `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip

.PHONY: install install-demo cluster lint test test-unit demo clean-cluster benchmarks

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install -e ".[airflow,test,pai]"
	touch $@

install: $(VENV)/.installed

# PyTorch, scikit-learn, matplotlib: only the demo and the DDP tests need them (a large download).
$(VENV)/.installed-demo: $(VENV)/.installed
	$(PIP) install -e ".[airflow,test,demo]"
	touch $@

install-demo: $(VENV)/.installed-demo

# Build (first time: ~20 min on 2 cores) and start the local Kubernetes control plane.
cluster:
	scripts/k8s-local up

# ruff (lint) and mypy (types: the library, operators, sensors); settings in pyproject.toml
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The test command: lint, then unit, local-backend, cluster and Airflow end-to-end tests.
test: install-demo lint cluster
	$(VENV)/bin/pytest -q -ra

test-unit: install
	$(VENV)/bin/pytest -q -ra tests/unit

demo: install-demo
	$(PY) -m dlc_airflow.demo

benchmarks: install cluster
	$(PY) benchmarks/notice_latency.py

clean-cluster:
	scripts/k8s-local down
