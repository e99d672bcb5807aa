"""The one MoE all-to-all interface: validate the request, canonicalise the rank set, memoise, and hand the
problem to the backend's module (:mod:`sim.comm.nccl`, :mod:`sim.comm.deepep` (v1, UCCL-EP and v2),
:mod:`sim.comm.deepep_ll`, :mod:`sim.comm.hybridep`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

import numpy as np

from sim.comm.case import Case
from sim.comm.costs import (
    MOE_BACKENDS,
    PHASES,
    SM_RESERVING_BACKENDS,
    AllToAllResult,
    CommCosts,
)
from sim.comm.deepep import deepep_alltoall, deepep_v2_alltoall
from sim.comm.deepep_ll import deepep_ll_alltoall
from sim.comm.fabric import canonical_ranks, check_ranks, topology_of
from sim.comm.hybridep import hybridep_alltoall
from sim.comm.nccl import nccl_alltoall
from sim.comm.transport import unsupported_reason
from sim.errors import ConfigError
from sim.specs import ClusterSpec, ModelSpec

__all__ = ["BACKENDS", "clear_caches", "moe_alltoall"]

#: backend name -> the function that times one dispatch/combine
BACKENDS: dict[str, Callable[[Case], AllToAllResult]] = {
    "nccl": nccl_alltoall,
    "deepep": deepep_alltoall,
    "deepep-ll": deepep_ll_alltoall,
    "hybridep": hybridep_alltoall,
    "uccl-ep": deepep_alltoall,
    "deepep-v2": deepep_v2_alltoall,
}
assert tuple(BACKENDS) == MOE_BACKENDS


def moe_alltoall(
    cluster: ClusterSpec,
    ep_ranks: Sequence[int],
    tokens_per_rank: int,
    model: ModelSpec,
    backend: str,
    phase: str,
    costs: CommCosts,
    *,
    bytes_per_elem: float,
    num_sms: int = 20,
    expert_load: np.ndarray | None = None,
    seed: int = 0,
    routing: str = "random",
) -> AllToAllResult:
    """One MoE ``dispatch`` or ``combine`` of ``tokens_per_rank`` tokens per EP rank.

    Experts are placed contiguously (expert e on ``ep_ranks[e // (E/P)]``); ``expert_load[e]`` is the
    fraction of routed token-copies going to expert e (None: uniform), the same for every sender.
    ``routing``: ``"random"`` (top-k drawn per token, group-limited per the model) or ``"round-robin"``
    (TorchTitan's forced load balance, as in the published B200 runs: a token's K experts are
    consecutive, so DeepEP sends it to one rank; needs ``expert_load=None``). It only changes the
    DeepEP/HybridEP dedup; the flat backends send K copies either way.

    - ``nccl`` (TorchTitan standard EP, published.md s1/s6): flat, one copy per selected expert
      (T*K*D*b per rank), as concurrent flows over the topology (PXN routes), plus, for dispatch,
      ``host_sync_s`` = the count all-to-all + blocking D2H copy. Combine reuses the splits (no sync).
    - ``deepep`` (v1 normal kernels, s5/s6): node-limited dedup. A token crosses RDMA once per distinct
      remote NVLink domain (to the rank on the sender's rail) and is fanned out over NVLink to each
      distinct destination GPU there. Time = max(link-limited time of those flows, SM-limited time from
      the ``num_sms`` curve (NVLink) and ``deepep_rdma_bw_per_sm`` (RDMA)) + ``deepep_overhead_s``.
      Distinct parts come from ``model.n_group``/``topk_group`` group-limited routing
      (:func:`part_hit_probabilities`). Dispatch uses ``bytes_per_elem`` (FP8 with scales:
      :data:`FP8_WITH_SCALES_BYTES_PER_ELEM`, or 2.0 BF16); combine is the mirror image.
    - ``hybridep`` (s5): the same dedup traffic as ``deepep``; kernel rates from Hybrid-EP's published
      tables (NVLink domain: GB200 NVL72; InfiniBand: H100) as shares of the link they were measured on.
    - ``deepep-ll`` (s5): one copy per expert, pure RDMA without PXN (NVLink inside a domain); the
      published latency table scaled linearly by bytes and link rate, floored by the flow model.
    - ``uccl-ep``: UCCL-EP, DeepEP's API and normal-mode traffic over a CPU proxy thread (any NIC, EFA
      included): ``deepep``'s model plus the proxy hop across domains (:mod:`sim.comm.transport`).
    - ``deepep-v2``: DeepEP v2 (ElasticBuffer, hybrid mode) over NCCL GIN: ``deepep``'s traffic and link rates,
      its own SM-limited rates (far fewer SMs for the same bandwidth), GPU-initiated on InfiniBand and EFA alike.

    The fabric's transport (InfiniBand or EFA, :mod:`sim.comm.transport`) sets NCCL's all-to-all share of the
    network and fixed cost per call, and whether DeepEP reaches the network through a proxy; Hybrid-EP across
    an EFA fabric is refused (:class:`ConfigError`).

    Skew: ranks hosting hot experts receive (dispatch) or send (combine) more. Every rank exchanges data
    with the slowest rank and the next MoE op needs all of its tokens, so every rank's ``time_s`` is the
    slowest rank's (for every backend; :func:`alltoall_times` keeps per-rank finishes).

    >>> from sim.catalog import load_cluster, load_model
    >>> c, m = load_cluster("hgx-b200", n_gpus=256), load_model("deepseek-v3-671b")
    >>> nccl = moe_alltoall(c, range(32), 4096, m, "nccl", "dispatch", CommCosts.default(), bytes_per_elem=2)
    >>> dep = moe_alltoall(c, range(32), 4096, m, "deepep", "dispatch", CommCosts.default(), bytes_per_elem=2)
    >>> bool(dep.rdma_bytes.sum() < nccl.rdma_bytes.sum()), dep.sms_used, nccl.host_sync_s > 0
    (True, 20, True)
    """
    if backend not in MOE_BACKENDS:
        raise ConfigError(f"moe_alltoall: backend must be one of {', '.join(MOE_BACKENDS)}; got {backend!r}")
    if phase not in PHASES:
        raise ConfigError(f"moe_alltoall: phase must be one of {', '.join(PHASES)}; got {phase!r}")
    rk = check_ranks(cluster, ep_ranks, "moe_alltoall")
    n_exp = model.n_routed_experts
    if n_exp % len(rk):
        raise ConfigError(
            f"moe_alltoall: expert parallel degree ({len(rk)}) must divide the number of experts ({n_exp})"
        )
    if tokens_per_rank < 0:
        raise ConfigError(f"moe_alltoall: tokens_per_rank must be non-negative, got {tokens_per_rank}")
    if not bytes_per_elem > 0:
        raise ConfigError(f"moe_alltoall: bytes_per_elem must be positive, got {bytes_per_elem}")
    if backend in SM_RESERVING_BACKENDS and not 0 < num_sms <= cluster.gpu.num_sms:
        raise ConfigError(
            f"moe_alltoall: num_sms ({num_sms}) must lie in 1..{cluster.gpu.num_sms} (SMs of {cluster.gpu.name})"
        )
    load_key: tuple[float, ...] | None = None
    if expert_load is not None:
        load = np.asarray(expert_load, dtype=float).ravel()
        if load.size != n_exp or np.any(load < 0) or not np.all(np.isfinite(load)) or load.sum() <= 0:
            raise ConfigError(
                f"moe_alltoall: expert_load must hold {n_exp} non-negative fractions with a positive sum, "
                f"got {load.size} values summing to {load.sum() if load.size else 0}"
            )
        load_key = tuple((load / load.sum()).tolist())
    if routing not in ("random", "round-robin"):
        raise ConfigError(f"moe_alltoall: routing must be 'random' or 'round-robin', got {routing!r}")
    if routing == "round-robin" and expert_load is not None:
        raise ConfigError("moe_alltoall: routing 'round-robin' is balanced by construction; pass expert_load=None")
    c, shifted = canonical_ranks(cluster, rk)
    return _moe_cached(
        c, shifted, int(tokens_per_rank), model, backend, phase, costs, float(bytes_per_elem),
        int(num_sms), load_key, int(seed), routing,
    )


@lru_cache(maxsize=4096)
def _moe_cached(
    cluster: ClusterSpec,
    ranks: tuple[int, ...],
    tokens: int,
    model: ModelSpec,
    backend: str,
    phase: str,
    costs: CommCosts,
    bytes_per_elem: float,
    num_sms: int,
    load_key: tuple[float, ...] | None,
    seed: int,
    routing: str = "random",
) -> AllToAllResult:
    n = len(ranks)
    load = None if load_key is None else np.asarray(load_key)
    rank_load = np.full(n, 1.0 / n) if load is None else load.reshape(n, -1).sum(axis=1)
    dom = np.asarray(ranks) // cluster.nvlink_domain_gpus
    case = Case(cluster, ranks, tokens, model, backend, phase, costs, bytes_per_elem, num_sms, load, seed, routing,
                topology_of(cluster, ranks), rank_load, dom)
    reason = unsupported_reason(cluster, backend, internode=case.internode)
    if reason is not None:  # an exception is not memoised: every such call is refused
        raise ConfigError(f"moe_alltoall: {reason}")
    return BACKENDS[backend](case)


def clear_caches() -> None:
    """Forget memoised topologies and all-to-all results (benchmarks measuring cold starts)."""
    _moe_cached.cache_clear()
    topology_of.cache_clear()
