"""studies/_sim.py: intervals through sim.uncertainty, stacks through sim.stacks."""

from __future__ import annotations

import pytest

from sim.errors import ConfigError
from studies import _sim


class _Pred:
    tokens_per_s_per_gpu = 1000.0
    stack = "megatron-26.04"


def test_interval_from_given_residuals_sits_at_their_mean_and_contains_the_prediction() -> None:
    low, high = _sim.interval_for(_Pred(), "megatron", [0.1, 0.1, 0.1])  # type: ignore[arg-type]
    assert low == pytest.approx(1000.0)  # widened down to the unshifted prediction
    assert high == pytest.approx(1000.0 * 2.718281828 ** 0.1)


def test_no_residual_gives_no_interval_and_one_gives_a_wide_one() -> None:
    assert _sim.interval_for(_Pred(), "torchtitan", []) is None  # type: ignore[arg-type]
    low, high = _sim.interval_for(_Pred(), "torchtitan", [0.1])  # type: ignore[arg-type]
    assert low < 1000.0 < 1000.0 * 2.718281828 ** 0.1 < high  # its error, widened as a 1-df t would


def test_unknown_stack_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        _sim.stack_profile("no-such-stack")
