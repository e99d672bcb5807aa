"""Pipeline assembly and the step tail: chunks of simulated layers (and overlapped pairs) through the
schedule (:mod:`sim.schedule`), then the gradient reductions, replica all-reduce and optimizer.

- FSDP2 (``StackProfile.param_sharding == "fsdp"``): with pipelining each chunk's weights are gathered
  before its first forward and its gradients reduce-scattered after its last backward (the last one to
  finish is exposed); single-stage plans gather per layer inside the layer simulation.
- ZeRO-1 (``"zero1"``, Megatron's distributed optimizer): no per-layer gathers; gradients are
  reduce-scattered in buckets from each chunk's last backward on, and parameters all-gathered after the
  update, the first bucket's before the first forward (:mod:`sim.predict.dp_scale`, which also adds the
  once-per-step reductions and the stragglers).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass, field

from sim import comm
from sim.accounting import optimizer_shard_divisor, optimizer_step_bytes_per_param
from sim.layout import Coords
from sim.predict.dp_scale import DpScale, dp_floor_s, dp_scale
from sim.predict.layers import (
    SimResult,
    _stream_of,
    layer_nodes,
    simulate_layer,
    simulate_pair,
)
from sim.predict.timing import BF16, Context
from sim.schedule import (
    DUAL,
    PipelineResult,
    PipelineSpec,
    overlapped_pairs,
    simulate_makespan,
    simulate_pipeline,
)
from sim.workload import chunk_layers

__all__ = ["Chunk", "Step", "assemble", "step_lower_bound_s"]


@dataclass
class Chunk:
    """One model chunk (virtual stage): its layer kinds, forward/backward seconds and their parts."""

    layers: list[str]
    f_s: float = 0.0
    b_s: float = 0.0
    f_parts: dict[str, float] = field(default_factory=dict)
    b_parts: dict[str, float] = field(default_factory=dict)
    f_hidden: dict[str, float] = field(default_factory=dict)
    b_hidden: dict[str, float] = field(default_factory=dict)
    w_s: float = 0.0
    #: busy seconds of the communication stream (a lower bound of f_s / b_s)
    f_comm: float = 0.0
    b_comm: float = 0.0


@dataclass
class Step:
    """Everything the breakdown and the trace need from one simulated step."""

    layers: dict[tuple[str, str], SimResult]
    pairs: dict[tuple[int, int], SimResult]
    chunks: list[Chunk]
    pipe: PipelineResult
    first_ag: list[float]
    rs_tail: float
    dp_ar: float
    opt: float
    step_s: float
    #: data-parallel work at scale (:mod:`sim.predict.dp_scale`): exposed buckets, once-per-step reductions,
    #: stragglers; with ZeRO-1 its bucketed reduce-scatter replaces ``rs_tail``
    dp: DpScale = field(default_factory=DpScale)
    #: the step boundary's fixed seconds (:attr:`sim.stacks.StackProfile.step_fixed_s`)
    fixed_s: float = 0.0


def _chunks(ctx: Context, layer_res: dict[tuple[str, str], SimResult]) -> list[Chunk]:
    model = ctx.model
    out = []
    wgrad: dict[str, float] = {}
    chunks = chunk_layers(model, ctx.plan)
    for ci, layers in enumerate(chunks):
        kinds = ["dense" if li < model.n_dense_layers else "moe" for li in layers]
        if ci == 0:
            kinds.insert(0, "embed")
        if ci == len(chunks) - 1:
            kinds += ctx.wl.last_chunk_tail()  # the head, then any MTP modules
        ch = Chunk(kinds)
        parts: dict[str, dict[str, float]] = {"fwd": defaultdict(float), "bwd": defaultdict(float)}
        hidden: dict[str, dict[str, float]] = {"fwd": defaultdict(float), "bwd": defaultdict(float)}
        for k in kinds:
            for ph in ("fwd", "bwd"):
                res = layer_res[(k, ph)]
                if ph == "fwd":
                    ch.f_s += res.time_s
                    ch.f_comm += res.comm_s
                else:
                    ch.b_s += res.time_s
                    ch.b_comm += res.comm_s
                for key, v in res.parts.items():
                    parts[ph][key] += v
                for key, v in res.hidden_s.items():
                    hidden[ph][key] += v
        ch.f_parts, ch.b_parts = dict(parts["fwd"]), dict(parts["bwd"])
        ch.f_hidden, ch.b_hidden = dict(hidden["fwd"]), dict(hidden["bwd"])
        for k in kinds:
            if k not in wgrad:
                wgrad[k] = _wgrad_time(ctx, k)
        ch.w_s = min(ch.b_s, sum(wgrad[k] for k in kinds))
        out.append(ch)
    return out


def _wgrad_time(ctx: Context, kind: str) -> float:
    """Seconds of one layer's weight-gradient GEMMs on the slowest symmetry class: the ``W`` that DualPipe
    defers to fill bubbles (zero-bubble split)."""
    wgrad = [op for op in ctx.wl.layer_ops(kind, "bwd") if op.gemm_pass == "wgrad"]
    classes = range(ctx.n_classes) if kind == "moe" else range(1)
    return max(sum(ctx.op_time(op, cls).seconds for op in wgrad) for cls in classes)


def _layer_results(ctx: Context) -> dict[tuple[str, str], SimResult]:
    """Each distinct layer of the model simulated once per phase."""
    kinds = {"embed", "head", "moe" if ctx.model.n_moe_layers else "dense"}
    if ctx.model.n_dense_layers:
        kinds.add("dense")
    kinds.update(ctx.wl.last_chunk_tail())
    return {(k, ph): simulate_layer(ctx, k, ph) for k in sorted(kinds) for ph in ("fwd", "bwd")}


def _pipeline_spec(ctx: Context, chunks: list[Chunk]) -> tuple[PipelineSpec, list[float]]:
    """The schedule's input (without the overlapped pairs' durations) and each chunk's gradient reduction."""
    model, plan, cluster = ctx.model, ctx.plan, ctx.cluster
    p2p = 0.0
    if plan.pp > 1:
        dst = ctx.layout.rank(Coords(1, 0, 0, 0, 0))
        p2p = comm.p2p_time(cluster, ctx.rep, dst, BF16 * ctx.wl.tokens_sp * model.dim, ctx.ccosts)
    first_ag, chunk_rs = [], []
    for ch in chunks:
        ag = rs = 0.0
        for k in ch.layers:
            if ctx.zero1:
                rs += ctx.fsdp_time(k, "rs")  # gradient buckets; params gathered after the update
            elif plan.pp > 1 or k in ("embed", "head", "mtp", "mtp_head"):  # per-layer FSDP is inside the layer sims
                ag += ctx.fsdp_time(k, "ag")
                rs += ctx.fsdp_time(k, "rs")
        first_ag.append(ag)
        chunk_rs.append(rs)
    dual = plan.pp_schedule in DUAL and plan.pp > 1
    combined = plan.ep_overlap and not dual
    spec = PipelineSpec(plan.pp_schedule, plan.pp, plan.vpp, plan.n_microbatches, [c.f_s for c in chunks],
                        [c.b_s for c in chunks], p2p, first_ag, {}, [c.w_s for c in chunks] if dual else (),
                        combined=combined,
                        blocking_p2p=ctx.stack.blocking_p2p and plan.pp_schedule == "1f1b" and plan.pp > 1)
    return spec, chunk_rs


def _fixed_tail(ctx: Context, chunks: list[Chunk]) -> tuple[float, float, float]:
    """(replica all-reduce, optimizer, step boundary) seconds after the pipeline: they do not depend on its
    timeline (the step boundary is :meth:`sim.stacks.StackProfile.step_boundary_s`, paid once per step)."""
    plan, cluster, stack = ctx.plan, ctx.cluster, ctx.stack
    local_params = sum(sum(ctx.layer_shards(k)) for ch in chunks for k in ch.layers) / max(1, plan.pp)
    dp_ar = ctx.collective("ar", local_params * ctx.wl.stack.grad_bytes, "rep") if plan.dp_replicate > 1 else 0.0
    # One fused multi-tensor AdamW (torch.optim.AdamW(fused=True), TE / apex FusedAdam) over the rank's shard:
    # memory-bound, its bytes from the stack's state widths; its few launches are one kernel gap.
    shard = local_params / optimizer_shard_divisor(plan, stack)
    opt = ctx.costs.memory_time(shard * optimizer_step_bytes_per_param(ctx.wl.stack), cluster.gpu.hbm_bw_bytes_per_s,
                                kernels=1, overhead_s=stack.kernel_overhead_s) / stack.eff(cluster.gpu.arch, "mem")
    opt += sum(ctx.costs.op_seconds(op, cluster.gpu, stack) for op in ctx.wl.step_ops())  # per-step weight quant
    return dp_ar, opt, stack.step_boundary_s(plan)


def assemble(ctx: Context) -> Step:
    """Simulate the distinct layers and pairs once each, run the schedule, add the step tail."""
    layer_res = _layer_results(ctx)
    chunks = _chunks(ctx, layer_res)
    spec, chunk_rs = _pipeline_spec(ctx, chunks)
    # Simulate only the overlapped pairs the schedule runs, each distinct (forward layers, backward layers)
    # once; a pair always runs on one rank, so it meets only that rank's own chunks.
    pairs: dict[tuple[int, int], SimResult] = {}
    by_sig: dict[tuple[tuple[str, ...], tuple[str, ...]], SimResult] = {}
    for i, j in sorted(overlapped_pairs(spec)):
        sig = (tuple(chunks[i].layers), tuple(reversed(chunks[j].layers)))
        if sig not in by_sig:
            by_sig[sig] = simulate_pair(ctx, *sig)
        pairs[(i, j)] = by_sig[sig]
    spec = dataclasses.replace(spec, pair_s={k: v.time_s for k, v in pairs.items()})
    pipe = simulate_pipeline(spec)
    last_rank = max(range(len(pipe.actions)), key=lambda p: pipe.actions[p][-1][4])
    last_stage = pipe.actions[last_rank][-1][1]
    dp = dp_scale(ctx, [c.layers for c in chunks], pipe,
                  forward_s_of={k: r.time_s for (k, phase), r in layer_res.items() if phase == "fwd"})
    if ctx.zero1:
        rs_tail = 0.0  # the buckets: dp.grad_rs_s
    else:
        rs_tail = chunk_rs[last_stage] if ctx.plan.pp > 1 else sum(chunk_rs)
    dp_ar, opt, fixed = _fixed_tail(ctx, chunks)
    step = pipe.makespan + rs_tail + dp_ar + opt + dp.total_s + fixed
    return Step(layer_res, pairs, chunks, pipe, first_ag=list(spec.first_f_extra_s), rs_tail=rs_tail, dp_ar=dp_ar,
                opt=opt, step_s=step, dp=dp, fixed_s=fixed)


def step_lower_bound_s(ctx: Context) -> float:
    """Seconds :func:`assemble`'s step takes at least, without simulating an overlapped pair: the same
    schedule with each pair at the busiest of its serial streams (compute, which communication only slows,
    and the all-to-all and TP streams), plus the tail that does not depend on the timeline. The
    schedule's makespan only grows with its durations (a fixed-order list schedule), so this is a bound."""
    chunks = _chunks(ctx, _layer_results(ctx))
    spec, _ = _pipeline_spec(ctx, chunks)
    sums: dict[tuple[tuple[str, str], int, bool], dict[str, float]] = {}
    floor = {(i, j): _pair_compute_s(ctx, chunks[i].layers, chunks[j].layers, sums)
             for i, j in overlapped_pairs(spec)}
    dp_floor = dp_floor_s(ctx, [c.layers for c in chunks])
    return simulate_makespan(dataclasses.replace(spec, pair_s=floor)) + sum(_fixed_tail(ctx, chunks)) + dp_floor


def _pair_compute_s(ctx: Context, f_kinds: list[str], b_kinds: list[str],
                    sums: dict[tuple[tuple[str, str], int, bool], dict[str, float]]) -> float:
    """Seconds one overlapped pair takes at least: on its busiest symmetry class, the busiest of its streams
    (compute, EP all-to-all, TP collectives), each serial, each task at least its own duration (``sums``:
    each layer's per-stream seconds, memoised by the caller)."""
    sides = [(k, "fwd") for k in f_kinds] + [(k, "bwd") for k in b_kinds]
    classes = range(ctx.n_classes if any(k == "moe" for k, _ in sides) else 1)
    overlapped = bool(f_kinds) and bool(b_kinds)  # as the pair's simulation times its ops
    best = 0.0
    for cls in classes:
        total: dict[str, float] = defaultdict(float)
        for layer in sides:
            key = (layer, cls, overlapped)
            if key not in sums:
                per_stream: dict[str, float] = defaultdict(float)
                for n, t in zip(layer_nodes(ctx, *layer), ctx.node_times(layer, cls, overlapped), strict=True):
                    per_stream[_stream_of(n.op)] += t.seconds
                sums[key] = per_stream
            for stream, v in sums[key].items():
                total[stream] += v
        best = max(best, *total.values())
    return best
