"""The intervals on the runs no fit saw (studies.interval_check): the widening factors beyond the envelope are what
the held-out runs need, and with them the held-out runs are covered near the nominal 80%."""

from __future__ import annotations

import math

import pytest

from sim.uncertainty import BEYOND_FACTOR, TRANSPORT_FACTOR
from studies.interval_check import (
    held_out_intervals,
    needed_factors,
    pooled_factor,
    reason_kind,
    smallest_factor,
)


@pytest.fixture(scope="module")
def rows():
    return held_out_intervals()


def test_every_held_out_file_is_checked(rows):
    assert {r.file for r in rows} == {"heldout_runs.toml", "heldout_models.toml", "scale_checks.toml", "efa_runs.toml",
                                      "heldout_torchtitan.toml", "mlperf_gpt_oss.toml", "heldout_recent.toml",
                                      "heldout_early.toml"}
    assert len(rows) >= 80
    beyond = [r for r in rows if r.kinds]
    assert all(r.distance == "beyond the envelope" and not math.isnan(r.need) for r in beyond)
    assert all(len(r.kinds) == 1 for r in beyond)  # each run counts under one reason


def test_shipped_factors_are_what_the_held_out_runs_need(rows):
    """A refit or a new held-out run that moves the need 15% from the shipped factor makes this fail: resize the
    constants in sim.uncertainty from `python -m studies.interval_check`."""
    _, pooled = pooled_factor(rows)
    assert BEYOND_FACTOR == pytest.approx(pooled, rel=0.15)
    _, transport = needed_factors(rows)["transport"]
    assert TRANSPORT_FACTOR == pytest.approx(transport, rel=0.15)


def test_beyond_the_envelope_coverage_is_near_nominal(rows):
    beyond = [r for r in rows if r.kinds]
    inside = sum(r.covered for r in beyond) / len(beyond)
    assert 0.7 <= inside <= 0.9


def test_wider_beyond_the_envelope_than_inside_it(rows):
    def median_width(group):
        widths = sorted(r.p90 / r.p10 for r in group)
        return widths[len(widths) // 2]

    measured = [r for r in rows if r.distance == "measured group"]
    beyond = [r for r in rows if r.kinds and r.kinds[0] != "transport"]
    efa = [r for r in rows if r.kinds and r.kinds[0] == "transport"]
    assert median_width(measured) < median_width(beyond) < median_width(efa)


def test_reason_kinds():
    assert reason_kind("fabric transport efa (aws-p6-b300) was never measured (measured: infiniband)") == "transport"
    assert reason_kind("EP backend uccl-ep was never measured on hgx-b300 (measured: hybridep)") == "backend or precision"
    assert reason_kind("precision bf16 was never measured on gb300-nvl72 (measured: mxfp8)") == "backend or precision"
    assert reason_kind("model kimi-k2 was never measured (measured: deepseek-v3-671b)") == "model"


def test_the_needed_factor_is_the_smallest_that_covers(rows):
    """The need is found by bisection on the interval as `moesim predict` builds it (the step boundary's band
    included, which does not scale with the factor): a run beyond the envelope is inside exactly when its need is
    at most the factor it was widened by."""
    assert smallest_factor(lambda w: w >= 2.5) == pytest.approx(2.5, abs=1e-6)
    assert smallest_factor(lambda w: True) == pytest.approx(0.0, abs=1e-6)
    assert smallest_factor(lambda w: False) == math.inf
    beyond = [r for r in rows if r.kinds]
    for r in beyond:
        factor = TRANSPORT_FACTOR if r.kinds[0] == "transport" else BEYOND_FACTOR
        if abs(r.need - factor) > 0.01:  # a run on its interval's edge is either
            assert (r.need <= factor) == r.covered, r.run_id


def test_the_measured_group_factor_is_what_its_held_out_runs_need(rows):
    """In-sample errors understate a new run's: the measured group's half-width is widened by GROUP_FACTOR, sized on
    the held-out runs that lie in a measured group (resize it from `python -m studies.interval_check`)."""
    from sim.uncertainty import GROUP_FACTOR
    from studies.interval_check import group_factor

    n, need = group_factor(rows)
    assert n >= 30 and GROUP_FACTOR == pytest.approx(need, rel=0.15)
    group = [r for r in rows if r.distance == "measured group"]
    assert 0.7 <= sum(r.covered for r in group) / len(group) <= 0.9


def test_the_factors_sized_without_a_file_hold_most_of_its_runs(rows):
    """Leave-one-file-out: each held-out file's runs under factors sized on the other files only (78% inside when
    written; nominal 80%). A file whose runs need far more than the others' (MLPerf GPT-OSS-20B's cells) shows here."""
    from studies.interval_check import leave_one_file_out

    lofo = leave_one_file_out(rows)
    assert {name for name, *_ in lofo} == {r.file for r in rows} - {"efa_runs.toml"}
    assert all(beyond > 0 and group > 0 and 0 <= inside <= n for _, beyond, group, inside, n in lofo)
    assert sum(r[3] for r in lofo) / sum(r[4] for r in lofo) >= 0.65
