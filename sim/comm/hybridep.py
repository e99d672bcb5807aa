"""The ``hybridep`` backend: NVIDIA's TMA-based DeepEP branch (Hybrid-EP), from its published tables.

Hybrid-EP moves the same node-deduplicated traffic as DeepEP v1 (:func:`sim.comm.deepep.dedup_traffic`).
Its kernel rates are the branch README's kernel-only "algorithm bandwidth" tables (published.md s5;
:class:`~sim.comm.costs.CommCosts` ``hybridep_*``), read as a share of the link they were measured on:

- inside one NVLink domain, the GB200 NVL72 table by (ranks in the domain, SMs), over NVLink5's
  ``hybridep_nvl_ref_bytes_per_s``: received bytes (the rank's own included) / (share x this GPU's NVLink);
- across domains, the H100 InfiniBand table by (EP ranks, SMs), in logical RDMA bytes (every distinct
  domain a token reaches, the sender's own included) over one 400 Gb/s NIC: logical bytes / (share x this
  GPU's NIC line rate) (the table's kernels include their NVLink stage, 8 GPUs per node).

Between table points the share is linear in ranks and SMs; below the first SM column proportional to SMs,
beyond the last column or row flat (a 64-rank NVL72 group reads the 36-rank row: no published point
beyond). The time is the slowest of those and the link-limited flow time at achievable link rates.
The kernels need no host sync when the caller gives the permuted-token count (its README); a framework that
does not (Megatron-Core, dropless) waits on the host before each forward dispatch, which the workload adds
as a ``host_sync`` op (``StackProfile.hybridep_host_syncs``). No notify barrier is added here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sim.comm.case import Case
from sim.comm.costs import AllToAllResult, CommCosts
from sim.comm.deepep import dedup_result, dedup_traffic
from sim.comm.fabric import flow_bound, flows_from_matrix, interpolate, scaled_capacity

__all__ = ["hybridep_alltoall", "hybridep_ib_share", "hybridep_nvl_share"]


def _table(ranks: float, sms: float, rank_axis: Sequence[int], sm_axis: Sequence[int],
           cells: Sequence[float]) -> float:
    """A row-major (ranks x SMs) table at (``ranks``, ``sms``): SMs per :func:`interpolate`, then linear in
    ranks, flat outside the rank axis."""
    width = len(sm_axis)
    per_row = [interpolate(sms, sm_axis, cells[i * width:(i + 1) * width]) for i in range(len(rank_axis))]
    return float(np.interp(ranks, np.asarray(rank_axis, dtype=float), per_row))


def _column(costs: CommCosts, scope: str, phase: str, bytes_per_elem: float) -> Sequence[float]:
    if phase == "combine":
        return getattr(costs, f"hybridep_{scope}_combine_bw")  # type: ignore[no-any-return]
    dtype = "fp8" if bytes_per_elem < 1.5 else "bf16"
    return getattr(costs, f"hybridep_{scope}_dispatch_{dtype}_bw")  # type: ignore[no-any-return]


def hybridep_nvl_share(ranks: int, sms: int, phase: str, bytes_per_elem: float, costs: CommCosts) -> float:
    """Hybrid-EP's algorithm bandwidth inside one NVLink domain of ``ranks`` ranks with ``sms`` SMs, as a
    share of the NVLink it was measured on (GB200 NVL72 table).

    >>> round(hybridep_nvl_share(8, 32, "dispatch", 2.0, CommCosts.default()) * 900, 1)  # GB/s, the table
    764.0
    >>> round(hybridep_nvl_share(64, 24, "combine", 2.0, CommCosts.default()) * 900, 1)  # 36 ranks, 16-32 SMs
    570.1
    """
    bw = _table(ranks, sms, costs.hybridep_nvl_ranks, costs.hybridep_nvl_sms,
                _column(costs, "nvl", phase, bytes_per_elem))
    return bw / costs.hybridep_nvl_ref_bytes_per_s


def hybridep_ib_share(ranks: int, sms: int, phase: str, bytes_per_elem: float, costs: CommCosts) -> float:
    """Hybrid-EP's logical RDMA bandwidth over ``ranks`` EP ranks with ``sms`` SMs, as a share of the NIC
    line rate it was measured on (H100, 400 Gb/s).

    >>> round(hybridep_ib_share(32, 16, "dispatch", 2.0, CommCosts.default()) * 50, 2)  # GB/s, the table
    57.69
    """
    bw = _table(ranks, sms, costs.hybridep_ib_ranks, costs.hybridep_ib_sms,
                _column(costs, "ib", phase, bytes_per_elem))
    return bw / costs.hybridep_ib_ref_bytes_per_s


def hybridep_alltoall(c: Case) -> AllToAllResult:
    """One Hybrid-EP dispatch or combine (see the module docstring). Cost terms: the flow time on its
    bottleneck link, and the table kernel's time on the link its rate is a share of (``nic`` across domains,
    ``nvlink`` inside one: the model scales the kernel with that link's rate)."""
    costs, cluster = c.costs, c.cluster
    traffic = dedup_traffic(c)
    cap = scaled_capacity(c.topo, costs, "nccl")
    done, edge_bytes, _ = flows_from_matrix(c.topo, c.ranks, traffic.nvl + traffic.rdma, cap, pxn=True)
    if traffic.n_domains > 1:  # the IB table's kernels include their NVLink stage (8 GPUs per node)
        nic = cluster.nic_bw_bytes_per_s * cluster.nics_per_gpu
        share = hybridep_ib_share(c.n, c.num_sms, c.phase, c.bytes_per_elem, costs)
        kernel = (traffic.rdma_work + traffic.own_domain_bytes) / (share * nic)
    else:
        share = hybridep_nvl_share(c.n, c.num_sms, c.phase, c.bytes_per_elem, costs)
        kernel = traffic.nvl_work / (share * cluster.nvlink_bw)
    slowest = float(np.maximum(done, kernel).max()) if c.tokens else 0.0
    bound, link = flow_bound(c.topo, edge_bytes, cap)
    terms = {bound: float(done.max()) if c.tokens else 0.0}
    kernel_on = "nic" if traffic.n_domains > 1 else "nvlink"
    terms[kernel_on] = max(terms.get(kernel_on, 0.0), float(kernel.max()) if c.tokens else 0.0)
    return dedup_result(c, traffic, np.full(c.n, slowest), edge_bytes, terms, link)
