"""Step-time breakdown: seconds per category on the busiest pipeline rank, summing exactly to the step,
and the communication hidden under compute, by kind.

:func:`bottleneck` names the largest share of the step's critical time (compute, a communication kind, the
pipeline bubble or the host); :func:`comm_report` gives, for every communication kind of the busiest rank,
the bytes it sends per step, the link class, the achieved rate over the engine's busy seconds and what the
backend's own cost model says limits it (:class:`sim.comm.CommCost`).

Categories: ``compute.<op class>``, exposed communication (``comm.a2a``: exposed all-to-all seconds,
``comm.a2a_count_exchange``, ``comm.tp``, ``comm.cp``, ``comm.fsdp``, ``comm.dp``, ``comm.wait``: a stream waiting for
a peer or another stream with nothing running), ``host_sync`` (GPU idle behind a blocking host copy),
``pipeline_bubble``, ``optimizer``, and data-parallel work at scale (:mod:`sim.predict.dp_scale`):
``comm.dp_exposed`` (ZeRO-1 buckets not hidden), ``comm.dp_once`` (once-per-step reductions) and
``straggler``; ``step_fixed``, the step boundary's fixed seconds (``StackProfile.step_fixed_s``). Hidden
communication (run under compute, so not on the step's path) is reported apart, in
:attr:`sim.predict.Prediction.hidden_comm`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

from sim import comm, ops
from sim.predict.layers import layer_nodes
from sim.predict.pipeline import Step
from sim.predict.timing import BF16, Context, is_a2a
from sim.workload import OpSpec

__all__ = ["BOTTLENECKS", "bottleneck", "breakdown", "comm_report"]

#: breakdown category -> what the step is bound by when that category holds the largest share
BOTTLENECKS = {
    "comm.a2a": f"{ops.MOE_DISPATCH}/combine (ep all-to-all)",
    "comm.a2a_count_exchange": ops.A2A_COUNT_EXCHANGE,
    "comm.tp": f"{ops.TP_ALL_GATHER}/reduce_scatter",
    "comm.cp": f"{ops.CP_ALL_TO_ALL} (context parallelism's exchange around attention)",
    "comm.fsdp": f"{ops.FSDP_ALL_GATHER}/reduce_scatter",
    "comm.dp": ops.DP_ALL_REDUCE,
    "comm.dp_exposed": "data-parallel gradient reduce-scatter / parameter all-gather (exposed buckets)",
    "comm.dp_once": "once-per-step reductions (grad norm, loss, expert bias)",
    "straggler": "stragglers (the slowest data-parallel rank)",
    "comm.wait": "wait (idle on a peer or another stream)",
    "comm.other": "comm.other",
    "host_sync": "host",
    "host_issue": "host (the CPU issuing eager kernels; CUDA graphs, --cuda-graphs, or a larger micro-batch relieve it)",
    "step_fixed": "the step boundary (per-step fixed work)",
    "pipeline_bubble": "pipeline bubble",
}


def breakdown(step: Step) -> tuple[dict[str, float], dict[str, float]]:
    """(exposed breakdown summing to ``step.step_s``, hidden communication by kind) of the busiest rank."""
    pipe, chunks = step.pipe, step.chunks
    rank = max(range(len(pipe.actions)), key=pipe.busy)
    out: dict[str, float] = defaultdict(float)
    hidden: dict[str, float] = defaultdict(float)

    def add(parts: dict[str, float], hid: dict[str, float], total: float, dur: float) -> None:
        scale = dur / total if total > 0 else 0.0
        for k, v in parts.items():
            out[k] += v * scale
        for k, v in hid.items():
            hidden[k] += v * scale
        if total <= 0 and dur > 0:
            out["comm.wait"] += dur

    for idx, (phase, stage, _mb, s, e) in enumerate(pipe.actions[rank]):
        dur = e - s
        if phase == "FB":
            fs, bs = pipe.pair_stages[(rank, idx)]
            res = step.pairs[(fs, bs)]
            add(res.parts, res.hidden_s, res.time_s, dur)
        elif phase == "F":
            ch = chunks[stage]
            add(ch.f_parts, ch.f_hidden, ch.f_s, dur)
        elif phase == "W":
            out["compute.wgrad"] += dur
        else:  # B, or a zero-bubble input-gradient B without its W
            ch = chunks[stage]
            add(ch.b_parts, ch.b_hidden, ch.b_s, dur)
    fsdp_ag = sum(step.first_ag[s] for s in {a[1] for a in pipe.actions[rank]})
    out["comm.fsdp"] += fsdp_ag + step.rs_tail
    if step.dp_ar:
        out["comm.dp"] += step.dp_ar
    out["optimizer"] += step.opt
    for key, v in (("comm.dp_exposed", step.dp.exposed_comm_s), ("comm.dp_once", step.dp.once_s),
                   ("straggler", step.dp.straggler_s)):  # sim.predict.dp_scale
        if v:
            out[key] += v
    if step.fixed_s:
        out["step_fixed"] += step.fixed_s
    out["pipeline_bubble"] = max(0.0, pipe.makespan - pipe.busy(rank) - fsdp_ag)
    total = sum(out.values())
    if abs(total - step.step_s) > 1e-9 * max(1.0, step.step_s):
        out["pipeline_bubble"] += step.step_s - total  # FSDP gathers of stages first reached inside a pair
    return {k: float(v) for k, v in sorted(out.items()) if v or k == "pipeline_bubble"}, \
        {k: float(v) for k, v in sorted(hidden.items())}


def bottleneck(parts: dict[str, float]) -> tuple[str, float]:
    """(what bounds the step, its share of the step) from an exposed breakdown (:func:`breakdown`): compute
    (every ``compute.*`` category and the optimizer) or one of :data:`BOTTLENECKS`, whichever holds the most
    seconds.

    >>> bottleneck({"compute.attn.core": 1.0, "compute.moe.expert_gemm": 1.0, "comm.a2a": 1.5})
    ('compute', 0.5714285714285714)
    >>> bottleneck({"compute.attn.core": 1.0, "comm.a2a": 1.5, "pipeline_bubble": 0.0})[0]
    'moe.dispatch/combine (ep all-to-all)'
    """
    groups: dict[str, float] = defaultdict(float)
    for k, v in parts.items():
        groups["compute" if k.startswith("compute.") or k == "optimizer" else BOTTLENECKS.get(k, k)] += v
    total = sum(groups.values())
    if total <= 0:
        return "compute", 0.0
    name = max(groups, key=lambda g: groups[g])
    return name, groups[name] / total


class _Kind:
    """One communication kind's per-step totals on the busiest rank."""

    def __init__(self) -> None:
        self.count = 0.0
        self.busy_s = 0.0
        self.nbytes = 0.0
        self.cost: comm.CommCost | None = None

    def add(self, count: float, busy_s: float, nbytes: float, cost: comm.CommCost | None) -> None:
        self.count += count
        self.busy_s += busy_s
        self.nbytes += nbytes
        if cost is not None and (self.cost is None or cost.bytes > self.cost.bytes):
            self.cost = cost


def _merge(costs: list[comm.CommCost]) -> comm.CommCost | None:
    """Collectives run back to back (an FSDP layer's dense then expert group) as one cost: terms added."""
    costs = [c for c in costs if c.seconds > 0 or c.bytes > 0]
    if not costs:
        return None
    terms: dict[str, float] = defaultdict(float)
    for c in costs:
        for k, v in c.terms:
            terms[k] += v
    link = "rdma" if any(c.link == "rdma" for c in costs) else "nvlink"
    return comm.CommCost.of(sum(c.seconds for c in costs), link, sum(c.bytes for c in costs), terms)


class _Costs:
    """Per-op :class:`~sim.comm.CommCost` of one prediction, memoised."""

    def __init__(self, ctx: Context, overlapped: bool) -> None:
        self.ctx, self.overlapped = ctx, overlapped
        self._op: dict[OpSpec, comm.CommCost | None] = {}
        self._fsdp: dict[tuple[str, str], comm.CommCost | None] = {}
        self._layer: dict[tuple[str, str], list[tuple[str, float, comm.CommCost]]] = {}

    def op(self, op: OpSpec) -> comm.CommCost | None:
        if op not in self._op:
            self._op[op] = self._op_cost(op)
        return self._op[op]

    def _op_cost(self, op: OpSpec) -> comm.CommCost | None:
        ctx = self.ctx
        if is_a2a(op):
            return comm.in_training_cost(ctx.a2a(op.coll), ctx.ccosts, peers=ctx.plan.ep, work_s=ctx.barrier_work_s,
                                         overlapped=self.overlapped)
        if op.coll == "a2a.counts":
            return ctx.a2a("a2a.dispatch").counts_cost
        ring = ctx.ring_of(op)
        if ring is None:
            return None
        kind, nbytes, group = ring
        ranks = ctx.group_ranks(group)
        return comm.ring_cost(ctx.cluster, ranks, nbytes, ctx.ccosts, kind) if len(ranks) > 1 else None

    def fsdp(self, kind: str, what: str) -> comm.CommCost | None:
        """One layer's FSDP gather (``ag``) or reduction (``rs``) over its dense and expert groups
        (:meth:`Context.fsdp_time`'s two collectives)."""
        key = (kind, what)
        if key not in self._fsdp:
            ctx = self.ctx
            dense, expert = ctx.layer_shards(kind)
            b = BF16 if what == "ag" else ctx.wl.stack.grad_bytes
            parts = []
            for n_params, group in ((dense, "dp"), (expert, "edp")):
                ranks = ctx.group_ranks(group)
                if len(ranks) > 1:
                    parts.append(comm.ring_cost(ctx.cluster, ranks, n_params * b, ctx.ccosts, what))
            self._fsdp[key] = _merge(parts)
        return self._fsdp[key]

    def layer(self, kind: str, phase: str) -> list[tuple[str, float, comm.CommCost]]:
        """(op name, bytes this rank sends, cost) of every communication op of one layer in ``phase``
        (``fwd``, or ``bwd`` with its recompute), FSDP2's per-layer collectives included."""
        key = (kind, phase)
        if key not in self._layer:
            out = []
            for node in layer_nodes(self.ctx, kind, phase):
                cost = self.op(node.op) if node.op.kind == "comm" else None
                if cost is not None:
                    out.append((node.op.name, cost.bytes, cost))
            if self.ctx.fsdp_per_layer and kind in ("dense", "moe"):
                for what in (("ag", "rs") if phase == "bwd" else ("ag",)):
                    cost = self.fsdp(kind, what)
                    if cost is not None:
                        name = ops.FSDP_ALL_GATHER if what == "ag" else ops.FSDP_REDUCE_SCATTER
                        out.append((name, cost.bytes, cost))
            self._layer[key] = out
        return self._layer[key]


def comm_report(ctx: Context, step: Step) -> dict[str, dict[str, Any]]:
    """For every communication kind (an op name of :mod:`sim.ops`) of the busiest pipeline rank, per
    optimizer step: ``bytes_per_step`` (bytes the rank sends), ``link`` (``nvlink`` or ``rdma``),
    ``busy_s`` (seconds its ops ran, from the engine's records), ``achieved_gbps`` (bytes / busy seconds,
    GB/s), ``link_bytes_per_step`` and ``link_gbps`` (the same for the bytes that cross ``link``: an all-to-all's
    sends inside its NVLink domain, DeepEP's NVLink forwards, stay off the network; :attr:`sim.comm.CommCost.crossing_bytes`),
    ``ops_per_step``, ``bound_by`` and ``terms_s`` (the backend's cost terms of one op, seconds, from
    :class:`sim.comm.CommCost`: what dominates the op's time; the largest op's where they differ).

    Layer and pair ops are counted from the simulated records (:attr:`SimResult.comm_ops`), the chunk-level
    FSDP / ZeRO-1 collectives, pipeline sends and the replica all-reduce from the step's schedule.
    Collectives the simulator does not time (ZeRO-1's parameter all-gather after the update, hidden under
    the next step) are not reported. DeepEP's in-training terms are those of the overlapped pairs when the
    schedule runs any (:func:`sim.comm.in_training_cost`).
    """
    pipe, chunks, plan = step.pipe, step.chunks, ctx.plan
    rank = max(range(len(pipe.actions)), key=pipe.busy)
    costs = _Costs(ctx, overlapped=bool(step.pairs))
    kinds: dict[str, _Kind] = defaultdict(_Kind)

    Totals = list[tuple[str, float, float, float, comm.CommCost]]
    memo: dict[tuple[object, ...], Totals] = {}

    def totals(res_ops: dict[str, tuple[float, float]], layers: list[tuple[str, str]]) -> Totals:
        nbytes: dict[str, float] = defaultdict(float)
        cost_of: dict[str, comm.CommCost] = {}
        for kind, phase in layers:
            for name, b, cost in costs.layer(kind, phase):
                nbytes[name] += b
                if name not in cost_of or cost.bytes > cost_of[name].bytes:
                    cost_of[name] = cost
        return [(name, count, busy_s, nbytes[name], cost_of[name])
                for name, (count, busy_s) in res_ops.items() if name in cost_of]

    def chunk_totals(stage: int, phase: str) -> Totals:
        out: Totals = []
        for k in chunks[stage].layers:
            out += totals(step.layers[(k, phase)].comm_ops, [(k, phase)])
        return out

    repeats: dict[tuple[object, ...], int] = defaultdict(int)

    def add(key: tuple[object, ...], make: Callable[[], Totals]) -> None:
        """Count one more run of ``key`` (a chunk or pair of the schedule); its totals are made once and added
        once per distinct key, times its runs, after the loop (a step runs each a microbatch count of times)."""
        if key not in memo:
            memo[key] = make()
        repeats[key] += 1

    last = len(chunks) - 1
    p2p = None
    if plan.pp > 1:
        from sim.layout import Coords

        dst = ctx.layout.rank(Coords(1, 0, 0, 0, 0))
        p2p = comm.p2p_cost(ctx.cluster, ctx.rep, dst, BF16 * ctx.wl.tokens_sp * ctx.model.dim, ctx.ccosts)
    for idx, (phase, stage, _mb, _s, _e) in enumerate(pipe.actions[rank]):
        sends = 0
        if phase == "FB":
            fs, bs = pipe.pair_stages[(rank, idx)]
            res = step.pairs[(fs, bs)]
            add(("FB", fs, bs), lambda: totals(
                res.comm_ops, [(k, "fwd") for k in chunks[fs].layers] + [(k, "bwd") for k in chunks[bs].layers]))
            sends = (fs < last) + (bs > 0)
        elif phase == "F":
            add(("F", stage), lambda: chunk_totals(stage, "fwd"))
            sends = int(stage < last)
        elif phase != "W":
            add(("B", stage), lambda: chunk_totals(stage, "bwd"))
            sends = int(stage > 0)
        if p2p is not None and sends:
            kinds[ops.PP_SEND].add(sends, sends * p2p.seconds, sends * p2p.bytes, p2p)
    for key, n in repeats.items():
        for name, count, busy_s, nbytes, op_cost in memo[key]:
            kinds[name].add(count * n, busy_s * n, nbytes * n, op_cost)
    for stage in sorted({a[1] for a in pipe.actions[rank]}):
        for k in chunks[stage].layers:
            whats: tuple[str, ...] = ()
            if ctx.zero1:
                whats = ("rs",)
            elif plan.pp > 1 or k in ("embed", "head", "mtp", "mtp_head"):
                whats = ("ag", "rs")
            for what in whats:
                cost = costs.fsdp(k, what)
                if cost is not None:
                    name = ops.FSDP_ALL_GATHER if what == "ag" else ops.FSDP_REDUCE_SCATTER
                    kinds[name].add(1, cost.seconds, cost.bytes, cost)
    if step.dp_ar:
        local = sum(sum(ctx.layer_shards(k)) for ch in chunks for k in ch.layers) / max(1, plan.pp)
        cost = comm.ring_cost(ctx.cluster, ctx.group_ranks("rep"), local * ctx.wl.stack.grad_bytes, ctx.ccosts, "ar")
        kinds[ops.DP_ALL_REDUCE].add(1, step.dp_ar, cost.bytes, cost)
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(kinds):
        tot = kinds[name]
        if tot.cost is None or tot.count <= 0:
            continue
        # the kind's ops move the same share across the link (one plan's dispatches are alike): the largest op's
        crossing = tot.nbytes * (tot.cost.crossing_bytes / tot.cost.bytes if tot.cost.bytes > 0 else 1.0)
        out[name] = {"bytes_per_step": tot.nbytes, "link": tot.cost.link,
                     "achieved_gbps": tot.nbytes / tot.busy_s / 1e9 if tot.busy_s > 0 else 0.0,
                     "link_bytes_per_step": crossing,
                     "link_gbps": crossing / tot.busy_s / 1e9 if tot.busy_s > 0 else 0.0,
                     "bound_by": tot.cost.bound_by, "busy_s": tot.busy_s, "ops_per_step": tot.count,
                     "terms_s": dict(tot.cost.terms)}
    return out
