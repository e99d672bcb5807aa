"""The fabric seen by collectives: canonical rank sets (translation invariance), topologies memoised per
rank set, link fractions by backend, concurrent flows (max-min fair) and the generic all-to-all.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from functools import lru_cache

import networkx as nx
import numpy as np

from sim.comm.costs import MOE_BACKENDS, AllToAllResult, CommCost, CommCosts
from sim.comm.transport import nccl_a2a_latency_s, nccl_a2a_net_share
from sim.errors import ConfigError
from sim.specs import ClusterSpec
from sim.topology import EDGE_KINDS, build_topology, route_edge_ids, transfer_times_ids

__all__ = [
    "alltoall_result",
    "alltoall_times",
    "canonical_ranks",
    "check_ranks",
    "flow_bound",
    "flows_from_matrix",
    "interpolate",
    "nic_bytes_of",
    "nvlink_fraction",
    "prepare_alltoall",
    "scaled_capacity",
    "topology_of",
]

def check_ranks(cluster: ClusterSpec, ranks: Sequence[int], what: str) -> tuple[int, ...]:
    """``ranks`` as a tuple of ints, checked: non-empty, distinct, inside the cluster (``what`` names the caller)."""
    rk = tuple(map(int, ranks))
    if not rk:
        raise ConfigError(f"{what}: ranks must not be empty")
    if len(set(rk)) != len(rk):
        raise ConfigError(f"{what}: ranks must be distinct, got {list(rk)[:16]}")
    if min(rk) < 0 or max(rk) >= cluster.n_gpus:
        raise ConfigError(f"{what}: ranks must lie in [0, n_gpus={cluster.n_gpus}), got {min(rk)}..{max(rk)}")
    return rk


def canonical_ranks(cluster: ClusterSpec, ranks: tuple[int, ...]) -> tuple[ClusterSpec, tuple[int, ...]]:
    """Shift ranks to the first leaf group/domain period and size the cluster to them (cache key)."""
    gpn, dom = cluster.gpus_per_node, cluster.nvlink_domain_gpus
    group = gpn * cluster.fabric.nodes_per_leaf
    lo, hi = min(ranks), max(ranks)
    if lo // group == hi // group:  # one leaf group: any domain-aligned shift keeps the structure
        period = math.lcm(gpn, dom)
        base = (lo // period) * period
        if (hi - base) // group:  # the shifted set must not straddle a group boundary
            base = (lo // math.lcm(group, dom)) * math.lcm(group, dom)
    else:
        period = math.lcm(group, dom)
        base = (lo // period) * period
    shifted = tuple(r - base for r in ranks)
    n = max(gpn, -(-(max(shifted) + 1) // gpn) * gpn)
    return dataclasses.replace(cluster, n_gpus=n, name="", source=""), shifted


@lru_cache(maxsize=256)
def topology_of(cluster: ClusterSpec, ranks: tuple[int, ...]) -> nx.DiGraph:
    return build_topology(cluster, gpus=ranks)


def nvlink_fraction(cluster: ClusterSpec, costs: CommCosts) -> float:
    if cluster.nvlink_bw_bytes_per_s > 0 and costs.nvlink_override_is_achievable:
        return 1.0
    digits = "".join(ch for ch in cluster.gpu.arch if ch.isdigit())
    nvl5 = bool(digits) and int(digits) >= 100  # Blackwell (sm100+) has NVLink5
    return costs.nvlink_fraction_nvl5 if nvl5 else costs.nvlink_fraction_nvl4


def scaled_capacity(topo: nx.DiGraph, costs: CommCosts, kind: str, *, internode: bool = False,
                    rdma_fraction: float | None = None) -> np.ndarray:
    """Each edge's achievable rate for ``kind``: ``nccl`` (NCCL's point-to-point rates), ``nccl_a2a`` (NCCL's
    all-to-all: its network edges at :func:`sim.comm.transport.nccl_a2a_net_share`) or DeepEP's (any other kind;
    ``rdma_fraction``: its network edges' share of the line, :func:`sim.comm.transport.rdma_share`; default
    ``CommCosts.deepep_rdma_fraction``)."""
    cluster: ClusterSpec = topo.graph["cluster"]
    nvl = nvlink_fraction(cluster, costs)
    if kind in ("nccl", "nccl_a2a"):
        net = nccl_a2a_net_share(cluster, costs) if kind == "nccl_a2a" else costs.ib_fraction
        frac = {"nvlink": nvl, "pcie": costs.ib_fraction, "nic": net, "fabric": net}
    else:
        rd = costs.deepep_rdma_fraction if rdma_fraction is None else rdma_fraction
        nvl *= costs.deepep_internode_nvlink_fraction if internode else costs.deepep_nvlink_fraction
        frac = {"nvlink": nvl, "pcie": rd, "nic": rd, "fabric": rd}
    scale = np.array([frac[k] for k in EDGE_KINDS])
    return np.asarray(topo.graph["capacity"] * scale[topo.graph["edge_kind"]], dtype=float)


def interpolate(x: float, xs: Sequence[float], ys: Sequence[float], *, log_x: bool = False) -> float:
    """Piecewise linear in x (or log x), flat beyond the last point, proportional below the first."""
    if x <= xs[0]:
        return ys[0] * x / xs[0] if not log_x else ys[0]
    f = np.log2 if log_x else (lambda v: np.asarray(v, dtype=float))
    return float(np.interp(f(x), f(np.asarray(xs, dtype=float)), ys))


def flows_from_matrix(
    topo: nx.DiGraph, ranks: tuple[int, ...], send: np.ndarray, capacity: np.ndarray, pxn: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-rank completion (max over the rank's flows), per-edge bytes, and the flow times matrix."""
    n = len(ranks)
    rk = np.asarray(ranks)
    i, j = np.nonzero((send > 0) & ~np.eye(n, dtype=bool))
    paths = route_edge_ids(topo, rk[i], rk[j], pxn=pxn)
    t = transfer_times_ids(paths, send[i, j], capacity, topo.graph["latency"])
    tm = np.zeros((n, n))
    tm[i, j] = t
    n_edges = capacity.size
    edge_bytes = np.bincount(
        np.where(paths < 0, n_edges, paths).ravel(),
        weights=np.repeat(send[i, j], paths.shape[1]),
        minlength=n_edges + 1,
    )[:n_edges]
    return np.maximum(tm.max(axis=1), tm.max(axis=0)), edge_bytes, tm


def flow_bound(topo: nx.DiGraph, edge_bytes: np.ndarray, capacity: np.ndarray) -> tuple[str, str]:
    """(what limits concurrent flows, the link class they cross) from their per-edge bytes: the edge that
    needs the longest at its (scaled) capacity is the flows' bottleneck; ``"nvlink"`` if it is an NVLink
    edge, else ``"nic"`` (the GPU-NIC, NIC-leaf and fabric edges of :data:`sim.topology.EDGE_KINDS`). The
    class is ``"rdma"`` when any byte leaves the NVLink domain, else ``"nvlink"``."""
    kinds = topo.graph["edge_kind"]
    nvl = EDGE_KINDS.index("nvlink")
    busy = np.divide(edge_bytes, capacity, out=np.zeros_like(edge_bytes, dtype=float), where=capacity > 0)
    bound = "nvlink" if not busy.size or kinds[int(np.argmax(busy))] == nvl else "nic"
    link = "rdma" if bool(np.any(edge_bytes[kinds != nvl] > 0)) else "nvlink"
    return bound, link


def nic_bytes_of(topo: nx.DiGraph, ranks: tuple[int, ...], edge_bytes: np.ndarray) -> np.ndarray:
    loc = np.searchsorted(topo.graph["gpus"], np.asarray(ranks))
    up = topo.graph["e_gpu_nic"][loc]  # (n, nics)
    return np.asarray(np.maximum(edge_bytes[up].sum(axis=1), edge_bytes[up + 1].sum(axis=1)), dtype=float)


def prepare_alltoall(
    topo_or_cluster: nx.DiGraph | ClusterSpec, ranks: Sequence[int], what: str
) -> tuple[nx.DiGraph, tuple[int, ...]]:
    if isinstance(topo_or_cluster, nx.DiGraph):
        return topo_or_cluster, tuple(int(r) for r in ranks)
    rk = check_ranks(topo_or_cluster, ranks, what)
    c, shifted = canonical_ranks(topo_or_cluster, rk)
    return topology_of(c, shifted), shifted


def alltoall_times(
    topo_or_cluster: nx.DiGraph | ClusterSpec,
    ranks: Sequence[int],
    send_bytes: np.ndarray,
    costs: CommCosts,
    *,
    kind: str = "nccl",
) -> np.ndarray:
    """Completion time (s) per rank of an all-to-all: ``send_bytes[a, b]`` from ``ranks[a]`` to ``ranks[b]``.

    All transfers start together and share links max-min fairly (``kind`` picks the link fractions:
    ``"nccl"`` or ``"deepep"``/``"hybridep"``/``"deepep-ll"``; ``"deepep-ll"`` routes without PXN). A rank
    finishes with the last flow it sends or receives; ``"nccl"`` adds NCCL's fixed cost per call
    (:func:`sim.comm.transport.nccl_a2a_latency_s`: launch and per-peer protocol, or EFA's per-call cost when the
    ranks span NVLink domains), the DeepEP kinds ``deepep_overhead_s``. The diagonal is local.

    >>> from sim.catalog import load_cluster
    >>> m = np.full((8, 8), 1e9)
    >>> t = alltoall_times(load_cluster("hgx-b200", n_gpus=8), range(8), m, CommCosts.default())
    >>> round(float(t[0]) * 1e6, 1)  # 7 GB over 721.8 GB/s + launch + 7 peers + NVLink latency
    9716.0
    """
    if kind not in MOE_BACKENDS:
        raise ConfigError(f"alltoall_times: kind must be one of {', '.join(MOE_BACKENDS)}; got {kind!r}")
    send = np.asarray(send_bytes, dtype=float)
    n = len(ranks)
    if send.shape != (n, n):
        raise ConfigError(f"alltoall_times: send_bytes must be ({n} x {n}) for {n} ranks, got {send.shape}")
    if np.any(send < 0) or not np.all(np.isfinite(send)):
        raise ConfigError("alltoall_times: send_bytes must be finite and non-negative")
    topo, rk = prepare_alltoall(topo_or_cluster, ranks, "alltoall_times")
    cap = scaled_capacity(topo, costs, "nccl" if kind == "nccl" else "deepep")
    done, _, _ = flows_from_matrix(topo, rk, send, cap, pxn=kind != "deepep-ll")
    if kind == "nccl":
        cluster: ClusterSpec = topo.graph["cluster"]
        internode = len({r // cluster.nvlink_domain_gpus for r in rk}) > 1
        return done + nccl_a2a_latency_s(cluster, costs, n, internode=internode)
    return done + costs.deepep_overhead_s


def alltoall_result(time: np.ndarray, sent: np.ndarray, recv: np.ndarray, nvl: np.ndarray, rdma: np.ndarray,
            nic: np.ndarray, *, sms_used: int, host_sync_s: float, backend: str, phase: str,
            cost: CommCost | None = None, counts_cost: CommCost | None = None) -> AllToAllResult:
    """An :class:`AllToAllResult` whose arrays are read-only (results are memoised and shared)."""
    for array in (time, sent, recv, nvl, rdma, nic):
        array.setflags(write=False)
    return AllToAllResult(time_s=time, sent_bytes=sent, recv_bytes=recv, nvlink_bytes=nvl, rdma_bytes=rdma,
                          nic_bytes=nic, sms_used=sms_used, host_sync_s=host_sync_s, backend=backend, phase=phase,
                          cost=cost, counts_cost=counts_cost)


check_ranks, canonical, topo, nvlink_fraction, scaled_capacity, interp = (
    check_ranks, canonical_ranks, topology_of, nvlink_fraction, scaled_capacity, interpolate)
flows_from_matrix, nic_bytes, prepare, result = flows_from_matrix, nic_bytes_of, prepare_alltoall, alltoall_result
