# dlc-airflow: the two commands a new user needs are `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# The tested set of every dependency (constraints/freeze.py writes it): a fresh install gets
# what the tests passed with. `make install CONSTRAINTS=` resolves freely (another Python).
CONSTRAINTS ?= constraints/constraints-py3.11.txt
PIN := $(if $(CONSTRAINTS),-c $(CONSTRAINTS))

.PHONY: install install-demo cluster slurm postgres browser podman lint test test-unit test-compat demo demo-cluster clean-cluster clean-slurm benchmarks soak

$(VENV)/.installed: pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install $(PIN) -e ".[airflow,test,pai]"
	rm -rf dlc_airflow.egg-info  # setuptools' build leftover: with the repo on sys.path Airflow would load our plugin twice
	touch $@

install: $(VENV)/.installed

# PyTorch, scikit-learn, matplotlib: only the demo and the DDP tests need them (a large download).
$(VENV)/.installed-demo: $(VENV)/.installed
	$(PIP) install $(PIN) -e ".[airflow,test,demo]"
	rm -rf dlc_airflow.egg-info
	touch $@

install-demo: $(VENV)/.installed-demo

# Build (first time: ~15 min on 2 cores) and start the local Kubernetes control plane.
cluster:
	scripts/k8s-local up

# Install Debian's Slurm packages if missing (apt) and start a local Slurm: munge, slurmctld,
# 4 slurmd nodes and slurmrestd (JWT) on this host (~1 s once installed); and beside it Slurm
# 24.11 from Debian 13's packages in a root filesystem of its own (~35 s to build it once).
slurm:
	scripts/slurm-local up
	scripts/slurm-local --version 24.11 up

# Debian's PostgreSQL (apt) as Airflow's metadata DB for the HA tests (2 schedulers, 2 triggerers).
postgres:
	scripts/postgres-local up

# Debian's chromium and chromium-driver (apt), for the UI tests in a real headless browser.
browser:
	scripts/browser-deps

# Debian's podman (apt): its Docker-compatible API for the tests that start a throwaway
# container through testcontainers (after `cluster`: it runs containers with the node's runc).
podman: cluster
	scripts/podman-local up

# ruff (lint) and mypy (types: the library, operators, sensors); settings in pyproject.toml
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The test command: lint, then the tests in two lanes at once (scripts/test-lanes): the main lane
# runs cluster, node and Airflow end-to-end tests; beside it the slurm lane runs tests/slurm on
# Slurm 22.05 and 24.11 (and each JSON shape's subset on v0.0.40 and v0.0.41), the tests that
# need no cluster (unit, the local and pai backends', the Airflow tests of local jobs) and long
# cluster tests that never restart the API server, then the older Airflows (test-compat).
test: install-demo lint cluster slurm postgres browser podman
	PYTHON=$(PYTHON) VENV=$(VENV) scripts/test-lanes

test-unit: install
	$(VENV)/bin/pytest -q -ra tests/unit

# The older Airflows supported beside 3.3 (3.1.8, 3.2.2): a venv each with its constraints, cached
# in ~/.cache/dlc-airflow/compat, then the unit suite and a lean end-to-end subset in each
# (scripts/test-compat says which; the README says what it costs). `make test` runs it in its slurm lane.
test-compat:
	PYTHON=$(PYTHON) scripts/test-compat

demo: install-demo
	$(PY) -m dlc_airflow.demo

# The same chain in pods on the local cluster's real node (PyTorch DDP over gloo in containers).
demo-cluster: install-demo cluster
	$(PY) -m dlc_airflow.demo --cluster --output demo-output-cluster

benchmarks: install cluster slurm
	$(PY) benchmarks/notice_latency.py
	$(PY) benchmarks/slurm_poller.py

# The randomized fault soak through real Airflow (hours; a 20-run version is in `make test`).
# SOAK_RUNS=200 by default; the seed is printed (SOAK_SEED=N replays one). SOAK_SHAPE=production
# (PostgreSQL, two schedulers, two triggerers) or sqlite (one of each).
SOAK_RUNS ?= 200
SOAK_SHAPE ?= production
soak: install cluster postgres
	$(PY) benchmarks/soak.py --runs $(SOAK_RUNS) --shape $(SOAK_SHAPE) $(if $(SOAK_SEED),--seed $(SOAK_SEED))

clean-cluster:
	scripts/k8s-local down

clean-slurm:
	scripts/slurm-local down
