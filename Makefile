# moeroof: build, test and report. Every target that runs Python bootstraps .venv on first use,
# so `make test` works on a clean checkout with only python3 (+ pip) installed.
#
#   make test     run the whole test suite (what CI runs, via .ci/run)
#   make report   execute notebooks/*.py with papermill into reports/ (.ipynb + .html)
#   make lab      JupyterLab on notebooks/ (jupytext opens the .py notebooks as notebooks)
#   make bench    performance benchmarks (benchmarks/run.py)
#   make clean    remove build output (reports/, caches); keeps .venv (rm -rf .venv for that)

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Re-install whenever pyproject.toml changes (dependencies, extras, entry points).
STAMP := $(VENV)/.installed

export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: report test lab bench clean

# Some distributions split ensurepip out of python3 (Debian's python3-venv); then create the venv
# without pip and install pip into it with the system pip, which needs no root-only packages.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || { \
	  rm -rf $(VENV) && $(PYTHON) -m venv --without-pip $(VENV) && \
	  $(PYTHON) -m pip --python $(PY) install -q pip; }
	$(PY) -m pip install -q -e '.[notebooks,test]'
	$(PY) -m ipykernel install --sys-prefix --name moeroof --display-name "moeroof (.venv)" >/dev/null
	@touch $@

test: $(STAMP)
	$(PY) -m pytest -q

report: $(STAMP)
	$(PY) -m moeroof.report

# Jupyter refuses to run as root unless told; containers often are root.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

lab: $(STAMP)
	$(VENV)/bin/jupyter lab --ServerApp.root_dir=notebooks $(ROOT_FLAG)

bench: $(STAMP)
	$(PY) benchmarks/run.py

clean:
	rm -rf reports build .pytest_cache .hypothesis lib/*.egg-info
	find lib tests benchmarks notebooks scripts -name __pycache__ -type d -prune -exec rm -rf {} + 2>/dev/null || true
