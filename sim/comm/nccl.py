"""The ``nccl`` backend: TorchTitan's standard EP (``all_to_all_single``, published.md s1/s6): flat, one copy
per selected expert, as concurrent flows over the topology (PXN routes), plus, for dispatch, the count
all-to-all that precedes it (the blocking D2H copy after it is the stack's host stall, not counted here).
"""

from __future__ import annotations

import numpy as np

from sim.comm.case import Case
from sim.comm.costs import AllToAllResult
from sim.comm.fabric import (
    alltoall_result,
    alltoall_times,
    flows_from_matrix,
    nic_bytes_of,
    scaled_capacity,
)

__all__ = ["nccl_alltoall"]


def nccl_alltoall(c: Case) -> AllToAllResult:
    """One NCCL dispatch or combine (every rank's time is the slowest rank's)."""
    n, costs = c.n, c.costs
    flat, nvl, rdma = c.flat_matrix()
    cap = scaled_capacity(c.topo, costs, "nccl")
    done, edge_bytes, _ = flows_from_matrix(c.topo, c.ranks, flat, cap, pxn=True)
    time = np.full(n, done.max() + costs.nccl_launch_s + costs.nccl_a2a_per_peer_s * (n - 1))
    counts_s = 0.0
    if c.phase == "dispatch":
        counts = np.full((n, n), costs.count_bytes_per_expert * c.model.n_routed_experts / n)
        counts_s = float(alltoall_times(c.topo, c.ranks, counts, costs).max())
    return alltoall_result(time, flat.sum(1), flat.sum(0), nvl.sum(1), rdma.sum(1), nic_bytes_of(c.topo, c.ranks, edge_bytes),
                   sms_used=costs.nccl_channels, host_sync_s=counts_s, backend=c.backend, phase=c.phase)
