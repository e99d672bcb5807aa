"""Token routing loads in closed form: Zipf shares, Dirichlet draws, tokens-per-expert files, EP-rank factors."""

from __future__ import annotations

import numpy as np
import pytest

from sim.errors import ConfigError
from sim.routing import expert_load, rank_load_factors


def test_zipf_shares_are_the_normalised_power_law_in_a_seeded_order() -> None:
    load = expert_load("zipf:1.5", 16, seed=7)
    expected = 1.0 / np.arange(1, 17) ** 1.5
    np.testing.assert_allclose(np.sort(load)[::-1], expected / expected.sum(), rtol=1e-12)
    assert load.sum() == pytest.approx(1.0)
    np.testing.assert_array_equal(load, expert_load("zipf:1.5", 16, seed=7))
    assert not np.array_equal(load, expert_load("zipf:1.5", 16, seed=8))  # the permutation follows the seed
    assert load.max() / load.min() == pytest.approx(16 ** 1.5)


def test_dirichlet_is_the_seeded_draw_normalised() -> None:
    load = expert_load("dirichlet:0.3", 32, seed=5)
    draw = np.random.default_rng(5).dirichlet(np.full(32, 0.3))
    np.testing.assert_allclose(load, draw / draw.sum(), rtol=1e-12)


def test_tokens_per_expert_file_is_normalised_and_checked(tmp_path) -> None:
    f = tmp_path / "load.txt"
    f.write_text("1 3\n0 4\n")
    np.testing.assert_allclose(expert_load(str(f), 4), [0.125, 0.375, 0.0, 0.5])
    g = tmp_path / "load.json"
    g.write_text("[2, 2, 4, 0]")
    np.testing.assert_allclose(expert_load(str(g), 4), [0.25, 0.25, 0.5, 0.0])
    f.write_text("1 -3 1 1\n")
    with pytest.raises(ConfigError, match="non-negative"):
        expert_load(str(f), 4)
    f.write_text("0 0 0 0\n")
    with pytest.raises(ConfigError, match="not all zero"):
        expert_load(str(f), 4)
    f.write_text("1 2 3\n")
    with pytest.raises(ConfigError, match="expected 4"):
        expert_load(str(f), 4)


def test_rank_load_factors_sum_contiguous_experts_relative_to_the_mean() -> None:
    load = np.array([0.4, 0.1, 0.2, 0.1, 0.05, 0.05, 0.05, 0.05])
    np.testing.assert_allclose(rank_load_factors(load, 4), [2.0, 1.2, 0.4, 0.4])
    np.testing.assert_allclose(rank_load_factors(load, 2), [1.6, 0.4])
    np.testing.assert_allclose(rank_load_factors(load, 8), load * 8)
