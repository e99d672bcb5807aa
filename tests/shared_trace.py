"""Where the tests find DeepSeek's real H800 trace (``../shared/data/traces/``): ``$MOESIM_SHARED_DIR`` when
set, else the ``shared`` folder beside the checkout, or one level further up (a worktree, mutmut's copy)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

F = TypeVar("F", bound=Callable[..., object])

NAME = "deepseek-v3-train-h800-ep64.json.gz"
_ROOT = Path(__file__).resolve().parents[1]
_BASES = [Path(os.environ["MOESIM_SHARED_DIR"])] if os.environ.get("MOESIM_SHARED_DIR") else []
CANDIDATES = [base / "data" / "traces" / NAME for base in (*_BASES, _ROOT.parent / "shared", _ROOT.parent.parent / "shared")]
#: the trace (the first candidate when none exists: tests that need it skip)
TRACE = next((p for p in CANDIDATES if p.exists()), CANDIDATES[0])
#: ``pytestmark`` of a module that reads the trace. shared_data: under MOESIM_CI=1 a skip for missing shared
#: data (not a missing tool) stays a skip.
NEEDS_TRACE = [pytest.mark.shared_data,
               pytest.mark.skipif(not TRACE.exists(), reason=f"DeepSeek's trace not found beside the checkout: {CANDIDATES}")]


def needs_trace(f: F) -> F:
    """Mark one test as reading the trace (:data:`NEEDS_TRACE`)."""
    for mark in NEEDS_TRACE:
        f = mark(f)
    return f
