"""Layer and F&B-pair simulation, op by op, on the SimPy engine.

A layer's ops (:class:`sim.workload.Workload`) become engine tasks with data dependencies (not a serial
chain): consecutive compute ops on the ``compute`` stream are one task (their parts kept for the trace
and breakdown), all-to-alls run on the ``comm`` stream and TP collectives on ``tp`` (one stream per process
group, as NCCL gives each communicator its own), host stalls block the rank,
FSDP gathers and reductions run on their own streams and share the NIC with the all-to-alls. Where the
stack overlaps the shared expert with the dispatch (``StackProfile.shared_expert_overlap``), the shared
expert is a side branch issued right after the dispatch; where the standard path's combine is waited on only
at its output's first use (``StackProfile.shared_expert_beside_combine``), right after the combine in the
forward and its recompute. (DeepEP's in-place data path, with no
sender-side permute/unpermute, is in the op lists of :mod:`sim.workload`.)

An overlapped F&B pair (DualPipe's, Megatron's combined 1F1B) interleaves the forward chunk of one
microbatch with the backward chunk of another, layer by layer, in DeepSeek's issue order (its H800 trace):
``combine(B)`` under ``attn(F)``, ``dispatch(F)`` under ``mlp(B)``, ``dispatch(B)`` under ``mlp(W)`` and
``mlp(F)``, ``combine(F)`` under ``attn(B)`` and ``attn(W)``; weight gradients issued after the
backward's next all-to-all (deferred W). Each layer is split into segments at its all-to-alls:
forward ``attn | dispatch | mlp | combine | post``, backward ``post | combine | mlp | dispatch | attn``.

Runs of identical layer pairs are simulated three long and extended by the steady-state increment
(exact for a periodic steady state), so a 61-layer chunk costs a handful of layers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from sim import ops
from sim.engine import HOST_ISSUE, Engine, Record, Task
from sim.joint import issues_eagerly
from sim.predict.timing import NIC, Context, is_a2a
from sim.workload import OpSpec

__all__ = ["SimResult", "Node", "layer_nodes", "simulate_layer", "simulate_pair", "summarize", "EXPOSED_KIND",
           "host_issue_s", "host_floor"]

#: breakdown category of communication / stall ops when nothing computes under them.
EXPOSED_KIND = {
    ops.MOE_DISPATCH: "comm.a2a",
    ops.MOE_COMBINE: "comm.a2a",
    ops.A2A_COUNT_EXCHANGE: "comm.a2a_count_exchange",
    ops.A2A_HOST_SYNC: "host_sync",
    ops.TP_ALL_GATHER: "comm.tp",
    ops.TP_REDUCE_SCATTER: "comm.tp",
    ops.CP_ALL_TO_ALL: "comm.cp",
    ops.FSDP_ALL_GATHER: "comm.fsdp",
    ops.FSDP_REDUCE_SCATTER: "comm.fsdp",
    HOST_ISSUE: "host_issue",
}
#: when several exposed things overlap, the earlier category takes the time (the sum stays the span).
_PRIORITY = ("host_sync", "host_issue", "comm.a2a", "comm.a2a_count_exchange", "comm.tp", "comm.cp", "comm.fsdp", "comm.other")


@dataclass
class SimResult:
    """One simulated layer (or pair) on the critical symmetry class: its span and where the span went.

    ``compute_s`` + ``exposed_s`` sum to ``time_s`` exactly; ``hidden_s``: communication seconds that ran
    under compute, by kind; :attr:`log`: (name, stream, phase, start, end) of every op (compute runs
    expanded), built on first use from ``records`` (the critical class's engine records, each with the
    parts of its merged compute run or None).
    """

    time_s: float
    compute_s: dict[str, float]
    exposed_s: dict[str, float]
    hidden_s: dict[str, float]
    records: list[tuple[Record, list[tuple[str, str, float]] | None]]
    comm_s: float = 0.0
    parts: dict[str, float] = field(default_factory=dict)
    #: (count, busy seconds) of the critical class's communication and host-stall ops, by op name
    comm_ops: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: an extended pair (:func:`_extend`): its ``records`` are the compressed pair's, to which ``repeat``
    #: more periods of ``period_s`` seconds were added (the trace replays them)
    repeat: int = 0
    period_s: float = 0.0
    _log: list[tuple[str, str, str, float, float]] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.parts = {**self.compute_s, **self.exposed_s}

    @property
    def log(self) -> list[tuple[str, str, str, float, float]]:
        if self._log is None:
            self._log = [item for r, parts in self.records for item in _expand(r, parts)]
        return self._log


@dataclass(frozen=True)
class Node:
    """One op of a layer with its data dependencies (indices into the layer's node list; -1 = layer input)."""

    op: OpSpec
    phase: str
    deps: tuple[int, ...]


def layer_nodes(ctx: Context, kind: str, phase: str) -> list[Node]:
    """The nodes of one layer of ``kind`` in ``phase`` (``fwd``, or ``bwd`` = recompute + backward)."""
    key = (kind, phase)
    if key not in ctx.node_cache:
        ctx.node_cache[key] = _layer_nodes(ctx, kind, phase)
    return ctx.node_cache[key]


def _layer_nodes(ctx: Context, kind: str, phase: str) -> list[Node]:
    wl, p, stack = ctx.wl, ctx.plan, ctx.stack
    seq: list[tuple[OpSpec, str]] = []
    if phase == "bwd" and kind in ("dense", "moe"):
        seq += [(op, "recompute") for op in wl.layer_ops(kind, "recompute")]
    seq += [(op, phase) for op in wl.layer_ops(kind, phase)]
    shared: set[int] = set()  # positions (in the reordered seq) of shared-expert ops moved under an a2a
    src: dict[int, int] = {}  # first moved op -> position whose output it reads
    consumer: dict[int, int] = {}  # position that reads the shared branch's output -> last moved op
    if kind == "moe" and p.ep > 1:
        if stack.shared_expert_overlap:
            seq, shared, src, consumer = _shared_under_a2a(seq, "first")
        elif stack.shared_expert_beside_combine and p.ep_backend == "nccl":
            seq, shared, src, consumer = _shared_under_a2a(seq, "last", phases=("fwd", "recompute"))
    # Data dependencies: a chain, except that a weight gradient feeds nothing (its successor depends on its
    # predecessor) and the moved shared expert is a side branch (from before the a2a to its consumer).
    nodes: list[Node] = []
    last = -1  # last node whose output the next op consumes
    side = -1
    for i, (op, ph) in enumerate(seq):
        if i in shared:
            dep = src[i] if i in src else side
            nodes.append(Node(op, ph, (dep,)))
            if op.gemm_pass != "wgrad":
                side = i
            continue
        deps = (last,) if i not in consumer else (last, consumer[i])
        nodes.append(Node(op, ph, deps))
        if op.gemm_pass != "wgrad":
            last = i
    return nodes


def _shared_under_a2a(seq: list[tuple[OpSpec, str]], anchor: Literal["first", "last"],
                      phases: tuple[str, ...] | None = None
                      ) -> tuple[list[tuple[OpSpec, str]], set[int], dict[int, int], dict[int, int]]:
    """The shared experts beside an all-to-all: in each pass (of ``phases``; None: every pass), issue the
    shared-expert ops right after the pass's ``anchor`` all-to-all, reading what the op before that
    all-to-all's group read, and make the first compute op after the pass's last all-to-all (and after the
    moved ops) wait for them. ``"first"``: Megatron's ``moe_shared_expert_overlap`` (forward: beside the
    dispatch); ``"last"``: the shared experts called while the combine is in flight
    (``StackProfile.shared_expert_beside_combine``)."""
    out = list(seq)
    shared: set[int] = set()
    src: dict[int, int] = {}
    consumer: dict[int, int] = {}
    for ph in dict.fromkeys(p for _, p in seq):
        if phases is not None and ph not in phases:
            continue
        pos = [i for i, (op, p) in enumerate(out) if p == ph]
        moved = [i for i in pos if out[i][0].name == ops.MOE_SHARED_EXPERT]
        a2as = [i for i in pos if is_a2a(out[i][0])]
        if not moved or not a2as:
            continue
        block = [out[i] for i in moved]
        rest = [x for i, x in enumerate(out) if i not in set(moved)]
        in_pass = [j for j, (op, p) in enumerate(rest) if p == ph and is_a2a(op)]
        at = in_pass[0] if anchor == "first" else in_pass[-1]  # the anchor all-to-all's position
        start = at
        while start > 0 and (rest[start - 1][0].kind == "host_sync" or rest[start - 1][0].coll == "a2a.counts"):
            start -= 1
        out = rest[: at + 1] + block + rest[at + 1:]
        # positions are now final for this pass; earlier passes' records shift by nothing (moves stay inside
        # their pass, which is contiguous)
        new_shared = set(range(at + 1, at + 1 + len(block)))
        shared |= new_shared
        src[at + 1] = start - 1
        last_a2a = max(j for j, (op, p) in enumerate(out) if p == ph and is_a2a(op))
        after = next((j for j in range(max(last_a2a, at + len(block)) + 1, len(out))
                      if out[j][1] == ph and out[j][0].kind != "comm"), None)
        if after is not None:
            consumer[after] = at + len(block)
    return out, shared, src, consumer


class _Builder:
    """Adds one layer's nodes to an engine rank, compute runs merged into one task each."""

    def __init__(self, ctx: Context, eng: Engine, rank: Hashable, cls: int, key: Hashable,
                 overlapped: bool = False) -> None:
        self.ctx, self.eng, self.rank, self.cls, self.key = ctx, eng, rank, cls, key
        self.n_cls = ctx.n_classes
        self.overlapped = overlapped  # an overlapped pair: its all-to-alls run under the other chunk's compute

    def add(self, layer: tuple[str, str], nodes: Sequence[Node], idx: Sequence[int], handles: dict[int, int],
            start: int | None, tag: Hashable) -> None:
        """Issue ``nodes[i]`` (``layer_nodes`` of ``layer``, its ``(kind, phase)``) for ``i`` in ``idx`` (in
        that order); ``handles`` maps node -> engine handle; ``start`` is the engine handle standing for the
        layer input (-1 deps)."""
        run: list[int] = []
        times = self.ctx.node_times(layer, self.cls, self.overlapped)
        eng, rank = self.eng, self.rank
        per_op = serial_issue_s(self.ctx)

        def dep_handles(i: int) -> list[int]:
            out: list[int] = []
            for d in nodes[i].deps:
                h = start if d < 0 else handles.get(d)
                if h is not None and h not in out:
                    out.append(h)
            return out

        def flush() -> None:
            parts = [(nodes[i].op.name, nodes[i].phase, times[i].seconds) for i in run]
            deps: list[int] = []
            for i in run:
                for h in dep_handles(i):
                    if h not in deps:
                        deps.append(h)
            h = eng.add(rank, Task(parts[0][0], "compute", sum(x[2] for x in parts), tuple(deps),
                                   phase=parts[0][1], args={"parts": parts},
                                   issue_s=per_op * sum(1 for i in run if issued_by_host(nodes[i].op))))
            for i in run:
                handles[i] = h
            run.clear()

        for i in idx:
            node = nodes[i]
            op = node.op
            if op.kind in ("comm", "host_sync"):
                if run:
                    flush()
                t = times[i]
                coll = (self.key, tag, i) if self.n_cls > 1 and op.coll.startswith("a2a") else None
                stream = _stream_of(op)
                flow = t.flow if is_a2a(op) and self.ctx.fsdp_per_layer else None
                task = Task(op.name, stream, 0.0 if flow else t.seconds, tuple(dep_handles(i)),
                            sms=t.sms if op.kind == "comm" else 0,
                            collective=coll, host_sync=op.kind == "host_sync", phase=node.phase,
                            link=NIC if flow else None, nbytes=flow.nbytes if flow else 0.0,
                            max_rate=flow.max_rate if flow else float("inf"),
                            issue_s=per_op if issued_by_host(op) else 0.0)
                handles[i] = eng.add(rank, task)
            else:
                # a run is a pure chain: a node that waits on anything outside the run starts a new one (so
                # a merged task never waits for what only its later members need)
                if run and any(d not in run for d in node.deps):
                    flush()
                run.append(i)
        if run:
            flush()


def _stream_of(op: OpSpec) -> str:
    """The stream an op runs on: one per process group, as NCCL (and DeepEP's buffer) give each communicator
    its own stream: ``comm`` for the EP all-to-alls and their count exchange, ``tp`` for the tensor-parallel
    collectives, ``compute`` for kernels and host stalls. (Within a layer the data dependencies serialise
    them anyway; in an overlapped pair one microbatch's TP gather need not queue behind the other's dispatch.)
    """
    if op.kind != "comm":
        return "compute"
    return "tp" if op.coll.startswith("tp.") else "comm"


def _segments(nodes: Sequence[Node]) -> list[list[int]]:
    """Node indices split at the all-to-alls: [compute, a2a-group, compute, a2a-group, compute, ...].
    The count exchange and host stall before a dispatch belong to its a2a group."""
    segs: list[list[int]] = [[]]
    i = 0
    n = len(nodes)
    while i < n:
        op = nodes[i].op
        if op.kind == "host_sync" or op.coll == "a2a.counts" or is_a2a(op):
            group = []
            while i < n and (nodes[i].op.kind == "host_sync" or nodes[i].op.coll == "a2a.counts"):
                group.append(i)
                i += 1
            if i < n and is_a2a(nodes[i].op):
                group.append(i)
                i += 1
            segs.append(group)
            segs.append([])
            continue
        segs[-1].append(i)
        i += 1
    return segs


def _fsdp_tasks(ctx: Context, eng: Engine, rank: Hashable, kind: str, phase: str) -> None:
    """FSDP2 per-layer prefetch (and, backward, the gradient reduce-scatter) on their own streams."""
    if not (ctx.fsdp_per_layer and kind in ("dense", "moe")):
        return
    whats = ("ag", "rs") if phase == "bwd" else ("ag",)
    for what in whats:
        name = ops.FSDP_ALL_GATHER if what == "ag" else ops.FSDP_REDUCE_SCATTER
        flow = ctx.fsdp_flow(kind, what)
        t = ctx.fsdp_time(kind, what)
        eng.add(rank, Task(name, "fsdp_" + what, 0.0 if flow else t, sms=ctx.ccosts.nccl_channels, phase=phase,
                           link=NIC if flow else None, nbytes=flow.nbytes if flow else 0.0,
                           max_rate=flow.max_rate if flow else float("inf")))


def _engine(ctx: Context) -> Engine:
    return Engine(ctx.gpu.num_sms, links={NIC: ctx.nic_bw})


def simulate_layer(ctx: Context, kind: str, phase: str) -> SimResult:
    """Simulate one layer of ``kind`` in ``phase`` on every symmetry class; the critical class's result."""
    return ctx.shared(("layer", kind, phase), lambda: _simulate_layer(ctx, kind, phase))


def _simulate_layer(ctx: Context, kind: str, phase: str) -> SimResult:
    nodes = layer_nodes(ctx, kind, phase)
    n_cls = ctx.n_classes if kind == "moe" else 1
    eng = _engine(ctx)
    for cls in range(n_cls):
        _fsdp_tasks(ctx, eng, cls, kind, phase)
        _Builder(ctx, eng, cls, cls, (kind, phase)).add((kind, phase), nodes, range(len(nodes)), {}, None, 0)
    eng.run()
    return host_floor(ctx, summarize(eng), [nodes])


def eager_op_s(ctx: Context) -> float:
    """Host seconds to issue one modelled op launched eagerly (``StackProfile.host_op_s``): 0 under compiled regions
    or full-iteration CUDA graphs (:func:`sim.joint.issues_eagerly`)."""
    if ctx.stack.host_op_s <= 0 or not issues_eagerly(ctx.stack, ctx.plan):
        return 0.0
    return ctx.stack.host_op_s


def issued_by_host(op: OpSpec) -> bool:
    """Whether the host launches ``op`` itself: not an op replayed from a partial plan's graphs (``OpSpec.graphed``)
    and not a host stall (timed as ``host_sync``)."""
    return op.kind != "host_sync" and not op.graphed


def host_issue_s(ctx: Context, node_lists: Sequence[Sequence[Node]]) -> float:
    """Seconds the host takes to issue the ops of ``node_lists`` (one layer phase, or the layers of an overlapped
    pair): :func:`eager_op_s` per op the host launches (:func:`issued_by_host`)."""
    per_op = eager_op_s(ctx)
    if per_op <= 0:
        return 0.0
    return per_op * sum(1 for nodes in node_lists for n in nodes if issued_by_host(n.op))


def serial_issue_s(ctx: Context) -> float:
    """Host seconds per eagerly issued op that the engine's host issues in order and holds at each blocking sync
    (``StackProfile.host_serial_syncs``; 0: no host in the engine, the layer-level :func:`host_floor` instead)."""
    return eager_op_s(ctx) if ctx.stack.host_serial_syncs else 0.0


def host_floor(ctx: Context, result: SimResult, node_lists: Sequence[Sequence[Node]]) -> SimResult:
    """``result`` at least as long as the host's issue of its ops (:func:`host_issue_s`): the host issues a layer's
    kernels in order and waits at each blocking sync, so when issuing them takes longer than running them the GPU
    waits for the host. The wait is the exposed category ``host_issue``."""
    host = host_issue_s(ctx, node_lists)
    if host <= result.time_s:
        return result
    exposed = dict(result.exposed_s)
    exposed["host_issue"] = exposed.get("host_issue", 0.0) + host - result.time_s
    return replace(result, time_s=host, exposed_s=exposed, _log=None)


# --- F&B pairs -------------------------------------------------------------------------------------

def _pair_order(n_b: int, n_f: int) -> list[tuple[str, int, str]]:
    """Issue order of one (forward layer, backward layer) pair as (side, segment index, part) with part
    ``main`` or ``w`` (a backward segment's weight gradients). Segments alternate compute (even indices)
    and all-to-all groups (odd). Step ``k``: the forward's all-to-all ``2k-1``, backward compute ``2k``, the
    backward's all-to-all ``2k+1``, the backward's deferred W of ``2k``, forward compute ``2k``. Each
    all-to-all is issued before the other chunk's compute that it runs under, as DeepSeek's trace shows
    (measured-runs.md s3: combine(B) under attn(F), dispatch(F) under mlp(B), dispatch(B) under mlp(W) and
    mlp(F), combine(F) under attn(B)); issued after it, a blocking host sync would hold the all-to-all
    until that compute ended.

    >>> _pair_order(5, 5)[:6]
    [('B', 0, 'main'), ('B', 1, 'main'), ('B', 0, 'w'), ('F', 0, 'main'), ('F', 1, 'main'), ('B', 2, 'main')]
    """
    out: list[tuple[str, int, str]] = []
    for k in range((max(n_b, n_f) + 1) // 2):
        c = 2 * k
        if 0 < c <= n_f:
            out.append(("F", c - 1, "main"))
        if c < n_b:
            out.append(("B", c, "main"))
        if c + 1 < n_b:
            out.append(("B", c + 1, "main"))
        if c < n_b:
            out.append(("B", c, "w"))
        if c < n_f:
            out.append(("F", c, "main"))
    return out


def _split_w(nodes: Sequence[Node], seg: list[int]) -> tuple[list[int], list[int]]:
    main = [i for i in seg if nodes[i].op.gemm_pass != "wgrad"]
    return main, [i for i in seg if nodes[i].op.gemm_pass == "wgrad"]


def _pair_program(ctx: Context, f_kinds: Sequence[str], b_kinds: Sequence[str], eng: Engine, cls: int,
                  key: Hashable) -> None:
    b = _Builder(ctx, eng, cls, cls, key, overlapped=bool(f_kinds) and bool(b_kinds))
    f_nodes = [layer_nodes(ctx, k, "fwd") for k in f_kinds]
    b_nodes = [layer_nodes(ctx, k, "bwd") for k in b_kinds]
    prev: dict[str, int | None] = {"F": None, "B": None}
    for li in range(max(len(f_nodes), len(b_nodes))):
        sides: dict[str, tuple[list[Node], list[list[int]], dict[int, int]]] = {}
        if li < len(f_nodes):
            sides["F"] = (f_nodes[li], _segments(f_nodes[li]), {})
        if li < len(b_nodes):
            sides["B"] = (b_nodes[li], _segments(b_nodes[li]), {})
        n_b = len(sides["B"][1]) if "B" in sides else 0
        n_f = len(sides["F"][1]) if "F" in sides else 0
        for side, si, part in _pair_order(n_b, n_f):
            nodes, segs, handles = sides[side]
            seg = segs[si]
            if side == "B":
                main, w = _split_w(nodes, seg)
                seg = w if part == "w" else main
            b.add((f_kinds[li], "fwd") if side == "F" else (b_kinds[li], "bwd"), nodes, seg, handles, prev[side],
                  (li, side))
        for side, (nodes, _segs, handles) in sides.items():
            chain = [handles[i] for i in handles if nodes[i].op.gemm_pass != "wgrad"]
            if chain:
                prev[side] = max(chain)


def _compress(f_kinds: Sequence[str], b_kinds: Sequence[str], cap: int, min_saving: int = 0
              ) -> tuple[list[str], list[str], int]:
    """Shorten the longest run of identical (F kind, B kind) layer pairs to ``cap``; returns the new kind lists
    and how many pairs were removed. ``min_saving`` > 0: leave the run whole unless the two shortened
    simulations (``cap`` and ``cap - 1`` long, see :func:`simulate_pair`) together cover at least
    ``min_saving`` fewer layer pairs than the one whole simulation."""
    n = max(len(f_kinds), len(b_kinds))
    pairs = [(f_kinds[i] if i < len(f_kinds) else None, b_kinds[i] if i < len(b_kinds) else None) for i in range(n)]
    best, best_len, i = 0, 0, 0
    while i < n:
        j = i
        while j < n and pairs[j] == pairs[i]:
            j += 1
        if j - i > best_len:
            best, best_len = i, j - i
        i = j
    short = n - best_len + cap  # layer pairs of the shortened chunk (the second run has one fewer)
    if best_len <= cap or (min_saving and n - (2 * short - 1) < min_saving):
        return list(f_kinds), list(b_kinds), 0
    keep = pairs[:best + cap] + pairs[best + best_len:]
    return ([f for f, _ in keep if f is not None], [b for _, b in keep if b is not None], best_len - cap)


def simulate_pair(ctx: Context, f_kinds: Sequence[str], b_kinds: Sequence[str]) -> SimResult:
    """The overlapped pair of a forward chunk of ``f_kinds`` layers and a backward chunk of ``b_kinds``."""
    f3, b3, removed = _compress(f_kinds, b_kinds, 3, min_saving=1)
    res3 = _run_pair(ctx, f3, b3)
    if not removed:
        return res3
    f2, b2, _ = _compress(f_kinds, b_kinds, 2)
    res2 = _run_pair(ctx, f2, b2)
    return _extend(res3, res2, removed)


def _run_pair(ctx: Context, f_kinds: Sequence[str], b_kinds: Sequence[str]) -> SimResult:
    """One simulation of the pair (chunks of different lengths compress to the same ones: shared)."""
    return ctx.shared(("pair", tuple(f_kinds), tuple(b_kinds)), lambda: _simulate_pair(ctx, f_kinds, b_kinds))


def _simulate_pair(ctx: Context, f_kinds: Sequence[str], b_kinds: Sequence[str]) -> SimResult:
    moe = "moe" in f_kinds or "moe" in b_kinds
    eng = _engine(ctx)
    for cls in range(ctx.n_classes if moe else 1):
        _pair_program(ctx, f_kinds, b_kinds, eng, cls, ("pair", tuple(f_kinds), tuple(b_kinds)))
    eng.run()
    layers = [layer_nodes(ctx, k, "fwd") for k in f_kinds] + [layer_nodes(ctx, k, "bwd") for k in b_kinds]
    return host_floor(ctx, summarize(eng), layers)


def _extend(r3: SimResult, r2: SimResult, extra: int) -> SimResult:
    """r3 + extra x (r3 - r2), category by category (a periodic steady state repeats the increment)."""
    def ext(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
        keys = sorted(set(a) | set(b))
        return {k: max(0.0, a.get(k, 0.0) + extra * (a.get(k, 0.0) - b.get(k, 0.0))) for k in keys}

    compute, exposed, hidden = ext(r3.compute_s, r2.compute_s), ext(r3.exposed_s, r2.exposed_s), ext(r3.hidden_s, r2.hidden_s)
    time = sum(compute.values()) + sum(exposed.values())
    ops_ = {k: (a[0] + extra * (a[0] - b[0]), a[1] + extra * (a[1] - b[1]))
            for k in r3.comm_ops for a, b in [(r3.comm_ops[k], r2.comm_ops.get(k, (0.0, 0.0)))]}
    return SimResult(time, compute, exposed, hidden, r3.records, r3.comm_s + extra * (r3.comm_s - r2.comm_s),
                     repeat=extra, period_s=max(0.0, r3.time_s - r2.time_s), comm_ops=ops_)


# --- summaries -------------------------------------------------------------------------------------

def _expand(r: Record, parts: list[tuple[str, str, float]] | None) -> list[tuple[str, str, str, float, float]]:
    if not parts:
        return [(r.name, r.stream, r.phase, r.start, r.end)]
    total = sum(p[2] for p in parts) or 1.0
    scale = (r.end - r.start) / total
    out, t = [], r.start
    for name, phase, d in parts:
        out.append((name, r.stream, phase, t, t + d * scale))
        t += d * scale
    return out


def summarize(eng: Engine) -> SimResult:
    """Where the critical class's span went: compute by op class, exposed communication by kind (a sweep:
    at each instant compute wins, then the first exposed category of :data:`_PRIORITY`; idle time with
    nothing running is ``comm.wait``), hidden communication by kind."""
    per_cls: dict[Hashable, list[Record]] = defaultdict(list)
    for r in eng.log:
        per_cls[r.rank].append(r)
    makespan = max((r.end for r in eng.log), default=0.0)
    args = eng.task_args()

    def busy(c: Hashable) -> float:
        return sum(r.end - r.start for r in per_cls[c] if r.stream == "compute" and r.name != ops.A2A_HOST_SYNC)

    crit = max(per_cls, key=busy) if per_cls else 0
    recs = sorted(per_cls.get(crit, []), key=lambda r: (r.start, r.handle))
    compute: dict[str, float] = defaultdict(float)
    records: list[tuple[Record, list[tuple[str, str, float]] | None]] = []
    comp_iv: list[tuple[float, float]] = []
    other_iv: list[tuple[float, float, str]] = []
    comm_total = 0.0
    comm_ops: dict[str, tuple[float, float]] = {}
    for r in recs:
        a = args[r.handle] or {}
        parts = a.get("parts")
        records.append((r, parts))
        if r.stream == "compute" and r.name != ops.A2A_HOST_SYNC:
            comp_iv.append((r.start, r.end))
            total = sum(p[2] for p in parts) if parts else 0.0
            for name, _ph, d in parts or [(r.name, r.phase, r.end - r.start)]:
                share = (r.end - r.start) * (d / total if total else 1.0)
                compute["compute." + ops.op_class(name)] += share
        elif r.name == HOST_ISSUE:
            other_iv.append((r.start, r.end, EXPOSED_KIND[HOST_ISSUE]))
        else:
            kind = EXPOSED_KIND.get(r.name, "comm.other")
            other_iv.append((r.start, r.end, kind))
            n, busy_s = comm_ops.get(r.name, (0.0, 0.0))
            comm_ops[r.name] = (n + 1, busy_s + r.end - r.start)
            if r.stream == "comm":
                comm_total += r.end - r.start
    exposed, hidden = _sweep(makespan, comp_iv, other_iv)
    hidden.pop(EXPOSED_KIND[HOST_ISSUE], None)  # a stream waiting for the host under compute hides no communication
    return SimResult(makespan, dict(compute), exposed, hidden, records, comm_total, comm_ops=comm_ops)


def _sweep(span: float, comp: list[tuple[float, float]], other: list[tuple[float, float, str]]
           ) -> tuple[dict[str, float], dict[str, float]]:
    events: list[tuple[float, int, int]] = []  # (time, +1/-1, category index; -1 = compute)
    kinds = list(_PRIORITY) + sorted({k for *_, k in other} - set(_PRIORITY))
    idx = {k: i for i, k in enumerate(kinds)}
    for s, e in comp:
        if e > s:
            events += [(s, 1, -1), (e, -1, -1)]
    for s, e, k in other:
        if e > s:
            events += [(s, 1, idx[k]), (e, -1, idx[k])]
    events.sort()
    exposed: dict[str, float] = defaultdict(float)
    hidden: dict[str, float] = defaultdict(float)
    active = [0] * len(kinds)
    computing = 0
    t = 0.0
    for time, delta, cat in events + [(span, 0, -2)]:
        if time > t:
            dt = time - t
            on = [i for i, n in enumerate(active) if n > 0]
            if computing > 0:
                for i in on:
                    hidden[kinds[i]] += dt
            elif on:
                exposed[kinds[on[0]]] += dt
            else:
                exposed["comm.wait"] += dt
            t = time
        if cat == -1:
            computing += delta
        elif cat >= 0:
            active[cat] += delta
    return dict(exposed), dict(hidden)
