"""The project's lint and type checks, run as tests so CI keeps them (tools come with the `test` extra)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def tool(name: str) -> str:
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return path


def test_ruff_lint_is_clean() -> None:
    result = subprocess.run([tool("ruff"), "check", "--select", "E,F,W,I", "--ignore", "E501",
                             "sim", "calibrate", "studies", "reference", "moesim", "tests", "benchmarks"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean_on_the_torch_free_packages() -> None:
    result = subprocess.run([tool("mypy"), "--ignore-missing-imports", "--cache-dir", "/tmp/moesim-mypy-cache",
                             "sim", "calibrate", "studies", "moesim"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_is_clean_on_sim_and_studies() -> None:
    """The simulator and the studies type-check under ``mypy --strict`` (issue 16)."""
    result = subprocess.run([tool("mypy"), "--strict", "--ignore-missing-imports", "--cache-dir",
                             "/tmp/moesim-mypy-strict-cache", "sim", "studies"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
