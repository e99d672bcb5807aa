"""The ``deepep`` backend: DeepEP v1 normal kernels (published.md s5/s6), node-limited dedup. A token crosses
RDMA once per distinct remote NVLink domain (to the rank on the sender's rail) and is fanned out over
NVLink to each distinct destination GPU there. Time = max(link-limited time of those flows, SM-limited
time from the ``num_sms`` curve (NVLink) and ``deepep_rdma_bw_per_sm`` (RDMA)) + ``deepep_overhead_s``.
:func:`in_training_s` adds what training adds: barrier waits from arrival spread, and the slowdown of
kernels that run under compute.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.comm.barrier import barrier_wait_s
from sim.comm.case import Case
from sim.comm.costs import DEEPEP_API_BACKENDS, AllToAllResult, CommCost, CommCosts
from sim.comm.fabric import (
    alltoall_result,
    flow_bound,
    flows_from_matrix,
    interpolate,
    nic_bytes_of,
    scaled_capacity,
)
from sim.comm.transport import proxy_s, rdma_share
from sim.routing import part_hit_probabilities

__all__ = ["DedupTraffic", "dedup_result", "dedup_traffic", "deepep_alltoall", "deepep_nvlink_bw", "deepep_v2_alltoall",
           "deepep_v2_nvlink_bw", "in_training_cost", "in_training_s"]

def in_training_s(result: AllToAllResult, costs: CommCosts, *, peers: int, work_s: float,
                  overlapped: bool) -> float:
    """Seconds of one DeepEP normal-mode dispatch or combine (DeepEP's API: :data:`DEEPEP_API_BACKENDS`) inside a
    training step: the microbenchmark model's kernel, slowed by ``costs.overlap_kernel_slowdown`` where the
    schedule runs it under compute (``overlapped``), plus its fixed part (notify overhead, a CPU proxy hop) and
    the barrier wait for the slowest of ``peers`` ranks, whose arrivals spread by ``costs.arrival_cv * work_s``
    (``work_s``: the compute since the previous barrier; :mod:`sim.comm.barrier`). Other backends: the model's
    time.

    >>> from sim.catalog import load_cluster, load_model
    >>> from sim.comm import moe_alltoall, FP8_WITH_SCALES_BYTES_PER_ELEM
    >>> c, m = load_cluster("h800-deepseek", n_gpus=2048), load_model("deepseek-v3-671b")
    >>> r = moe_alltoall(c, range(64), 4096, m, "deepep", "dispatch", CommCosts.default(),
    ...                  bytes_per_elem=FP8_WITH_SCALES_BYTES_PER_ELEM)
    >>> bench = in_training_s(r, CommCosts.default(), peers=64, work_s=0.0, overlapped=False)
    >>> round(bench * 1e6)  # the microbenchmark model alone
    2192
    >>> round(in_training_s(r, CommCosts.default(), peers=64, work_s=7.77e-3, overlapped=True) * 1e6)
    4878
    """
    t = float(result.time_s.max())
    if result.backend not in DEEPEP_API_BACKENDS or t <= 0:
        return t
    fixed = _fixed_s(result, costs)
    kernel = (t - fixed) * (1.0 + (costs.overlap_kernel_slowdown if overlapped else 0.0))
    return kernel + fixed + barrier_wait_s(peers, costs.arrival_cv * max(work_s, 0.0))


def _fixed_s(result: AllToAllResult, costs: CommCosts) -> float:
    """The part of a DeepEP-API kernel's time that compute beside it does not slow: its notify overhead and,
    where it has one, the CPU proxy hop (the cost model's ``latency`` term)."""
    if result.cost is None:
        return costs.deepep_overhead_s
    return dict(result.cost.terms).get("latency", costs.deepep_overhead_s)


def in_training_cost(result: AllToAllResult, costs: CommCosts, *, peers: int, work_s: float,
                     overlapped: bool) -> CommCost | None:
    """The :class:`~sim.comm.costs.CommCost` of :func:`in_training_s` (same arguments, same ``seconds``):
    for DeepEP, the microbenchmark's link and SM terms slowed as the kernel is, and ``latency`` = its
    overhead + the notify's barrier wait for the slowest peer; other backends: the result's own cost.

    >>> from sim.catalog import load_cluster, load_model
    >>> from sim.comm import moe_alltoall
    >>> c, m = load_cluster("hgx-b200", n_gpus=256), load_model("deepseek-v3-671b")
    >>> r = moe_alltoall(c, range(32), 8192, m, "deepep", "dispatch", CommCosts.default(), bytes_per_elem=2.0)
    >>> cost = in_training_cost(r, CommCosts.default(), peers=32, work_s=0.01, overlapped=False)
    >>> cost.seconds == in_training_s(r, CommCosts.default(), peers=32, work_s=0.01, overlapped=False)
    True
    """
    base = result.cost
    if base is None or result.backend not in DEEPEP_API_BACKENDS:
        return base
    seconds = in_training_s(result, costs, peers=peers, work_s=work_s, overlapped=overlapped)
    if float(result.time_s.max()) <= 0:
        return CommCost.of(seconds, base.link, base.bytes, {"latency": seconds}, link_bytes=base.link_bytes)
    slow = 1.0 + (costs.overlap_kernel_slowdown if overlapped else 0.0)
    terms = {k: v * slow for k, v in base.terms if k != "latency"}
    terms["latency"] = _fixed_s(result, costs) + barrier_wait_s(peers, costs.arrival_cv * max(work_s, 0.0))
    return CommCost.of(seconds, base.link, base.bytes, terms, link_bytes=base.link_bytes)


def deepep_nvlink_bw(num_sms: int, phase: str, bytes_per_elem: float, costs: CommCosts) -> float:
    """DeepEP v1's SM-limited NVLink "algorithm bandwidth" (bytes/s) with ``num_sms`` SMs (B200 table).

    Dispatch below 1.5 bytes per element uses the FP8 column. Linear between table points, proportional
    to SMs below the first, flat above the last.

    >>> deepep_nvlink_bw(24, "dispatch", 2.0, CommCosts.default()) / 1e9
    494.0
    """
    if phase == "combine":
        ys = costs.deepep_combine_bw
    else:
        ys = costs.deepep_dispatch_fp8_bw if bytes_per_elem < 1.5 else costs.deepep_dispatch_bf16_bw
    return interpolate(num_sms, costs.deepep_sms, ys)


@dataclass(frozen=True, eq=False)
class DedupTraffic:
    """The bytes of one node-deduplicated dispatch or combine (DeepEP v1 and HybridEP alike), per EP rank.

    ``nvl``/``rdma``: [sender, receiver] bytes over NVLink (relays included) and RDMA; ``self_bytes``:
    bytes a rank keeps (its own experts' tokens); ``own_domain_bytes``: bytes of the tokens that reach
    experts in the sender's own NVLink domain (the local share the benchmarks' "logical" RDMA bytes
    count); ``domain_ranks``: most EP ranks in one NVLink domain; ``n_domains``: domains the group spans.
    """

    nvl: np.ndarray
    rdma: np.ndarray
    self_bytes: np.ndarray
    own_domain_bytes: np.ndarray
    domain_ranks: int
    n_domains: int

    @property
    def nvl_work(self) -> np.ndarray:
        """Algorithm bytes per rank on NVLink: the larger direction plus the rank's own (the benchmarks'
        received-bytes convention)."""
        return np.asarray(np.maximum(self.nvl.sum(1), self.nvl.sum(0)) + self.self_bytes, dtype=float)

    @property
    def rdma_work(self) -> np.ndarray:
        """Physical RDMA bytes per rank, the larger direction."""
        return np.asarray(np.maximum(self.rdma.sum(1), self.rdma.sum(0)), dtype=float)


def dedup_traffic(c: Case) -> DedupTraffic:
    """Node-limited dedup: a token crosses RDMA once per distinct remote NVLink domain (to the rank on the
    sender's rail) and is fanned out over NVLink to each distinct destination GPU there; combine is the
    mirror image."""
    n_exp, k = c.model.n_routed_experts, c.model.top_k
    n, load, dom = c.n, c.load, c.dom
    part_rank = np.arange(n_exp) // (n_exp // n)
    domains, dom_idx = np.unique(dom, return_inverse=True)
    p_rank = part_hit_probabilities(
        n_exp, k, part_rank, n_group=c.model.n_group, topk_group=c.model.topk_group, expert_load=load,
        seed=c.seed, routing=c.routing,
    )
    q_dom = part_hit_probabilities(
        n_exp, k, dom_idx[part_rank], n_group=c.model.n_group, topk_group=c.model.topk_group,
        expert_load=load, seed=c.seed, routing=c.routing,
    )
    if load is not None:  # dedup never exceeds the flat copies
        p_rank = np.minimum(p_rank, k * c.rank_load)
    vol = c.tokens * c.token_bytes
    nvl = np.zeros((n, n))
    rdma = np.zeros((n, n))
    members = [np.flatnonzero(dom_idx == d) for d in range(len(domains))]
    pos = np.zeros(n, dtype=np.int64)
    for mem in members:
        pos[mem] = np.arange(mem.size)
    for d, mem in enumerate(members):
        inside = dom_idx == d
        nvl[np.ix_(mem, mem)] += vol * p_rank[mem][None, :]
        outside = np.flatnonzero(~inside)
        if outside.size:
            relay = mem[pos[outside] % mem.size]
            rdma[outside, relay] += vol * q_dom[d]
            senders = np.bincount(np.searchsorted(mem, relay), minlength=mem.size)
            nvl[np.ix_(mem, mem)] += vol * senders[:, None] * p_rank[mem][None, :]
    self_bytes = vol * p_rank
    np.fill_diagonal(nvl, 0.0)
    if c.phase == "combine":
        nvl, rdma = nvl.T.copy(), rdma.T.copy()
    return DedupTraffic(nvl, rdma, self_bytes, vol * q_dom[dom_idx], max(m.size for m in members), len(domains))


def dedup_result(c: Case, traffic: DedupTraffic, time: np.ndarray, edge_bytes: np.ndarray,
                 terms: dict[str, float] | None = None, link: str = "nvlink") -> AllToAllResult:
    """The :class:`AllToAllResult` of a dedup backend's ``traffic`` finishing at ``time``; ``terms``: the
    backend's cost terms (seconds by :data:`~sim.comm.costs.BOUND_BY`) and ``link`` the class crossed."""
    moved = traffic.nvl + traffic.rdma
    sent = moved.sum(1)
    crossing = (traffic.rdma if link == "rdma" else traffic.nvl).sum(1)
    cost = CommCost.of(float(time.max()), link, float(sent.max()), terms,
                       link_bytes=float(crossing.max())) if terms else None
    return alltoall_result(time, sent, moved.sum(0), traffic.nvl.sum(1), traffic.rdma.sum(1),
                           nic_bytes_of(c.topo, c.ranks, edge_bytes), sms_used=c.num_sms, host_sync_s=0.0,
                           backend=c.backend, phase=c.phase, cost=cost)


def deepep_alltoall(c: Case) -> AllToAllResult:
    """One DeepEP v1 normal-mode dispatch or combine (or UCCL-EP's, the same kernels behind DeepEP's API):
    max(link-limited flow time, SM-limited time from the ``num_sms`` curve (NVLink) and
    ``deepep_rdma_bw_per_sm`` (RDMA)) + ``deepep_overhead_s`` + the CPU proxy hop where the kernel has one
    (:func:`sim.comm.transport.proxy_s`: UCCL-EP, or DeepEP on EFA). Cost terms: the flow time on its
    bottleneck link (``nic``/``nvlink``), the SM-limited time (``sms``), the fixed part (``latency``)."""
    costs = c.costs
    return _dedup_kernel(c, deepep_nvlink_bw(c.num_sms, c.phase, c.bytes_per_elem, costs),
                         costs.deepep_rdma_bw_per_sm * c.num_sms)


def deepep_v2_nvlink_bw(num_sms: int, phase: str, costs: CommCosts) -> float:
    """DeepEP v2's SM-limited NVLink "algorithm bandwidth" (bytes/s) with ``num_sms`` SMs (SM100 EP8 table):
    linear between its points, proportional to SMs below the first, flat above the last.

    >>> round(deepep_v2_nvlink_bw(24, "dispatch", CommCosts.default()) / 1e9), round(deepep_v2_nvlink_bw(12, "combine", CommCosts.default()) / 1e9)
    (643, 338)
    """
    ys = costs.deepep_v2_combine_bw if phase == "combine" else costs.deepep_v2_dispatch_bw
    return interpolate(num_sms, costs.deepep_v2_sms, ys)


def deepep_v2_alltoall(c: Case) -> AllToAllResult:
    """One DeepEP v2 dispatch or combine (ElasticBuffer in its hybrid mode over NCCL GIN, deepseek-ai/DeepEP
    PR #605): v1's node-deduplicated traffic and link rates, with v2's SM-limited rates
    (:func:`deepep_v2_nvlink_bw`, ``deepep_v2_rdma_bw_per_sm``): it reaches the links with a few SMs where v1
    needs 20 or more. GIN is GPU-initiated on InfiniBand (GDAKI) and on EFA (NCCL 2.31's EFA GDA GIN type), so
    no CPU proxy hop. Cost terms as :func:`deepep_alltoall`'s.

    >>> from sim.catalog import load_cluster, load_model
    >>> from sim.comm import moe_alltoall
    >>> c, m = load_cluster("hgx-b200", n_gpus=32), load_model("deepseek-v3-671b")
    >>> v1, v2 = (moe_alltoall(c, range(8), 4096, m, b, "dispatch", CommCosts.default(), bytes_per_elem=2.0, num_sms=12)
    ...           for b in ("deepep", "deepep-v2"))
    >>> bool(v2.time_s.max() < v1.time_s.max())  # at 12 SMs v1 is SM-bound, v2 near the link
    True
    """
    costs = c.costs
    return _dedup_kernel(c, deepep_v2_nvlink_bw(c.num_sms, c.phase, costs), costs.deepep_v2_rdma_bw_per_sm * c.num_sms)


def _dedup_kernel(c: Case, nvlink_sm_bw: float, rdma_sm_bw: float) -> AllToAllResult:
    """A DeepEP-API kernel over node-deduplicated traffic: max(link-limited flow time, SM-limited time at
    ``nvlink_sm_bw`` (NVLink algorithm bytes) and ``rdma_sm_bw`` (RDMA bytes)) + ``deepep_overhead_s`` + the
    CPU proxy hop where the backend has one on this fabric."""
    costs = c.costs
    traffic = dedup_traffic(c)
    proxy = proxy_s(c.cluster, costs, c.backend, internode=traffic.n_domains > 1)
    cap = scaled_capacity(c.topo, costs, "deepep", internode=traffic.n_domains > 1,
                          rdma_fraction=rdma_share(c.cluster, costs, c.backend, proxied=proxy > 0))
    done, edge_bytes, _ = flows_from_matrix(c.topo, c.ranks, traffic.nvl + traffic.rdma, cap, pxn=True)
    sm_time = np.maximum(traffic.nvl_work / nvlink_sm_bw, traffic.rdma_work / rdma_sm_bw)
    slowest = float(np.maximum(done, sm_time).max()) if c.tokens else 0.0
    bound, link = flow_bound(c.topo, edge_bytes, cap)
    fixed = costs.deepep_overhead_s + proxy
    terms = {bound: float(done.max()) if c.tokens else 0.0, "sms": float(sm_time.max()) if c.tokens else 0.0,
             "latency": fixed}
    return dedup_result(c, traffic, np.full(c.n, slowest + fixed), edge_bytes, terms, link)
