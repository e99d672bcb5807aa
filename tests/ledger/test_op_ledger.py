"""Ledger tests, per op: FLOPs and bytes from the shapes, seconds from the op's curve (closed forms).

Each number is recomputed here from the model's shapes and the cost model's public curves, so a change
to one op's FLOPs, its dtype, its efficiency curve or its load scaling fails a test by name.
"""

from __future__ import annotations

import dataclasses

import pytest

from sim.catalog import load_cluster, load_model
from sim.costs import default_costs
from sim.predict import predict
from sim.routing import expert_load, rank_load_factors
from sim.specs import ParallelPlan
from sim.workload import Workload

MODEL = load_model("deepseek-v3-16b")
CLUSTER = load_cluster("hgx-b200", n_gpus=16)
GPU = CLUSTER.gpu
COSTS = default_costs(GPU)
PLAN = ParallelPlan(ep=8, dp_shard=16, seq_len=1024, global_batch=32)
T = PLAN.micro_batch * PLAN.seq_len  # tokens per microbatch per rank (tp = cp = 1)
D, F, E, K = MODEL.dim, MODEL.moe_inter_dim, MODEL.n_routed_experts, MODEL.top_k
from sim.stacks import StackProfile, load_stack  # noqa: E402

#: efficiency 1 and no launch gap: the op's time is the hardware curve's alone (stack factors: tests/sim/test_stacks.py)
_NEUTRAL = StackProfile(name="neutral", kernel_overhead_s=0.0)


def _ops(kind: str = "moe", phase: str = "fwd", plan: ParallelPlan = PLAN) -> dict[str, list]:
    out: dict[str, list] = {}
    for op in Workload(MODEL, plan).layer_ops(kind, phase):
        out.setdefault(op.name, []).append(op)
    return out


def test_token_counts() -> None:
    wl = Workload(MODEL, PLAN)
    assert wl.tokens == T
    assert wl.expert_rows == T * K  # every token copy lands on one of this rank's e = E / ep experts (balanced)
    assert wl.local_experts == E // PLAN.ep


def test_dense_gemm_flops_are_2_rows_k_n() -> None:
    for name in ("attn.q_proj", "attn.o_proj", "moe.shared_expert"):
        for op in (o for o in _ops()[name] if o.kind == "gemm"):
            assert op.flops == pytest.approx(2 * T * op.k_in * op.n_out), name


def test_attention_projection_shapes() -> None:
    q = _ops()["attn.q_proj"][0]
    assert (q.k_in, q.n_out) == (D, MODEL.n_heads * MODEL.qk_head_dim)  # no q compression in the 16B model
    o = _ops()["attn.o_proj"][0]
    assert (o.k_in, o.n_out) == (MODEL.n_heads * MODEL.v_head_dim, D)


def test_router_flops() -> None:
    router = next(o for o in _ops()["moe.router"] if o.kind == "gemm")
    assert router.flops == pytest.approx(2 * T * D * E)


def test_expert_gemm_flops_and_rows() -> None:
    gate_up = [o for o in _ops()["moe.expert_gemm.gate_up"] if o.kind == "grouped_gemm"]
    down = [o for o in _ops()["moe.expert_gemm.down"] if o.kind == "grouped_gemm"]
    assert len(gate_up) == 2 and len(down) == 1  # w1 and w3, then w2
    for op in gate_up + down:
        assert op.rows == T * K
        assert op.flops == pytest.approx(2 * T * K * D * F)
        assert op.load_scaled  # routed experts follow the EP rank's load


def test_shared_expert_flops() -> None:
    shared = [o for o in _ops()["moe.shared_expert"] if o.kind == "gemm"]
    total = sum(o.flops for o in shared)
    assert total == pytest.approx(3 * 2 * T * D * F * MODEL.n_shared_experts)


def test_dispatch_and_combine_bytes() -> None:
    ops = _ops()
    dispatch, combine = ops["moe.dispatch"][0], ops["moe.combine"][0]
    assert dispatch.nbytes == pytest.approx(T * K * D * 2)  # bf16 token copies
    assert combine.nbytes == pytest.approx(T * K * D * 2)


def test_backward_has_twice_the_forward_gemm_flops() -> None:
    fwd = sum(o.flops for o in Workload(MODEL, dataclasses.replace(PLAN, ac="none")).layer_ops("moe", "fwd")
              if o.kind in ("gemm", "grouped_gemm"))
    bwd = sum(o.flops for o in Workload(MODEL, dataclasses.replace(PLAN, ac="none")).layer_ops("moe", "bwd")
              if o.kind in ("gemm", "grouped_gemm"))
    assert bwd == pytest.approx(2 * fwd, rel=1e-9)


def test_gemm_seconds_from_the_curve() -> None:
    op = _ops()["attn.q_proj"][0]
    eff = COSTS.gemm_eff["bf16"](op.flops) * 1.0
    expected = op.flops / (GPU.bf16_flops * eff) + 0.0
    assert COSTS.op_seconds(op, GPU, _NEUTRAL) == pytest.approx(expected, rel=1e-12)


def test_grouped_gemm_seconds_follow_the_load_factor() -> None:
    op = next(o for o in _ops()["moe.expert_gemm.down"] if o.kind == "grouped_gemm")
    work = COSTS.grouped_work_scale(op.k_in, op.n_out)  # the expert's work per row over the curves' shape
    for factor in (0.5, 1.0, 2.7):
        eff = COSTS.grouped_gemm_eff["bf16"](op.rows * factor * work) * 1.0
        expected = op.flops * factor / (GPU.bf16_flops * eff) + 0.0
        assert COSTS.op_seconds(op, GPU, _NEUTRAL, load_factor=factor) == pytest.approx(expected, rel=1e-12)


def test_memory_op_seconds_from_bandwidth() -> None:
    op = next(o for o in _ops()["moe.permute"] if o.kind == "mem")
    expected = op.nbytes / (GPU.hbm_bw_bytes_per_s * COSTS.mem_bw_eff * 1.0) \
        + 0.0
    assert COSTS.op_seconds(op, GPU, _NEUTRAL) == pytest.approx(expected, rel=1e-12)


def test_mxfp8_quantize_ops_cost_what_they_move() -> None:
    plan = dataclasses.replace(PLAN, precision="mxfp8-grouped")
    quants = [o for o in Workload(MODEL, plan).layer_ops("moe", "fwd") if o.kind == "quant"]
    assert quants, "MXFP8 grouped GEMMs quantize their inputs"
    for op in quants:
        nbytes = op.elems * (2 + 1 + 1 / 32)
        expected = nbytes / (GPU.hbm_bw_bytes_per_s * COSTS.quantize_bw_eff * 1.0) \
            + 0.0
        assert COSTS.op_seconds(op, GPU, _NEUTRAL) == pytest.approx(expected, rel=1e-12)


def test_skewed_routing_slows_the_expert_gemms() -> None:
    """The busiest EP rank sets the pace: its expert GEMMs take longer by (about) its load factor."""
    skewed = dataclasses.replace(PLAN, routing="zipf:1.2")
    factor = rank_load_factors(expert_load("zipf:1.2", E, 0), PLAN.ep).max()
    no_launch = {"launch.compiled_s": 0.0}  # kernel time alone: a launch's fixed time does not grow with the rows
    balanced_s = predict(MODEL, CLUSTER, PLAN, params=no_launch).breakdown["compute.moe.expert_gemm"]
    skewed_s = predict(MODEL, CLUSTER, skewed, params=no_launch).breakdown["compute.moe.expert_gemm"]
    # More rows raise the grouped GEMM's efficiency (r / (r + r_half), sim.joint), so the time grows by less than
    # the factor: per expert it is rows + r_half, never less than the rows' share of the growth. r_half is
    # the one-kernel half-point on this chip (per SM) for this expert's work per row (K x N).
    from sim.joint import GROUPED_HALF_ROWS_ONE_KERNEL, half_rows_on, shipped_values

    rows = PLAN.ep * T * K / E  # rows per local expert, balanced
    values = shipped_values()
    costs = dataclasses.replace(COSTS, grouped_per_expert_share=values["grouped.per_expert_share"])
    half = half_rows_on(GPU, GROUPED_HALF_ROWS_ONE_KERNEL) / costs.grouped_work_scale(
        MODEL.dim, MODEL.moe_inter_dim)
    floor = (factor * rows + half) / (rows + half)
    assert floor * 0.98 < skewed_s / balanced_s <= factor * 1.001


def test_host_sync_counted_once_per_dispatch() -> None:
    """One host sync per MoE layer forward (the dispatch's count exchange), again in full recompute."""
    pred = predict(MODEL, CLUSTER, PLAN)
    per_layer = sum(o.kind == "host_sync" for o in Workload(MODEL, PLAN).layer_ops("moe", "fwd"))
    assert per_layer == 1
    runs = 2 if PLAN.ac == "full" else 1  # forward, then the recompute in backward
    expected = runs * MODEL.n_moe_layers * PLAN.n_microbatches * load_stack('torchtitan').host_sync_s
    assert pred.breakdown["host_sync"] == pytest.approx(expected, rel=1e-9)


def test_mxfp8_curve_reproduces_the_published_fwd_bwd_speedups() -> None:
    """The MXFP8 grouped-GEMM curves, with their quantize and rearrange kernels and the wgrad kernel's own
    slowdown, give back published.md s4's fwd+bwd speedups over BF16 at every M they were derived at."""
    from sim.catalog import load_gpu
    from sim.costs import (
        _MXFP8_SPEEDUP,
        _QUANT_BW_EFF,
        _REF_K,
        _REF_N,
        _mxfp8_pass_overhead,
        default_costs,
    )

    gpu = load_gpu("b200")
    costs = default_costs(gpu)
    for m, speedup in _MXFP8_SPEEDUP:
        flops = 2 * m * _REF_N * _REF_K
        bf16 = 3 * costs.grouped_gemm_time(flops, m, gpu.bf16_flops, "bf16")
        mx = (2 * costs.grouped_gemm_time(flops, m, gpu.fp8_flops, "mxfp8")
              + costs.grouped_gemm_time(flops, m, gpu.fp8_flops, "mxfp8_wgrad")
              + _mxfp8_pass_overhead(m, _QUANT_BW_EFF, gpu.hbm_bw_bytes_per_s))
        assert bf16 / mx == pytest.approx(speedup, rel=1e-9), m
    # the wgrad kernel is the per-kernel breakdown's 2103.3 / 1671.2 slower than the forward
    fwd = costs.grouped_gemm_time(1e12, 131072, gpu.fp8_flops, "mxfp8")
    assert costs.grouped_gemm_time(1e12, 131072, gpu.fp8_flops, "mxfp8_wgrad") / fwd == pytest.approx(2103.3 / 1671.2)


def test_mxfp8_quantize_and_rearrange_match_the_published_per_kernel_sum() -> None:
    """published.md s4 per-kernel breakdown at 131072 tokens, dim 7168, hidden 2048, G=8: quantize A 525.3 and
    B 65.4, rearranges 29.7 + 13.3 (forward); grad_out 144.4, B 70.7, 19.4 + 12.9 (dgrad); dim1 grad_out 141.5
    and A 472.2, 199.8 + 207.9 (wgrad): 1902.5 us. The model's quantize kernels run at 76% of HBM bandwidth."""
    from sim.costs import _QUANT_BW_EFF, _mxfp8_pass_overhead

    published = (525.3 + 65.4 + 29.7 + 13.3) + (144.4 + 70.7 + 19.4 + 12.9) + (141.5 + 472.2 + 199.8 + 207.9)
    assert _mxfp8_pass_overhead(131072, _QUANT_BW_EFF, 7.7e12) * 1e6 == pytest.approx(published, rel=0.03)
    # the weight terms do not grow with tokens: a quarter of the tokens costs more than a quarter
    small = _mxfp8_pass_overhead(32768, _QUANT_BW_EFF, 7.7e12)
    assert _mxfp8_pass_overhead(131072, _QUANT_BW_EFF, 7.7e12) / 4 < small < _mxfp8_pass_overhead(131072, _QUANT_BW_EFF, 7.7e12) / 3


def test_layer_shards_and_single_stage_gathers_closed_form() -> None:
    """Each layer kind's parameters on one rank (TP, then FSDP over dp_shard x cp; experts over EP, ETP and
    expert FSDP); a single-stage FSDP plan gathers the embedding and the head outside the layer simulations."""
    from sim.accounting import count_params
    from sim.predict.timing import Context
    from sim.stacks import load_stack

    model, cluster = load_model("deepseek-v3-16b"), load_cluster("hgx-b200", n_gpus=16)
    plan = ParallelPlan(tp=2, ep=4, dp_shard=8, global_batch=16, seq_len=1024)
    ctx = Context(model, cluster, plan, default_costs(cluster.gpu), load_stack("torchtitan"))
    pc, shard = count_params(model), plan.tp * plan.dp_shard * plan.cp
    assert ctx.layer_shards("embed") == (pytest.approx(pc.embedding / shard), 0.0)
    assert ctx.layer_shards("head") == (pytest.approx((pc.output + pc.final_norm) / shard), 0.0)
    assert ctx.layer_shards("dense")[0] == pytest.approx(
        (pc.attention_per_layer + pc.norms_per_layer + pc.dense_ffn_per_layer) / shard)
    dense_moe, expert = ctx.layer_shards("moe")
    assert dense_moe == pytest.approx((pc.attention_per_layer + pc.norms_per_layer + pc.shared_experts_per_layer
                                       + pc.router_per_layer) / shard)
    assert expert == pytest.approx(pc.routed_experts_per_layer / plan.ep / plan.etp / max(1, plan.expert_fsdp))
    step = predict(model, cluster, plan).trace_data["step"]
    assert step.first_ag == [pytest.approx(ctx.fsdp_time("embed", "ag") + ctx.fsdp_time("head", "ag"))]
