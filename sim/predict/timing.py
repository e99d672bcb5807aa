"""Op timing for one prediction: compute ops from the cost model and the stack, communication from
:mod:`sim.comm`, shared-link flows (NIC bytes and standalone rates), FSDP / ZeRO shard sizes.

:class:`Context` holds everything one prediction shares (specs, costs, stack, the representative rank's
groups, memoised all-to-all and collective results) and answers "how long does this op take on symmetry
class ``cls``" (:meth:`Context.op_time`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from sim import comm, ops
from sim.accounting import count_params
from sim.costs import CostModel
from sim.layout import Coords, Layout
from sim.placement import distinct_ep_groups
from sim.predict.memo import SimMemo, layer_sim_key
from sim.routing import is_balanced, rank_load_factors, routed_load
from sim.specs import ClusterSpec, ModelSpec, ParallelPlan
from sim.stacks import StackProfile
from sim.workload import OpSpec, Workload

__all__ = ["BF16", "FP32", "NIC", "Context", "Flow", "OpTime", "is_a2a"]

T = TypeVar("T")

BF16 = 2.0
FP32 = 4.0
#: The key of a rank's NIC in :attr:`sim.engine.Engine.links`.
NIC = "nic"


@dataclass(frozen=True, slots=True)
class Flow:
    """Bytes an op pushes through the rank's NIC and the rate it reaches alone (its own bottleneck)."""

    nbytes: float
    max_rate: float


@dataclass(frozen=True, slots=True)
class OpTime:
    """Seconds of one op on one symmetry class, the SMs it holds, its NIC flow (None: none)."""

    seconds: float
    sms: int = 0
    flow: Flow | None = None


@dataclass
class _OpCaches:
    """A prediction's memoised op-level results that depend only on what its layer simulations read."""

    a2a: dict[str, comm.AllToAllResult] = field(default_factory=dict)
    op_times: dict[tuple[OpSpec, int, bool], OpTime] = field(default_factory=dict)
    node_times: dict[tuple[tuple[str, str], int, bool], list[OpTime]] = field(default_factory=dict)
    node_cache: dict[tuple[str, str], list] = field(default_factory=dict)  # type: ignore[type-arg]
    layer_ops: dict[tuple[str, str], list[OpSpec]] = field(default_factory=dict)


class Context:
    """Specs, costs and stack of one prediction, with memoised communication results; ``memo``: layer and
    pair simulations shared with other predictions of the same model, cluster, costs and stack."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, costs: CostModel,
                 stack: StackProfile, memo: SimMemo | None = None) -> None:
        self.model, self.cluster, self.plan, self.costs, self.stack = model, cluster, plan, costs, stack
        self.gpu = cluster.gpu
        self.ccosts = comm.CommCosts(**costs.comm) if costs.comm else comm.CommCosts.default()
        self.layout = Layout(plan)
        self.wl = Workload(model, plan, stack)
        self.rep = self.layout.rank(Coords(0, 0, 0, 0, 0))
        # "balanced" is the framework's forced balance: TorchTitan round-robin, Megatron random logits.
        if plan.routing == "round-robin" or (plan.routing == "balanced" and stack.force_balance == "round-robin"):
            self.a2a_routing = "round-robin"
        else:
            self.a2a_routing = "random"
        #: routed copies dispatched relative to dropless routing (below 1 when a capacity drops, above when padded)
        self.copies_scale = 1.0
        if is_balanced(plan.routing) and not (plan.expert_capacity_factor or plan.ep_rank_capacity_factor):
            self.load = None
            self.factors = np.ones(1)
        else:
            load = routed_load(plan.routing, model.n_routed_experts, plan.ep, plan.routing_seed,
                               plan.expert_capacity_factor, plan.pad_to_capacity, plan.ep_rank_capacity_factor,
                               model.top_k)
            self.copies_scale = float(load.sum())
            factors = rank_load_factors(load, plan.ep)
            uniform = bool(np.allclose(load, load[0]))
            self.load = None if uniform else load / self.copies_scale
            self.factors = factors[:1] if uniform else factors
        self.nic_bw = cluster.nic_bw_bytes_per_s * cluster.nics_per_gpu * self.ccosts.ib_fraction
        self._coll: dict[tuple[str, str, float], float] = {}
        self._groups: dict[str, list[int]] = {}
        self._barrier_work: float | None = None
        self._ep_groups = distinct_ep_groups(self.layout, self.cluster)
        self._fsdp: dict[tuple[str, str], float] = {}
        self.memo = memo
        self._sim_key: tuple[object, ...] | None = None
        if memo is not None:
            memo.bind(model, cluster, costs, stack)
            # op times, layer nodes and all-to-alls read what the layer simulations read: shared with them
            self.caches = self.shared("op caches", _OpCaches)
            self.wl.share_layer_ops(self.caches.layer_ops)
        else:
            self.caches = _OpCaches()
        #: each (kind, phase) layer's nodes, as :func:`sim.predict.layers.layer_nodes` builds them
        self.node_cache = self.caches.node_cache

    def shared(self, what: Hashable, make: Callable[[], T]) -> T:
        """``make()``, the simulation ``what`` of this prediction, or the memo's result of the same
        simulation of an earlier prediction whose layers read the same (:func:`sim.predict.memo.layer_sim_key`)."""
        if self.memo is None:
            return make()
        if self._sim_key is None:
            self._sim_key = layer_sim_key(self.plan, self._ep_groups)
        return self.memo.get((self._sim_key, what), make)

    @property
    def n_classes(self) -> int:
        return len(self.factors)

    def a2a(self, coll: str) -> comm.AllToAllResult:
        """The dispatch or combine (``coll`` = ``a2a.dispatch`` / ``a2a.combine``) of the slowest EP group."""
        phase = coll.split(".")[1]
        if phase not in self.caches.a2a:
            p = self.plan
            bpe = comm.FP8_WITH_SCALES_BYTES_PER_ELEM if (
                p.precision == "fp8-blockwise" and phase == "dispatch" and p.ep_backend != "nccl"
                and self.stack.fp8_dispatch) else BF16
            results = [
                comm.moe_alltoall(
                    self.cluster, group, int(round(self.wl.tokens_dispatched * self.copies_scale)), self.model, p.ep_backend, phase,
                    self.ccosts, bytes_per_elem=bpe, num_sms=p.deepep_sms, expert_load=self.load,
                    seed=p.routing_seed, routing=self.a2a_routing if self.load is None else "random",
                )
                for group in self._ep_groups
            ]
            self.caches.a2a[phase] = max(results, key=lambda r: float(r.time_s.max()))
        return self.caches.a2a[phase]

    def collective(self, kind: str, nbytes: float, group: str = "tp") -> float:
        key = (kind, group, nbytes)
        if key not in self._coll:
            ranks = self.group_ranks(group)
            fn = {"ag": comm.allgather_time, "rs": comm.reduce_scatter_time, "ar": comm.allreduce_time}[kind]
            self._coll[key] = fn(self.cluster, ranks, nbytes, self.ccosts) if len(ranks) > 1 else 0.0
        return self._coll[key]

    def group_ranks(self, group: str) -> list[int]:
        """The representative rank's ``tp``, ``dp`` (FSDP), ``edp`` (expert FSDP), ``rep`` or ``cp`` group
        (memoised)."""
        ranks = self._groups.get(group)
        if ranks is None:
            ranks = self._groups[group] = list(
                {"tp": self.layout.tp_group, "dp": self.layout.dp_shard_group, "edp": self.layout.expert_fsdp_group,
                 "rep": self.layout.dp_replicate_group, "cp": self.layout.cp_group}[group](self.rep))
        return list(ranks)

    def crosses_nic(self, ranks: list[int]) -> bool:
        dom = self.cluster.nvlink_domain_gpus
        return len({r // dom for r in ranks}) > 1

    # --- op durations ---------------------------------------------------------------------------
    def op_time(self, op: OpSpec, cls: int, overlapped: bool = False) -> OpTime:
        """Seconds, SMs held and NIC flow of ``op`` on symmetry class ``cls`` (memoised); ``overlapped``: the
        op runs in an overlapped pair, under the other chunk's compute (it changes only DeepEP kernels)."""
        key = (op, cls, overlapped)
        t = self.caches.op_times.get(key)
        if t is None:
            t = self.caches.op_times[key] = self._op_time(op, cls, overlapped)
        return t

    def node_times(self, layer: tuple[str, str], cls: int, overlapped: bool = False) -> list[OpTime]:
        """:meth:`op_time` of every node of ``layer`` (its ``(kind, phase)``, as built into :attr:`node_cache`
        by :func:`sim.predict.layers.layer_nodes`), memoised per layer, class and overlap."""
        key = (layer, cls, overlapped)
        out = self.caches.node_times.get(key)
        if out is None:
            out = self.caches.node_times[key] = [self.op_time(n.op, cls, overlapped) for n in self.node_cache[layer]]
        return out

    @property
    def barrier_work_s(self) -> float:
        """Mean compute seconds between two EP barriers of a MoE layer on the representative rank: the
        layer's forward, recompute and backward compute over its all-to-alls (the arrival spread of a
        barrier grows with it: :mod:`sim.comm.barrier`)."""
        if self._barrier_work is None:
            compute, barriers = 0.0, 0
            for phase in ("fwd", "recompute", "bwd"):
                for op in self.wl.layer_ops("moe", phase):
                    if op.kind == "comm":
                        barriers += op.coll in ("a2a.dispatch", "a2a.combine")
                    elif op.kind != "host_sync":
                        compute += self.costs.op_seconds(op, self.gpu, self.stack, 1.0)
            self._barrier_work = compute / barriers if barriers else 0.0
        return self._barrier_work

    def _op_time(self, op: OpSpec, cls: int, overlapped: bool = False) -> OpTime:
        k = op.kind
        if k == "host_sync":  # NCCL: the split sizes' D2H copy; DeepEP/Hybrid-EP: their counts and the stack's glue
            return OpTime(self.stack.host_sync_s * self.stack.host_syncs(self.plan.ep_backend))
        if k != "comm":
            return OpTime(self.costs.op_seconds(op, self.gpu, self.stack, float(self.factors[cls])))
        if op.coll == "a2a.counts":
            return OpTime(self.a2a("a2a.dispatch").host_sync_s, self.ccosts.nccl_channels)
        if op.coll.startswith("a2a."):
            res = self.a2a(op.coll)
            t = float(res.time_s[cls if self.n_classes > 1 else 0])
            if res.backend in comm.DEEPEP_API_BACKENDS:
                t = comm.in_training_s(res, self.ccosts, peers=self.plan.ep, work_s=self.barrier_work_s,
                                       overlapped=overlapped)
            nic = float(res.nic_bytes.max())
            flow = Flow(nic, nic / t) if nic > 0 and t > 0 else None
            return OpTime(t, res.sms_used, flow)
        ring = self.ring_of(op)
        if ring is None:
            raise AssertionError(op)
        return OpTime(self.collective(*ring), self.ccosts.nccl_channels)

    def ring_of(self, op: OpSpec) -> tuple[str, float, str] | None:
        """(kind, bytes per rank, group) of the ring collective a tensor- or context-parallel op is priced as,
        for :meth:`collective` and the breakdown's cost alike; None for any other op. Context parallelism's
        all-to-all sends (cp - 1) / cp of its bytes: an all-gather's traffic of its bytes over cp ranks."""
        if op.coll == "tp.all_gather":
            return "ag", op.nbytes, "tp"
        if op.coll == "tp.reduce_scatter":
            return "rs", op.nbytes, "tp"
        if op.coll == ops.CP_ALL_TO_ALL:
            return "ag", op.nbytes / self.plan.cp, "cp"
        return None

    # --- FSDP / ZeRO sizes ------------------------------------------------------------------------
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
        elif kind == "mtp":  # the projection and the embedding/hidden norms; the embedding is shared
            dense = 2 * self.model.dim * self.model.dim + 2 * self.model.dim
        elif kind == "mtp_head":  # its own final norm; the output head is shared
            dense = self.model.dim
        return dense / p.tp / (p.dp_shard * p.cp), expert

    def fsdp_time(self, kind: str, what: str) -> float:
        """All-gather (bf16 weights) or reduce-scatter (gradients at the stack's / plan's width) of one layer's
        shards (memoised)."""
        t = self._fsdp.get((kind, what))
        if t is None:
            dense, expert = self.layer_shards(kind)
            b = BF16 if what == "ag" else self.wl.stack.grad_bytes
            t = self._fsdp[(kind, what)] = (self.collective(what, dense * b, "dp")
                                            + self.collective(what, expert * b, "edp"))
        return t

    def fsdp_flow(self, kind: str, what: str) -> Flow | None:
        """The NIC bytes of one layer's FSDP gather/reduction (ring: (n-1) shards per rank) and its rate."""
        dense, expert = self.layer_shards(kind)
        b = BF16 if what == "ag" else self.wl.stack.grad_bytes
        nbytes = 0.0
        for n_params, group in ((dense, "dp"), (expert, "edp")):
            ranks = self.group_ranks(group)
            if len(ranks) > 1 and self.crosses_nic(ranks):  # this rank's NIC carries its share of the crossings
                nbytes += (len(ranks) - 1) * n_params * b / comm.ring_nic_ranks(self.cluster, ranks, self.ccosts)
        t = self.fsdp_time(kind, what)
        return Flow(nbytes, nbytes / t) if nbytes > 0 and t > 0 else None

    @property
    def zero1(self) -> bool:
        return self.stack.param_sharding == "zero1"

    @property
    def fsdp_per_layer(self) -> bool:
        """FSDP2's per-layer gathers inside the layer (single stage); pipelines gather per chunk."""
        p = self.plan
        return not self.zero1 and p.pp == 1 and p.dp_shard * p.cp > 1


def is_a2a(op: OpSpec) -> bool:
    return op.kind == "comm" and op.coll in ("a2a.dispatch", "a2a.combine")

