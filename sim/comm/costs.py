"""The communication cost parameters (:class:`CommCosts`, each with its source) and the result type of
one MoE all-to-all (:class:`AllToAllResult`). One definition per constant: every backend reads them here.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from sim.errors import ConfigError

__all__ = ["BOUND_BY", "DEEPEP_API_BACKENDS", "FP8_WITH_SCALES_BYTES_PER_ELEM", "LINKS", "MOE_BACKENDS", "PHASES",
           "SM_RESERVING_BACKENDS", "AllToAllResult", "CommCost", "CommCosts"]

MOE_BACKENDS = ("nccl", "deepep", "deepep-ll", "hybridep", "uccl-ep", "deepep-v2")
#: backends that run DeepEP's normal-mode kernels behind DeepEP's API (UCCL-EP is a drop-in replacement of
#: ``deep_ep.Buffer``; DeepEP v2's ElasticBuffer keeps the hybrid, node-deduplicated mode): the same traffic,
#: notify barrier and SM reservation
DEEPEP_API_BACKENDS = ("deepep", "uccl-ep", "deepep-v2")
#: backends whose kernels are given a number of SMs (``num_sms``, a plan's ``deepep_sms``)
SM_RESERVING_BACKENDS = (*DEEPEP_API_BACKENDS, "hybridep")

PHASES = ("dispatch", "combine")
# DeepEP FP8 dispatch: 1 byte per element plus one fp32 scale per 128 (published.md s6: 7,392 B at D=7168).
FP8_WITH_SCALES_BYTES_PER_ELEM = 1.0 + 4.0 / 128
# Fields that scale a link's capacity or divide by one: zero would leave a link with no capacity.
_RATE_SUFFIXES = ("_fraction", "_nvl5", "_nvl4", "_bw", "_bw_per_sm", "_bytes_per_s", "_ref_copy_bytes")


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
    # NCCL's all-to-all across NVLink domains: its share of the NIC rate above (what NCCL reaches point to point),
    # on the flows that leave a domain. An all-to-all cannot aggregate NICs (one per peer flow, PXN-routed), and
    # every rank keeps 2(n-1) connections busy at once. FITTED jointly (sim.joint ``nccl.a2a_net_fraction``).
    nccl_a2a_net_fraction: float = 1.0
    # NCCL's rings across NVLink domains: one ring per channel, each leaving a domain through another of the group's
    # ranks there, so the crossings spread over all their NICs (sim.comm.collectives.ring_nic_ranks; NCCL
    # reduce-scatter 260-360 GB/s bus bandwidth across 4-128 HGX H100 nodes, ~6-7x one NIC, published.md s8).
    # False: every crossing on one NIC per rank (the former model; the ablation's "flat ring").
    nccl_ring_nic_spread: bool = True
    # NCCL software costs. ASSUMED (no published figure; for calibration): kernel launch + setup per
    # collective, and per-peer protocol cost of a grouped send/recv all-to-all.
    nccl_launch_s: float = 10e-6
    nccl_a2a_per_peer_s: float = 1e-6
    # Ring step latency, NCCL's own model (src/graph/tuning.cc, Simple protocol; published.md s8): each of a
    # ring's steps inside an NVLink domain 3.4 us, each step that crosses to the next domain 14 us (the
    # reduce-scatter / all-gather of n ranks over N domains: (n - N) + (N - 1) steps); leaf-spine ~+1 us
    # per crossing step when the ring spans leaf groups (s3).
    nccl_step_nvlink_s: float = 3.4e-6
    nccl_step_ib_s: float = 14e-6
    nccl_step_spine_s: float = 1e-6
    # Small all-reduces (a gradient norm, a loss, an expert bias): NCCL's tree, LL protocol (tuning.cc:
    # baseLat 6.8 us, per hop 0.6 us NVLink, 5.0 us network): base + 2((ranks per domain - 1) x intra +
    # log2(domains) x inter) (s8).
    nccl_tree_base_s: float = 6.8e-6
    nccl_tree_hop_nvlink_s: float = 0.6e-6
    nccl_tree_hop_net_s: float = 5.0e-6
    # Stragglers (sim.predict.dp_scale): coefficient of variation of one microbatch's time on a rank. ASSUMED
    # (no published per-microbatch figure): the EP-barrier arrival spread fitted on DeepSeek's H800 trace
    # (arrival_cv below, per ~8 ms window between barriers), taken as the per-microbatch spread, i.e. jitter
    # correlated within a microbatch; for a calibration to override.
    straggler_cv: float = 0.0731
    # SMs NCCL's channels hold during any NCCL collective (all-to-all, FSDP / ZeRO all-gather and reduce-scatter,
    # TP all-gather and reduce-scatter): compute beside it runs on the rest. ASSUMED: NCCL's usual 16
    # channels, 1 SM each.
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
    # DeepEP v2 (ElasticBuffer over NCCL GIN, deepseek-ai/DeepEP PR #605; published.md s5), 8K tokens. NVLink, SM100
    # EP8: dispatch / combine 643 / 675 GB/s with 24 SMs, 726 / 740 with 64 (the same "algorithm bandwidth" as v1's
    # table, one column for either dispatch width). RDMA: SM100 EP 8x2 over CX7 90 / 91 GB/s "logical" with 12 SMs
    # (7.5 GB/s per SM; SM90 8x4: 61 with 6). The link rates are v1's (the 90 logical GB/s over 2 nodes is 45
    # physical of the 50 GB/s NIC, v1's IBGDA share): what v2 changes is how few SMs reach them.
    deepep_v2_sms: tuple[int, ...] = (24, 64)
    deepep_v2_dispatch_bw: tuple[float, ...] = (643e9, 726e9)
    deepep_v2_combine_bw: tuple[float, ...] = (675e9, 740e9)
    deepep_v2_rdma_bw_per_sm: float = 90e9 / 12
    # AWS EFA (SRD over libfabric; FabricSpec.transport = "efa"). NCCL's all-to-all through aws-ofi-nccl, from
    # nccl-tests alltoall_perf on p5.48xlarge (8 H100, 4 x 100 Gb/s EFA per GPU; crazyguitar/
    # aws-gpu-communication-benchmark data/nccl_alltoall.csv @a77f70d: 2-32 nodes, 32 MB-2 GB per rank). One
    # least-squares fit of time = call + per_peer x (ranks - 1) + inter-node bytes / rate over all 35 points
    # (DERIVED; mean |residual| 6%, largest 20% at 32 MB on 32 nodes): 0.186 ms per call, 4.15 us per peer, 41.0
    # GB/s of the 50 GB/s per GPU (efa_a2a_fraction, in place of InfiniBand's NCCL all-to-all share). Applies to
    # an NCCL all-to-all whose group spans NVLink domains over an EFA fabric.
    efa_a2a_fraction: float = 41.0 / 50
    efa_a2a_call_s: float = 0.186e-3
    efa_a2a_per_peer_s: float = 4.15e-6
    # GPU-initiated EP kernels without IBGDA: a CPU proxy thread turns the kernel's requests into RDMA writes
    # (UCCL-EP everywhere; DeepEP's NVSHMEM over libfabric on EFA). The kernels' NVLink rates and SM limits stay
    # DeepEP's; the proxy adds a fixed hop per kernel and caps the RDMA rate. Low-latency kernels: UCCL-EP's
    # comparison (uccl-project/uccl ep/docs/deepep-efa-comparison-zh.md @e7cd649): B200 + 400G EFA low-latency
    # dispatch 228 us / combine 318 us against DeepEP's IBGDA 118 / 195 us on H800 (same 128-token EP16 case):
    # the proxy hop adds 110 / 123 us, mean 116 us per kernel (DERIVED).
    proxy_ll_s: float = 116e-6
    # Normal (throughput) kernels: the fixed hop and the RDMA share of the NIC line rate, fitted jointly
    # (calibrate.proxy_fit.fit_proxy_normal: log least squares, the simulator's own kernel model) to UCCL-EP's
    # normal-kernel times on p6-b200 (uccl-project/uccl ep/README.md @021c2c0: 8 B200 + 8 x 400 Gb/s EFA per
    # node, 4096 tokens, hidden 7168, top-8 of 288 experts, FP8 dispatch / BF16 combine, EP16 / 24 / 32:
    # dispatch 1141 / 1637 / 2072 us, combine 1965 / 2887 / 3724 us): 402 +- 93 us per kernel and 0.80 +- 0.05
    # of the line (DERIVED; largest residual 7.3%), in place of DeepEP's IBGDA share (deepep_rdma_fraction, 0.88).
    # The former values (116 us and 0.53, read off the EP16 point alone) came out 27-34% slow at EP32.
    proxy_normal_s: float = 402e-6
    proxy_rdma_fraction: float = 0.80
    # DeepEP v2's GIN over EFA (NCCL 2.31's Libfabric_GDAKI GIN type: GPU-initiated, no proxy) reaches a smaller share of
    # the NIC line than IBGDA on InfiniBand: fitted (calibrate.proxy_fit.fit_gin_efa_share: log least squares, the
    # simulator's own deepep-v2 kernel) to AWS's direct EP campaign on p6-b200 (awslabs/awsome-distributed-ai
    # micro-benchmarks/expert-parallelism/ep-backend-comparison/RESULTS-b200.md @46793a8: 4096 tokens, hidden 7168,
    # top-8 of 256 experts; EP16 / EP32 FP8 dispatch 865 / 2041 us, BF16 dispatch 1501 / 3753 us, BF16 combine 1615 /
    # 3745 us): 0.70 +- 0.01 of the line (DERIVED; residuals within 9%).
    gin_efa_rdma_fraction: float = 0.70
    # DeepEP normal-mode kernels IN TRAINING, as mechanisms (:func:`sim.comm.deepep.in_training_s`); the
    # microbenchmark model above reproduces DeepEP's tables, these two numbers add what training adds.
    # (1) Barrier waits: notify_dispatch / cached_notify end in a barrier over the EP group, so a rank waits
    # for the slowest of its peers (sim.comm.barrier): arrivals spread by arrival_cv x the compute since the
    # previous barrier. FITTED on DeepSeek's H800 EP64 trace (measured-runs.md s3) by
    # calibrate.barrier_fit.fit_arrival_cv: the 16 notify kernels' median wait 1,399 us (1,409 us less the
    # 10 us overhead) = cv x 8.16 ms (the window's 130.6 ms of compute kernels over its 16 barriers) x
    # E[max of 64 normals] 2.344 -> cv 0.0731 (residual: the kernels spread -30%..+159% around the median;
    # tests/calibrate/test_trace_window.py refits it from the trace).
    arrival_cv: float = 0.0731
    # (2) Kernels slowed by the compute beside them (HBM, L2 and SMs shared), only where the schedule runs
    # the all-to-all under compute (DualPipe pairs, Megatron's combined 1F1B). FITTED on the same trace by
    # calibrate.document._comm_tables (the h800-deepseek-trace calibration carries the same number): its
    # four DeepEP kernel kinds run 1.41-2.00x slower than DeepEP's EP64 benchmark (forward FP8 dispatch
    # 2.00, backward dispatch 1.60, forward combine 1.41, backward combine 1.53); one slowdown for all, their
    # geometric mean x1.62 (residuals -13%..+12%). Not the NIC: a link-bound kernel would move FP8 dispatch
    # and BF16 combine bytes at one rate, and these do not.
    overlap_kernel_slowdown: float = 0.6209
    # DeepEP v1 low-latency kernels, H800 (~50 GB/s NIC), 128 tokens, top-8, FP8 dispatch / BF16 combine
    # (s5): time by EP size; scaled linearly by token-copy bytes and by the NIC (NVLink for EP8) rate.
    deepep_ll_ep: tuple[int, ...] = (8, 16, 32, 64, 128, 256)
    deepep_ll_dispatch_s: tuple[float, ...] = (77e-6, 118e-6, 155e-6, 173e-6, 192e-6, 194e-6)
    deepep_ll_combine_s: tuple[float, ...] = (114e-6, 195e-6, 273e-6, 314e-6, 369e-6, 360e-6)
    deepep_ll_ref_copy_bytes: float = 128 * 8 * 7168.0  # 128 tokens x top-8 x D=7168 (bf16: x2)
    deepep_ll_ref_nic_bw_bytes_per_s: float = 50e9  # H800's CX7 400 Gb/s (s5)
    deepep_ll_ref_nvlink_bw_bytes_per_s: float = 160e9  # H800 achievable NVLink (s3)
    # HybridEP (NVIDIA's TMA-based DeepEP branch; docs/README_Hybrid-EP.md at 94a9f8f, published.md s5):
    # "algorithm bandwidth" (received bytes incl. the rank's own / time), KERNEL ONLY (Megatron calls
    # dispatch_with_permute: no d2d copy, the permute is moesim's own op), 4096 tokens, hidden 7168, top-8,
    # 8 local experts per rank, random uniform routing. Tables are row-major: one row per rank count, one
    # column per SM count; dispatch FP8, dispatch BF16, combine.
    # (1) One NVLink domain: GB200 NVL72 (MNNVL), NVLink5 at hybridep_nvl_ref_bytes_per_s per direction.
    hybridep_nvl_ranks: tuple[int, ...] = (8, 16, 24, 32, 36)
    hybridep_nvl_sms: tuple[int, ...] = (16, 32)
    hybridep_nvl_dispatch_fp8_bw: tuple[float, ...] = (
        620.98e9, 713.98e9, 577.17e9, 650.48e9, 360.12e9, 577.96e9, 286.93e9, 538.86e9, 260.53e9, 489.27e9)
    hybridep_nvl_dispatch_bf16_bw: tuple[float, ...] = (
        750.15e9, 764.03e9, 661.93e9, 706.95e9, 637.80e9, 665.97e9, 629.79e9, 642.23e9, 612.85e9, 632.31e9)
    hybridep_nvl_combine_bw: tuple[float, ...] = (
        684.27e9, 737.13e9, 600.75e9, 666.26e9, 565.53e9, 639.80e9, 547.25e9, 605.15e9, 543.27e9, 596.99e9)
    hybridep_nvl_ref_bytes_per_s: float = 900e9
    # (2) Over InfiniBand: H100, 8 GPUs per node, one CX7 400 Gb/s NIC per GPU (hybridep_ib_ref_bytes_per_s
    # line rate); "IB bandwidth" in the benchmark's logical RDMA bytes (every distinct node a token reaches,
    # its own included, as DeepEP's internode table).
    hybridep_ib_ranks: tuple[int, ...] = (16, 32, 64)
    hybridep_ib_sms: tuple[int, ...] = (4, 8, 16)
    hybridep_ib_dispatch_fp8_bw: tuple[float, ...] = (
        34.00e9, 62.00e9, 68.48e9, 38.50e9, 51.30e9, 55.35e9, 37.50e9, 46.63e9, 46.52e9)
    hybridep_ib_dispatch_bf16_bw: tuple[float, ...] = (
        44.40e9, 76.80e9, 71.71e9, 52.60e9, 54.50e9, 57.69e9, 48.00e9, 50.55e9, 49.97e9)
    hybridep_ib_combine_bw: tuple[float, ...] = (
        52.00e9, 68.00e9, 62.95e9, 51.00e9, 56.40e9, 57.46e9, 46.00e9, 51.03e9, 49.77e9)
    hybridep_ib_ref_bytes_per_s: float = 50e9

    @classmethod
    def default(cls) -> CommCosts:
        """The published-figure defaults above."""
        return cls()

    @classmethod
    def scalar_fields(cls) -> frozenset[str]:
        """The fields a calibration's ``comm`` table (or a trial) may override: every one but the tables by SM count
        or EP size.

        >>> "efa_a2a_fraction" in CommCosts.scalar_fields(), "deepep_sms" in CommCosts.scalar_fields()
        (True, False)
        """
        return frozenset(f.name for f in dataclasses.fields(cls) if not isinstance(f.default, tuple))

    @staticmethod
    def scalar_problem(name: str, value: float) -> str | None:
        """Why ``value`` cannot be the scalar field ``name`` (``None`` when it can): every one is a finite number, not
        negative; a rate or a link's share (:data:`_RATE_SUFFIXES`) positive; a share (``*_fraction``) at most 1.
        The one rule for the defaults, a calibration's ``comm`` table and a trial's ``--comm``.

        >>> CommCosts.scalar_problem("efa_a2a_fraction", 1.5), CommCosts.scalar_problem("proxy_normal_s", 0.0)
        ("efa_a2a_fraction takes 0 to 1 (a share of a link's rate)", None)
        """
        if not math.isfinite(value) or value < 0:
            return f"{name} must be non-negative and finite (not negative, not NaN, not infinite)"
        if name.endswith("_fraction") and value > 1:
            return f"{name} takes 0 to 1 (a share of a link's rate)"
        if name.endswith(_RATE_SUFFIXES) and not value > 0:
            return f"{name} must be positive (a rate or a link's share)"
        return None

    def __post_init__(self) -> None:
        for name in ("deepep_dispatch_fp8_bw", "deepep_dispatch_bf16_bw", "deepep_combine_bw"):
            if len(getattr(self, name)) != len(self.deepep_sms):
                raise ConfigError(f"CommCosts: {name} needs one value per deepep_sms entry {self.deepep_sms}")
        for name in ("deepep_v2_dispatch_bw", "deepep_v2_combine_bw"):
            if len(getattr(self, name)) != len(self.deepep_v2_sms):
                raise ConfigError(f"CommCosts: {name} needs one value per deepep_v2_sms entry {self.deepep_v2_sms}")
        for axes, names in (
            (("hybridep_nvl_ranks", "hybridep_nvl_sms"),
             ("hybridep_nvl_dispatch_fp8_bw", "hybridep_nvl_dispatch_bf16_bw", "hybridep_nvl_combine_bw")),
            (("hybridep_ib_ranks", "hybridep_ib_sms"),
             ("hybridep_ib_dispatch_fp8_bw", "hybridep_ib_dispatch_bf16_bw", "hybridep_ib_combine_bw")),
        ):
            cells = len(getattr(self, axes[0])) * len(getattr(self, axes[1]))
            for name in names:
                if len(getattr(self, name)) != cells:
                    raise ConfigError(f"CommCosts: {name} needs one value per ({axes[0]}, {axes[1]}) pair ({cells})")
        for name in ("deepep_ll_dispatch_s", "deepep_ll_combine_s"):
            if len(getattr(self, name)) != len(self.deepep_ll_ep):
                raise ConfigError(f"CommCosts: {name} needs one value per deepep_ll_ep entry {self.deepep_ll_ep}")
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            vals = v if isinstance(v, tuple) else (v,)
            for x in vals:
                problem = self.scalar_problem(f.name, x) if isinstance(x, int | float) else None
                if problem:
                    raise ConfigError(f"CommCosts: {problem}, got {v}")


#: what can limit a communication op, as a backend's cost model names its terms: the scale-out NIC (and the
#: network behind it), NVLink, the SMs the kernel is given, blocking host work, fixed latencies and waits
#: (launches, per-peer protocol costs, notify barriers)
BOUND_BY = ("nic", "nvlink", "sms", "host", "latency")
#: the link class an op's bytes cross: NVLink inside one domain, or RDMA through the NICs (topology edge kinds
#: ``pcie``/``nic``/``fabric``) between domains
LINKS = ("nvlink", "rdma")


@dataclass(frozen=True)
class CommCost:
    """Why one communication op takes its ``seconds``: the terms of the backend's own cost model (seconds each,
    keyed by :data:`BOUND_BY`), the one that dominates (``bound_by``), the link class the bytes cross
    (:data:`LINKS`), the bytes one rank sends (the busiest rank's) and, of those, the bytes that cross ``link``
    (``link_bytes``: an all-to-all's sends to its own NVLink domain, or DeepEP's NVLink forwards, stay off the
    network; None: all of them). Built beside the time from the same numbers; ``seconds`` is the backend's time.

    >>> c = CommCost.of(2e-3, "rdma", 1e8, {"nic": 1.9e-3, "latency": 1e-4}, link_bytes=7.5e7)
    >>> c.bound_by, c.crossing_bytes, CommCost.of(1e-3, "nvlink", 1e8, {"nvlink": 1e-3}).crossing_bytes
    ('nic', 75000000.0, 100000000.0)
    """

    seconds: float
    link: str
    bound_by: str
    bytes: float
    terms: tuple[tuple[str, float], ...] = ()
    link_bytes: float | None = None

    @classmethod
    def of(cls, seconds: float, link: str, nbytes: float, terms: dict[str, float],
           link_bytes: float | None = None) -> CommCost:
        """The cost whose ``bound_by`` is the largest of ``terms`` (ties: the first in :data:`BOUND_BY`)."""
        assert link in LINKS and terms and set(terms) <= set(BOUND_BY), (link, terms)
        ordered = tuple((k, float(terms[k])) for k in BOUND_BY if k in terms)
        bound = max(ordered, key=lambda kv: kv[1])[0]
        return cls(float(seconds), link, bound, float(nbytes), ordered,
                   None if link_bytes is None else float(link_bytes))

    @property
    def crossing_bytes(self) -> float:
        """The bytes one rank sends across ``link`` (all it sends where the backend does not split them)."""
        return self.bytes if self.link_bytes is None else self.link_bytes

    def as_dict(self) -> dict[str, object]:
        return {"seconds": self.seconds, "link": self.link, "bound_by": self.bound_by, "bytes": self.bytes,
                "link_bytes": self.crossing_bytes, "terms": dict(self.terms)}


@dataclass(frozen=True, eq=False)  # numpy fields: compare field by field
class AllToAllResult:
    """One MoE dispatch or combine over an EP group; per-rank arrays are indexed like ``ep_ranks``.

    ``time_s``: kernel time per rank (host_sync_s excluded: the engine adds it as a blocking CPU wait).
    ``sent_bytes``/``recv_bytes``: bytes each rank puts on / takes off links (DeepEP relays count twice,
    as received and sent); ``nvlink_bytes``/``rdma_bytes``: the sent bytes by link type; ``nic_bytes``:
    the larger direction through the rank's own NIC (PXN relays included). ``sms_used``: SMs the
    kernel holds while it runs (NCCL: its channels). ``host_sync_s``: NCCL's count all-to-all that precedes
    the dispatch (the D2H copy after it is the stack's host stall, added by the engine). ``cost``: the
    backend's terms behind ``time_s`` (:class:`CommCost`); ``counts_cost``: those of the count all-to-all.
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
    cost: CommCost | None = None
    counts_cost: CommCost | None = None
