"""Gaps the seed-23 mutation sample of sim/ found (docs/mutation.md, issue 16): one test per surviving mutant
that a real input can observe, each checking the behaviour from its meaning, not the implementation's formula."""

from __future__ import annotations

import dataclasses
import json

import pytest

from sim.catalog import load_cluster, load_gpu, load_model
from sim.errors import ConfigError, PlanError
from sim.predict import validate_plan
from sim.specs import ParallelPlan
from sim.stacks import load_stack


def test_fsdp_transient_expert_weights_are_split_over_ep_times_etp() -> None:
    """(sim.accounting memory_per_gpu) Expert tensor parallelism shards each expert etp ways on top of the ep
    split: the unsharded expert weights FSDP gathers shrink with etp, and ep 2 x etp 2 holds as much as ep 4."""
    from sim.accounting import memory_per_gpu

    model, gpu = load_model("deepseek-v3-16b"), load_gpu("h100")

    def transient(**kw: int) -> float:
        plan = ParallelPlan(**{"tp": 2, "dp_shard": 8, "global_batch": 8, "seq_len": 1024, **kw})
        return memory_per_gpu(model, plan, gpu).transient_bytes

    assert transient(ep=4, etp=2) < transient(ep=4, etp=1)
    assert transient(ep=2, etp=2) == pytest.approx(transient(ep=4, etp=1), rel=1e-12)


def test_a_calibration_attention_curve_sets_the_forward_efficiency() -> None:
    """(sim.calibration to_cost_model) Without a scalar attn_fwd_eff, the cost model's forward attention
    efficiency is the calibration's measured attn_eff.fwd at the largest size profiled."""
    from sim.calibration import parse_calibration, to_cost_model

    doc = {"schema": "moesim.calibration", "version": 2, "name": "t", "gpu": "h800",
           "provenance": {"method": "test", "sources": ["x"]},
           "attn_eff": {"fwd": {"sizes": [1e9, 1e12], "values": [0.05, 0.123]},
                        "bwd": {"sizes": [1e9, 1e12], "values": [0.04, 0.0987]}}}
    costs = to_cost_model(parse_calibration(json.dumps(doc), "cal.json"))
    assert costs.attn_fwd_eff == pytest.approx(0.123)
    assert costs.attn_bwd_eff == pytest.approx(0.0987)


def test_a_bad_quantize_weights_choice_is_named() -> None:
    """(sim.stacks StackProfile) The message names the field the user got wrong."""
    with pytest.raises(ConfigError, match=r"quantize_weights must be one of per_call, per_step; got 'sometimes'"):
        dataclasses.replace(load_stack("torchtitan"), quantize_weights="sometimes")


def test_a_step_of_exactly_the_token_limit_is_allowed() -> None:
    """(sim.specs ParallelPlan) The limit is on tokens per step that *exceed* MAX_TOKENS_PER_STEP."""
    from sim.limits import MAX_TOKENS_PER_STEP

    plan = ParallelPlan(seq_len=1 << 24, global_batch=MAX_TOKENS_PER_STEP // (1 << 24), micro_batch=1 << 16)
    assert plan.global_batch * plan.seq_len == MAX_TOKENS_PER_STEP
    with pytest.raises(ConfigError, match="tokens per step exceeds"):
        ParallelPlan(seq_len=1 << 24, global_batch=2 * plan.global_batch, micro_batch=1 << 16)


def test_torchao_fp8_linear_backward_quantises_grad_input_and_weight() -> None:
    """(sim.workload _backward) TorchAO (torchtitan: no fused quantisation, no FP8 activation cache, weights
    quantised per call) casts, in the backward of an FP8 linear, grad_out (rows x n_out) and also the saved
    input (rows x k_in) and the weight (k_in x n_out) again: at least all three tensors' elements."""
    from sim.workload import Workload

    stack = load_stack("torchtitan")
    assert not stack.fused_act_quant and not stack.fp8_act_cache and stack.quantize_weights == "per_call"
    wl = Workload(load_model("deepseek-v3-16b"),
                  ParallelPlan(ep=8, dp_shard=8, global_batch=8, seq_len=4096, precision="fp8-current"), stack)
    fwd = [op for op in wl.layer_ops("dense", "fwd") if op.kind == "gemm" and op.dtype != "bf16"]
    assert fwd
    bwd = wl.layer_ops("dense", "bwd")
    for name in {op.name for op in fwd}:
        need = sum(op.rows * op.n_out + op.rows * op.k_in + op.k_in * op.n_out for op in fwd if op.name == name)
        quantised = sum(op.elems for op in bwd if op.kind == "quant" and op.backward and op.name == name)
        assert quantised >= need * (1 - 1e-12), name


def test_mxfp8_grouped_needs_block_scaled_fp8_hardware() -> None:
    """(sim.predict validate_plan) Hopper has no MXFP8 tensor cores: MXFP8 grouped experts are refused there."""
    assert not load_gpu("h100").mxfp8
    plan = ParallelPlan(ep=8, dp_shard=8, global_batch=8, precision="mxfp8-grouped")
    with pytest.raises(PlanError, match="precision 'mxfp8-grouped' needs block-scaled FP8 tensor cores"):
        validate_plan(load_model("deepseek-v3-16b"), load_cluster("hgx-h100", n_gpus=8), plan)


def test_ep_overlap_needs_at_least_one_moe_layer_and_one_is_enough() -> None:
    """(sim.predict validate_plan) Combined 1F1B overlaps the MoE all-to-alls: a model without MoE layers is
    refused, a model with a single MoE layer is not."""
    base = load_model("debug")
    cluster, stack = load_cluster("hgx-b200", n_gpus=8), load_stack("megatron")
    plan = ParallelPlan(ep=4, dp_shard=8, global_batch=8, seq_len=256, ep_overlap=True)
    one = dataclasses.replace(base, n_dense_layers=base.n_layers - 1)
    assert one.n_moe_layers == 1
    validate_plan(one, cluster, plan, stack)
    dense = dataclasses.replace(base, n_dense_layers=base.n_layers)
    assert dense.n_moe_layers == 0
    with pytest.raises(PlanError, match="ep_overlap needs MoE layers"):
        validate_plan(dense, cluster, plan, stack)
