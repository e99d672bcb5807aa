"""Behaviours of the simulator's inputs and intervals (issue 30 item 5): each dtype's GEMMs on their own curve, a
calibration applied to a stack that has its own per-architecture numbers, the interval file's contents and
refusals, the calibration's spread widening every interval, tensor parallelism against grouped-query heads, and
selective recompute of the shared expert."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from sim import interval_data
from sim.calibration import calibrated_inputs, load_calibration
from sim.catalog import load_gpu, load_model
from sim.costs import default_costs
from sim.errors import ConfigError, PlanError
from sim.specs import ParallelPlan
from sim.stacks import StackProfile, load_stack
from sim.uncertainty import DISTANCES, distance_interval, logo_interval_coverage
from sim.workload import Workload

# --- kernel costs ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gpu", ["h100", "b200"])
def test_every_dense_dtype_has_its_own_curve_and_is_timed_on_it(gpu: str) -> None:
    """BF16, FP8 and MXFP8 dense GEMMs each run at their own measured asymptote (Hopper: cuBLAS BF16 0.80, FP8
    maximum achievable matmul 0.709), not at another dtype's."""
    spec = load_gpu(gpu)
    costs = default_costs(spec)
    assert set(costs.gemm_eff) == {"bf16", "fp8", "fp8-blockwise", "mxfp8"}
    flops = 1e12
    for dtype, peak in (("bf16", spec.bf16_flops), ("fp8", spec.fp8_flops), ("mxfp8", spec.fp8_flops)):
        assert costs.gemm_time(flops, peak, dtype) == pytest.approx(flops / (peak * costs.gemm_eff[dtype](flops)))
    if gpu == "h100":
        assert costs.gemm_eff["bf16"](1e12) == pytest.approx(0.80)
        assert costs.gemm_eff["fp8"](1e12) == pytest.approx(1402.6 / 1979)


def test_a_calibration_keeps_a_stack_s_own_per_architecture_numbers() -> None:
    """The H800 trace's pass ratios multiply the stack's sm90 efficiencies; classes it does not measure keep the
    stack's own sm90 numbers (not the wildcard's)."""
    cal = load_calibration("h800-deepseek-trace")
    ratios = cal.tables["stack_efficiency"]["sm90"]
    stack = StackProfile(efficiency={"*": {"default": 0.5}, "sm90": {"default": 0.6, "mem": 0.3}})
    _, out = calibrated_inputs(cal, load_gpu("h800"), stack)
    assert out.eff("sm90", "mem") == pytest.approx(0.3)
    assert out.eff("sm90", "attn.fwd") == pytest.approx(0.6)
    for op_class, ratio in ratios.items():
        assert out.eff("sm90", op_class) == pytest.approx(0.6 * ratio)
    assert out.eff("sm100", "mem") == pytest.approx(0.5)  # another architecture is untouched


# --- the interval file -------------------------------------------------------------------------------------------


def test_the_interval_file_carries_each_run_s_residuals() -> None:
    """Every row of the written file holds log(measured / predicted), in sample and left out of its group."""
    data = interval_data.load_shipped()
    assert data is not None and data.runs
    rows = json.loads(interval_data.to_json(data))["runs"]
    assert len(rows) == len(data.runs)
    for raw, run in zip(rows, data.runs, strict=True):
        assert raw["id"] == run.id
        assert raw["log_residual"] == pytest.approx(
            math.log(run.measured_tokens_per_s_per_gpu / run.predicted_tokens_per_s_per_gpu))
        if run.logo_predicted_tokens_per_s_per_gpu is None:
            assert raw["logo_log_residual"] is None
        else:
            assert raw["logo_log_residual"] == pytest.approx(
                math.log(run.measured_tokens_per_s_per_gpu / run.logo_predicted_tokens_per_s_per_gpu))


def test_the_interval_file_round_trips(tmp_path: Path) -> None:
    data = interval_data.load_shipped()
    assert data is not None
    again = interval_data.load(interval_data.write(data, tmp_path / "iv.json"))
    assert again.runs == data.runs


@pytest.mark.parametrize(("text", "got"), [('{"schema_version": 99, "runs": []}', "99"),
                                          ('{"runs": []}', "None"), ("[1, 2]", "'list'")])
def test_a_file_of_another_schema_names_what_it_found(tmp_path: Path, text: str, got: str) -> None:
    path = tmp_path / "iv.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=rf"not an interval file of schema_version \d+ \(schema_version: {got}\)"):
        interval_data.load(path)


# --- intervals ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("distance", DISTANCES)
def test_the_calibration_s_spread_widens_every_interval(distance: str) -> None:
    """The calibration's own spread adds in quadrature at every distance from the evidence: a larger spread, a
    wider p10-p90 around the same prediction."""
    group, pool, logo = [0.0, 0.02, -0.01], [0.0, 0.02, -0.03, 0.01, 0.04], [0.1, -0.1, 0.05, -0.02]
    widths = []
    for sd in (0.0, 0.05, 0.2):
        iv = distance_interval(100.0, distance, group, pool, logo, calibration_sd=sd)
        assert iv.p10 <= 100.0 <= iv.p90
        widths.append(math.log(iv.p90 / iv.p10))
    assert widths[0] < widths[1] < widths[2]


def test_logo_coverage_passes_the_calibration_spread_to_every_interval() -> None:
    runs = [{"id": f"r{i}", "group": f"g{i % 3}", "predicted": 100.0, "measured": 100.0 + 3 * i} for i in range(9)]
    narrow = logo_interval_coverage(runs)
    wide = logo_interval_coverage(runs, calibration_sd=0.3)
    assert wide["median_p90_p10_ratio"] > narrow["median_p90_p10_ratio"]
    for a, b in zip(narrow["rows"], wide["rows"], strict=True):
        assert b["p10"] < a["p10"] and b["p90"] > a["p90"]


# --- plans against models ----------------------------------------------------------------------------------------


def test_tensor_parallelism_must_divide_or_be_divided_by_grouped_query_heads() -> None:
    """Grouped-query attention splits (or replicates) its KV heads over TP ranks, so TP and the KV head count
    must divide one another; multi-head latent attention has no KV heads to split."""
    gqa = dataclasses.replace(load_model("qwen3-30b-a3b"), n_heads=48, n_kv_heads=6)
    plan = ParallelPlan(tp=4, ep=1, dp_shard=1, global_batch=4, seq_len=256)
    with pytest.raises(PlanError, match=r"tp \(4\) and n_kv_heads \(6\) must divide one another"):
        plan.check_fits(gqa, 4)
    ParallelPlan(tp=2, ep=1, dp_shard=1, global_batch=4, seq_len=256).check_fits(gqa, 2)  # 6 % 2 == 0
    mla = dataclasses.replace(load_model("deepseek-v3-16b"), n_kv_heads=6)
    assert mla.attention != "gqa"
    plan.check_fits(mla, 4)


# --- selective recompute -----------------------------------------------------------------------------------------


def test_recomputing_the_shared_experts_re_runs_their_gemms_and_nothing_else() -> None:
    """Megatron's recompute_modules = [shared_experts] re-runs the shared expert's forward in the backward."""
    model = load_model("deepseek-v3-16b")
    stack = load_stack("megatron-26.04")
    plan = ParallelPlan(ep=4, dp_shard=8, global_batch=16, seq_len=512, ac="selective",
                        recompute_modules="shared_experts")
    wl = Workload(model, plan, stack.for_plan(plan))
    again = wl.layer_ops("moe", "recompute")
    assert again and {op.name for op in again} == {"moe.shared_expert"}
    shared_fwd = [op for op in wl.layer_ops("moe", "fwd") if op.name == "moe.shared_expert"]
    assert sum(op.flops for op in again) == pytest.approx(sum(op.flops for op in shared_fwd))
