# limelight: `make demo` and `make test` set everything up on a fresh clone, then run.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test install lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# torch first, from the pinned CPU wheel, so nothing that depends on it pulls a CUDA build
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

test: install
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q

demo: install
	HF_HUB_OFFLINE=1 $(BIN)/python -m limelight.demo

lint: install
	$(BIN)/ruff check src tests benchmarks

clean:
	rm -rf $(VENV) .cache demo-out
