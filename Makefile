# One-command set-up: `make demo` and `make test` create .venv and install everything.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# the pricing kernels compiled into numba's on-disk cache (optiond warmup); again after a kernel changes
WARM   := $(VENV)/.warm
KERNEL_SOURCES := $(shell find src/optiond/kernels src/optiond/surface -name '*.py' 2>/dev/null)
CHAIN  ?= examples/data/spy_chain_2026-02-13.csv
# the snapshot time of the bundled Yahoo chains (examples/data/README.md), New York time
QUOTE_TIME ?= 10:50
OUTDIR ?= out
# where demo writes the surface's pictures (the README shows them from here)
PLOTDIR ?= docs/surface

# system libraries Qt needs for the panel and its offscreen tests (Debian/Ubuntu names)
QT_SYSTEM_LIBS := libegl1 libgl1 libxkbcommon0 libfontconfig1 libdbus-1-3 libglib2.0-0

.PHONY: demo test test-gpu bench venv clean system-deps

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

$(WARM): $(STAMP) $(KERNEL_SOURCES)
	$(VENV)/bin/optiond warmup
	touch $(WARM)

venv: $(WARM)

demo: $(WARM)
	@mkdir -p $(OUTDIR)
	@echo "== 1. main job in-process (no daemon), with the volatility surface and its pictures =="
	$(VENV)/bin/optiond chain $(CHAIN) -o $(OUTDIR)/spy_chain_priced.csv --quote-time $(QUOTE_TIME) --no-daemon \
	  --surface $(OUTDIR)/spy_surface.json --plot $(PLOTDIR)
	@echo "== 2. the same job through a daemon =="
	$(VENV)/bin/optiond serve --detach
	$(VENV)/bin/optiond status
	$(VENV)/bin/optiond chain $(CHAIN) -o $(OUTDIR)/spy_chain_priced_daemon.csv --quote-time $(QUOTE_TIME) --daemon-only; rc=$$?; \
	  $(VENV)/bin/optiond stop; exit $$rc

system-deps:
	@for lib in libEGL.so.1 libxkbcommon.so.0 libfontconfig.so.1 libdbus-1.so.3; do \
	  ldconfig -p | grep -q "$$lib" || missing=1; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(QT_SYSTEM_LIBS); \
	  else echo "the panel needs these system packages: $(QT_SYSTEM_LIBS)"; exit 1; fi; fi

test: $(STAMP) system-deps
	$(PY) -m pytest -m "not gpu" -q

test-gpu: $(STAMP)
	$(PY) -m pytest -m gpu -q

bench: $(WARM)
	$(PY) bench/binomial_cpu.py
	$(PY) bench/daemon.py
	$(PY) bench/chain.py
	$(PY) bench/mlmc.py --device cpu --eps 0.005 0.0025
	$(PY) bench/adi.py --cpu

clean:
	rm -rf $(VENV) $(OUTDIR) build *.egg-info
