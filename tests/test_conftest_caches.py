"""Under mutation testing every test starts with sim's and calibrate's caches empty (tests/conftest.py)."""

from __future__ import annotations

import pytest

from sim.schedule import _dual_order_of
from tests.conftest import clear_if_mutation_testing, clear_memoised


def test_clearing_empties_the_caches_of_sim_and_calibrate() -> None:
    _dual_order_of("dualpipe", 4, 8, 0)
    assert _dual_order_of.cache_info().currsize >= 1
    assert clear_memoised() >= 5
    assert _dual_order_of.cache_info().currsize == 0


def test_only_mutation_testing_empties_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MUTANT_UNDER_TEST", raising=False)
    _dual_order_of("dualpipe", 4, 8, 1)
    assert not clear_if_mutation_testing() and _dual_order_of.cache_info().currsize >= 1
    monkeypatch.setenv("MUTANT_UNDER_TEST", "stats")
    assert clear_if_mutation_testing() and _dual_order_of.cache_info().currsize == 0
