"""What the scale-out transport adds to an expert-parallel all-to-all: InfiniBand (GPU-initiated RDMA, IBGDA)
or AWS EFA (SRD over libfabric, no IBGDA; :attr:`sim.specs.FabricSpec.transport`).

- NCCL's all-to-all across NVLink domains: its share of the network rate (:func:`nccl_a2a_net_share`) and its
  fixed cost per call (:func:`nccl_a2a_latency_s`). On EFA both come from nccl-tests on p5
  (:class:`~sim.comm.costs.CommCosts` ``efa_a2a_*``).
- GPU-initiated EP kernels (DeepEP's API) without IBGDA go through a CPU proxy thread: UCCL-EP always does,
  DeepEP does on EFA (NVSHMEM's libfabric transport). :func:`proxy_s` is that hop's time per kernel (normal
  kernels: fitted to UCCL-EP's benchmark by :mod:`calibrate.proxy_fit`; low-latency kernels apart).
- DeepEP v2's GIN kernels need no proxy on either fabric; over EFA their RDMA reaches a share of the line of its
  own (fitted to AWS's EP campaign by :mod:`calibrate.proxy_fit`). :func:`rdma_share` gives each path's share.
- Kernels that need IBGDA to leave a domain and have no proxy path (Hybrid-EP) cannot run across EFA:
  :func:`unsupported_reason`.

>>> from sim.catalog import load_cluster
>>> ib, efa = load_cluster("hgx-b300", n_gpus=32), load_cluster("p6-b300", n_gpus=32)
>>> from sim.comm.costs import CommCosts
>>> c = CommCosts.default()
>>> round(nccl_a2a_latency_s(ib, c, 16, internode=True) * 1e6), round(nccl_a2a_latency_s(efa, c, 16, internode=True) * 1e6)
(25, 248)
>>> unsupported_reason(efa, "hybridep", internode=True) is not None, unsupported_reason(ib, "hybridep", internode=True)
(True, None)
"""

from __future__ import annotations

from sim.comm.costs import CommCosts
from sim.specs import ClusterSpec

__all__ = ["is_efa", "nccl_a2a_latency_s", "nccl_a2a_net_share", "proxy_s", "rdma_share", "unsupported_reason"]

#: backends whose kernels reach the network through a CPU proxy thread on every fabric
_ALWAYS_PROXIED = ("uccl-ep",)
#: backends whose GPU-initiated kernels fall back to a host proxy where the fabric has no IBGDA
_PROXIED_WITHOUT_IBGDA = ("deepep", "deepep-ll")
#: backends that need IBGDA across domains and have no proxy path
_NEED_IBGDA = ("hybridep",)
#: backends whose kernels reach the network through NCCL's GPU-initiated GIN (GDAKI on InfiniBand and, from NCCL
#: 2.31, on EFA): no proxy, but on EFA a share of the line of their own
_GIN = ("deepep-v2",)


def is_efa(cluster: ClusterSpec) -> bool:
    """Whether ``cluster``'s scale-out fabric is AWS EFA."""
    return cluster.fabric.transport == "efa"


def nccl_a2a_net_share(cluster: ClusterSpec, costs: CommCosts) -> float:
    """The share of a NIC's line rate an NCCL all-to-all reaches on the flows that leave an NVLink domain: on
    InfiniBand NCCL's point-to-point share times ``nccl_a2a_net_fraction`` (fitted jointly), on EFA the
    share nccl-tests measured (``efa_a2a_fraction``)."""
    if is_efa(cluster):
        return costs.efa_a2a_fraction
    return costs.ib_fraction * costs.nccl_a2a_net_fraction


def nccl_a2a_latency_s(cluster: ClusterSpec, costs: CommCosts, ranks: int, *, internode: bool) -> float:
    """Fixed seconds of one NCCL all-to-all over ``ranks`` ranks: launch plus a per-peer protocol cost, or
    on EFA, when the group leaves its NVLink domain, the per-call and per-peer cost nccl-tests measured."""
    peers = max(ranks - 1, 0)
    if internode and is_efa(cluster):
        return costs.efa_a2a_call_s + costs.efa_a2a_per_peer_s * peers
    return costs.nccl_launch_s + costs.nccl_a2a_per_peer_s * peers


def proxy_s(cluster: ClusterSpec, costs: CommCosts, backend: str, *, internode: bool,
            low_latency: bool = False) -> float:
    """Seconds a CPU proxy hop adds to one EP kernel whose bytes leave the NVLink domain (0 inside one): a
    normal kernel's (``proxy_normal_s``) or, with ``low_latency``, a low-latency kernel's (``proxy_ll_s``)."""
    if not internode:
        return 0.0
    if backend in _ALWAYS_PROXIED or (backend in _PROXIED_WITHOUT_IBGDA and is_efa(cluster)):
        return costs.proxy_ll_s if low_latency else costs.proxy_normal_s
    return 0.0


def rdma_share(cluster: ClusterSpec, costs: CommCosts, backend: str, *, proxied: bool) -> float:
    """The share of a NIC's line rate a DeepEP-API kernel's RDMA reaches: through a CPU proxy
    (``proxy_rdma_fraction``), DeepEP v2's GIN over EFA (``gin_efa_rdma_fraction``), else GPU-initiated RDMA over
    InfiniBand (``deepep_rdma_fraction``)."""
    if proxied:
        return costs.proxy_rdma_fraction
    if backend in _GIN and is_efa(cluster):
        return costs.gin_efa_rdma_fraction
    return costs.deepep_rdma_fraction


def unsupported_reason(cluster: ClusterSpec, backend: str, *, internode: bool) -> str | None:
    """Why ``backend`` cannot run an EP group that leaves its NVLink domain on ``cluster`` (None: it can)."""
    if internode and is_efa(cluster) and backend in _NEED_IBGDA:
        return (f"ep_backend {backend!r} needs InfiniBand's GPU-initiated RDMA (IBGDA) between NVLink domains, "
                f"which {cluster.name or 'this cluster'}'s EFA fabric lacks; use nccl, deepep or uccl-ep, or an EP "
                f"group inside one NVLink domain")
    return None
