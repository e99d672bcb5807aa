"""Mechanisms the single-MoE-layer cells (measured-runs.md s8) exposed: Megatron dispatches BF16 tokens, Transformer
Engine's grouped GEMM is per-expert cuBLAS, forced balance leaves the EP barrier little spread to wait for, and a
layer benchmark does not carry a release's step-level scalar."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim import comm
from sim.catalog import load_cluster, load_gpu, load_model
from sim.costs import default_costs
from sim.joint import apply_params, shipped_values, te_grouped_large
from sim.layer_check import MoELayerCell, predict_moe_layer
from sim.predict import simulation_context
from sim.specs import ParallelPlan
from sim.stacks import StackProfile, load_stack

_REF = 16384 * 8  # the curves' large reference shape (rows per expert x 8)


def _dispatch_bytes_per_elem(stack_name: str) -> float:
    model, cluster = load_model("deepseek-v3-671b"), load_cluster("hgx-h100", n_gpus=64)
    plan = ParallelPlan(ep=8, pp=8, dp_shard=8, seq_len=4096, micro_batch=1, global_batch=64,
                        precision="fp8-blockwise", ep_backend="deepep")
    stack = load_stack(stack_name)
    ctx = simulation_context(model, cluster, plan, default_costs(cluster.gpu), stack, params=shipped_values())
    res = ctx.a2a("a2a.dispatch")
    return float(res.sent_bytes.max())


def test_megatron_dispatches_bf16_tokens_and_deepseek_fp8() -> None:
    """Megatron-Core's flex dispatcher sends BF16 hidden states (TE quantises after the dispatch); DeepSeek's
    stack sends FP8 tokens with their scales: the same plan moves ~1.9x the bytes under Megatron."""
    assert load_stack("megatron-26.04").fp8_dispatch is False
    assert load_stack("deepseek").fp8_dispatch is True
    megatron, deepseek = _dispatch_bytes_per_elem("megatron-26.04"), _dispatch_bytes_per_elem("deepseek")
    assert megatron / deepseek == pytest.approx(2.0 / comm.FP8_WITH_SCALES_BYTES_PER_ELEM, rel=1e-6)


@pytest.mark.parametrize("gpu", ["h100", "b200"])
def test_transformer_engines_grouped_gemm_runs_at_the_dense_cublas_rate_at_large_shapes(gpu: str) -> None:
    """TE's grouped linear is one cuBLAS GEMM per expert: at the large shape its BF16 / FP8 curves reach the cost
    model's dense asymptote; TorchTitan's torch._grouped_mm keeps its own (lower) grouped rate."""
    costs = default_costs(load_gpu(gpu))
    large = te_grouped_large(costs)
    assert large["bf16"] == pytest.approx(costs.gemm_eff["bf16"].values[-1])
    assert large["fp8"] == pytest.approx(costs.gemm_eff["fp8"].values[-1])
    cluster = load_cluster(f"hgx-{gpu}", n_gpus=8)
    plan = ParallelPlan(ep=8, dp_shard=8)
    _, te, _ = apply_params(shipped_values(), cluster, costs, load_stack("megatron-26.04"), plan)
    _, titan, _ = apply_params(shipped_values(), cluster, costs, load_stack("torchtitan"), plan)
    assert te.grouped_gemm_eff["bf16"](_REF) == pytest.approx(large["bf16"], rel=1e-9)
    assert titan.grouped_gemm_eff["bf16"](_REF) < 0.9 * te.grouped_gemm_eff["bf16"](_REF)


def _arrival_cv(plan: ParallelPlan, calibration: str | None = None, value: float = 0.02) -> float:
    cluster = load_cluster("hgx-b200", n_gpus=8)
    costs = default_costs(cluster.gpu)
    if calibration:
        costs = replace(costs, comm={**costs.comm, "arrival_cv": 0.0731})
    values = dict(shipped_values(), **{"ep.arrival_cv_balanced": value})
    _, c, _ = apply_params(values, cluster, costs, load_stack("torchtitan"), plan)
    return float(c.comm.get("arrival_cv", comm.CommCosts.default().arrival_cv))


def test_forced_balance_takes_its_own_barrier_spread() -> None:
    """Under forced balance every EP rank runs the same work: the barrier's arrival spread is the joint
    parameter ``ep.arrival_cv_balanced``; a real router's plan keeps the trace-measured spread, and a calibration
    that sets its own keeps it."""
    balanced = ParallelPlan(ep=8, dp_shard=8, routing="balanced")
    skewed = replace(balanced, routing="zipf:1.2")
    assert _arrival_cv(balanced) == pytest.approx(0.02)
    assert _arrival_cv(skewed) == pytest.approx(comm.CommCosts.default().arrival_cv)
    assert _arrival_cv(balanced, calibration="trace") == pytest.approx(0.0731)


def _cell(backend: str = "deepep") -> MoELayerCell:
    return MoELayerCell(id="t", dim=1024, moe_inter_dim=512, n_experts=16, top_k=4, cluster="hgx-h100", gpus=8,
                        ep=8, tokens_per_gpu=2048, ep_backend=backend, precision="bf16")


def test_a_layer_benchmark_does_not_carry_the_release_scalar() -> None:
    """The release scalar is a whole step's; a layer benchmark times kernels alone: its prediction does not move
    with ``release.<stack>``."""
    values = shipped_values()
    slow = dict(values, **{"release.megatron-26.04": 0.3})
    a, b = predict_moe_layer(_cell(), params=values), predict_moe_layer(_cell(), params=slow)
    assert (a.forward_s, a.backward_s) == (b.forward_s, b.backward_s)


def test_a_user_stack_without_fp8_dispatch_defaults_to_bf16_tokens() -> None:
    assert StackProfile().fp8_dispatch is False


def _sorts(stack_name: str, experts: int, backend: str = "nccl") -> int:
    from sim.workload import Workload

    cell = MoELayerCell(id="t", dim=512, moe_inter_dim=256, n_experts=experts, top_k=2, cluster="hgx-h100", gpus=8,
                        ep=8, tokens_per_gpu=1024, ep_backend=backend, precision="bf16")
    from sim.layer_check import layer_model, layer_plan

    ops_ = Workload(layer_model(cell), layer_plan(cell), load_stack(stack_name)).layer_ops("moe", "fwd")
    return sum(op.name in ("moe.permute", "moe.unpermute") for op in ops_)


def test_megatron_skips_the_receiver_sort_with_one_local_expert_and_torchtitan_does_not() -> None:
    """Megatron-Core's all-to-all dispatcher sorts received tokens by local expert only with two or more local
    experts; TorchTitan's permute indices run for any count."""
    assert _sorts("megatron-26.04", 8) == 2  # sender-side permute + unpermute only
    assert _sorts("megatron-26.04", 16) == 4
    assert _sorts("torchtitan", 8) == 4
    assert _sorts("megatron-26.04", 8, "hybridep") == 0


def test_hopper_blockwise_fp8_runs_below_tensorwise_fp8_and_blackwell_does_not() -> None:
    from sim.costs import _HOPPER_BLOCKWISE_OVER_TENSORWISE

    h100, b200 = default_costs(load_gpu("h100")), default_costs(load_gpu("b200"))
    assert 0.7 < _HOPPER_BLOCKWISE_OVER_TENSORWISE < 0.8
    assert h100.gemm_eff["fp8-blockwise"](1e12) == pytest.approx(h100.gemm_eff["fp8"](1e12) * _HOPPER_BLOCKWISE_OVER_TENSORWISE)
    assert b200.gemm_eff["fp8-blockwise"](1e12) == pytest.approx(b200.gemm_eff["fp8"](1e12))
