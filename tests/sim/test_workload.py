"""The workload's per-op FLOPs agree with sim.accounting; names come from the shared vocabulary."""

import pytest

from sim.accounting import exact_flops_per_token
from sim.catalog import load_model
from sim.ops import ALL_OPS
from sim.specs import ParallelPlan
from sim.workload import Workload, chunk_layers


def _useful_flops(wl: Workload, model) -> float:
    total = 0.0
    for li in range(model.n_layers):
        kind = "dense" if li < model.n_dense_layers else "moe"
        for phase in ("fwd", "bwd"):
            total += sum(op.flops * op.useful_frac for op in wl.layer_ops(kind, phase)
                         if op.kind in ("gemm", "grouped_gemm", "attn"))
    for phase in ("fwd", "bwd"):
        total += sum(op.flops for op in wl.layer_ops("head", phase) if op.kind == "gemm")
    return total


@pytest.mark.parametrize("name", ["debug", "deepseek-v3-16b", "deepseek-v3-671b", "qwen3-30b-a3b"])
@pytest.mark.parametrize("tp", [1, 2])
def test_flops_agree_with_accounting(name, tp):
    model = load_model(name)
    ep = 8 if model.n_routed_experts % 8 == 0 else 1
    plan = ParallelPlan(tp=tp, ep=ep, dp_shard=8, seq_len=1024, global_batch=8)
    wl = Workload(model, plan)
    per_rank = _useful_flops(wl, model)
    # Every rank of a TP group does 1/tp of the useful work; tokens per TP group = seq_len.
    assert per_rank * tp / plan.seq_len == pytest.approx(exact_flops_per_token(model, plan.seq_len), rel=1e-12)


@pytest.mark.parametrize("precision", ["bf16", "mxfp8-grouped", "mxfp8", "fp8-blockwise"])
@pytest.mark.parametrize("ac", ["none", "selective", "full"])
def test_op_names_are_shared_vocabulary(precision, ac):
    wl = Workload(load_model("debug"), ParallelPlan(tp=2, ep=2, dp_shard=2, precision=precision, ac=ac,
                                                     global_batch=2, seq_len=64))
    for kind in ("embed", "dense", "moe", "head"):
        for phase in ("fwd", "bwd", "recompute"):
            assert {op.name for op in wl.layer_ops(kind, phase)} <= set(ALL_OPS)


def test_recompute_modes():
    model = load_model("debug")
    n = {ac: len(Workload(model, ParallelPlan(ac=ac, global_batch=1, seq_len=64)).layer_ops("moe", "recompute"))
         for ac in ("none", "selective", "full")}
    assert n["none"] == 0 < n["selective"] < n["full"]


def test_mxfp8_adds_quantize_kernels_both_directions():
    wl = Workload(load_model("debug"), ParallelPlan(ep=2, dp_shard=2, precision="mxfp8-grouped", global_batch=2))
    for phase in ("fwd", "bwd"):
        kinds = {op.kind for op in wl.layer_ops("moe", phase) if op.name == "moe.quantize"}
        assert kinds == {"quant", "rearrange"}


def test_chunks_match_accounting_split():
    model = load_model("deepseek-v3-671b")
    plan = ParallelPlan(pp=2, vpp=2, pp_schedule="interleaved-1f1b", global_batch=8)
    chunks = chunk_layers(model, plan)
    assert [len(c) for c in chunks] == [16, 15, 15, 15]
