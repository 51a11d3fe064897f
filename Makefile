# moeroof: build, test and report. Every target that runs Python bootstraps .venv on first use,
# so `make test` works on a clean checkout with only python3 (+ pip) installed.
#
#   make test     ruff (lint + format check), then the whole test suite (what CI runs, via .ci/run)
#   make check    the quick loop: ruff, then the tests not marked slow/notebook/browser
#   make report   execute notebooks/*.py with papermill into reports/ (.ipynb + .html + index.html,
#                 figures in reports/figures/): it writes nothing outside reports/
#   make figures  make report, then copy into the committed figures/ each figure whose plotted data
#                 changed (reports/figures/NAME.json against figures/NAME.json; bytes alone never)
#   make docs     the documentation site (mkdocs.yml, docs/) into site/, warnings as errors
#   make lab      JupyterLab on notebooks/ (the .py notebooks open as notebooks; whatif has controls)
#   make bench    performance benchmarks (benchmarks/run.py, benchmarks/vs_libcachesim.py, benchmarks/fit_plan_bench.py)
#   make clean    remove build output (reports/, caches); keeps .venv (rm -rf .venv for that)

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Re-install whenever pyproject.toml changes (dependencies, extras, entry points) or the pinned
# versions do (constraints.txt: what CI resolves, so a fresh install gets the same ones).
STAMP := $(VENV)/.installed

export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: report figures test check lint lab bench clean browser bytecode docs compiler

# Some distributions split ensurepip out of python3 (Debian's python3-venv); then create the venv
# without pip and install pip into it with the system pip, which needs no root-only packages.
$(STAMP): pyproject.toml constraints.txt
	@echo "make: setting up $(VENV): pip installs moeroof and its dependencies (quiet; a few minutes on a first run)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || { \
	  rm -rf $(VENV) && $(PYTHON) -m venv --without-pip $(VENV) && \
	  $(PYTHON) -m pip --python $(PY) install -q pip; }
	@command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1 || $(MAKE) --no-print-directory compiler
	$(PY) -m pip install -q -c constraints.txt -e '.[notebooks,test,capture,docs,sweep,parquet]'
	$(PY) -m ipykernel install --sys-prefix --name moeroof --display-name "moeroof (.venv)" >/dev/null
	@mkdir -p $(LAB_SETTINGS_DIR)
	@printf '%s\n' '$(LAB_OVERRIDES)' > $(LAB_SETTINGS_DIR)/overrides.json
	@touch $@ $(NATIVE_STAMP)
	@echo "make: $(VENV) ready; the moeroof command is $(VENV)/bin/moeroof (or: source $(VENV)/bin/activate)"

# The C kernels are compiled by the install (setup.py) into lib/moeroof/kernels/_native*.so;
# an edit of their sources rebuilds them here (the library refuses to load when stale).
NATIVE_SRC := setup.py lib/moeroof/kernels/sources.py $(wildcard lib/moeroof/kernels/native/*.[ch])
NATIVE_STAMP := $(VENV)/.native
$(NATIVE_STAMP): $(STAMP) $(NATIVE_SRC)
	@echo "make: rebuilding the C kernels (their sources changed)"
	$(PY) -m pip install -q --no-deps -e .
	@touch $@

# The install compiles the C kernels: as root with apt-get, install a C compiler when none is on
# PATH; otherwise say what to install (the install cannot go on without one).
compiler:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "make: installing Debian's gcc for the C kernels"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev >/dev/null; \
	else \
	  echo "make: no C compiler on PATH (cc, gcc): install one (Debian: apt-get install gcc libc6-dev; macOS: xcode-select --install)" >&2; \
	  exit 1; \
	fi

# JupyterLab opens a .py file in the text editor unless told otherwise: this venv's lab opens
# Python files with jupytext's notebook view, so `make lab` shows notebooks/*.py as notebooks
# (right-click → Open With → Editor still edits the text). tests/test_browser.py relies on it.
LAB_SETTINGS_DIR := $(VENV)/share/jupyter/lab/settings
LAB_OVERRIDES := {"@jupyterlab/docmanager-extension:plugin": {"defaultViewers": {"python": "Jupytext Notebook"}}}

# The browser tests drive Debian's chromium (never a downloaded browser). As root with apt-get,
# install it when missing; otherwise say so (those tests skip outside CI and fail in CI).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "make: installing Debian's chromium for the browser tests"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	  else \
	    echo "make: no chromium on PATH; browser tests will skip (apt-get install chromium chromium-driver)" >&2; \
	  fi; }

# The suite's own bytecode, compiled ahead (a no-op when up to date): the editable install leaves
# lib/ uncompiled, and with PYTHONDONTWRITEBYTECODE set (as on some boxes) every command would
# compile its modules from source at each start (~30-40 ms of a quick command's 0.13-0.2 s).
bytecode: $(STAMP) $(NATIVE_STAMP)
	@$(PY) -m compileall -q lib/moeroof

# Lint and format are part of the test: a tree that ruff rejects does not pass.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The tests run their files on up to TEST_JOBS cores (pytest-xdist; a file's tests stay together
# in one worker, as they share fixtures and temp folders): 0 runs them in this process.
TEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 4 ] && n=4; echo $$n)

test: $(STAMP) bytecode browser lint
	$(PY) -m pytest -q -n $(TEST_JOBS) --dist loadfile

# The quick loop: lint, then every test not marked slow, notebook or browser, on the same cores
# as make test, the first failure stopping the run.
check: $(STAMP) bytecode lint
	$(PY) -m pytest -q -x -n $(TEST_JOBS) --dist loadfile -m "not slow and not notebook and not browser"

report: $(STAMP) bytecode
	$(PY) -m moeroof.present.report

figures: report
	$(PY) -m moeroof.present.figures

# Jupyter refuses to run as root unless told; containers often are root.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict -d site

lab: $(STAMP)
	$(VENV)/bin/jupyter lab --ServerApp.root_dir=notebooks $(ROOT_FLAG)

# benchmarks/run.py, then whole commands against libCacheSim (skipped, with the reason, when it does not
# import) and the C reference (skipped when no C compiler) at 10^6 and 10^7 requests: the second runs
# even when the first misses a floor, and make fails if either does.
bench: $(STAMP) bytecode
	status=0; $(PY) benchmarks/run.py || status=$$?; \
	$(PY) benchmarks/vs_libcachesim.py || status=$$?; \
	$(PY) benchmarks/fit_plan_bench.py || status=$$?; \
	exit $$status

clean:
	rm -rf reports build site .pytest_cache .hypothesis lib/*.egg-info
	find lib tests benchmarks notebooks scripts -name __pycache__ -type d -prune -exec rm -rf {} + 2>/dev/null || true
