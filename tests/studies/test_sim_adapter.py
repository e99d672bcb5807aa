"""studies/_sim.py: intervals through sim.uncertainty, stacks through sim.stacks."""

from __future__ import annotations

import pytest

from sim.errors import ConfigError
from studies import _sim


class _Pred:
    tokens_per_s_per_gpu = 1000.0
    stack = "megatron-26.04"


def test_interval_from_given_residuals_is_centred_on_their_mean() -> None:
    low, high = _sim.interval_for(_Pred(), "megatron", [0.1, 0.1, 0.1])  # type: ignore[arg-type]
    assert low == pytest.approx(high) == pytest.approx(1000.0 * 2.718281828 ** 0.1)


def test_too_few_residuals_give_no_interval() -> None:
    assert _sim.interval_for(_Pred(), "torchtitan", [0.1]) is None  # type: ignore[arg-type]


def test_unknown_stack_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        _sim.stack_profile("no-such-stack")
