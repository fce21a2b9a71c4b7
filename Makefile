# One-command set-up: `make demo` and `make test` create .venv and install everything.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
CHAIN  ?= examples/data/spy_chain_2026-02-13.csv
OUTDIR ?= out

.PHONY: demo test test-gpu bench venv clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	@mkdir -p $(OUTDIR)
	@echo "== 1. main job in-process (no daemon) =="
	$(VENV)/bin/optiond chain $(CHAIN) -o $(OUTDIR)/spy_chain_priced.csv --no-daemon
	@echo "== 2. the same job through a daemon =="
	$(VENV)/bin/optiond serve --detach
	$(VENV)/bin/optiond status
	$(VENV)/bin/optiond chain $(CHAIN) -o $(OUTDIR)/spy_chain_priced_daemon.csv --daemon-only; rc=$$?; \
	  $(VENV)/bin/optiond stop; exit $$rc

test: $(STAMP)
	$(PY) -m pytest -m "not gpu" -q

test-gpu: $(STAMP)
	$(PY) -m pytest -m gpu -q

bench: $(STAMP)
	$(PY) bench/binomial_cpu.py
	$(PY) bench/daemon.py
	$(PY) bench/chain.py

clean:
	rm -rf $(VENV) $(OUTDIR) build *.egg-info
