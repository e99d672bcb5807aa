"""studies/_sim.py: the one adapter to sim's moving interfaces never turns an API mismatch into a crash."""

from __future__ import annotations

import sys
import types

import pytest

from studies import _sim


class _Pred:
    tokens_per_s_per_gpu = 1000.0


@pytest.mark.parametrize("fn, expected", [
    (lambda predicted, log_residuals, *, stack="": types.SimpleNamespace(p10=900.0, p90=1100.0), (900.0, 1100.0)),
    (lambda pred: (1.0, 2.0), (1.0, 2.0)),
    (lambda pred: {"low": 3.0, "high": 4.0}, (3.0, 4.0)),
    (lambda a, b, c: None, None),  # an interface the adapter does not know: no interval, no error
])
def test_interval_adapter(monkeypatch: pytest.MonkeyPatch, fn, expected) -> None:
    fake = types.ModuleType("sim.uncertainty")
    fake.interval = fn  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sim.uncertainty", fake)
    assert _sim.interval_for(_Pred(), "torchtitan", [0.0, 0.1, -0.1]) == expected  # type: ignore[arg-type]


def test_too_few_residuals_give_no_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("sim.uncertainty")
    fake.interval = lambda predicted, log_residuals, *, stack="": types.SimpleNamespace(p10=1, p90=2)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sim.uncertainty", fake)
    assert _sim.interval_for(_Pred(), "torchtitan", [0.1]) is None  # type: ignore[arg-type]
