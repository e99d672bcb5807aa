"""Fixtures for the reference tests: fp32 CPU, few threads, deterministic seeds."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TORCHAO_FORCE_SKIP_LOADING_SO_FILES", "1")
torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _seeded() -> None:
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def debug_spec():
    from sim.catalog import load_model

    return load_model("debug")
