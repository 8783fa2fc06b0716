# Two commands on a fresh machine: `make demo` and `make test`.
# Each creates/refreshes the virtual environment and installs what it needs.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test stress venv tools lint typecheck bench clean

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

# The suite runs on TEST_WORKERS pytest-xdist workers (3 keeps a 2-core machine busy:
# much of the suite waits on subprocesses); TEST_WORKERS=0 runs it in this process.
# (Not --dist loadgroup: pytest-xdist 3.8 cannot rename pytest 9's node ids, so its
# groups are ignored; the full matrix is shared through a file lock instead.)
# The slowest tests are listed at the end, so a run shows where its time went.
TEST_WORKERS ?= 3
test: $(STAMP) tools lint typecheck
	bash scripts/ensure-system-deps.sh
	bash scripts/ensure-postgres.sh
	$(PY) -m pytest -q -n $(TEST_WORKERS) --durations=25

# The adversarial suite in its long mode (`make test` runs the same tests quickly):
# every test marked `stress`, with SHAREDOS_STRESS=long (e.g. 100 SIGKILLs of a
# host under 4 concurrent clients); prints its figures at the end.
stress: $(STAMP)
	SHAREDOS_STRESS=long $(PY) -m pytest -q -m stress -p no:cacheprovider

lint: $(STAMP)
	$(VENV)/bin/ruff check sharedos tests benchmarks
	$(VENV)/bin/ruff format --check sharedos tests benchmarks

typecheck: $(STAMP)
	$(VENV)/bin/mypy sharedos

# Every benchmark, one report, JSON under reports/bench/ (git-ignored).
# `make bench BENCH_QUICK=1` is the few-minute development mode; the full run
# takes about 35-45 minutes on the 2-core machine (Rego and Casbin at 10,000 rules).
BENCH_STAMP := $(VENV)/.bench-installed
$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	BENCH_QUICK=$(BENCH_QUICK) $(PY) -m benchmarks.run

clean:
	rm -rf $(VENV) .tools build dist
