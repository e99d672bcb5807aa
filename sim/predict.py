"""Step-time prediction: workload + costs + network -> engine -> pipeline schedule -> :class:`Prediction`.

Two levels, both SimPy:

1. Layer level (:mod:`sim.engine`): one layer's forward, and its backward with recompute, on one rank's
   compute stream and communication streams, timed by the cost model (compute) and :mod:`sim.comm`
   (all-to-alls, TP collectives). Ranks with identical work and traffic form one symmetry class and are
   simulated once: with balanced routing one rank stands for the whole step; skewed routing gives one
   class per EP rank, and every all-to-all waits for the slowest member. Each distinct (layer kind,
   phase) is simulated once per prediction and reused for every layer and microbatch.
2. Pipeline level (:mod:`sim.schedule`): chunks (virtual stages) of layers through 1F1B, interleaved
   1F1B or DualPipe(V), with p2p sends and the FSDP all-gather of each chunk's weights.

Then the step adds the exposed gradient reduce-scatter, the replica all-reduce and the optimizer.

>>> from sim.catalog import load_model, load_cluster
>>> from sim.specs import ParallelPlan
>>> p = predict(load_model("debug"), load_cluster("hgx-b200", n_gpus=8),
...             ParallelPlan(ep=4, dp_shard=8, global_batch=16, seq_len=512))
>>> p.fits_in_memory, p.step_time_s > 0
(True, True)
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sim import comm, ops
from sim.accounting import count_params, memory_per_gpu, torchtitan_flops_per_token
from sim.costs import CostModel, default_costs
from sim.engine import Engine, Record, Task
from sim.errors import PlanError
from sim.layout import Coords, Layout
from sim.placement import distinct_ep_groups
from sim.routing import expert_load, is_balanced, rank_load_factors
from sim.schedule import PipelineResult, PipelineSpec, simulate_pipeline
from sim.specs import ClusterSpec, ModelSpec, ParallelPlan
from sim.stacks import StackProfile, load_stack
from sim.workload import OpSpec, Workload, chunk_layers

__all__ = ["Prediction", "LayerResult", "predict", "validate_plan"]

BF16 = 2.0
FP32 = 4.0


@dataclass
class LayerResult:
    """One layer kind in one phase on the critical symmetry class."""

    time_s: float
    compute_s: dict[str, float]
    exposed_s: dict[str, float]
    log: list[tuple[str, str, str, float, float]]
    #: busy time of the all-to-all / TP stream (a lower bound of ``time_s``)
    comm_s: float = 0.0


@dataclass
class Prediction:
    """A predicted training step. Times in seconds, memory in bytes; ``breakdown`` sums to the step."""

    name: str
    model: str
    gpu: str
    n_gpus: int
    plan: dict[str, Any]
    step_time_s: float
    tokens_per_s_per_gpu: float
    tflops_per_gpu: float
    mfu: float
    breakdown: dict[str, float]
    peak_memory_bytes: float
    memory_capacity_bytes: float
    fits_in_memory: bool
    memory: dict[str, Any] = field(default_factory=dict)
    measured_tokens_per_s_per_gpu: float | None = None
    source: str = ""
    #: the stack profile's name, release and provenance
    stack: dict[str, Any] = field(default_factory=dict)
    trace_data: Any = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in dataclasses.asdict(self).items() if k != "trace_data"}
        if self.measured_tokens_per_s_per_gpu is None:
            out.pop("measured_tokens_per_s_per_gpu")
            out.pop("source")
        return out


def validate_plan(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan) -> None:
    """Raise :class:`PlanError` if the plan cannot run (degrees, microbatches, backend, precision)."""
    plan.check_fits(model, cluster.n_gpus)
    gpu = cluster.gpu
    if plan.ep_backend != "nccl" and not gpu.deepep:
        raise PlanError(f"plan: ep_backend {plan.ep_backend!r} needs a DeepEP-capable GPU; {gpu.name} is not")
    if plan.ep_backend in ("deepep", "hybridep") and not 0 < plan.deepep_sms < gpu.num_sms:
        raise PlanError(f"plan: deepep_sms ({plan.deepep_sms}) must be below the GPU's {gpu.num_sms} SMs")
    if plan.precision in ("mxfp8", "mxfp8-grouped") and not gpu.mxfp8:
        raise PlanError(
            f"plan: precision {plan.precision!r} needs block-scaled FP8 tensor cores (SM100, e.g. b200); "
            f"{gpu.name} ({gpu.arch}) would only run TorchAO's emulated path, which is slower than bf16"
        )


class _Context:
    """Everything one prediction shares: specs, costs, groups of the representative rank, a2a results."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, costs: CostModel,
                 stack: StackProfile) -> None:
        self.model, self.cluster, self.plan, self.costs, self.stack = model, cluster, plan, costs, stack
        self.gpu = cluster.gpu
        self.ccosts = comm.CommCosts(**costs.comm) if costs.comm else comm.CommCosts.default()
        self.layout = Layout(plan)
        self.wl = Workload(model, plan, stack)
        self.rep = self.layout.rank(Coords(0, 0, 0, 0, 0))
        if is_balanced(plan.routing):
            self.load = None
            self.factors = np.ones(1)
        else:
            self.load = expert_load(plan.routing, model.n_routed_experts, plan.routing_seed)
            self.factors = rank_load_factors(self.load, plan.ep)
        self._a2a: dict[str, comm.AllToAllResult] = {}
        self.ep_groups = distinct_ep_groups(self.layout, cluster) if plan.ep > 1 else [self.layout.ep_group(self.rep)]
        self._coll: dict[tuple[str, float], float] = {}

    @property
    def n_classes(self) -> int:
        return len(self.factors)

    def a2a(self, coll: str) -> comm.AllToAllResult:
        phase = coll.split(".")[1]
        if phase not in self._a2a:
            p = self.plan
            bpe = comm.FP8_WITH_SCALES_BYTES_PER_ELEM if (
                p.precision == "fp8-blockwise" and phase == "dispatch" and p.ep_backend != "nccl") else BF16
            # Every distinct placement of an EP group (e.g. one straddling two NVLink domains) is simulated;
            # the slowest decides, as every rank waits for it at the pipeline's and the step's end.
            results = [comm.moe_alltoall(
                self.cluster, group, int(round(self.wl.tokens_dispatched)), self.model,
                p.ep_backend, phase, self.ccosts, bytes_per_elem=bpe, num_sms=p.deepep_sms,
                expert_load=self.load, seed=p.routing_seed,
                routing="round-robin" if p.routing == "round-robin" else "random",
            ) for group in self.ep_groups]
            self._a2a[phase] = max(results, key=lambda res: float(res.time_s.max()))
        return self._a2a[phase]

    def collective(self, kind: str, nbytes: float, group: str = "tp") -> float:
        key = (kind + group, nbytes)
        if key not in self._coll:
            ranks = {"tp": self.layout.tp_group, "dp": self.layout.dp_shard_group,
                     "edp": self.layout.expert_fsdp_group, "rep": self.layout.dp_replicate_group}[group](self.rep)
            fn = {"ag": comm.allgather_time, "rs": comm.reduce_scatter_time, "ar": comm.allreduce_time}[kind]
            self._coll[key] = fn(self.cluster, ranks, nbytes, self.ccosts) if len(ranks) > 1 else 0.0
        return self._coll[key]

    # --- op durations ---------------------------------------------------------------------------
    def op_time(self, op: OpSpec, cls: int) -> tuple[float, int]:
        """(seconds, SMs held) of ``op`` on symmetry class ``cls``."""
        c = self.costs
        k = op.kind
        if k not in ("comm", "host_sync"):
            return c.op_seconds(op, self.gpu, self.stack, float(self.factors[cls])), 0
        if k == "host_sync":
            return self.stack.host_sync_s, 0
        if op.coll == "a2a.counts":
            return self.a2a("a2a.dispatch").host_sync_s, c.nccl_sms
        if op.coll.startswith("a2a."):
            res = self.a2a(op.coll)
            return float(res.time_s[cls if self.n_classes > 1 else 0]), res.sms_used
        if op.coll == "tp.all_gather":
            return self.collective("ag", op.nbytes), c.nccl_sms
        if op.coll == "tp.reduce_scatter":
            return self.collective("rs", op.nbytes), c.nccl_sms
        raise AssertionError(op)

    # --- FSDP sizes -------------------------------------------------------------------------------
    def layer_shards(self, kind: str) -> tuple[float, float]:
        """(dense, expert) parameters of one layer held by this rank after TP/EP/FSDP sharding."""
        pc, p = count_params(self.model), self.plan
        dense = pc.attention_per_layer + pc.norms_per_layer
        expert = 0.0
        if kind == "moe":
            dense += pc.shared_experts_per_layer + pc.router_per_layer
            expert = pc.routed_experts_per_layer / p.ep / p.etp / max(1, p.expert_fsdp)
        elif kind == "dense":
            dense += pc.dense_ffn_per_layer
        elif kind == "embed":
            dense = pc.embedding
        elif kind == "head":
            dense = pc.output + pc.final_norm
        return dense / p.tp / (p.dp_shard * p.cp), expert

    def fsdp_time(self, kind: str, what: str) -> float:
        """All-gather (bf16 weights) or reduce-scatter (fp32 grads) of one layer's shards."""
        dense, expert = self.layer_shards(kind)
        if what == "ag":
            return self.collective("ag", dense * BF16, "dp") + self.collective("ag", expert * BF16, "edp")
        return self.collective("rs", dense * FP32, "dp") + self.collective("rs", expert * FP32, "edp")


_EXPOSED_KIND = {
    ops.MOE_DISPATCH: "comm.a2a",
    ops.MOE_COMBINE: "comm.a2a",
    ops.A2A_COUNT_EXCHANGE: "comm.a2a_count_exchange",
    ops.A2A_HOST_SYNC: "host_sync",
    ops.TP_ALL_GATHER: "comm.tp",
    ops.TP_REDUCE_SCATTER: "comm.tp",
    ops.FSDP_ALL_GATHER: "comm.fsdp",
    ops.FSDP_REDUCE_SCATTER: "comm.fsdp",
}


def _simulate_layer(ctx: _Context, kind: str, phase: str) -> LayerResult:
    """Simulate one layer of ``kind`` in ``phase`` (``fwd``, or ``bwd`` = recompute + backward)."""
    wl = ctx.wl
    recompute = phase == "bwd" and kind in ("dense", "moe")
    seq: list[tuple[OpSpec, str]] = []
    if recompute:
        seq += [(op, "recompute") for op in wl.layer_ops(kind, "recompute")]
    seq += [(op, phase) for op in wl.layer_ops(kind, phase)]
    moe = kind == "moe"
    n_cls = ctx.n_classes if moe else 1
    eng = Engine(ctx.gpu.num_sms)
    # ZeRO-1 (distributed optimizer) keeps the weights resident: no per-layer gathers.
    fsdp_per_layer = ctx.plan.pp == 1 and ctx.plan.dp_shard * ctx.plan.cp > 1 and ctx.stack.param_sharding == "fsdp"
    for cls in range(n_cls):
        if fsdp_per_layer and kind in ("dense", "moe"):
            # Prefetch of the next layer's weights (and, backward, the previous layer's gradients).
            eng.add(cls, Task(ops.FSDP_ALL_GATHER, "fsdp_ag", ctx.fsdp_time(kind, "ag"), sms=ctx.costs.nccl_sms,
                              phase=phase))
            if phase == "bwd":
                eng.add(cls, Task(ops.FSDP_REDUCE_SCATTER, "fsdp_rs", ctx.fsdp_time(kind, "rs"),
                                  sms=ctx.costs.nccl_sms, phase=phase))
        prev: int | None = None
        for i, (op, ph) in enumerate(seq):
            dur, sms = ctx.op_time(op, cls)
            is_comm = op.kind == "comm"
            coll = (kind, phase, i) if is_comm and n_cls > 1 and (op.coll.startswith("a2a")) else None
            task = Task(op.name, "comm" if is_comm else "compute", dur, () if prev is None else (prev,),
                        sms=sms if is_comm else 0, collective=coll, host_sync=op.kind == "host_sync", phase=ph)
            prev = eng.add(cls, task)
    makespan = eng.run()
    # Critical class: the one whose compute finishes last (all end together when a2a-bound).
    per_cls: dict[Hashable, list[Record]] = defaultdict(list)
    for r in eng.log:
        per_cls[r.rank].append(r)
    crit = max(per_cls, key=lambda c: sum(r.end - r.start for r in per_cls[c] if r.stream == "compute"))
    recs = sorted(per_cls[crit], key=lambda r: r.start)
    compute: dict[str, float] = defaultdict(float)
    busy: list[tuple[float, float]] = []
    for r in recs:
        if r.stream == "compute" and r.name != ops.A2A_HOST_SYNC:
            compute["compute." + ops.op_class(r.name)] += r.end - r.start
            busy.append((r.start, r.end))
    exposed: dict[str, float] = defaultdict(float)
    comm_total = 0.0
    covered = sum(e - s for s, e in busy)
    for r in recs:
        if r.stream != "compute" or r.name == ops.A2A_HOST_SYNC:
            overlap = sum(max(0.0, min(e, r.end) - max(s, r.start)) for s, e in busy)
            exposed[_EXPOSED_KIND.get(r.name, "comm.other")] += (r.end - r.start) - overlap
            if r.stream == "comm":
                comm_total += r.end - r.start
    accounted = covered + sum(exposed.values())
    if makespan - accounted > 1e-12:
        exposed["comm.wait"] += makespan - accounted  # streams overlapping each other / waiting for peers
    log = [(r.name, r.stream, r.phase, r.start, r.end) for r in recs]
    return LayerResult(makespan, dict(compute), dict(exposed), log, comm_total)


@dataclass
class _Chunk:
    layers: list[str]
    f_s: float = 0.0
    b_s: float = 0.0
    f_parts: dict[str, float] = field(default_factory=dict)
    b_parts: dict[str, float] = field(default_factory=dict)
    f_comm: float = 0.0
    b_comm: float = 0.0


def _chunks(ctx: _Context, layer_res: dict[tuple[str, str], LayerResult]) -> list[_Chunk]:
    model = ctx.model
    out = []
    chunks = chunk_layers(model, ctx.plan)
    for ci, layers in enumerate(chunks):
        kinds = ["dense" if li < model.n_dense_layers else "moe" for li in layers]
        if ci == 0:
            kinds.insert(0, "embed")
        if ci == len(chunks) - 1:
            kinds.append("head")
        ch = _Chunk(kinds)
        fp: dict[str, float] = defaultdict(float)
        bp: dict[str, float] = defaultdict(float)
        for k in kinds:
            for ph, parts in (("fwd", fp), ("bwd", bp)):
                res = layer_res[(k, ph)]
                if ph == "fwd":
                    ch.f_s += res.time_s
                    ch.f_comm += res.comm_s
                else:
                    ch.b_s += res.time_s
                    ch.b_comm += res.comm_s
                for key, v in {**res.compute_s}.items():
                    parts[key] += v
                for key, v in res.exposed_s.items():
                    parts[key] += v
        ch.f_parts, ch.b_parts = dict(fp), dict(bp)
        out.append(ch)
    return out


def _pair_time(ctx: _Context, f: _Chunk, b: _Chunk) -> float:
    """DualPipe's overlapped F&B of two microbatches: compute serialises, communication hides under it
    (compute slowed by the SMs the communication kernels hold while they overlap)."""
    cf = sum(v for k, v in f.f_parts.items() if k.startswith("compute."))
    cb = sum(v for k, v in b.b_parts.items() if k.startswith("compute."))
    comm_s = f.f_comm + b.b_comm
    sms = ctx.plan.deepep_sms if ctx.plan.ep_backend in ("deepep", "hybridep") else ctx.costs.nccl_sms
    slow = ctx.gpu.num_sms / (ctx.gpu.num_sms - sms) if sms else 1.0
    compute = cf + cb
    overlapped = min(comm_s, compute)
    return max(compute + overlapped * (slow - 1.0), comm_s)


def _wgrad_time(ctx: _Context, kind: str) -> float:
    """Seconds of one layer's weight-gradient GEMMs (the backward's ``wgrad`` passes, about half its GEMM
    time), on the slowest symmetry class: the ``W`` that DualPipe defers to fill bubbles (zero-bubble split)."""
    wgrad = [op for op in ctx.wl.layer_ops(kind, "bwd") if op.gemm_pass == "wgrad"]
    classes = range(ctx.n_classes) if kind == "moe" else range(1)
    return max(sum(ctx.op_time(op, cls)[0] for op in wgrad) for cls in classes)


def predict(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, costs: CostModel | None = None,
            *, name: str = "", stack: StackProfile | str | None = None) -> Prediction:
    """Predict one training step of ``model`` on ``cluster`` under ``plan`` with ``stack`` (a profile, a
    profile name or file; ``None``: torchtitan).

    Raises :class:`~sim.errors.PlanError` for plans that cannot run.
    """
    stack = load_stack(stack)
    cluster = stack.place(cluster)  # e.g. Megatron's 64 ranks per NVL72 rack
    validate_plan(model, cluster, plan)
    costs = costs or default_costs(cluster.gpu)
    ctx = _Context(model, cluster, plan, costs, stack)
    kinds = {"embed", "head", "moe" if model.n_moe_layers else "dense"}
    if model.n_dense_layers:
        kinds.add("dense")
    layer_res = {(k, ph): _simulate_layer(ctx, k, ph) for k in sorted(kinds) for ph in ("fwd", "bwd")}
    chunks = _chunks(ctx, layer_res)
    # Pipeline level.
    pp_bytes = BF16 * ctx.wl.tokens_sp * model.dim
    p2p = 0.0
    if plan.pp > 1:
        dst = ctx.layout.rank(Coords(1, 0, 0, 0, 0))
        p2p = comm.p2p_time(cluster, ctx.rep, dst, pp_bytes, ctx.ccosts)
    first_ag = []
    chunk_rs = []
    for ch in chunks:
        ag = rs = 0.0
        if plan.pp > 1 or stack.param_sharding == "zero1":  # once per step per chunk
            for k in ch.layers:
                ag += ctx.fsdp_time(k, "ag")
                rs += ctx.fsdp_time(k, "rs")
        else:  # per-layer FSDP already inside the layer sims; embed/head gathered once per step
            for k in ch.layers:
                if k in ("embed", "head"):
                    ag += ctx.fsdp_time(k, "ag")
                    rs += ctx.fsdp_time(k, "rs")
        first_ag.append(ag)
        chunk_rs.append(rs)
    pairs: dict[tuple[int, int], float] = {}
    w_s: list[float] = []
    if plan.pp_schedule in ("dualpipe", "dualpipev") and plan.pp > 1:
        pairs = {(i, j): _pair_time(ctx, chunks[i], chunks[j]) for i in range(len(chunks)) for j in range(len(chunks))}
        wgrad = {k: _wgrad_time(ctx, k) for k in kinds}
        w_s = [min(c.b_s, sum(wgrad[k] for k in c.layers)) for c in chunks]
    spec = PipelineSpec(plan.pp_schedule, plan.pp, plan.vpp, plan.n_microbatches,
                        [c.f_s for c in chunks], [c.b_s for c in chunks], p2p, first_ag, pairs, w_s)
    pipe = simulate_pipeline(spec)
    # Step tail: gradient reduce-scatter of the last chunk to finish, replica all-reduce, optimizer.
    last_rank = max(range(len(pipe.actions)), key=lambda p: pipe.actions[p][-1][4])
    last_stage = pipe.actions[last_rank][-1][1]
    rs_tail = chunk_rs[last_stage] if plan.pp > 1 else sum(chunk_rs)
    local_params = sum(
        sum(ctx.layer_shards(k)) for ch in chunks for k in ch.layers
    ) / max(1, plan.pp)
    dp_ar = ctx.collective("ar", local_params * FP32, "rep") if plan.dp_replicate > 1 else 0.0
    opt = costs.memory_time(local_params * 32.0, cluster.gpu.hbm_bw_bytes_per_s, kernels=4,
                            overhead_s=stack.kernel_overhead_s) / stack.eff(cluster.gpu.arch, "mem")
    opt += sum(costs.op_seconds(op, cluster.gpu, stack) for op in ctx.wl.step_ops())  # per-step weight quant
    step = pipe.makespan + rs_tail + dp_ar + opt
    breakdown = _breakdown(pipe, chunks, step, rs_tail, dp_ar, opt, first_ag, plan)
    # Outputs.
    tokens = plan.tokens_per_step
    tps = tokens / step / cluster.n_gpus
    tflops = torchtitan_flops_per_token(model, plan.seq_len) * tps
    mem = memory_per_gpu(model, plan, cluster.gpu, stack)
    trace_data = {"layers": layer_res, "chunks": chunks, "pipeline": pipe, "plan": plan, "step_s": step,
                  "tail": (rs_tail, dp_ar, opt)}
    return Prediction(
        name=name or f"{model.name} on {cluster.n_gpus}x {cluster.gpu.name}",
        model=model.name,
        gpu=cluster.gpu.name,
        n_gpus=cluster.n_gpus,
        plan=plan.as_dict(),
        step_time_s=step,
        tokens_per_s_per_gpu=tps,
        tflops_per_gpu=tflops / 1e12,
        mfu=tflops / cluster.gpu.bf16_flops,
        breakdown=breakdown,
        peak_memory_bytes=float(mem.total_bytes),
        memory_capacity_bytes=float(mem.capacity_bytes),
        fits_in_memory=bool(mem.fits),
        memory=mem.as_dict(),
        stack=stack.describe(),
        trace_data=trace_data,
    )


def _breakdown(pipe: PipelineResult, chunks: list[_Chunk], step: float, rs_tail: float, dp_ar: float,
               opt: float, first_ag: list[float], plan: ParallelPlan) -> dict[str, float]:
    """Seconds per step on the busiest pipeline rank, by category; the values sum to the step time."""
    rank = max(range(len(pipe.actions)), key=pipe.busy)
    out: dict[str, float] = defaultdict(float)
    for phase, stage, _mb, s, e in pipe.actions[rank]:
        if phase in ("FB", "W"):
            _add_overlapped(out, chunks[stage], phase, e - s)
            continue
        parts = []
        if phase == "F":
            parts.append((chunks[stage].f_parts, chunks[stage].f_s))
        if phase == "B":
            parts.append((chunks[stage].b_parts, chunks[stage].b_s))
        total = sum(t for _, t in parts) or 1.0
        scale = (e - s) / total
        for p, _ in parts:
            for k, v in p.items():
                out[k] += v * scale
    fsdp_ag = sum(first_ag[s] for s in {a[1] for a in pipe.actions[rank]})
    out["comm.fsdp"] += fsdp_ag + rs_tail
    if dp_ar:
        out["comm.dp"] += dp_ar
    out["optimizer"] += opt
    out["pipeline_bubble"] = max(0.0, pipe.makespan - pipe.busy(rank) - fsdp_ag)
    return {k: float(v) for k, v in sorted(out.items())}


def _add_overlapped(out: dict[str, float], ch: _Chunk, phase: str, dur: float) -> None:
    """Attribute a DualPipe step to categories: an overlapped F&B pair (``FB``) runs both compute parts back
    to back with the all-to-alls hidden under them, its time beyond that compute (SMs lent to the
    all-to-all kernels, or an all-to-all longer than the compute) counts as ``comm.a2a``; a deferred weight
    gradient (``W``) is backward compute."""
    sources = [ch.f_parts, ch.b_parts] if phase == "FB" else [ch.b_parts]
    compute: dict[str, float] = defaultdict(float)
    for parts in sources:
        for k, v in parts.items():
            if k.startswith("compute."):
                compute[k] += v
    total = sum(compute.values())
    scale = min(1.0, dur / total) if total else 0.0
    for k, v in compute.items():
        out[k] += v * scale
    if dur > total * scale:
        out["comm.a2a"] += dur - total * scale
