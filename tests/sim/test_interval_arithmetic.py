"""The interval arithmetic of sim.uncertainty, value by value on small inputs worked out by hand: Student-t
half-widths, the calibration spread in quadrature, the distance classes at their boundaries, the nearest runs'
order, what a JSON interval holds (issue 30 item 5: tests per behaviour)."""

from __future__ import annotations

import math
import statistics
from types import SimpleNamespace

import pytest

from sim.errors import ConfigError
from sim.uncertainty import (
    BEYOND_FACTOR,
    DISTANCES,
    GROUP_FACTOR,
    SCALE_SPAN,
    T90,
    calibration_sd,
    classify,
    distance_interval,
    interval,
    nearest_runs,
)

Z90 = 1.2816


def test_the_t_table_is_the_one_sided_90_percent_quantile() -> None:
    assert T90[:4] == (3.078, 1.886, 1.638, 1.533)
    assert all(a > b for a, b in zip(T90, T90[1:]))  # falls toward the normal's 1.2816
    assert T90[-1] > Z90


def test_interval_of_three_residuals_by_hand() -> None:
    rs = [0.1, -0.1, 0.05]
    iv = interval(200.0, rs)
    mean, sd = statistics.fmean(rs), statistics.stdev(rs)
    half = 1.886 * sd * math.sqrt(1 + 1 / 3)  # t(0.90, df=2)
    assert (iv.n_runs, iv.validation_sd, iv.mean_log_residual) == (3, pytest.approx(sd), pytest.approx(mean))
    assert iv.p10 == pytest.approx(200.0 * math.exp(mean - half))
    assert iv.p90 == pytest.approx(200.0 * math.exp(mean + half))
    assert iv.point == 200.0


def test_the_calibration_spread_adds_in_quadrature() -> None:
    rs = [0.1, -0.1, 0.05]
    val = 1.886 * statistics.stdev(rs) * math.sqrt(1 + 1 / 3)
    iv = interval(200.0, rs, calibration_sd=0.1)
    half = math.sqrt(val ** 2 + (Z90 * 0.1) ** 2)
    assert iv.p90 == pytest.approx(200.0 * math.exp(statistics.fmean(rs) + half))
    assert iv.calibration_sd == 0.1


def test_one_residual_is_widened_as_a_one_degree_t() -> None:
    iv = interval(100.0, [0.2])
    assert iv.n_runs == 1 and iv.validation_sd == 0.0
    assert iv.p90 == pytest.approx(100.0 * math.exp(0.2 + 0.2 * 3.078))
    assert iv.p10 == pytest.approx(min(100.0, 100.0 * math.exp(0.2 - 0.2 * 3.078)))


def test_no_residuals_and_no_calibration_spread_is_unbounded() -> None:
    iv = interval(100.0, [])
    assert (iv.p10, iv.p90) == (0.0, math.inf)
    assert iv.to_dict()["p90_tokens_per_s_per_gpu"] is None and iv.to_dict()["p10_tokens_per_s_per_gpu"] == 0.0
    bounded = interval(100.0, [], calibration_sd=0.1)
    assert bounded.p90 == pytest.approx(100.0 * math.exp(Z90 * 0.1))
    assert bounded.p10 == pytest.approx(100.0 * math.exp(-Z90 * 0.1))


def test_the_interval_always_holds_its_prediction() -> None:
    iv = interval(100.0, [0.5, 0.6, 0.55])  # every run measured ~70% above its prediction
    assert iv.p10 == 100.0 and iv.p90 > 100.0 * math.exp(0.55)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_a_non_positive_or_non_finite_prediction_is_refused(bad: float) -> None:
    with pytest.raises(ConfigError, match="predicted tokens/s must be positive"):
        interval(bad, [0.1, 0.2])


def test_non_finite_residuals_are_left_out() -> None:
    assert interval(100.0, [0.1, -0.1, math.nan, math.inf]).n_runs == 2


def test_to_dict_keys_and_values() -> None:
    iv = interval(100.0, [0.1, -0.1, 0.05], stack="megatron", left_out="run-a")
    d = iv.to_dict()
    assert d["prediction_tokens_per_s_per_gpu"] == 100.0 and d["validation_runs"] == 3
    assert d["stack"] == "megatron" and d["left_out_run"] == "run-a" and "distance" not in d
    assert d["p10_tokens_per_s_per_gpu"] == iv.p10 and d["p90_tokens_per_s_per_gpu"] == iv.p90
    assert interval(100.0, [0.1, 0.2]).to_dict()["left_out_run"] is None


# --- calibration spread from residual tables ---------------------------------------------------------------------


def test_calibration_sd_is_the_median_table_width_over_2_z90() -> None:
    tables = {"a": {"p10_rel": -0.1, "p90_rel": 0.1, "n": 5}, "b": {"p10_rel": -0.3, "p90_rel": 0.3, "n": 3},
              "c": {"p10_rel": -0.2, "p90_rel": 0.2, "n": 2},
              "op_seconds.x": {"p10_rel": -9.0, "p90_rel": 9.0, "n": 50},  # op lookups are not fitted tables
              "d": {"p10_rel": -5.0, "p90_rel": 5.0, "n": 1}}  # one sample has no spread
    assert calibration_sd(tables) == pytest.approx(0.4 / (2 * Z90))
    assert calibration_sd({}) == 0.0


# --- distances ---------------------------------------------------------------------------------------------------


def _row(**kw: object) -> SimpleNamespace:
    base = {"cluster": "hgx-b200", "family": "megatron", "gpus": 256, "ep_backend": "nccl", "precision": "mxfp8",
            "model": "m", "id": "r", "logo_error": None}
    return SimpleNamespace(**{**base, **kw})


@pytest.mark.parametrize(("n_gpus", "distance"), [(128, DISTANCES[0]), (512, DISTANCES[0]), (127, DISTANCES[1]),
                                                  (513, DISTANCES[2]), (64, DISTANCES[1])])
def test_scale_boundaries_are_inclusive_at_2x(n_gpus: int, distance: str) -> None:
    assert SCALE_SPAN == 2.0
    assert classify([_row()], "hgx-b200", "megatron", n_gpus, "nccl", "mxfp8").distance == distance


def test_a_backend_or_precision_never_measured_on_the_class_is_beyond() -> None:
    rows = [_row(), _row(cluster="gb200-nvl72", ep_backend="hybridep", precision="bf16")]
    place = classify(rows, "hgx-b200", "megatron", 256, "hybridep", "bf16")
    assert place.distance == DISTANCES[2]
    assert place.reasons == ("EP backend hybridep was never measured on hgx-b200 (measured: nccl)",
                             "precision bf16 was never measured on hgx-b200 (measured: mxfp8)")


def test_a_class_never_measured_is_a_new_group_compared_with_every_run() -> None:
    place = classify([_row()], "gb300-nvl72", "megatron", 256, "nccl", "mxfp8")
    assert place.distance == DISTANCES[1] and place.reasons == ("no run was measured on gb300-nvl72",)
    far = classify([_row()], "gb300-nvl72", "megatron", 1024, "nccl", "mxfp8")
    assert far.reasons == ("1024 GPUs is beyond 2x the largest count measured on any measured class (256)",)


def test_a_new_stack_on_a_measured_class_is_a_new_group() -> None:
    place = classify([_row()], "hgx-b200", "torchtitan", 256, "nccl", "mxfp8")
    assert place.reasons == ("no torchtitan run was measured on hgx-b200",)
    between = classify([_row(gpus=8), _row(gpus=256)], "hgx-b200", "megatron", 32, "nccl", "mxfp8")
    assert between.reasons == ("32 GPUs is outside [0.5x, 2x] of the hgx-b200 x megatron runs' counts (8, 256)",)


def test_new_group_and_beyond_widen_the_logo_half_width_by_their_factors() -> None:
    logo = [0.1, -0.1, 0.05]
    bare = interval(100.0, logo)
    new = distance_interval(100.0, DISTANCES[1], [], [], logo)
    beyond = distance_interval(100.0, DISTANCES[2], [], [], logo)
    centre = 100.0 * math.exp(statistics.fmean(logo))
    half = max(math.log(bare.p90 / centre), math.log(centre / bare.p10))
    assert new.p90 == pytest.approx(centre * math.exp(half * GROUP_FACTOR)) and new.widen == GROUP_FACTOR
    assert beyond.p90 == pytest.approx(centre * math.exp(half * BEYOND_FACTOR)) and beyond.widen == BEYOND_FACTOR
    assert distance_interval(100.0, DISTANCES[1], [], [], logo, widen=1.0).p90 == pytest.approx(bare.p90)
    assert (new.distance, beyond.distance) == (DISTANCES[1], DISTANCES[2])


def test_measured_group_pools_its_spread_with_every_run() -> None:
    group, pool = [0.0, 0.02], [0.0, 0.02, -0.03, 0.01]
    iv = distance_interval(100.0, DISTANCES[0], group, pool, [0.5, -0.5, 0.4])
    ss = sum((x - 0.01) ** 2 for x in group) + sum((x - statistics.fmean(pool)) ** 2 for x in pool)
    sd = math.sqrt(ss / 4)  # df = (2 - 1) + (4 - 1)
    half = 1.533 * sd * math.sqrt(1 + 1 / 2) * GROUP_FACTOR  # t(0.90, df=4), widened as a new run needs
    assert iv.p90 == pytest.approx(100.0 * math.exp(0.01 + half)) and iv.widen == GROUP_FACTOR
    assert iv.validation_sd == pytest.approx(sd) and iv.n_runs == 4 and iv.mean_log_residual == pytest.approx(0.01)


def test_a_measured_group_without_residuals_falls_back_to_the_new_group_interval() -> None:
    logo = [0.1, -0.1, 0.05]
    assert distance_interval(100.0, DISTANCES[0], [], [], logo).p90 == \
        pytest.approx(distance_interval(100.0, DISTANCES[1], [], [], logo).p90)


# --- nearest runs ------------------------------------------------------------------------------------------------


def test_nearest_runs_rank_class_then_stack_then_model_then_scale() -> None:
    """Score: 2 for another class, 1.5 another stack, 1 another model, 0.5 per doubling of the GPU count."""
    rows = [_row(id="other-class", cluster="gb200-nvl72"), _row(id="other-stack", family="torchtitan"),
            _row(id="2x-scale", gpus=512), _row(id="other-model", model="x"), _row(id="same", logo_error=0.12345)]
    out = nearest_runs(rows, "hgx-b200", "megatron", 256, "m", k=5)
    assert [r["id"] for r in out] == ["same", "2x-scale", "other-model", "other-stack", "other-class"]
    assert out[0]["error"] == 0.1235 and out[1]["error"] is None
    assert [r["id"] for r in nearest_runs(rows, "hgx-b200", "megatron", 256, "m", k=2)] == ["same", "2x-scale"]


def test_the_plan_s_own_runs_come_first_among_equals() -> None:
    rows = [_row(id="a"), _row(id="b")]
    assert [r["id"] for r in nearest_runs(rows, "hgx-b200", "megatron", 256, "m", own=("b",))] == ["b", "a"]
