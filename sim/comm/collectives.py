"""NCCL ring collectives over the group's bottleneck link (all-gather, reduce-scatter, all-reduce) and
point-to-point sends.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from sim.comm.costs import CommCost, CommCosts
from sim.comm.fabric import (
    check_ranks,
    flow_bound,
    nvlink_fraction,
    prepare_alltoall,
    scaled_capacity,
)
from sim.errors import ConfigError
from sim.specs import ClusterSpec
from sim.topology import route_edge_ids, transfer_times_ids

__all__ = ["allgather_time", "allreduce_time", "allreduce_tree_time", "p2p_cost", "p2p_time", "reduce_scatter_time",
           "ring_cost", "ring_latency_s", "ring_nic_ranks"]

def _ring(cluster: ClusterSpec, ranks: Sequence[int], nbytes: float, costs: CommCosts, what: str) -> tuple[int, float, float]:
    rk = check_ranks(cluster, ranks, what)
    if nbytes < 0:
        raise ConfigError(f"{what}: bytes_per_rank must be non-negative, got {nbytes}")
    nvl = cluster.nvlink_bw * nvlink_fraction(cluster, costs)
    arr = np.asarray(rk)
    if len(set((arr // cluster.nvlink_domain_gpus).tolist())) == 1:
        return len(rk), nvl, costs.nccl_step_nvlink_s
    nic = cluster.nic_bw_bytes_per_s * cluster.nics_per_gpu * costs.ib_fraction
    groups = arr // cluster.gpus_per_node // cluster.fabric.nodes_per_leaf
    inter = costs.nccl_step_ib_s + (costs.nccl_step_spine_s if len(set(groups.tolist())) > 1 else 0.0)
    n, n_domains = len(rk), len(set((arr // cluster.nvlink_domain_gpus).tolist()))
    # NCCL's ring (tuning.cc): of its n-1 steps per pass, N-1 cross to the next NVLink domain, the rest stay
    # inside one; returned as the mean step latency, so (n-1) x step is the pass's latency.
    step = ((n - n_domains) * costs.nccl_step_nvlink_s + (n_domains - 1) * inter) / (n - 1)
    return n, min(nvl, nic * ring_nic_ranks(cluster, rk, costs)), step


def ring_nic_ranks(cluster: ClusterSpec, ranks: Sequence[int], costs: CommCosts | None = None) -> int:
    """How many of a ring group's ranks in one NVLink domain carry its traffic out of the domain: NCCL runs one
    ring per channel and rotates which rank of each domain sends out of it (a different NIC per channel), so a
    domain's crossings spread over the NICs of all the group's ranks inside it; the domain holding fewest of them
    binds. Each rank's NIC so carries ``1 / ring_nic_ranks`` of what a ring step moves. 0 when the group stays in
    one domain; 1 across domains when ``costs.nccl_ring_nic_spread`` is off (every crossing on one NIC).

    Measured: NCCL reduce-scatter at 260-360 GB/s bus bandwidth across 4-128 H100 nodes of 8 GPUs and one 400 Gb/s
    NIC each (nccl #1229), all-reduce ~350 GB/s over 1,984 H200 (nccl-tests #283), ~6-7x one NIC; GB200 racks:
    793 GB/s over 2 racks, within 5% of one rack's NVLink (coreweave nccl-tests; published.md s8).

    >>> from sim.catalog import load_cluster
    >>> c = load_cluster("hgx-b200", n_gpus=32)
    >>> ring_nic_ranks(c, range(32)), ring_nic_ranks(c, range(0, 32, 8)), ring_nic_ranks(c, range(8))
    (8, 1, 0)
    """
    arr = np.asarray(list(ranks))
    per_domain = np.bincount(arr // cluster.nvlink_domain_gpus)
    per_domain = per_domain[per_domain > 0]
    if per_domain.size < 2:
        return 0
    return int(per_domain.min()) if costs is None or costs.nccl_ring_nic_spread else 1


def ring_latency_s(cluster: ClusterSpec, ranks: Sequence[int], costs: CommCosts, kind: str = "rs") -> float:
    """Latency part of one ring call (s): launch + the steps' latencies, NCCL's
    ``base + (nsteps - nInterSteps) x intraLat + nInterSteps x interLat`` with ``nsteps`` = n-1 (``rs``/``ag``)
    or 2(n-1) (``ar``) and ``nInterSteps`` = N-1 or 2(N-1) over N NVLink domains.

    >>> from sim.catalog import load_cluster
    >>> c = load_cluster("hgx-b200", n_gpus=32)
    >>> round(ring_latency_s(c, range(32), CommCosts.default()) * 1e6, 1)  # 10 + 28 x 3.4 + 3 x 14
    147.2
    """
    n, _, step = _ring(cluster, ranks, 0.0, costs, "ring_latency_s")
    return 0.0 if n == 1 else costs.nccl_launch_s + (2 if kind == "ar" else 1) * (n - 1) * step


def allreduce_tree_time(cluster: ClusterSpec, ranks: Sequence[int], nbytes: float, costs: CommCosts) -> float:
    """NCCL tree all-reduce time (s) of a small ``nbytes`` buffer (a gradient norm, a loss, a bias vector):
    ``base + 2((ranks per domain - 1) x intra + log2(domains) x inter)`` (tuning.cc, LL protocol), plus the
    bytes up and down the tree at the group's bottleneck rate.

    >>> from sim.catalog import load_cluster
    >>> c = load_cluster("hgx-b200", n_gpus=64)
    >>> round(allreduce_tree_time(c, range(64), 4.0, CommCosts.default()) * 1e6, 2)  # 6.8 + 2(7 x .6 + 3 x 5)
    45.2
    """
    n, bw, _ = _ring(cluster, ranks, nbytes, costs, "allreduce_tree_time")
    if n == 1:
        return 0.0
    arr = np.asarray(list(ranks))
    n_domains = len(set((arr // cluster.nvlink_domain_gpus).tolist()))
    per_domain = math.ceil(n / n_domains)
    latency = costs.nccl_tree_base_s + 2 * ((per_domain - 1) * costs.nccl_tree_hop_nvlink_s
                                            + math.log2(n_domains) * costs.nccl_tree_hop_net_s)
    return latency + 2 * nbytes / bw


def allgather_time(cluster: ClusterSpec, ranks: Sequence[int], bytes_per_rank: float, costs: CommCosts) -> float:
    """Ring all-gather time (s); ``bytes_per_rank`` is each rank's input shard.

    The ring runs at the group's bottleneck: achievable NVLink inside one domain, else the NICs of the group's
    ranks in a domain, over which NCCL's channels spread the crossings (:func:`ring_nic_ranks`; capped by NVLink);
    the n-1 steps pay NCCL's latencies (:func:`ring_latency_s`: an NVLink step inside a domain, an IB step, + spine
    when the group spans leaf groups, into the next one), plus one ``nccl_launch_s``.

    >>> from sim.catalog import load_cluster
    >>> round(allgather_time(load_cluster("hgx-b200", n_gpus=16), range(16), 1e9, CommCosts.default()), 6)
    0.038731
    """
    n, bw, step = _ring(cluster, ranks, bytes_per_rank, costs, "allgather_time")
    return 0.0 if n == 1 else costs.nccl_launch_s + (n - 1) * (bytes_per_rank / bw + step)


def reduce_scatter_time(cluster: ClusterSpec, ranks: Sequence[int], bytes_per_rank: float, costs: CommCosts) -> float:
    """Ring reduce-scatter time (s); ``bytes_per_rank`` is each rank's output shard (same cost as all-gather).

    >>> from sim.catalog import load_cluster
    >>> round(reduce_scatter_time(load_cluster("hgx-b200", n_gpus=8), range(8), 1e9, CommCosts.default()) * 1e3, 3)
    9.732
    """
    return allgather_time(cluster, ranks, bytes_per_rank, costs)


def allreduce_time(cluster: ClusterSpec, ranks: Sequence[int], bytes_per_rank: float, costs: CommCosts) -> float:
    """Ring all-reduce time (s) of a ``bytes_per_rank`` buffer: reduce-scatter + all-gather of 1/n shards.

    >>> from sim.catalog import load_cluster
    >>> round(allreduce_time(load_cluster("hgx-b200", n_gpus=8), range(8), 8e9, CommCosts.default()) * 1e3, 3)
    19.454
    """
    n, bw, step = _ring(cluster, ranks, bytes_per_rank, costs, "allreduce_time")
    return 0.0 if n == 1 else costs.nccl_launch_s + 2 * (n - 1) * (bytes_per_rank / n / bw + step)


def p2p_time(cluster: ClusterSpec, src: int, dst: int, nbytes: float, costs: CommCosts) -> float:
    """One NCCL send/recv of ``nbytes`` (s): launch + bytes over the route's achievable bottleneck + latency.

    >>> from sim.catalog import load_cluster
    >>> round(p2p_time(load_cluster("hgx-b200", n_gpus=16), 0, 8, 48.5e9, CommCosts.default()), 6)
    1.000012
    """
    rk = check_ranks(cluster, (src, dst), "p2p_time") if src != dst else (src,)
    if nbytes < 0:
        raise ConfigError(f"p2p_time: nbytes must be non-negative, got {nbytes}")
    if src == dst:
        return 0.0
    topo, sh = prepare_alltoall(cluster, rk, "p2p_time")
    cap = scaled_capacity(topo, costs, "nccl")
    paths = route_edge_ids(topo, np.array([sh[0]]), np.array([sh[1]]))
    t = transfer_times_ids(paths, np.array([float(nbytes)]), cap, topo.graph["latency"])
    return costs.nccl_launch_s + float(t[0])


def ring_cost(cluster: ClusterSpec, ranks: Sequence[int], bytes_per_rank: float, costs: CommCosts,
              kind: str = "ag") -> CommCost:
    """The :class:`CommCost` of a ring all-gather / reduce-scatter (``kind`` ``"ag"``/``"rs"``; the same time as
    :func:`allgather_time`) or all-reduce (``"ar"``, :func:`allreduce_time`): the steps' bytes over the
    ring's bottleneck (``nvlink`` inside one domain, else ``nic`` when the NICs are slower than NVLink) and
    the launch + step ``latency``; ``bytes``: what one rank sends ((n-1) shards; all-reduce 2(n-1)/n).

    >>> from sim.catalog import load_cluster
    >>> c = ring_cost(load_cluster("hgx-b200", n_gpus=16), range(16), 1e9, CommCosts.default())
    >>> c.bound_by, c.link, c.seconds == allgather_time(load_cluster("hgx-b200", n_gpus=16), range(16), 1e9,
    ...                                                  CommCosts.default())
    ('nic', 'rdma', True)
    """
    if kind not in ("ag", "rs", "ar"):
        raise ConfigError(f"ring_cost: kind must be 'ag', 'rs' or 'ar', got {kind!r}")
    n, bw, step = _ring(cluster, ranks, bytes_per_rank, costs, "ring_cost")
    arr = np.asarray(list(ranks))
    spans = len(set((arr // cluster.nvlink_domain_gpus).tolist())) > 1
    nvl = cluster.nvlink_bw * nvlink_fraction(cluster, costs)
    on = "nic" if spans and bw < nvl else "nvlink"
    link = "rdma" if spans else "nvlink"
    if kind == "ar":
        seconds = allreduce_time(cluster, ranks, bytes_per_rank, costs)
        moved = 2 * (n - 1) * bytes_per_rank / n
    else:
        seconds = allgather_time(cluster, ranks, bytes_per_rank, costs)
        moved = (n - 1) * bytes_per_rank
    if n == 1:
        return CommCost.of(0.0, "nvlink", 0.0, {"latency": 0.0})
    steps = (n - 1) * (2 if kind == "ar" else 1)
    return CommCost.of(seconds, link, moved, {on: moved / bw, "latency": costs.nccl_launch_s + steps * step})


def p2p_cost(cluster: ClusterSpec, src: int, dst: int, nbytes: float, costs: CommCosts) -> CommCost:
    """The :class:`CommCost` of :func:`p2p_time`: the transfer on its route's bottleneck edge and the launch +
    route ``latency``.

    >>> from sim.catalog import load_cluster
    >>> p2p_cost(load_cluster("hgx-b200", n_gpus=16), 0, 8, 48.5e9, CommCosts.default()).bound_by
    'nic'
    """
    seconds = p2p_time(cluster, src, dst, nbytes, costs)
    if src == dst:
        return CommCost.of(0.0, "nvlink", 0.0, {"latency": 0.0})
    topo, sh = prepare_alltoall(cluster, (src, dst), "p2p_cost")
    cap = scaled_capacity(topo, costs, "nccl")
    paths = route_edge_ids(topo, np.array([sh[0]]), np.array([sh[1]]))
    edges = paths[0][paths[0] >= 0]
    latency = costs.nccl_launch_s + float(topo.graph["latency"][edges].sum())
    edge_bytes = np.zeros(cap.size)
    edge_bytes[edges] = float(nbytes)
    bound, link = flow_bound(topo, edge_bytes, cap)
    return CommCost.of(seconds, link, float(nbytes), {bound: max(0.0, seconds - latency), "latency": latency})
