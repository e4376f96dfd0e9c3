# gpuserve developer entry points. Every target installs what it needs first.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: help setup test lint typecheck imports unit e2e crds crds-check api-docs \
        cluster-build cluster-up cluster-down cluster-status demo bench

help:
	@echo "make demo            local cluster + operator + sample services under load"
	@echo "make test            every check and test (what CI runs)"
	@echo "make crds            regenerate crds/ (and docs/api.md) from the pydantic models"
	@echo "make cluster-up      start the local control plane with simulated GPU nodes"
	@echo "make cluster-down    stop it; make cluster-status shows it"

setup: $(STAMP)
$(STAMP): pyproject.toml scripts/bootstrap.sh
	@bash scripts/bootstrap.sh
	@touch $@

lint: setup
	$(VENV)/bin/ruff check gpuserve controllers cli operator e2e tests bench
imports: setup
	$(VENV)/bin/lint-imports
typecheck: setup
	$(VENV)/bin/mypy

crds: setup api-docs
	$(PY) -m gpuserve.api.crdgen --out crds
	$(PY) -m gpuserve.api.crdgen --out charts/gpuserve/crds
# The API reference is generated from the same models: its drift fails like the CRDs'.
crds-check: setup
	$(PY) -m gpuserve.api.crdgen --out crds --check
	$(PY) -m gpuserve.api.crdgen --out charts/gpuserve/crds --check
	$(PY) -m gpuserve.api.docgen --out docs/api.md --check
api-docs: setup
	$(PY) -m gpuserve.api.docgen --out docs/api.md

unit: setup
	$(PY) -m pytest -q tests -m "not cluster"

test: setup lint imports typecheck crds-check cluster-build
	$(PY) -m pytest -q -ra

cluster-build: setup
	$(PY) -m e2e.cluster build
cluster-up: setup
	$(PY) -m e2e.cluster up
cluster-down: setup
	$(PY) -m e2e.cluster down
cluster-status: setup
	$(PY) -m e2e.cluster status

bench: setup cluster-build
	$(PY) bench/cluster_startup.py --runs 3
	$(PY) bench/triton_batching.py
	$(PY) bench/reconcile_latency.py --services 50
	$(PY) bench/autoscaling.py --compress 2
	$(PY) bench/fidelity.py

demo: setup
	$(PY) -m e2e.demo $(DEMO_ARGS)
