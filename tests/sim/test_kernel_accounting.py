"""What the kernels of a step move and how fast their chips run them: the mechanisms the single-MoE-layer cells
(measured-runs.md s8) and the same-plan pairs (s5) pointed to, each checked against the former accounting.

- a grouped GEMM's roll-off is time per SM: its half-point scales with the chip's tensor rate per SM
  (``sim.joint.half_rows_on``), and a share of it is a fixed time per expert, amortised over the expert's work per
  row (``CostModel.grouped_work_scale``), checked against published grouped GEMM benchmarks at two shapes;
- a GB300 runs at its own sustained clock over a B300's (``chip.gb300_clock``);
- Transformer Engine's fused top-K permute moves each token once (``StackProfile.fused_permute``);
- TorchTitan's eager MoE bookkeeping moves what its PyTorch ops read and write (``StackProfile.eager_moe_glue``):
  an FP32 weighted sum over every token's K slots on each TP rank, a padding copy before the receiver's gather,
  and DeepEP's score multiply;
- TorchTitan's sums by index run in PyTorch's index kernels at their measured rates
  (``StackProfile.indexed_accumulate``, ``sim.costs.ACCUMULATE_BW_SHARE``): DeepEP's scatter-add and its gather's
  backward one atomic add per element, the standard path's gathers' backwards sorted;
- SwiGLU and RMSNorm backwards move what their kernels read and write (``OpSpec.backward_nbytes``);
- an FP8 cast of an activation has no backward kernel of its own (``OpSpec.backward_free``), and the casts of
  the experts' inputs read the BF16 tensor an all-to-all or Megatron's SwiGLU wrote;
- Megatron's experts run gate and up as one grouped GEMM of 2F outputs (``StackProfile.fused_gate_up``);
- a weight is read once for its row- and column-wise FP8 copies (``Workload.weight_quantisation``);
- a layer benchmark's EP ranks reach each DeepEP barrier together (``sim.layer_check.QUIET_ARRIVALS``).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim import ops
from sim.catalog import load_cluster, load_gpu, load_model
from sim.costs import default_costs
from sim.joint import (
    FLASHINFER_HALF_ROWS_FP4,
    GROUPED_HALF_ROWS_ONE_KERNEL,
    REF_TENSOR_FLOPS_PER_SM,
    apply_params,
    grouped_half_rows,
    half_rows_on,
    prior_values,
    shipped_values,
    spec,
)
from sim.layer_check import MoELayerCell, predict_moe_layer
from sim.specs import ParallelPlan
from sim.stacks import load_stack
from sim.workload import BF16, OpSpec, Workload

_REF = 16384 * 8  # the grouped curves' large reference shape (rows per expert x 8)


def _grouped_share_at(gpu: str, rows_per_expert: float) -> float:
    """The joint BF16 grouped curve at ``rows_per_expert`` over its value at the large shape, on ``gpu``."""
    cluster = load_cluster(f"hgx-{gpu}", n_gpus=8)
    costs = default_costs(cluster.gpu)
    _, out, _ = apply_params(shipped_values(), cluster, costs, load_stack("megatron-26.04"), ParallelPlan(ep=8, dp_shard=8))
    curve = out.grouped_gemm_eff["bf16"]
    return curve(rows_per_expert * 8) / curve(_REF)


def test_the_grouped_roll_off_half_point_scales_with_the_tensor_rate_per_sm() -> None:
    h100, b200 = load_gpu("h100"), load_gpu("b200")
    assert b200.bf16_flops / b200.num_sms == pytest.approx(REF_TENSOR_FLOPS_PER_SM)
    assert half_rows_on(b200, 1400.0) == pytest.approx(1400.0)
    assert half_rows_on(h100, 1400.0) == pytest.approx(1400.0 * (989e12 / 132) / (2250e12 / 148))
    # A Hopper SM amortises the same per-expert fixed time over fewer rows: at 256 rows per expert its grouped
    # GEMM keeps more of its large-shape rate than a Blackwell one (the former rule gave both the same share).
    assert _grouped_share_at("h100", 256) > _grouped_share_at("b200", 256) + 0.05


def test_an_fp8_grouped_gemm_needs_twice_the_rows_of_a_bf16_one() -> None:
    """An FP8 tile does twice a BF16 tile's math in the same time, so the rows that amortise a tile's fixed time
    double (:func:`sim.joint.grouped_half_rows`); the prior is flashinfer's NVFP4 half-point at BF16's rate."""
    b200 = load_gpu("b200")
    assert grouped_half_rows(b200, 85.0, "bf16") == pytest.approx(85.0)
    for key in ("fp8", "mxfp8", "mxfp8_wgrad", "fp8-blockwise"):
        assert grouped_half_rows(b200, 85.0, key) == pytest.approx(170.0)
    assert GROUPED_HALF_ROWS_ONE_KERNEL == pytest.approx(FLASHINFER_HALF_ROWS_FP4 * 2250 / 9000)
    assert "grouped.half_rows" not in prior_values()  # a sourced constant, no joint parameter
    assert spec("grouped.half_rows_per_expert_launch").fitted


def _grouped_seconds_per_flop(k_in: float, n_out: float, rows_per_expert: float, share: float) -> float:
    cluster = load_cluster("hgx-h100", n_gpus=8)
    values = dict(shipped_values(), **{"grouped.per_expert_share": share})
    gpu, costs, stack = apply_params(values, cluster, default_costs(cluster.gpu), load_stack("megatron-26.04"),
                                     ParallelPlan(ep=8, dp_shard=8))
    rows = rows_per_expert * 4
    op = OpSpec("g", "grouped_gemm", flops=2 * rows * k_in * n_out, rows=rows, k_in=k_in, n_out=n_out, groups=4)
    return costs.op_seconds(op, gpu.gpu, replace(stack, kernel_overhead_s=0.0)) / op.flops


def test_an_expert_of_more_work_per_row_reaches_its_rate_at_fewer_rows() -> None:
    """A fixed time per expert is amortised over the expert's work: at 128 rows a Mixtral-shaped expert
    (4096 x 28672 per row) runs nearer its asymptote than a DeepSeek-V3-shaped one (7168 x 2048); with the
    mechanism off (share 0) the rows alone decide and both run at the same rate."""
    mixtral, deepseek = (4096, 2 * 14336), (7168, 2048)
    assert _grouped_seconds_per_flop(*mixtral, 128, 1.0) < 0.9 * _grouped_seconds_per_flop(*deepseek, 128, 1.0)
    assert _grouped_seconds_per_flop(*mixtral, 128, 0.0) == pytest.approx(
        _grouped_seconds_per_flop(*deepseek, 128, 0.0))
    assert default_costs(load_gpu("b200")).grouped_work_scale(7168, 2048) == 1.0


def test_a_gb300_runs_at_its_own_clock_over_a_b300() -> None:
    values = shipped_values()
    plan = ParallelPlan(ep=8, dp_shard=8)
    rates = {}
    for cluster_name in ("hgx-b300", "gb300-nvl72", "gb200-nvl72"):
        cluster = load_cluster(cluster_name, n_gpus=8)
        out, _, _ = apply_params(values, cluster, default_costs(cluster.gpu), load_stack("megatron-26.04"), plan)
        rates[cluster_name] = out.gpu.bf16_flops
    assert values["chip.gb300_clock"] == pytest.approx(2070 / 2032)
    gb300_over_b300 = rates["gb300-nvl72"] / rates["hgx-b300"]
    assert gb300_over_b300 == pytest.approx(2500 / 2250 * values["chip.nvl72_rate"] * values["chip.gb300_clock"])
    assert rates["gb200-nvl72"] == pytest.approx(2500e12 * values["chip.nvl72_rate"])  # GB200 untouched


def _workload(stack: str, precision: str = "bf16", backend: str = "nccl") -> Workload:
    plan = ParallelPlan(ep=8, dp_shard=8, seq_len=4096, global_batch=8, precision=precision, ep_backend=backend,
                        ac="none")
    return Workload(load_model("deepseek-v3-671b"), plan, load_stack(stack))


def _ops(wl: Workload, phase: str, name: str, kind: str = "mem"):  # type: ignore[no-untyped-def]
    return [op for op in wl.layer_ops("moe", phase) if op.name == name and op.kind == kind]


def test_fused_top_k_permute_moves_each_token_once() -> None:
    megatron, titan = _workload("megatron-26.04"), _workload("torchtitan")
    T, D, K = megatron.tokens_dispatched, 7168, 8
    sender = {w: _ops(w, "fwd", ops.MOE_PERMUTE)[0].nbytes for w in (megatron, titan)}
    assert sender[megatron] == pytest.approx((K + 1) * T * D * BF16)  # read each token, write its K copies
    assert sender[titan] == pytest.approx(2 * K * T * D * BF16)  # an index gather: every copy read and written
    assert load_stack("megatron-26.02").fused_permute and not load_stack("torchtitan").fused_permute


def test_torchtitans_eager_moe_bookkeeping_moves_what_its_ops_read_and_write() -> None:
    """torchtitan 1a36996b MoE.forward (score_before_experts = False): zeros over T x K slots, index put, cast to
    FP32, bmm with the scores, cast back; with TP the MoE input is replicated, so the slots are the whole T's while
    the copies are the rank's T/tp share. _permute: vstack (a copy) then the gather. DeepEP combine_tokens: the
    score multiply, then the scatter-add. (Every pass as bytes: the index sums and the bmm's batched backward
    priced apart are the tests below.)"""
    plan = ParallelPlan(tp=2, ep=8, dp_shard=8, seq_len=4096, global_batch=8, ac="none")
    as_bytes = replace(load_stack("torchtitan"), indexed_accumulate=False, combine_bmm_batched=False)
    titan = Workload(load_model("deepseek-v3-671b"), plan, as_bytes)
    T, D, K = titan.tokens, 7168, 8
    copies = T / 2 * K
    (fwd,) = _ops(titan, "fwd", ops.MOE_UNPERMUTE)[-1:]
    (bwd,) = [op for op in titan.layer_ops("moe", "bwd") if op.name == ops.MOE_UNPERMUTE and op.kind == "mem"
              and op.nbytes == fwd.backward_nbytes][:1]
    assert fwd.nbytes == pytest.approx((12 * T * K + 4 * copies + 10 * T) * D)
    assert bwd.nbytes == pytest.approx((14 * T * K + 4 * copies + 14 * T) * D)
    # the receiver's sort copies the received tokens once (vstack) before gathering them
    sort = _ops(titan, "fwd", ops.MOE_PERMUTE)[-1]
    assert sort.nbytes == pytest.approx(4 * BF16 * titan.expert_rows * D)
    # without the flag: one pass each, the former accounting
    plain = Workload(load_model("deepseek-v3-671b"), plan, replace(as_bytes, eager_moe_glue=False))
    assert plain.moe_glue("combine") == (plain._sender_permute_bytes(unpermute=True),) * 2
    assert plain.moe_glue("sort") == (2 * BF16 * plain.expert_rows * D,) * 2
    # DeepEP: the scores multiply the copies in a pass of their own before the scatter-add
    deepep = Workload(load_model("deepseek-v3-671b"), replace(plan, ep_backend="deepep"), as_bytes)
    rows = BF16 * deepep.expert_rows * D
    assert deepep.moe_glue("unsort") == (4 * rows, 6 * rows) and deepep.moe_glue("sort") == (2 * rows, 2 * rows)
    assert not load_stack("megatron-26.04").eager_moe_glue and load_stack("torchtitan").eager_moe_glue


def test_torchtitans_sums_by_index_run_in_pytorchs_index_kernels() -> None:
    """torchtitan 1a36996b: DeepEP's _unpermute_tokens sums the K copies with scatter_add_ (forward; an atomic per
    element) and _permute_tokens' index_select has index_add_ as its backward (atomic); the standard path's gathers
    x[token_indices // top_k] and x[permuted_indices] have index_put_ with accumulate as their backward (sorted).
    Megatron's fused TE permute has none. Off, the bytes are the former accounting's."""
    D, K = 7168, 8
    assert load_stack("torchtitan").indexed_accumulate and load_stack("torchtitan").combine_bmm_batched
    titan = replace(load_stack("torchtitan"), combine_bmm_batched=False)  # the index sums alone
    deepep = Workload(load_model("deepseek-v3-671b"), _workload("torchtitan", backend="deepep").plan, titan)
    rows = deepep.expert_rows * D
    assert [(op.accumulate, op.elems) for op in deepep.layer_ops("moe", "fwd") if op.kind == "accum"] == [
        ("atomic", rows)]
    assert [(op.name, op.accumulate, op.elems) for op in deepep.layer_ops("moe", "bwd") if op.kind == "accum"] == [
        (ops.MOE_PERMUTE, "atomic", rows)]
    std = Workload(deepep.model, _workload("torchtitan").plan, titan)
    copies = std.tokens_dispatched * K * D
    assert sorted((op.name, op.accumulate, op.elems) for op in std.layer_ops("moe", "bwd") if op.kind == "accum") == [
        (ops.MOE_PERMUTE, "sorted", copies), (ops.MOE_PERMUTE, "sorted", std.expert_rows * D)]
    assert not [op for op in std.layer_ops("moe", "fwd") if op.kind == "accum"]
    for name in ("megatron-26.04", "deepseek"):
        wl = _workload(name, backend="deepep" if name == "deepseek" else "nccl")
        assert not [op for ph in ("fwd", "bwd") for op in wl.layer_ops("moe", ph) if op.kind == "accum"]
    # off: no index kernels, every pass as bytes again (the forward's as before)
    plain = replace(titan, indexed_accumulate=False)
    for backend in ("nccl", "deepep"):
        wl = Workload(deepep.model, replace(deepep.plan, ep_backend=backend), plain)
        on = Workload(deepep.model, replace(deepep.plan, ep_backend=backend), titan)
        assert not [op for ph in ("fwd", "bwd") for op in wl.layer_ops("moe", ph) if op.kind == "accum"]
        moved = sum(op.elems for op in on.layer_ops("moe", "fwd") if op.kind == "accum") * 2 * BF16
        fwd_bytes = [sum(op.nbytes for op in w.layer_ops("moe", "fwd") if op.kind == "mem") for w in (wl, on)]
        assert fwd_bytes[0] - fwd_bytes[1] == pytest.approx(moved - (on.expert_rows / K * D * BF16 if moved else 0))


def test_torchtitans_combine_bmm_backward_runs_in_batched_kernels() -> None:
    """torchtitan 1a36996b: the standard path's combine is torch.bmm(scores [T, 1, K], FP32 slots [T, K, D]); with
    ``combine_bmm_batched`` its two gradients (2 x FP32 x (T + T K) x D bytes) leave the memory-bound backward for
    an op at the batched kernels' rate; the DeepEP path (no bmm) and Megatron's fused unpermute keep none."""
    D, K = 7168, 8
    on = replace(load_stack("torchtitan"), combine_bmm_batched=True)
    plain = replace(on, combine_bmm_batched=False)
    model, plan = load_model("deepseek-v3-671b"), _workload("torchtitan").plan
    std_on, std_off = Workload(model, plan, on), Workload(model, plan, plain)
    bmm = 2 * 4 * (std_on.tokens + std_on.tokens * K) * D
    batched = [op for op in std_on.layer_ops("moe", "bwd") if op.kind == "accum" and op.accumulate == "batched"]
    assert [(op.name, op.elems) for op in batched] == [(ops.MOE_UNPERMUTE, bmm / 2)]
    mem = [sum(op.nbytes for op in w.layer_ops("moe", "bwd") if op.kind == "mem") for w in (std_off, std_on)]
    assert mem[0] - mem[1] == pytest.approx(bmm)
    assert [op.nbytes for op in std_on.layer_ops("moe", "fwd")] == [op.nbytes for op in std_off.layer_ops("moe", "fwd")]
    deepep = Workload(model, replace(plan, ep_backend="deepep"), on)
    assert not [op for op in deepep.layer_ops("moe", "bwd") if op.accumulate == "batched"]
    mega = replace(load_stack("megatron-26.04"), combine_bmm_batched=True)
    assert not [op for op in Workload(model, plan, mega).layer_ops("moe", "bwd") if op.accumulate == "batched"]
    # scores before the experts (Llama 4, TorchTitan's MoEArgs default): the copies are summed, no bmm
    summed = replace(model, scores_before_experts=True)
    assert not [op for op in Workload(summed, plan, on).layer_ops("moe", "bwd") if op.accumulate == "batched"]
    assert load_model("llama4-scout-17b-16e").scores_before_experts and not model.scores_before_experts


def test_combine_bmm_backward_takes_its_measured_rate() -> None:
    """TorchTitan PR #2466 (B200, Qwen3-30B-A3B, local batch 16): the bmm backward takes ~6-9 ms where a
    memory-bound kernel would take ~1 ms; at 4,096 tokens a sequence its bytes take 1.26 ms at the B200's full HBM
    rate and the middle of 6-9 ms at the sourced share."""
    b200 = load_gpu("b200")
    T, K, D = 16 * 4096, 8, 2048
    nbytes = 2 * 4 * (T + T * K) * D
    ran = default_costs(b200).accumulate_time(nbytes / 2, b200.hbm_bw_bytes_per_s, "batched")
    assert nbytes / b200.hbm_bw_bytes_per_s == pytest.approx(1.255e-3, rel=0.01)
    assert ran == pytest.approx(7.5e-3, rel=0.01)


def test_index_sums_take_their_measured_rates() -> None:
    """TileOPs PR #608: PyTorch's scatter_add_ unpermute of 2,048 tokens x top-2 x 4,096 on an H200 in 0.20 ms;
    TorchAO PR #4623: the backward of an index gather of 196,608 x 2,048 BF16 rows on a B200 in 1.848 ms."""
    h200, b200 = load_gpu("h200"), load_gpu("b200")
    atomic = OpSpec("x", "accum", elems=2048 * 2 * 4096, accumulate="atomic")
    ran = default_costs(h200).op_seconds(atomic, h200, replace(load_stack("torchtitan"), efficiency={},
                                                                kernel_overhead_s=0.0))
    assert ran == pytest.approx(0.20e-3, rel=0.01)
    assert default_costs(b200).accumulate_time(196608 * 2048, b200.hbm_bw_bytes_per_s, "sorted") == pytest.approx(
        1.848e-3, rel=0.01)
    with pytest.raises(ValueError, match="layout 'other'"):
        default_costs(b200).accumulate_time(1.0, 1e12, "other")


def test_swiglu_and_rmsnorm_backwards_move_what_their_kernels_read_and_write() -> None:
    wl = _workload("megatron-26.04")
    fwd_act = [op for op in wl.layer_ops("moe", "fwd") if op.module == "moe_act" and op.kind == "mem"]
    bwd_act = [op for op in wl.layer_ops("moe", "bwd") if op.module == "moe_act" and op.kind == "mem"]
    assert fwd_act and [b.nbytes / f.nbytes for f, b in zip(reversed(fwd_act), bwd_act)] == pytest.approx(
        [5 / 3] * len(fwd_act))
    norm_f, norm_b = _ops(wl, "fwd", ops.MOE_NORM)[0], _ops(wl, "bwd", ops.MOE_NORM)[0]
    assert norm_b.nbytes / norm_f.nbytes == pytest.approx(1.5)


def test_an_fp8_cast_of_an_activation_has_no_backward_kernel() -> None:
    """TE writes an activation's FP8 copies in the forward; the backward quantises grad_out with each GEMM's
    backward pass, and the forward's cast has no backward of its own (it was counted as 2x its bytes)."""
    wl = _workload("megatron-26.04", precision="fp8-blockwise", backend="hybridep")
    casts = [op for op in wl.layer_ops("moe", "fwd") if op.name == ops.MOE_QUANTIZE and op.kind == "mem"]
    assert casts and all(op.backward_free for op in casts)
    bwd_casts = [op for op in wl.layer_ops("moe", "bwd") if op.name == ops.MOE_QUANTIZE and op.kind == "mem"]
    grad_out_casts = [op for op in wl.layer_ops("moe", "bwd") if op.kind == "grouped_gemm" and op.gemm_pass == "dgrad"]
    assert len(bwd_casts) == len(grad_out_casts)  # one grad_out quantisation per dgrad, nothing else
    # each reads the BF16 gradient the all-to-all wrote and writes its row- and column-wise copies
    expected = sum(op.rows * op.n_out * (2 + 2 * (1 + 1 / 32)) for op in grad_out_casts)
    assert sum(op.nbytes for op in bwd_casts) == pytest.approx(expected)


def test_megatron_runs_gate_and_up_as_one_grouped_gemm() -> None:
    megatron, titan = _workload("megatron-26.04", "mxfp8", "hybridep"), _workload("torchtitan", "mxfp8", "deepep")
    m_gemms = [op for op in megatron.layer_ops("moe", "fwd") if op.kind == "grouped_gemm"]
    t_gemms = [op for op in titan.layer_ops("moe", "fwd") if op.kind == "grouped_gemm"]
    assert [op.n_out for op in m_gemms] == [2 * 2048, 7168]
    assert [op.n_out for op in t_gemms] == [2048, 2048, 7168]
    assert sum(op.flops for op in m_gemms) == pytest.approx(sum(op.flops for op in t_gemms))


@pytest.mark.parametrize(("precision", "reads"), [("mxfp8", 1), ("fp8-current", 2)])
def test_a_weight_is_read_once_for_both_fp8_copies(precision: str, reads: int) -> None:
    """TE's MXFP8 cast (BIDIMENSIONAL) and blockwise quantize-transpose read a weight once and write its row- and
    column-wise copies; per-tensor current scaling reads it once more for the amax."""
    wl = _workload("megatron-26.04", precision, "hybridep")
    gpu = load_gpu("b200")
    costs = default_costs(gpu)
    step = wl.step_ops()
    quant = [op for op in step if op.kind == "quant"]
    amax = [op for op in step if op.kind == "mem"]
    assert len(quant) == 1 and quant[0].copies == 2 and len(amax) == reads - 1
    params = quant[0].elems
    seconds = costs.quantize_time(params, gpu.hbm_bw_bytes_per_s, quant[0].copies)
    assert seconds == pytest.approx(params * (2 + 2 * (1 + 1 / 32)) / (gpu.hbm_bw_bytes_per_s * costs.quantize_bw_eff))
    # the former accounting: two separate casts, each reading the weight
    assert seconds < costs.quantize_time(2 * params, gpu.hbm_bw_bytes_per_s) * 0.7


def test_a_layer_benchmarks_ranks_reach_the_deepep_barrier_together() -> None:
    """The benchmark barriers every rank before each iteration and runs identical kernels: the step's arrival
    spread under forced balance does not apply (changing it changes nothing)."""
    cell = MoELayerCell(id="toy", dim=1024, moe_inter_dim=512, n_experts=16, top_k=4, cluster="hgx-h100", gpus=8,
                        ep=8, tokens_per_gpu=1024, ep_backend="deepep", precision="bf16")
    base = predict_moe_layer(cell)
    spread = predict_moe_layer(cell, params=dict(shipped_values(), **{"ep.arrival_cv_balanced": 0.3}))
    assert spread.forward_s == pytest.approx(base.forward_s, rel=1e-12)
    assert spread.backward_s == pytest.approx(base.backward_s, rel=1e-12)


def _grouped_tflops(chip: str, stack: str, k_in: int, n_out: int, rows_per_expert: int, groups: int,
                    half_rows: float | None = None) -> float:
    """TFLOPS of one BF16 grouped GEMM alone (no launch cost, no release scalar) under the shipped calibration
    (``half_rows``: ``grouped.half_rows`` at this value instead)."""
    cluster = load_cluster(f"hgx-{chip}", n_gpus=8)
    values = shipped_values() if half_rows is None else dict(shipped_values(), **{"grouped.half_rows": half_rows})
    gpu, costs, st = apply_params(values, cluster, default_costs(cluster.gpu), load_stack(stack),
                                  ParallelPlan(ep=8, dp_shard=8))
    rows = rows_per_expert * groups
    op = OpSpec("g", "grouped_gemm", flops=2 * rows * k_in * n_out, rows=rows, k_in=k_in, n_out=n_out, groups=groups)
    kernels_alone = replace(st, kernel_overhead_s=0.0, efficiency={"*": {"default": 1.0}})
    return op.flops / costs.op_seconds(op, gpu.gpu, kernels_alone) / 1e12


@pytest.mark.parametrize(("rows_per_expert", "groups", "cutlass"), [(2048, 16, 636.9), (4096, 8, 650.6)])
def test_thin_experts_on_h100_run_at_the_measured_grouped_rate(rows_per_expert: int, groups: int,
                                                               cutlass: float) -> None:
    """TE PR #2045 (H100 BF16, experts of K 2048 x N 768; TE 2.7, CUDA 12.9): CUTLASS's persistent grouped kernel
    (what ``torch._grouped_mm`` runs on sm90) 636.9 TFLOPS at 16 x 2,048 rows and 650.6 at 8 x 4,096. TorchTitan's
    grouped GEMM alone comes within 10%; at the half-point the runs pulled the roll-off to (2,104 rows, no longer
    fitted) it ran at half that. tgale96/grouped_gemm PR #37's 160.5 TFLOPS (128 x 512 rows, K 2048 x N 1536) is
    not a kernel rate to check against: that library takes the group sizes as a host tensor and builds each call's
    problem list on the host; the GEMMs' tiles alone would take a sixth of its time."""
    titan = _grouped_tflops("h100", "torchtitan", 2048, 768, rows_per_expert, groups)
    assert titan == pytest.approx(cutlass, rel=0.10)
    assert _grouped_tflops("h100", "torchtitan", 2048, 768, rows_per_expert, groups, half_rows=2104.0) < 0.75 * cutlass


@pytest.mark.parametrize(("rows", "measured"), [(113, 1364 / 1624), (170, 1712 / 2119), (227, 2069 / 2464),
                                                (341, 2388 / 2932)])
def test_a_thinner_expert_runs_slower_at_the_same_rows_as_measured(rows: int, measured: float) -> None:
    """flashinfer PR #2503 (published.md s8), Blackwell masked grouped GEMM in NVFP4, 18 groups: experts of N 7168 x
    K 2048 against N 4096 x K 7168 (twice the work per row) at the same rows per expert. An NVFP4 SM does four times
    a BF16 one's math per second, so ``rows`` FP4 rows stand where ``rows / 4`` BF16 rows do; within 0.10, the
    residuals of the least-squares fit the share comes from (within 11%). Under the former rule (all of the
    roll-off a fixed time per expert) the thin one ran at 0.52-0.57 of the other."""
    thin = _grouped_tflops("b200", "torchtitan", 2048, 7168, rows // 4, 18)
    fat = _grouped_tflops("b200", "torchtitan", 7168, 4096, rows // 4, 18)
    assert thin / fat == pytest.approx(measured, abs=0.10)
    assert thin < fat
