"""The ratio intervals of ``moesim compare`` on held-out pairs (studies.ratio_check): the factor beyond the envelope is
what the held-out pairs need, and the step boundary's part moves a short step against a long one, not two alike."""

from __future__ import annotations

import math

import pytest

from sim.uncertainty import ratio_boundary_shift
from studies.compare import RATIO_BEYOND_FACTOR, RATIO_GROUP_FACTOR, ratio_interval
from studies.ratio_check import (
    RATIO_FILES,
    held_out_ratios,
    needed_ratio_factor,
    ratio_markdown,
)


@pytest.fixture(scope="module")
def rows():
    return held_out_ratios()


def test_every_pair_is_of_one_model_within_one_file(rows):
    assert {r.file for r in rows} <= set(RATIO_FILES) and "efa_runs.toml" not in RATIO_FILES
    assert len(rows) >= 300
    assert all(r.p10 <= r.predicted <= r.p90 for r in rows)
    assert all(r.need >= 0 for r in rows)


def test_shipped_ratio_factor_is_what_the_held_out_pairs_need(rows):
    """A refit or a new held-out run that moves the need 15% from the shipped factor makes this fail: resize
    studies.compare.RATIO_BEYOND_FACTOR from `python -m studies.ratio_check`."""
    _, need = needed_ratio_factor(rows)
    assert RATIO_BEYOND_FACTOR == pytest.approx(need, rel=0.15)
    _, need_inside = needed_ratio_factor(rows, beyond=False)
    assert RATIO_GROUP_FACTOR == pytest.approx(need_inside, rel=0.15)
    for side in (True, False):
        pairs = [r for r in rows if r.beyond == side]
        assert 0.7 <= sum(r.covered for r in pairs) / len(pairs) <= 0.9


def test_the_boundary_moves_a_short_step_against_a_long_one_only():
    band = (1.5, 2.6)
    assert ratio_boundary_shift(4.0, 2.0, 4.0, 2.0, band, beyond=False) == (0.0, 0.0)
    short_vs_long = ratio_boundary_shift(4.0, 2.0, 40.0, 2.0, band, beyond=False)
    assert short_vs_long[0] > 0.1 and short_vs_long[1] > 0.1
    # a step of one microbatch pays no boundary: against it, the other step's boundary moves the ratio alone
    assert ratio_boundary_shift(4.0, 2.0, 4.0, 0.0, band, beyond=False)[1] > 0.1
    assert ratio_boundary_shift(4.0, 0.0, 4.0, 0.0, band, beyond=True) == (0.0, 0.0)
    assert ratio_boundary_shift(4.0, 2.0, 40.0, 2.0, None, beyond=True) == (0.0, 0.0)
    # beyond the envelope the boundary may be none: the short step may run twice as fast
    assert ratio_boundary_shift(4.0, 2.0, 40.0, 2.0, band, beyond=True)[1] > math.log(1.8)


def test_the_boundary_part_adds_in_quadrature_to_the_pair_spread():
    residuals = [-0.1, -0.05, 0.0, 0.05, 0.1] * 4
    plain = ratio_interval(1.2, residuals)
    moved = ratio_interval(1.2, residuals, boundary_shift=(0.3, 0.4))
    assert math.log(1.2 / moved.p10) == pytest.approx(math.hypot(math.log(1.2 / plain.p10), 0.3))
    assert math.log(moved.p90 / 1.2) == pytest.approx(math.hypot(math.log(plain.p90 / 1.2), 0.4))
    assert ratio_interval(1.2, residuals, boundary_shift=(0.0, 0.0)) == plain


def test_the_markdown_names_the_shipped_factor(rows):
    text = "\n".join(ratio_markdown(rows))
    assert f"`RATIO_BEYOND_FACTOR` = {RATIO_BEYOND_FACTOR:g}" in text and "| heldout_runs.toml |" in text


def test_the_ratio_factors_sized_without_a_file_hold_most_of_its_pairs(rows):
    """Leave-one-file-out: each file's pairs under factors sized on the other files' pairs (80% when written)."""
    from studies.ratio_check import leave_one_file_out

    lofo = leave_one_file_out(rows)
    assert {name for name, *_ in lofo} == {r.file for r in rows}
    assert sum(r[3] for r in lofo) / sum(r[4] for r in lofo) >= 0.65
