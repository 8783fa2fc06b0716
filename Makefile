# Two commands on a fresh machine: `make demo` and `make test`.
# Each creates/refreshes the virtual environment and installs what it needs.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test venv tools lint typecheck bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

# Pinned npm packages (MCP conformance suite, Inspector, harness CLIs) are
# linked at the git-ignored .tools/; scripts/install-tools.sh is idempotent and
# quick when the pinned set is already in the machine's cache.
tools:
	bash scripts/install-tools.sh

demo: $(STAMP)
	$(VENV)/bin/sharedos demo

test: $(STAMP) tools lint typecheck
	bash scripts/ensure-system-deps.sh
	bash scripts/ensure-postgres.sh
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check sharedos tests benchmarks
	$(VENV)/bin/ruff format --check sharedos tests benchmarks

typecheck: $(STAMP)
	$(VENV)/bin/mypy sharedos

bench: $(STAMP)
	$(PY) benchmarks/bench_policy.py
	$(PY) benchmarks/bench_kernel.py
	$(PY) benchmarks/bench_bridge.py

clean:
	rm -rf $(VENV) .tools build dist
