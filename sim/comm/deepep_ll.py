"""The ``deepep-ll`` backend: DeepEP v1 low-latency kernels (published.md s5): one copy per expert, pure RDMA
without PXN (NVLink inside a domain); the published latency table scaled linearly by bytes and link rate,
floored by the flow model.
"""

from __future__ import annotations

import numpy as np

from sim.comm.case import Case
from sim.comm.costs import AllToAllResult, CommCost
from sim.comm.fabric import (
    alltoall_result,
    flow_bound,
    flows_from_matrix,
    interpolate,
    nic_bytes_of,
    nvlink_fraction,
    scaled_capacity,
)
from sim.comm.transport import proxy_s, rdma_share

__all__ = ["deepep_ll_alltoall"]


def deepep_ll_alltoall(c: Case) -> AllToAllResult:
    """One low-latency dispatch or combine. Cost terms: the flow time on its bottleneck link + the overhead
    (``latency``) when the flow model wins; else the scaled table on the link it is scaled by (``nic`` when
    the group spans domains, ``nvlink`` inside one); plus, on EFA, the CPU proxy hop
    (:func:`sim.comm.transport.proxy_s`)."""
    n, costs, cluster, phase = c.n, c.costs, c.cluster, c.phase
    n_exp, k = c.model.n_routed_experts, c.model.top_k
    flat, nvl, rdma = c.flat_matrix()
    spans = c.internode
    proxy = proxy_s(cluster, costs, c.backend, internode=spans, low_latency=True)
    cap = scaled_capacity(c.topo, costs, "deepep", rdma_fraction=rdma_share(cluster, costs, c.backend, proxied=proxy > 0))
    done, edge_bytes, _ = flows_from_matrix(c.topo, c.ranks, flat, cap, pxn=False)
    table = costs.deepep_ll_dispatch_s if phase == "dispatch" else costs.deepep_ll_combine_s
    ref_bytes = costs.deepep_ll_ref_copy_bytes * (1.0 if phase == "dispatch" else 2.0)
    if spans:
        rate_ratio = costs.deepep_ll_ref_nic_bw_bytes_per_s / cluster.nic_bw_bytes_per_s
    else:
        nvl_bw = cluster.nvlink_bw * nvlink_fraction(cluster, costs)
        rate_ratio = costs.deepep_ll_ref_nvlink_bw_bytes_per_s / nvl_bw
    scaled = interpolate(n, costs.deepep_ll_ep, table, log_x=True)
    scaled *= c.tokens * k * c.token_bytes / ref_bytes * rate_ratio
    time = np.full(n, max(float(done.max()) + costs.deepep_overhead_s, scaled) + proxy)
    # DeepEP low_latency launch: ceil(E / ceil(E / SMs)) SMs (DeepEP v1 internode_ll.cu).
    sms = -(-n_exp // -(-n_exp // cluster.gpu.num_sms))
    bound, link = flow_bound(c.topo, edge_bytes, cap)
    if float(done.max()) + costs.deepep_overhead_s >= scaled:
        terms = {bound: float(done.max()), "latency": costs.deepep_overhead_s + proxy}
    else:
        terms = {"nic" if spans else "nvlink": scaled, **({"latency": proxy} if proxy else {})}
    sent = flat.sum(1)
    crossing = (rdma if link == "rdma" else nvl).sum(1)
    cost = CommCost.of(float(time.max()), link, float(sent.max()), terms, link_bytes=float(crossing.max()))
    return alltoall_result(time, sent, flat.sum(0), nvl.sum(1), rdma.sum(1), nic_bytes_of(c.topo, c.ranks, edge_bytes),
                   sms_used=sms, host_sync_s=0.0, backend=c.backend, phase=phase, cost=cost)
