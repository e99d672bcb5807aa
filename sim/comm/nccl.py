"""The ``nccl`` backend: TorchTitan's standard EP (``all_to_all_single``, published.md s1/s6): flat, one copy
per selected expert, as concurrent flows over the topology (PXN routes), plus, for dispatch, the count
all-to-all that precedes it (the blocking D2H copy after it is the stack's host stall, not counted here).
"""

from __future__ import annotations

import numpy as np

from sim.comm.case import Case
from sim.comm.costs import AllToAllResult, CommCost
from sim.comm.fabric import (
    alltoall_result,
    alltoall_times,
    flow_bound,
    flows_from_matrix,
    nic_bytes_of,
    scaled_capacity,
)
from sim.comm.transport import nccl_a2a_latency_s

__all__ = ["nccl_alltoall"]


def nccl_alltoall(c: Case) -> AllToAllResult:
    """One NCCL dispatch or combine (every rank's time is the slowest rank's). Its :class:`CommCost` terms:
    the flows' time on their bottleneck link (``nic`` or ``nvlink``; the network's rate times
    :func:`sim.comm.transport.nccl_a2a_net_share`) and the fixed ``latency`` per call
    (:func:`sim.comm.transport.nccl_a2a_latency_s`: launch and per-peer protocol, or EFA's per-call cost); the
    count all-to-all's the same (tiny flows: ``latency``)."""
    n, costs = c.n, c.costs
    flat, nvl, rdma = c.flat_matrix()
    cap = scaled_capacity(c.topo, costs, "nccl_a2a")
    done, edge_bytes, _ = flows_from_matrix(c.topo, c.ranks, flat, cap, pxn=True)
    latency = nccl_a2a_latency_s(c.cluster, costs, n, internode=c.internode)
    time = np.full(n, done.max() + latency)
    bound, link = flow_bound(c.topo, edge_bytes, cap)
    sent = flat.sum(1)
    crossing = (rdma if link == "rdma" else nvl).sum(1)
    cost = CommCost.of(float(time.max()), link, float(sent.max()), {bound: float(done.max()), "latency": latency},
                       link_bytes=float(crossing.max()))
    counts_s = 0.0
    counts_cost = None
    if c.phase == "dispatch":
        counts = np.full((n, n), costs.count_bytes_per_expert * c.model.n_routed_experts / n)
        counts_s = float(alltoall_times(c.topo, c.ranks, counts, costs).max())
        np.fill_diagonal(counts, 0.0)
        c_done, c_edges, _ = flows_from_matrix(c.topo, c.ranks, counts, cap, pxn=True)
        c_bound, c_link = flow_bound(c.topo, c_edges, cap)
        counts_cost = CommCost.of(counts_s, c_link, float(counts.sum(1).max()),
                                  {c_bound: float(c_done.max()), "latency": latency})
    return alltoall_result(time, sent, flat.sum(0), nvl.sum(1), rdma.sum(1), nic_bytes_of(c.topo, c.ranks, edge_bytes),
                   sms_used=costs.nccl_channels, host_sync_s=counts_s, backend=c.backend, phase=c.phase,
                   cost=cost, counts_cost=counts_cost)
