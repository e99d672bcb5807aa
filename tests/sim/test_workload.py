"""The workload's per-op FLOPs agree with sim.accounting; names come from the shared vocabulary."""

import dataclasses

import pytest

from sim.accounting import exact_flops_per_token
from sim.catalog import load_model
from sim.ops import ALL_OPS
from sim.specs import ParallelPlan
from sim.stacks import load_stack
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
    wl = Workload(model, plan, load_stack("megatron"))  # causal over the sequence: the accounting's attention
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


# --- ops per stack ------------------------------------------------------------------------------------

from sim import ops  # noqa: E402

_EP_PLAN = dict(ep=4, dp_shard=4, global_batch=4, seq_len=256)


def _names(wl: Workload, kind: str = "moe", phase: str = "fwd") -> list[str]:
    return [op.name for op in wl.layer_ops(kind, phase)]


@pytest.mark.parametrize("stack", ["torchtitan", "megatron"])
def test_deepep_reads_tokens_in_place(stack):
    model = load_model("debug")
    nccl = Workload(model, ParallelPlan(**_EP_PLAN, ep_backend="nccl"), load_stack(stack))
    deep = Workload(model, ParallelPlan(**_EP_PLAN, ep_backend="deepep"), load_stack(stack))
    # NCCL: sender sort + receiver sort; DeepEP: the receiver's only (torchtitan deepep.py, Megatron flex).
    assert _names(nccl).count(ops.MOE_PERMUTE) == 2 and _names(deep).count(ops.MOE_PERMUTE) == 1
    # (a sum by index priced apart, TorchTitan's DeepEP scatter-add, is an ``accum`` op of the same pass)
    passes = [[op.name for op in wl.layer_ops("moe", "fwd") if op.kind != "accum"] for wl in (nccl, deep)]
    assert passes[0].count(ops.MOE_UNPERMUTE) == 2 and passes[1].count(ops.MOE_UNPERMUTE) == 1
    d = ParallelPlan(**_EP_PLAN).seq_len * model.top_k * model.dim * 2
    sender = [op for op in nccl.layer_ops("moe", "fwd") if op.name == ops.MOE_PERMUTE][0]
    # TorchTitan's index gather reads and writes every copy; TE's fused top-K permute (Megatron) reads each token once
    expected = 2 * d if stack == "torchtitan" else d * (1 + 1 / model.top_k)
    assert sender.nbytes == pytest.approx(expected) and not sender.load_scaled


def test_torchao_quantises_per_call_and_te_once_per_step():
    model = load_model("debug")
    plan = ParallelPlan(**_EP_PLAN, precision="mxfp8")
    tt, mc = Workload(model, plan, load_stack("torchtitan")), Workload(model, plan, load_stack("megatron"))
    weight = model.n_routed_experts // 4 * model.moe_inter_dim * model.dim
    tt_quant = [op for op in tt.layer_ops("moe", "fwd") if op.kind == "quant"]
    assert any(op.elems == weight for op in tt_quant)  # B quantised in the forward call
    assert {op.kind for op in tt.layer_ops("moe", "fwd") if op.name == ops.MOE_QUANTIZE} == {"quant", "rearrange"}
    assert tt.step_ops() == []
    # TE: no quantize or rearrange kernel in the layer (fused into producers), weights once per step.
    assert not [op for op in mc.layer_ops("moe", "fwd") if op.kind in ("quant", "rearrange")]
    assert not [op for op in mc.layer_ops("moe", "bwd") if op.kind == "rearrange"]
    (step,) = mc.step_ops()
    assert step.kind == "quant" and step.elems > 0
    # TE's cast reads the BF16 expert input the dispatch wrote and writes its FP8 row- and column-wise copies:
    # 2 + 2 x (1 + 1/32) B per element.
    rows = mc.expert_rows
    fused = [op for op in mc.layer_ops("moe", "fwd") if op.name == ops.MOE_QUANTIZE and op.kind == "mem"]
    assert fused[0].nbytes == pytest.approx(rows * model.dim * (2 + 2 * (1 + 1 / 32)))


def test_te_keeps_the_forward_fp8_input_for_wgrad():
    model = load_model("debug")
    plan = ParallelPlan(**_EP_PLAN, precision="mxfp8")
    tt, mc = Workload(model, plan, load_stack("torchtitan")), Workload(model, plan, load_stack("megatron"))
    tt_b = sum(op.elems for op in tt.layer_ops("moe", "bwd") if op.kind == "quant" and op.load_scaled)
    mc_b = sum(op.elems for op in mc.layer_ops("moe", "bwd") if op.kind == "quant")
    rows, d, f = tt.expert_rows, model.dim, model.moe_inter_dim
    # TorchAO re-quantises grad_out twice and the saved input once per expert GEMM; TE nothing separately.
    assert tt_b == pytest.approx(2 * (2 * rows * f + rows * d) + (2 * rows * d + rows * f))
    assert mc_b == 0


def test_megatron_recomputes_its_modules_only():
    model = load_model("deepseek-v3-16b")
    stack = load_stack("megatron")
    wl = Workload(model, ParallelPlan(ep=8, dp_shard=8, global_batch=8, seq_len=1024, ac="selective"), stack)
    rec = wl.layer_ops("moe", "recompute")
    assert rec and {op.module for op in rec} <= {"mla_up_proj", "moe_act"}
    assert not [op for op in rec if op.kind in ("comm", "grouped_gemm", "attn", "host_sync")]
    assert {op.kind for op in rec} == {"gemm", "mem"}  # the q/kv up-projections and the SwiGLUs
    dense = wl.layer_ops("dense", "recompute")
    assert {op.module for op in dense} == {"mla_up_proj", "mlp"}
    full_moe = Workload(model, ParallelPlan(ep=8, dp_shard=8, global_batch=8, seq_len=1024, ac="selective"),
                        dataclasses.replace(stack, recompute_modules=("moe",)))
    assert [op for op in full_moe.layer_ops("moe", "recompute") if op.name == ops.MOE_DISPATCH]


def test_fp8_current_runs_every_linear_in_fp8():
    wl = Workload(load_model("debug"), ParallelPlan(**_EP_PLAN, precision="fp8-current"), load_stack("megatron"))
    assert wl.linear_dtype == wl.expert_dtype == "fp8"
    assert {op.dtype for op in wl.layer_ops("moe", "fwd") if op.kind in ("gemm", "grouped_gemm")} == {"fp8", "bf16"}


def test_plan_recompute_modules_override_the_stack():
    model = load_model("deepseek-v3-16b")
    base = dict(ep=8, dp_shard=8, global_batch=8, seq_len=1024, ac="selective")
    own = Workload(model, ParallelPlan(**base), load_stack("megatron"))
    only_act = Workload(model, ParallelPlan(**base, recompute_modules="moe_act"), load_stack("megatron"))
    assert {op.module for op in only_act.layer_ops("moe", "recompute")} == {"moe_act"}
    assert len(only_act.layer_ops("moe", "recompute")) < len(own.layer_ops("moe", "recompute"))
    with pytest.raises(Exception, match="recompute_modules must be one of"):
        ParallelPlan(**base, recompute_modules="attn")


def test_torchtitan_deepep_dispatches_every_token_on_every_tp_rank():
    """TorchTitan 1a36996b's DeepEP path has no reorderer for the TP plan to split the tokens with: with TP2 each
    TP rank dispatches (and its experts compute) the whole microbatch; its standard path and Megatron's DeepEP
    split the tokens over the TP ranks."""
    model = load_model("debug")
    plan = dict(tp=2, ep=4, dp_shard=2, global_batch=4, seq_len=256)
    tokens = plan["seq_len"]
    titan, megatron = load_stack("torchtitan"), load_stack("megatron")
    assert not titan.deepep_tp_token_split and megatron.deepep_tp_token_split
    assert Workload(model, ParallelPlan(**plan, ep_backend="deepep"), titan).tokens_dispatched == tokens
    assert Workload(model, ParallelPlan(**plan, ep_backend="nccl"), titan).tokens_dispatched == tokens / 2
    assert Workload(model, ParallelPlan(**plan, ep_backend="deepep"), megatron).tokens_dispatched == tokens / 2
    tp1 = dict(plan, tp=1, dp_shard=4)
    assert Workload(model, ParallelPlan(**tp1, ep_backend="deepep"), titan).tokens_dispatched == tokens


def test_a_document_mask_computes_the_documents_keys_not_the_causal_prefix():
    """TorchTitan's block-causal mask: the core attention's FLOPs follow the keys a query's document holds
    (sim.documents), at most the causal prefix; its projections are unchanged."""
    from sim.documents import attended_keys

    model = load_model("deepseek-v3-671b")
    for seq in (256, 8192):
        plan = ParallelPlan(tp=1, ep=8, dp_shard=8, seq_len=seq, global_batch=8)
        titan, megatron = load_stack("torchtitan"), load_stack("megatron")
        assert titan.document_mask and not megatron.document_mask
        core = {name: next(op for op in Workload(model, plan, stack).layer_ops("moe", "fwd") if op.name == ops.ATTN_CORE)
                for name, stack in (("titan", titan), ("megatron", megatron))}
        ratio = core["titan"].flops / core["megatron"].flops
        assert ratio == pytest.approx(attended_keys(seq) / ((seq + 1) / 2))
        assert ratio <= 1
    assert attended_keys(8192) < 0.2 * (8192 + 1) / 2  # C4's documents are short next to an 8,192-token sequence
