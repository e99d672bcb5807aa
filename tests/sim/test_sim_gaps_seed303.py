"""Gaps the seed-303 mutation sample of sim/ found (docs/mutation.md): one test per surviving mutant that a
real input can observe, each checking the behaviour from its meaning, not the implementation's formula."""

from __future__ import annotations

import dataclasses

import pytest

from sim import ops
from sim.catalog import load_cluster, load_gpu, load_model
from sim.comm.costs import CommCosts
from sim.comm.fabric import interpolate
from sim.costs import default_costs
from sim.errors import ConfigError
from sim.predict import predict
from sim.specs import ParallelPlan
from sim.stacks import StackProfile, load_stack
from sim.workload import Workload


def test_moving_no_bytes_costs_no_time_not_even_a_launch() -> None:
    """(sim.costs CostModel.memory_time) An op with nothing to move is not launched: zero seconds, whatever
    the per-kernel overhead."""
    costs = default_costs(load_gpu("b200"))
    assert costs.memory_time(0.0, 8e12, kernels=4, overhead_s=5e-6) == 0.0
    assert costs.memory_time(1.0, 8e12, kernels=4, overhead_s=5e-6) >= 4 * 5e-6


@pytest.mark.parametrize("field, value, needle", [
    ("deepep_dispatch_fp8_bw", (246e9, -1.0, 443e9, 554e9), "non-negative"),
    ("deepep_combine_bw", (302e9, 0.0, 524e9, 586e9), "must be positive"),
])
def test_every_entry_of_a_bandwidth_table_is_checked(field: str, value: tuple[float, ...], needle: str) -> None:
    """(sim.comm.costs CommCosts) A table of rates is checked entry by entry, not only scalar fields: one
    bad entry is refused naming the field."""
    with pytest.raises(ConfigError) as err:
        dataclasses.replace(CommCosts.default(), **{field: value})
    assert field in str(err.value) and needle in str(err.value)


def test_a_log_scale_table_stays_flat_below_its_first_point() -> None:
    """(sim.comm.fabric interpolate) On a log axis (SM counts) a value below the first point takes the first
    point's value; only a linear axis scales proportionally toward zero."""
    assert interpolate(8.0, [16.0, 32.0], [100.0, 200.0], log_x=True) == 100.0
    assert interpolate(8.0, [16.0, 32.0], [100.0, 200.0]) == pytest.approx(50.0)


def test_a_calibrations_host_sync_gap_reaches_its_stack() -> None:
    """(sim.calibration calibration_stack) The host-sync stall a calibration measured is the one its stack
    uses, not the default."""
    import json

    from sim.calibration import calibration_stack, parse_calibration

    doc = {"schema": "moesim.calibration", "version": 2, "name": "t", "gpu": "h800",
           "provenance": {"method": "test", "sources": ["x"]}, "host_sync_s": 0.00123}
    stack = calibration_stack(parse_calibration(json.dumps(doc), "cal.json"))
    assert stack.host_sync_s == 0.00123 != StackProfile().host_sync_s


def test_a_boolean_saved_activation_width_is_refused() -> None:
    """(sim.stacks StackProfile) ``true`` is not a byte width: a boolean in saved_act_bytes is refused by
    name, as a number out of range is."""
    with pytest.raises(ConfigError, match="saved_act_bytes.moe_act"):
        StackProfile(saved_act_bytes={"moe_act": True})
    with pytest.raises(ConfigError, match="saved_act_bytes.moe_act"):
        StackProfile(saved_act_bytes={"moe_act": 8})
    assert StackProfile(saved_act_bytes={"moe_act": 1}).saved_act_bytes["moe_act"] == 1


def test_the_backward_casts_of_a_tp_replicated_projection_count_as_replicated_work() -> None:
    """(sim.workload Workload._backward) MLA's down-projections run on every TP rank: their backward FP8
    casts (one TorchAO pass, unfused) carry the same 1/tp useful share as their backward GEMMs."""
    plan = ParallelPlan(tp=2, dp_shard=4, ep=8, precision="fp8-current", seq_len=1024, global_batch=8)
    stack = load_stack("torchtitan")
    assert not stack.fused_act_quant
    wl = Workload(load_model("deepseek-v3-671b"), plan, stack)
    q = [o for o in wl.layer_ops("moe", "bwd") if o.name == ops.ATTN_Q_PROJ]
    replicated = [o for o in q if o.kind in ("quant", "gemm") and o.useful_frac != 1.0]
    assert [(o.kind, o.useful_frac) for o in replicated] == [("quant", 0.5), ("gemm", 0.5), ("gemm", 0.5)]


@pytest.mark.parametrize("schedule", ["dualpipe", "dualpipev"])
def test_deferred_weight_gradients_are_reported_as_such(schedule: str) -> None:
    """(sim.predict.breakdown) A zero-bubble schedule's deferred weight-gradient (W) actions are reported as
    ``compute.wgrad``, and the breakdown still sums to the step."""
    p = predict(load_model("debug"), load_cluster("hgx-b200", n_gpus=8),
                ParallelPlan(pp=2, ep=4, dp_shard=4, pp_schedule=schedule, global_batch=16, seq_len=512))
    assert p.breakdown["compute.wgrad"] > 0
    assert sum(p.breakdown.values()) == pytest.approx(p.step_time_s, rel=1e-9)
