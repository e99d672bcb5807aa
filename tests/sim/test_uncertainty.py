"""Prediction intervals in closed form, and the measured-run pairs they are built from."""

from __future__ import annotations

import math
import statistics

import pytest

from sim.catalog import load_cluster, load_model
from sim.errors import ConfigError
from sim.predict import predict
from sim.specs import ParallelPlan
from sim.stacks import load_stack
from sim.uncertainty import (
    T90,
    interval,
    measured_run_pairs,
    prediction_interval,
    stack_family,
)

RS = [0.05, -0.02, 0.01, 0.08, -0.03]


def test_interval_is_the_student_t_prediction_interval_in_log_space() -> None:
    iv = interval(1000.0, RS, stack="torchtitan")
    n, mean, sd = len(RS), statistics.fmean(RS), statistics.stdev(RS)
    half = T90[n - 2] * sd * math.sqrt(1 + 1 / n)
    centre = 1000.0 * math.exp(mean)
    assert iv.point == 1000.0  # never shifted by the mean residual
    assert iv.p10 == pytest.approx(centre * math.exp(-half), rel=1e-12)
    assert iv.p90 == pytest.approx(centre * math.exp(half), rel=1e-12)
    assert (iv.n_runs, iv.stack, iv.validation_sd, iv.calibration_sd) == (n, "torchtitan", sd, 0.0)
    assert iv.to_dict() == {"p10_tokens_per_s_per_gpu": iv.p10, "prediction_tokens_per_s_per_gpu": 1000.0,
                            "p90_tokens_per_s_per_gpu": iv.p90, "validation_runs": n, "stack": "torchtitan",
                            "calibration_log_sd": 0.0, "validation_log_sd": sd, "mean_log_residual": mean,
                            "left_out_run": None}
    assert iv.contains(iv.p10) and iv.contains(iv.p90) and not iv.contains(iv.p90 * 1.0001)


def test_a_biased_stack_widens_the_interval_to_the_prediction_never_moves_it() -> None:
    up = interval(1000.0, [0.30, 0.25, 0.35])
    assert up.point == 1000.0 and up.p10 == 1000.0 and up.p90 > 1000.0 * math.exp(0.35)
    down = interval(1000.0, [-0.30, -0.25, -0.35])
    assert down.p90 == 1000.0 and down.p10 < 1000.0 * math.exp(-0.35)


def test_calibration_spread_adds_in_quadrature() -> None:
    base, wide = interval(1000.0, RS), interval(1000.0, RS, calibration_sd=0.04)
    n, sd, mean = len(RS), statistics.stdev(RS), statistics.fmean(RS)
    half = math.hypot(T90[n - 2] * sd * math.sqrt(1 + 1 / n), 1.2816 * 0.04)
    assert wide.p90 / (1000.0 * math.exp(mean)) == pytest.approx(math.exp(half), rel=1e-12)
    assert wide.point == base.point and wide.p90 > base.p90


def test_few_runs_one_run_and_none() -> None:
    one = interval(500.0, [0.1])
    assert one.point == 500.0 and one.p10 == pytest.approx(500.0 * math.exp(0.1 - 0.1 * T90[0]))
    assert one.p90 / (500.0 * math.exp(0.1)) == pytest.approx(math.exp(0.1 * T90[0]))
    assert (one.n_runs, one.validation_sd) == (1, 0.0)
    none = interval(500.0, [])
    assert (none.p10, none.point, none.p90) == (0.0, 500.0, math.inf)
    calibrated = interval(500.0, [], calibration_sd=0.05)
    assert calibrated.p90 / calibrated.point == pytest.approx(math.exp(1.2816 * 0.05))
    assert interval(500.0, [float("nan"), 0.1]).n_runs == 1  # non-finite residuals are dropped
    many = interval(500.0, [0.01 * (i % 7) for i in range(40)])
    rs = [0.01 * (i % 7) for i in range(40)]
    half = 1.2816 * statistics.stdev(rs) * math.sqrt(1 + 1 / 40)  # beyond 30 dof: the normal quantile
    assert many.p90 / (500.0 * math.exp(statistics.fmean(rs))) == pytest.approx(math.exp(half), rel=1e-12)
    with pytest.raises(ConfigError, match="positive"):
        interval(0.0, RS)


def test_stack_family_and_prediction_interval_use_the_framework() -> None:
    assert stack_family("megatron-26.04") == "megatron" and stack_family("torchtitan") == "torchtitan"
    pred = predict(load_model("debug"), load_cluster("hgx-b200", n_gpus=8),
                   ParallelPlan(ep=4, dp_shard=8, global_batch=16, seq_len=512), stack=load_stack("megatron"))
    iv = prediction_interval(pred)
    assert iv is not None and iv.stack == "megatron" and iv.n_runs >= 2 and iv.p10 <= iv.point < iv.p90
    assert iv.point == pred.tokens_per_s_per_gpu and iv.left_out == ""


RUN = """
[[run]]
id = "{rid}"
{extra}
model = "debug"
gpu = "b200"
gpus = 8
cluster = "hgx-b200"
stack = "torchtitan"
release = "x"
measured_tokens_per_s_per_gpu = 1234.5
source = "a test"
[run.plan]
ep = 4
seq_len = 512
global_batch = 16
"""


def test_measured_run_pairs_predict_held_out_runs_and_skip_the_rest(tmp_path) -> None:
    f = tmp_path / "runs.toml"
    f.write_text(RUN.format(rid="held", extra="") + RUN.format(rid="fit", extra="fitted = true")
                 + RUN.format(rid="bad", extra="").replace('model = "debug"', 'model = "no-such-model"'))
    pairs, skipped = measured_run_pairs(f)
    want = predict(load_model("debug"), load_cluster("hgx-b200", n_gpus=8),
                   ParallelPlan(ep=4, dp_shard=8, global_batch=16, seq_len=512), stack=load_stack("torchtitan"))
    assert pairs == [("held", "torchtitan", pytest.approx(want.tokens_per_s_per_gpu, rel=1e-12), 1234.5)]
    assert len(skipped) == 2 and skipped[0].startswith("fit: fitted") and skipped[1].startswith("bad: ")
    f.write_text("[[run]\n")
    with pytest.raises(ConfigError, match="malformed TOML"):
        measured_run_pairs(f)


def test_residuals_skip_the_excluded_run_and_non_positive_numbers() -> None:
    from sim.uncertainty import residuals_by_stack

    pairs = [("a", "s", 100.0, 110.0), ("b", "s", 0.0, 100.0), ("c", "s", 100.0, 0.0), ("d", "t", 50.0, 25.0)]
    assert residuals_by_stack(pairs) == {"s": [pytest.approx(math.log(1.1))], "t": [pytest.approx(math.log(0.5))]}
    assert residuals_by_stack(pairs, exclude="a") == {"t": [pytest.approx(math.log(0.5))]}


def test_measured_run_pairs_use_the_given_costs(tmp_path) -> None:
    import dataclasses

    from sim.catalog import load_gpu
    from sim.costs import default_costs

    f = tmp_path / "runs.toml"
    f.write_text(RUN.format(rid="held", extra=""))
    base = measured_run_pairs(f)[0][0][2]
    slow = dataclasses.replace(default_costs(load_gpu("b200")), attn_fwd_eff=0.05, attn_bwd_eff=0.05)
    assert measured_run_pairs(f, slow)[0][0][2] < base


def test_calibration_sd_is_the_median_table_spread_without_op_lookups() -> None:
    from sim.uncertainty import calibration_sd

    z = 1.2816
    tables = {"gemm_eff.bf16": {"p10_rel": -0.1, "p90_rel": 0.1, "n": 5},
              "grouped_gemm_eff.bf16": {"p10_rel": -0.3, "p90_rel": 0.3, "n": 5},
              "attn_fwd_eff": {"p10_rel": -0.05, "p90_rel": 0.05, "n": 3},
              "op_seconds.moe.permute": {"p10_rel": -2.0, "p90_rel": 2.0, "n": 9},  # op lookups: not a fitted table
              "comm_rates.x": {"p10_rel": -5.0, "p90_rel": 5.0, "n": 1}}  # one sample: no spread
    assert calibration_sd(tables) == pytest.approx(0.2 / (2 * z))  # median of 0.2, 0.6, 0.1 widths
    assert calibration_sd({}) == 0.0
    assert calibration_sd({"op_seconds.a": {"p10_rel": -1, "p90_rel": 1, "n": 4}}) == 0.0


def test_loo_coverage_counts_per_stack_and_overall() -> None:
    from sim.uncertainty import loo_coverage

    pairs = [("a", "s", 100.0, 101.0), ("b", "s", 100.0, 99.0), ("c", "s", 100.0, 100.5), ("d", "s", 100.0, 150.0),
             ("e", "t", 10.0, 10.0)]
    out = loo_coverage(pairs)
    assert out["runs"] == 5 and out["nominal"] == 0.8
    assert out["coverage"] == pytest.approx(out["covered"] / 5)
    assert out["per_stack"]["t"] == {"runs": 1, "covered": 1}  # no other run of its stack: unbounded interval
    assert out["per_stack"]["s"]["runs"] == 4
    rows = {r["id"]: r for r in out["rows"]}
    assert rows["d"]["covered"] is False and rows["a"]["others"] == 3
    assert loo_coverage([])["coverage"] == 0.0


def test_a_distance_interval_names_its_distance_and_evidence_formats_in_one_line() -> None:
    from sim.uncertainty import distance_interval, format_evidence

    iv = distance_interval(100.0, "new group", [], [], [0.1, -0.1, 0.05])
    assert iv.to_dict()["distance"] == "new group" and iv.evidence is None
    # a measured group without a residual of its own falls back to the leave-one-group-out spread
    same = distance_interval(100.0, "measured group", [], [0.0, 0.01], [0.1, -0.1, 0.05])
    assert (same.p10, same.p90) == (iv.p10, iv.p90)
    line = format_evidence({"distance": "beyond the envelope", "group": "g x s", "nearest": [{"id": "a", "error": None}],
                            "note": "outside the validated envelope: x"})
    assert line == "evidence: beyond the envelope (g x s); nearest measured: a (LOGO n/a); note: outside the validated envelope: x"
