"""The op lists of sim.workload, checked by their meaning: which ops follow the routed tokens, which recompute
module each belongs to, what a step adds, and the byte counts of the memory-bound ops."""

from __future__ import annotations

import dataclasses

import pytest

from sim import ops
from sim.catalog import load_model
from sim.specs import ParallelPlan
from sim.stacks import load_stack
from sim.workload import Workload

BF16 = 2.0


def _wl(model: str = "deepseek-v3-671b", stack: str = "megatron", **plan) -> Workload:
    kw = dict(ep=8, dp_shard=8, global_batch=8, seq_len=4096, precision="mxfp8", ep_backend="nccl", ac="selective")
    return Workload(load_model(model), ParallelPlan(**{**kw, **plan}), load_stack(stack))


@pytest.mark.parametrize("stack", ["megatron", "torchtitan", "deepseek"])
@pytest.mark.parametrize("phase", ["fwd", "bwd"])
def test_only_the_ops_on_routed_tokens_scale_with_the_ranks_load(stack: str, phase: str) -> None:
    """Between the dispatch and the combine (backward: the combine's gradient and the dispatch's) every op works
    on the tokens routed to this rank, so it scales with its load factor; outside, nothing does."""
    seq = _wl(stack=stack, precision="mxfp8" if stack != "deepseek" else "fp8-blockwise").layer_ops("moe", phase)
    names = [op.name for op in seq]
    first, second = ((names.index(ops.MOE_DISPATCH), names.index(ops.MOE_COMBINE)) if phase == "fwd"
                     else (names.index(ops.MOE_COMBINE), names.index(ops.MOE_DISPATCH)))
    m = load_model("deepseek-v3-671b")
    weights = m.n_routed_experts // 8 * m.dim * m.moe_inter_dim  # TorchAO quantises the weights per call
    for i, op in enumerate(seq):
        weight_quant = op.kind in ("quant", "rearrange") and op.elems == weights
        routed = first < i < second and op.name != ops.MOE_SHARED_EXPERT and not weight_quant
        assert op.load_scaled == routed, (i, op.name, op.kind)


def test_recompute_modules_of_the_ops() -> None:
    seq = _wl().layer_ops("moe", "fwd")
    modules = {(op.name, op.kind): op.module for op in seq}
    assert modules[(ops.A2A_HOST_SYNC, "host_sync")] == "moe"
    assert modules[(ops.MOE_EXPERT_GEMM_GATE_UP, "mem")] == "moe_act"  # SwiGLU of the routed experts
    assert modules[(ops.ATTN_CORE, "attn")] == "core_attn"
    assert {"layernorm", "mla_up_proj"} <= {op.module for op in seq if op.name == ops.ATTN_Q_PROJ and op.kind == "mem"}
    assert {op.module for op in seq if op.name == ops.MOE_PERMUTE} == {"moe"}
    assert {op.module for op in seq if op.name == ops.MOE_COMBINE} == {"moe"}
    dense = _wl().layer_ops("dense", "fwd")
    assert {op.module for op in dense if op.name == ops.MLP_DENSE} == {"mlp"}


def test_dense_mlp_activation_bytes_closed_form() -> None:
    wl = _wl()
    m, tokens = load_model("deepseek-v3-671b"), 4096
    mem = [op for op in wl.layer_ops("dense", "fwd") if op.name == ops.MLP_DENSE and op.kind == "mem"]
    assert 3 * BF16 * tokens * m.dense_inter_dim in [op.nbytes for op in mem]  # the SwiGLU: gate, up in; out


def test_quantised_linears_carry_their_gemms_useful_share() -> None:
    wl = _wl(stack="megatron", precision="fp8-blockwise", tp=2, ep=4)
    seq = wl.layer_ops("moe", "fwd")
    for i, op in enumerate(seq):
        if op.kind == "quant" and i + 1 < len(seq) and seq[i + 1].kind == "gemm" and seq[i + 1].name == op.name:
            assert op.useful_frac == seq[i + 1].useful_frac, op.name


def test_step_ops_quantise_expert_weights_only_when_experts_run_in_low_precision() -> None:
    te = dataclasses.replace(load_stack("megatron"), name="te")
    low = Workload(load_model("deepseek-v3-16b"), ParallelPlan(ep=8, dp_shard=8, global_batch=8, precision="mxfp8"), te)
    bf16 = Workload(load_model("deepseek-v3-16b"), ParallelPlan(ep=8, dp_shard=8, global_batch=8, precision="bf16"), te)
    assert bf16.step_ops() == []
    assert low.step_ops() and all(op.elems > 0 or op.nbytes > 0 for op in low.step_ops())


def test_fp8_activation_cache_keeps_a_second_copy() -> None:
    cached = dataclasses.replace(load_stack("megatron"), fp8_act_cache=True)
    plain = dataclasses.replace(load_stack("megatron"), fp8_act_cache=False)
    model = load_model("deepseek-v3-16b")
    plan = ParallelPlan(ep=8, dp_shard=8, global_batch=8, precision="fp8-blockwise")
    q = lambda st: sum(op.nbytes + op.elems for op in Workload(model, plan, st).layer_ops("moe", "fwd")  # noqa: E731
                       if op.name == ops.MOE_QUANTIZE or (op.kind in ("quant", "mem") and "proj" in op.name))
    assert q(cached) > q(plain)
