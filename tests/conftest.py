"""Shared fixtures: the real data in ../shared/data (never copied into the repository)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("LIMELIGHT_DATA", REPO.parent / "shared" / "data"))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LIMELIGHT_DATA", str(DATA))


def pytest_collection_modifyitems(config, items):
    if not DATA.is_dir():  # never the case in CI; a clear message for anyone else
        skip = pytest.mark.skip(reason=f"shared data folder {DATA} is absent")
        for item in items:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def trec_eval_dir() -> Path:
    return DATA / "runs" / "trec_eval_test"
