"""Collective communication costs over the topology: MoE all-to-all backends and ring collectives.

Every cost parameter lives in :class:`CommCosts` with its source (``published.md`` section numbers of
``shared/data/published.md``; ASSUMED where no public figure exists, for the calibration to fit).

- :func:`alltoall_times`: a generic all-to-all of an (n x n) byte matrix as concurrent flows over the
  topology (max-min fair, event driven; :func:`sim.topology.transfer_times_ids`).
- :func:`moe_alltoall`: one MoE dispatch or combine for the ``nccl``, ``deepep``, ``deepep-ll`` and
  ``hybridep`` backends (published.md sections 1, 5, 6).
- :func:`allgather_time`, :func:`reduce_scatter_time`, :func:`allreduce_time`: rings over the group's
  bottleneck link; :func:`p2p_time`: one transfer.

Topologies are built only over the ranks involved (:func:`sim.topology.build_topology` with ``gpus``),
after shifting the rank set to the first leaf group (the fabric is translation invariant), and results
are memoised, so a repeated call costs a dictionary look-up.

Shape letters: T tokens per rank, D model dim, E routed experts, K top-k, P ranks in the EP group.

>>> from sim.catalog import load_cluster, load_model
>>> cluster, model = load_cluster("hgx-b200", n_gpus=256), load_model("deepseek-v3-671b")
>>> r = moe_alltoall(cluster, range(32), 8192, model, "nccl", "dispatch", CommCosts.default(),
...                  bytes_per_elem=2.0)
>>> round(float(r.time_s.max()) * 1e3, 1), int(r.sent_bytes[0] // 2**20)
(14.6, 868)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import networkx as nx
import numpy as np

from sim.errors import ConfigError
from sim.routing import part_hit_probabilities
from sim.specs import ClusterSpec, ModelSpec
from sim.topology import EDGE_KINDS, build_topology, route_edge_ids, transfer_times_ids

__all__ = [
    "CommCosts",
    "AllToAllResult",
    "MOE_BACKENDS",
    "FP8_WITH_SCALES_BYTES_PER_ELEM",
    "alltoall_times",
    "moe_alltoall",
    "deepep_nvlink_bw",
    "in_training_s",
    "allgather_time",
    "reduce_scatter_time",
    "allreduce_time",
    "p2p_time",
]

MOE_BACKENDS = ("nccl", "deepep", "deepep-ll", "hybridep")
PHASES = ("dispatch", "combine")
# DeepEP FP8 dispatch: 1 byte per element plus one fp32 scale per 128 (published.md s6: 7,392 B at D=7168).
FP8_WITH_SCALES_BYTES_PER_ELEM = 1.0 + 4.0 / 128


@dataclass(frozen=True)
class CommCosts:
    """Efficiencies, latencies and bandwidth curves of the communication backends (SI units).

    Derive variants with ``dataclasses.replace(CommCosts.default(), ib_fraction=0.9)``.
    """

    # Links. NCCL's topology model: 40.1 GB/s per NVLink5 link = 721.8 of 900 GB/s per GPU; 20.6 per
    # NVLink4 link = 370.8 of 450 (published.md s3).
    nvlink_fraction_nvl5: float = 721.8 / 900
    nvlink_fraction_nvl4: float = 370.8 / 450
    # A cluster's own nvlink_bw override is an achievable rate already (H800: "~160 GB/s achievable", s3).
    nvlink_override_is_achievable: bool = True
    # IB NDR 400 Gb/s: 48-49 GB/s per NIC achievable (nccl-tests #267, #319; s3).
    ib_fraction: float = 48.5 / 50
    # NCCL software costs. ASSUMED (no published figure; for calibration): kernel launch + setup per
    # collective, and per-peer protocol cost of a grouped send/recv all-to-all.
    nccl_launch_s: float = 10e-6
    nccl_a2a_per_peer_s: float = 1e-6
    # Ring step latency: NVLink ~1 us; IB ~2 us per switch round trip, leaf-spine ~+1 us (s3).
    nccl_step_nvlink_s: float = 1e-6
    nccl_step_ib_s: float = 2e-6
    nccl_step_spine_s: float = 1e-6
    # SMs NCCL's channels hold during an all-to-all. ASSUMED: NCCL's usual 16 p2p channels, 1 SM each.
    nccl_channels: int = 16
    # TorchTitan standard EP (s1): all_to_all_single of int64 per-expert counts. The blocking
    # device-to-host copy of the split sizes that follows is a host stall of the stack
    # (``StackProfile.host_sync_s``), not a communication cost: counted once, by the engine.
    count_bytes_per_expert: float = 8.0
    # DeepEP v1 normal kernels on B200, 8 ranks, 4096 tokens, uniform routing: "algorithm bandwidth"
    # (received bytes incl. the rank's own / time) by SMs given (Hybrid-EP branch README; s5).
    deepep_sms: tuple[int, ...] = (16, 24, 32, 48)
    deepep_dispatch_fp8_bw: tuple[float, ...] = (246e9, 349e9, 443e9, 554e9)
    deepep_dispatch_bf16_bw: tuple[float, ...] = (348e9, 494e9, 619e9, 646e9)
    deepep_combine_bw: tuple[float, ...] = (302e9, 420e9, 524e9, 586e9)
    # DeepEP's share of an NVLink that NCCL reaches: H800 intranode EP8 dispatch 153 GB/s over the
    # ~160 GB/s achievable NVLink (combine 158; s5).
    deepep_nvlink_fraction: float = 153 / 160
    # DeepEP RDMA. The H800 internode table (s5) counts every distinct node a token reaches, its own
    # included (DeepEP test_internode's "logical" bytes). Physical = logical x remote/all distinct nodes:
    # EP32 (4 nodes, 3.61 distinct, 2.71 remote) 58 -> 43.5 GB/s; EP64 (top-4 of 8 nodes, 3.63 / 3.18)
    # 51 -> 44.7 GB/s; mean 44.1 of the 50 GB/s NIC.
    deepep_rdma_fraction: float = 44.1 / 50
    # SM limit on RDMA: 58 logical GB/s handled by 20 SMs ("20 of 132 SMs saturate IB", s5).
    deepep_rdma_bw_per_sm: float = 58e9 / 20
    # NVLink fan-out in internode mode, as a fraction of NCCL-achievable NVLink: EP16 on 2 nodes is
    # NVLink-bound; its 43 logical GB/s (1.99 of 2 nodes per token) = 1.40 ms per 4096-token FP8 dispatch
    # matches 0.78 x 160 GB/s in this model (s5).
    deepep_internode_nvlink_fraction: float = 0.78
    # Notify (count exchange on the GPU) + barrier per DeepEP kernel, as in DeepEP's benchmarks. ASSUMED.
    deepep_overhead_s: float = 10e-6
    # DeepEP internode kernels IN TRAINING (MEASURED, DeepSeek's H800 EP64 trace, measured-runs.md s3;
    # recomputed from the trace by tests/sim/test_deepseek_trace.py). :func:`moe_alltoall` stays the
    # microbenchmark model (it reproduces DeepEP's tables); the simulator's step applies these
    # (:func:`in_training_s`). The notify_dispatch / cached_notify kernel before every internode dispatch
    # and combine (count exchange + barrier: it waits until every peer has arrived) averages 2,036 us
    # (16 kernels, 753-3,807 us) and takes the place of deepep_overhead_s:
    deepep_internode_notify_s: float = 2036e-6
    # and the kernels run slower than the model predicts for the same shapes (4096 tokens, EP64, 20 SMs):
    # forward FP8 dispatch 4,346 us measured vs 2,192 us modelled (x1.98); BF16 combine 6,181 us vs
    # 4,240 us (x1.46).
    deepep_internode_dispatch_training_factor: float = 4346 / 2192
    deepep_internode_combine_training_factor: float = 6181 / 4240
    # DeepEP v1 low-latency kernels, H800 (~50 GB/s NIC), 128 tokens, top-8, FP8 dispatch / BF16 combine
    # (s5): time by EP size; scaled linearly by token-copy bytes and by the NIC (NVLink for EP8) rate.
    deepep_ll_ep: tuple[int, ...] = (8, 16, 32, 64, 128, 256)
    deepep_ll_dispatch_s: tuple[float, ...] = (77e-6, 118e-6, 155e-6, 173e-6, 192e-6, 194e-6)
    deepep_ll_combine_s: tuple[float, ...] = (114e-6, 195e-6, 273e-6, 314e-6, 369e-6, 360e-6)
    deepep_ll_ref_copy_bytes: float = 128 * 8 * 7168.0  # 128 tokens x top-8 x D=7168 (bf16: x2)
    deepep_ll_ref_nic_bw_bytes_per_s: float = 50e9  # H800's CX7 400 Gb/s (s5)
    deepep_ll_ref_nvlink_bw_bytes_per_s: float = 160e9  # H800 achievable NVLink (s3)
    # HybridEP (NVIDIA's TMA-based DeepEP branch): ASSUMED 1.5x DeepEP v1's per-SM throughput, same link
    # fractions (no published per-SM table).
    hybridep_sm_scale: float = 1.5

    @classmethod
    def default(cls) -> CommCosts:
        """The published-figure defaults above."""
        return cls()

    def __post_init__(self) -> None:
        for name in ("deepep_dispatch_fp8_bw", "deepep_dispatch_bf16_bw", "deepep_combine_bw"):
            if len(getattr(self, name)) != len(self.deepep_sms):
                raise ConfigError(f"CommCosts: {name} needs one value per deepep_sms entry {self.deepep_sms}")
        for name in ("deepep_ll_dispatch_s", "deepep_ll_combine_s"):
            if len(getattr(self, name)) != len(self.deepep_ll_ep):
                raise ConfigError(f"CommCosts: {name} needs one value per deepep_ll_ep entry {self.deepep_ll_ep}")
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            vals = v if isinstance(v, tuple) else (v,)
            if any(isinstance(x, (int, float)) and x < 0 for x in vals):
                raise ConfigError(f"CommCosts: {f.name} must be non-negative, got {v}")


@dataclass(frozen=True, eq=False)  # numpy fields: compare field by field
class AllToAllResult:
    """One MoE dispatch or combine over an EP group; per-rank arrays are indexed like ``ep_ranks``.

    ``time_s``: kernel time per rank (host_sync_s excluded: the engine adds it as a blocking CPU wait).
    ``sent_bytes``/``recv_bytes``: bytes each rank puts on / takes off links (DeepEP relays count twice,
    as received and sent); ``nvlink_bytes``/``rdma_bytes``: the sent bytes by link type; ``nic_bytes``:
    the larger direction through the rank's own NIC (PXN relays included). ``sms_used``: SMs the
    kernel holds while it runs (NCCL: its channels). ``host_sync_s``: NCCL's count all-to-all that precedes
    the dispatch (the D2H copy after it is the stack's host stall, added by the engine).
    """

    time_s: np.ndarray
    sent_bytes: np.ndarray
    recv_bytes: np.ndarray
    nvlink_bytes: np.ndarray
    rdma_bytes: np.ndarray
    nic_bytes: np.ndarray
    sms_used: int
    host_sync_s: float
    backend: str = "nccl"
    phase: str = "dispatch"


# ---------------------------------------------------------------------------------------------------
# Topology per rank set, efficiencies


def _check_ranks(cluster: ClusterSpec, ranks: Sequence[int], what: str) -> tuple[int, ...]:
    rk = tuple(int(r) for r in ranks)
    if not rk:
        raise ConfigError(f"{what}: ranks must not be empty")
    if len(set(rk)) != len(rk):
        raise ConfigError(f"{what}: ranks must be distinct, got {list(rk)[:16]}")
    if min(rk) < 0 or max(rk) >= cluster.n_gpus:
        raise ConfigError(f"{what}: ranks must lie in [0, n_gpus={cluster.n_gpus}), got {min(rk)}..{max(rk)}")
    return rk


def _canonical(cluster: ClusterSpec, ranks: tuple[int, ...]) -> tuple[ClusterSpec, tuple[int, ...]]:
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
def _topo(cluster: ClusterSpec, ranks: tuple[int, ...]) -> nx.DiGraph:
    return build_topology(cluster, gpus=ranks)


def _nvlink_fraction(cluster: ClusterSpec, costs: CommCosts) -> float:
    if cluster.nvlink_bw_bytes_per_s > 0 and costs.nvlink_override_is_achievable:
        return 1.0
    digits = "".join(ch for ch in cluster.gpu.arch if ch.isdigit())
    nvl5 = bool(digits) and int(digits) >= 100  # Blackwell (sm100+) has NVLink5
    return costs.nvlink_fraction_nvl5 if nvl5 else costs.nvlink_fraction_nvl4


def _scaled_capacity(topo: nx.DiGraph, costs: CommCosts, kind: str, *, internode: bool = False) -> np.ndarray:
    cluster: ClusterSpec = topo.graph["cluster"]
    nvl = _nvlink_fraction(cluster, costs)
    if kind == "nccl":
        frac = {"nvlink": nvl, "pcie": costs.ib_fraction, "nic": costs.ib_fraction, "fabric": costs.ib_fraction}
    else:
        rd = costs.deepep_rdma_fraction
        nvl *= costs.deepep_internode_nvlink_fraction if internode else costs.deepep_nvlink_fraction
        frac = {"nvlink": nvl, "pcie": rd, "nic": rd, "fabric": rd}
    scale = np.array([frac[k] for k in EDGE_KINDS])
    return topo.graph["capacity"] * scale[topo.graph["edge_kind"]]


def _interp(x: float, xs: Sequence[float], ys: Sequence[float], *, log_x: bool = False) -> float:
    """Piecewise linear in x (or log x), flat beyond the last point, proportional below the first."""
    if x <= xs[0]:
        return ys[0] * x / xs[0] if not log_x else ys[0]
    f = np.log2 if log_x else (lambda v: np.asarray(v, dtype=float))
    return float(np.interp(f(x), f(np.asarray(xs, dtype=float)), ys))


def in_training_s(result: AllToAllResult, costs: CommCosts, internode: bool) -> float:
    """Seconds of one DeepEP/HybridEP normal-mode dispatch or combine inside a training step: the
    microbenchmark model's time, internode scaled to the kernel rates DeepSeek's trace shows and with the
    measured notify/barrier instead of the benchmark's overhead. Other backends: the model's time.

    >>> from sim.catalog import load_cluster, load_model
    >>> c, m = load_cluster("h800-deepseek", n_gpus=2048), load_model("deepseek-v3-671b")
    >>> r = moe_alltoall(c, range(64), 4096, m, "deepep", "dispatch", CommCosts.default(),
    ...                  bytes_per_elem=FP8_WITH_SCALES_BYTES_PER_ELEM)
    >>> round(in_training_s(r, CommCosts.default(), True) * 1e6)  # ~4,330 us kernel + 2,036 us notify
    6362
    """
    t = float(result.time_s.max())
    if result.backend not in ("deepep", "hybridep") or not internode or t <= 0:
        return t
    factor = (costs.deepep_internode_dispatch_training_factor if result.phase == "dispatch"
              else costs.deepep_internode_combine_training_factor)
    return (t - costs.deepep_overhead_s) * factor + costs.deepep_internode_notify_s


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
    return _interp(num_sms, costs.deepep_sms, ys)


# ---------------------------------------------------------------------------------------------------
# Generic all-to-all


def _flows_from_matrix(
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


def _nic_bytes(topo: nx.DiGraph, ranks: tuple[int, ...], edge_bytes: np.ndarray) -> np.ndarray:
    loc = np.searchsorted(topo.graph["gpus"], np.asarray(ranks))
    up = topo.graph["e_gpu_nic"][loc]  # (n, nics)
    return np.maximum(edge_bytes[up].sum(axis=1), edge_bytes[up + 1].sum(axis=1))


def _prepare(
    topo_or_cluster: nx.DiGraph | ClusterSpec, ranks: Sequence[int], what: str
) -> tuple[nx.DiGraph, tuple[int, ...]]:
    if isinstance(topo_or_cluster, nx.DiGraph):
        return topo_or_cluster, tuple(int(r) for r in ranks)
    rk = _check_ranks(topo_or_cluster, ranks, what)
    c, shifted = _canonical(topo_or_cluster, rk)
    return _topo(c, shifted), shifted


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
    finishes with the last flow it sends or receives; ``"nccl"`` adds ``nccl_launch_s`` and
    ``nccl_a2a_per_peer_s`` per peer, the DeepEP kinds ``deepep_overhead_s``. The diagonal is local.

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
    topo, rk = _prepare(topo_or_cluster, ranks, "alltoall_times")
    cap = _scaled_capacity(topo, costs, "nccl" if kind == "nccl" else "deepep")
    done, _, _ = _flows_from_matrix(topo, rk, send, cap, pxn=kind != "deepep-ll")
    if kind == "nccl":
        return done + costs.nccl_launch_s + costs.nccl_a2a_per_peer_s * (n - 1)
    return done + costs.deepep_overhead_s


# ---------------------------------------------------------------------------------------------------
# MoE dispatch / combine


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
    - ``hybridep``: as ``deepep`` with ``hybridep_sm_scale`` times the per-SM throughput (ASSUMED).
    - ``deepep-ll`` (s5): one copy per expert, pure RDMA without PXN (NVLink inside a domain); the
      published latency table scaled linearly by bytes and link rate, floored by the flow model.

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
    rk = _check_ranks(cluster, ep_ranks, "moe_alltoall")
    n_exp = model.n_routed_experts
    if n_exp % len(rk):
        raise ConfigError(
            f"moe_alltoall: expert parallel degree ({len(rk)}) must divide the number of experts ({n_exp})"
        )
    if tokens_per_rank < 0:
        raise ConfigError(f"moe_alltoall: tokens_per_rank must be non-negative, got {tokens_per_rank}")
    if not bytes_per_elem > 0:
        raise ConfigError(f"moe_alltoall: bytes_per_elem must be positive, got {bytes_per_elem}")
    if backend in ("deepep", "hybridep") and not 0 < num_sms <= cluster.gpu.num_sms:
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
    c, shifted = _canonical(cluster, rk)
    return _moe_cached(
        c, shifted, int(tokens_per_rank), model, backend, phase, costs, float(bytes_per_elem),
        int(num_sms), load_key, int(seed), routing,
    )


def _result(time: np.ndarray, sent: np.ndarray, recv: np.ndarray, nvl: np.ndarray, rdma: np.ndarray,
            nic: np.ndarray, *, sms_used: int, host_sync_s: float, backend: str, phase: str) -> AllToAllResult:
    """An :class:`AllToAllResult` whose arrays are read-only (results are memoised and shared)."""
    for array in (time, sent, recv, nvl, rdma, nic):
        array.setflags(write=False)
    return AllToAllResult(time_s=time, sent_bytes=sent, recv_bytes=recv, nvlink_bytes=nvl, rdma_bytes=rdma,
                          nic_bytes=nic, sms_used=sms_used, host_sync_s=host_sync_s, backend=backend, phase=phase)


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
    n_exp, k = model.n_routed_experts, model.top_k
    token_bytes = model.dim * bytes_per_elem
    load = None if load_key is None else np.asarray(load_key)
    rank_load = np.full(n, 1.0 / n) if load is None else load.reshape(n, -1).sum(axis=1)
    topo = _topo(cluster, ranks)
    rk = np.asarray(ranks)
    dom = rk // cluster.nvlink_domain_gpus

    if backend in ("nccl", "deepep-ll"):
        flat = np.tile(tokens * k * token_bytes * rank_load, (n, 1))  # [sender, receiver]
        np.fill_diagonal(flat, 0.0)
        if phase == "combine":
            flat = flat.T.copy()
        same = dom[:, None] == dom[None, :]
        nvl, rdma = np.where(same, flat, 0.0), np.where(same, 0.0, flat)
        cap = _scaled_capacity(topo, costs, "nccl" if backend == "nccl" else "deepep")
        done, edge_bytes, _ = _flows_from_matrix(topo, ranks, flat, cap, pxn=backend == "nccl")
        host_sync = 0.0
        if backend == "nccl":
            time = np.full(n, done.max() + costs.nccl_launch_s + costs.nccl_a2a_per_peer_s * (n - 1))
            sms = costs.nccl_channels
            if phase == "dispatch":
                counts = np.full((n, n), costs.count_bytes_per_expert * n_exp / n)
                host_sync = float(alltoall_times(topo, ranks, counts, costs).max())
        else:
            spans = len(set(dom.tolist())) > 1
            table = costs.deepep_ll_dispatch_s if phase == "dispatch" else costs.deepep_ll_combine_s
            ref_bytes = costs.deepep_ll_ref_copy_bytes * (1.0 if phase == "dispatch" else 2.0)
            if spans:
                rate_ratio = costs.deepep_ll_ref_nic_bw_bytes_per_s / cluster.nic_bw_bytes_per_s
            else:
                nvl_bw = cluster.nvlink_bw * _nvlink_fraction(cluster, costs)
                rate_ratio = costs.deepep_ll_ref_nvlink_bw_bytes_per_s / nvl_bw
            scaled = _interp(n, costs.deepep_ll_ep, table, log_x=True)
            scaled *= tokens * k * token_bytes / ref_bytes * rate_ratio
            time = np.full(n, max(float(done.max()) + costs.deepep_overhead_s, scaled))
            # DeepEP low_latency launch: ceil(E / ceil(E / SMs)) SMs (DeepEP v1 internode_ll.cu).
            sms = -(-n_exp // -(-n_exp // cluster.gpu.num_sms))
        return _result(time, flat.sum(1), flat.sum(0), nvl.sum(1), rdma.sum(1), _nic_bytes(topo, ranks, edge_bytes),
                       sms_used=sms, host_sync_s=host_sync, backend=backend, phase=phase)

    # DeepEP / HybridEP normal kernels: dedup per destination domain, NVLink fan-out.
    part_rank = np.arange(n_exp) // (n_exp // n)
    domains, dom_idx = np.unique(dom, return_inverse=True)
    p_rank = part_hit_probabilities(
        n_exp, k, part_rank, n_group=model.n_group, topk_group=model.topk_group, expert_load=load, seed=seed,
        routing=routing,
    )
    q_dom = part_hit_probabilities(
        n_exp, k, dom_idx[part_rank], n_group=model.n_group, topk_group=model.topk_group,
        expert_load=load, seed=seed, routing=routing,
    )
    if load is not None:  # dedup never exceeds the flat copies
        p_rank = np.minimum(p_rank, k * rank_load)
    vol = tokens * token_bytes
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
    if phase == "combine":
        nvl, rdma = nvl.T.copy(), rdma.T.copy()
    cap = _scaled_capacity(topo, costs, "deepep", internode=len(domains) > 1)
    done, edge_bytes, _ = _flows_from_matrix(topo, ranks, nvl + rdma, cap, pxn=True)
    scale = costs.hybridep_sm_scale if backend == "hybridep" else 1.0
    nvl_work = np.maximum(nvl.sum(1), nvl.sum(0)) + self_bytes
    rdma_work = np.maximum(rdma.sum(1), rdma.sum(0))
    sm_time = np.maximum(
        nvl_work / (scale * deepep_nvlink_bw(num_sms, phase, bytes_per_elem, costs)),
        rdma_work / (scale * costs.deepep_rdma_bw_per_sm * num_sms),
    )
    slowest = float(np.maximum(done, sm_time).max()) if tokens else 0.0
    time = np.full(n, slowest + costs.deepep_overhead_s)
    moved = nvl + rdma
    return _result(time, moved.sum(1), moved.sum(0), nvl.sum(1), rdma.sum(1), _nic_bytes(topo, ranks, edge_bytes),
                   sms_used=num_sms, host_sync_s=0.0, backend=backend, phase=phase)


# ---------------------------------------------------------------------------------------------------
# Ring collectives and point-to-point


def _ring(cluster: ClusterSpec, ranks: Sequence[int], nbytes: float, costs: CommCosts, what: str) -> tuple[int, float, float]:
    rk = _check_ranks(cluster, ranks, what)
    if nbytes < 0:
        raise ConfigError(f"{what}: bytes_per_rank must be non-negative, got {nbytes}")
    nvl = cluster.nvlink_bw * _nvlink_fraction(cluster, costs)
    arr = np.asarray(rk)
    if len(set((arr // cluster.nvlink_domain_gpus).tolist())) == 1:
        return len(rk), nvl, costs.nccl_step_nvlink_s
    nic = cluster.nic_bw_bytes_per_s * cluster.nics_per_gpu * costs.ib_fraction
    groups = arr // cluster.gpus_per_node // cluster.fabric.nodes_per_leaf
    step = costs.nccl_step_ib_s + (costs.nccl_step_spine_s if len(set(groups.tolist())) > 1 else 0.0)
    return len(rk), min(nvl, nic), step


def allgather_time(cluster: ClusterSpec, ranks: Sequence[int], bytes_per_rank: float, costs: CommCosts) -> float:
    """Ring all-gather time (s); ``bytes_per_rank`` is each rank's input shard.

    The ring runs at the group's bottleneck: achievable NVLink inside one domain, else the rank's NICs
    (capped by NVLink); each of the n-1 steps pays the NVLink or IB step latency (+ spine when the group
    spans leaf groups), plus one ``nccl_launch_s``.

    >>> from sim.catalog import load_cluster
    >>> round(allgather_time(load_cluster("hgx-b200", n_gpus=16), range(16), 1e9, CommCosts.default()), 6)
    0.309318
    """
    n, bw, step = _ring(cluster, ranks, bytes_per_rank, costs, "allgather_time")
    return 0.0 if n == 1 else costs.nccl_launch_s + (n - 1) * (bytes_per_rank / bw + step)


def reduce_scatter_time(cluster: ClusterSpec, ranks: Sequence[int], bytes_per_rank: float, costs: CommCosts) -> float:
    """Ring reduce-scatter time (s); ``bytes_per_rank`` is each rank's output shard (same cost as all-gather).

    >>> from sim.catalog import load_cluster
    >>> round(reduce_scatter_time(load_cluster("hgx-b200", n_gpus=8), range(8), 1e9, CommCosts.default()) * 1e3, 3)
    9.715
    """
    return allgather_time(cluster, ranks, bytes_per_rank, costs)


def allreduce_time(cluster: ClusterSpec, ranks: Sequence[int], bytes_per_rank: float, costs: CommCosts) -> float:
    """Ring all-reduce time (s) of a ``bytes_per_rank`` buffer: reduce-scatter + all-gather of 1/n shards.

    >>> from sim.catalog import load_cluster
    >>> round(allreduce_time(load_cluster("hgx-b200", n_gpus=8), range(8), 8e9, CommCosts.default()) * 1e3, 3)
    19.42
    """
    n, bw, step = _ring(cluster, ranks, bytes_per_rank, costs, "allreduce_time")
    return 0.0 if n == 1 else costs.nccl_launch_s + 2 * (n - 1) * (bytes_per_rank / n / bw + step)


def p2p_time(cluster: ClusterSpec, src: int, dst: int, nbytes: float, costs: CommCosts) -> float:
    """One NCCL send/recv of ``nbytes`` (s): launch + bytes over the route's achievable bottleneck + latency.

    >>> from sim.catalog import load_cluster
    >>> round(p2p_time(load_cluster("hgx-b200", n_gpus=16), 0, 8, 48.5e9, CommCosts.default()), 6)
    1.000012
    """
    rk = _check_ranks(cluster, (src, dst), "p2p_time") if src != dst else (src,)
    if nbytes < 0:
        raise ConfigError(f"p2p_time: nbytes must be non-negative, got {nbytes}")
    if src == dst:
        return 0.0
    topo, sh = _prepare(cluster, rk, "p2p_time")
    cap = _scaled_capacity(topo, costs, "nccl")
    paths = route_edge_ids(topo, np.array([sh[0]]), np.array([sh[1]]))
    t = transfer_times_ids(paths, np.array([float(nbytes)]), cap, topo.graph["latency"])
    return costs.nccl_launch_s + float(t[0])
