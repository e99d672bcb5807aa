"""The CPU proxy hop of DeepEP-API normal kernels without IBGDA, fitted to UCCL-EP's own benchmark.

UCCL-EP (and DeepEP over NVSHMEM's libfabric transport on EFA) reach the network through a CPU proxy thread
(:mod:`sim.comm.transport`). Its normal (throughput) kernels cost a fixed time per kernel and move their RDMA
bytes at a share of the NIC's line rate: ``CommCosts.proxy_normal_s`` and ``CommCosts.proxy_rdma_fraction``.
Both are fitted here, jointly, by least squares on the log of the kernel times that UCCL-EP's README publishes
for its normal kernels on p6-b200 (8 B200 and 8 x 400 Gb/s EFA per node; DeepSeek-V3 pretraining setting:
4,096 tokens per rank, hidden 7,168, top-8 of 288 experts, FP8 dispatch, BF16 combine) at EP16, EP24 and EP32,
each point predicted by the simulator's own kernel model (:func:`sim.comm.moe_alltoall`, ``uccl-ep``): the
node-deduplicated traffic over the topology plus the fixed hop. Three EP degrees put a token on 2, 3 and 4
nodes, which is what separates the fixed part from the rate.

The README's p5en table (H200, two 200 Gb/s EFA NICs per GPU) is not fitted: its dispatch agrees with
p6-b200's, but its combine takes 4.9-6.4 ms where p6-b200's takes 2.0-3.7 ms, falling as EP grows: a
per-connection limit of that platform that one table does not identify (:data:`P5EN_NORMAL_US`: its dispatch checks
the fit on a platform it never saw, within 8%; its combine is a strict xfail in ``tests/sim/test_efa_transport.py``).

DeepEP v2 over NCCL GIN needs no proxy on EFA (NCCL 2.31's GPU-initiated GDAKI path) but reaches a smaller share of
the line than IBGDA on InfiniBand: ``CommCosts.gin_efa_rdma_fraction``, fitted the same way to AWS's direct EP
campaign on p6-b200 (:func:`fit_gin_efa_share`), whose UCCL-EP and DeepEP v1 columns check the proxy fit.

``python -m calibrate.proxy_fit`` prints the fit and every point against the model (:func:`report`).

>>> fit = fit_proxy_normal()
>>> round(fit.fixed_s * 1e6), round(fit.rdma_fraction, 2), fit.max_abs_residual < 0.1
(402, 0.8, True)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from sim.catalog import load_cluster, load_model
from sim.comm import FP8_WITH_SCALES_BYTES_PER_ELEM, CommCosts, moe_alltoall
from sim.specs import ModelSpec

__all__ = ["B200_CAMPAIGN_BACKENDS", "B200_CAMPAIGN_US", "P5EN_NORMAL_US", "P5_NORMAL_LOGICAL_GBPS", "P6_B200_NORMAL_US",
           "ProxyFit", "ShareFit", "benchmark_model", "campaign_kernel_s", "fit_gin_efa_share", "fit_proxy_normal",
           "kernel_s", "logical_rdma_bytes", "normal_kernel_s", "p5_rows", "report"]

#: uccl-project/uccl ep/README.md @021c2c0, "Normal kernels with NVLink and RDMA forwarding", On p6-b200:
#: EP -> (dispatch, combine) microseconds per kernel.
P6_B200_NORMAL_US: dict[int, tuple[float, float]] = {16: (1141.0, 1965.0), 24: (1637.0, 2887.0), 32: (2072.0, 3724.0)}
#: The same README, On p5en (8 H200, 16 x 200 Gb/s EFA per node): not fitted (module docstring).
P5EN_NORMAL_US: dict[int, tuple[float, float]] = {16: (1196.0, 6379.0), 24: (1633.0, 6365.0), 32: (2022.0, 4899.0)}

#: awslabs/awsome-distributed-ai micro-benchmarks/expert-parallelism/ep-backend-comparison/RESULTS-p5.md @46793a8
#: (p5.48xlarge: 8 H100 and 32 x 100 Gb/s EFA per node; 4,096 tokens, hidden 7,168, top-8 of 256 experts, BF16):
#: (ranks, backend) -> (dispatch, combine) "RDMA" GB/s as DeepEP's test prints them (logical bytes: every node a token
#: reaches, its own included). Not fitted: a check of the proxy model on another platform and, for ``deepep``, on
#: NVSHMEM's proxy rather than UCCL-EP's (:func:`p5_rows`).
P5_NORMAL_LOGICAL_GBPS: dict[tuple[int, str], tuple[float, float]] = {
    (32, "deepep"): (43.7, 46.1), (32, "uccl-ep"): (38.2, 30.2),
    (64, "deepep"): (39.6, 39.2), (64, "uccl-ep"): (29.9, 26.7)}

#: awslabs/awsome-distributed-ai micro-benchmarks/expert-parallelism/ep-backend-comparison/RESULTS-b200.md @46793a8
#: (p6-b200, August 2026; 4,096 tokens, hidden 7,168, top-8 of 256 experts): (ranks, dtype, phase) -> microseconds of
#: one prefill (normal) kernel for (UCCL-EP, DeepEP v1 over NVSHMEM, DeepEP v2 over NCCL GIN). The v2 column fits
#: ``CommCosts.gin_efa_rdma_fraction`` (:func:`fit_gin_efa_share`); the other two check the proxy fit on a second
#: campaign (UCCL-EP) and on NVSHMEM's proxy (DeepEP v1), which no fit reads.
B200_CAMPAIGN_US: dict[tuple[int, str, str], tuple[float, float, float]] = {
    (16, "fp8", "dispatch"): (1161.12, 1014.0, 864.688), (16, "bf16", "dispatch"): (1637.97, 1639.0, 1501.0),
    (16, "bf16", "combine"): (2096.58, 1633.22, 1615.0), (32, "fp8", "dispatch"): (2229.95, 2369.0, 2041.0),
    (32, "bf16", "dispatch"): (3852.97, 4125.0, 3753.0), (32, "bf16", "combine"): (3950.79, 4106.52, 3745.0)}
B200_CAMPAIGN_BACKENDS = ("uccl-ep", "deepep", "deepep-v2")

_TOKENS = 4096
_EXPERTS = 288
_SMS = 24  # UCCL-EP's test_internode.py default (Buffer.num_sms), as DeepEP's
_PHASES = (("dispatch", FP8_WITH_SCALES_BYTES_PER_ELEM), ("combine", 2.0))


@dataclass(frozen=True)
class ProxyFit:
    """The fitted hop: seconds per kernel, RDMA share of the line rate, their 1-sigma, the residuals."""

    fixed_s: float
    rdma_fraction: float
    fixed_sigma_s: float
    rdma_fraction_sigma: float
    residuals: tuple[float, ...]

    @property
    def max_abs_residual(self) -> float:
        """The largest |predicted / measured - 1| over the fitted points."""
        return max(abs(r) for r in self.residuals)


def benchmark_model() -> ModelSpec:
    """DeepSeek-V3 with the benchmark's 288 experts (its hidden size and top-8 are the model's)."""
    return dataclasses.replace(load_model("deepseek-v3-671b"), n_routed_experts=_EXPERTS)


def kernel_s(cluster_name: str, ranks: int, phase: str, backend: str, costs: CommCosts, *,
             model: ModelSpec | None = None, bytes_per_elem: float = 2.0) -> float:
    """Seconds of one ``backend`` normal ``phase`` kernel of a benchmark's case (4,096 tokens per rank, ``model``'s
    hidden size and top-k; default DeepSeek-V3) at ``ranks`` ranks on ``cluster_name``, as the simulator times it."""
    result = moe_alltoall(load_cluster(cluster_name, n_gpus=ranks), range(ranks), _TOKENS,
                          model or load_model("deepseek-v3-671b"), backend, phase, costs,
                          bytes_per_elem=bytes_per_elem, num_sms=_SMS)
    return float(result.time_s.max())


def normal_kernel_s(cluster_name: str, ep: int, phase: str, costs: CommCosts) -> float:
    """Seconds of one UCCL-EP normal ``phase`` kernel of UCCL-EP's README case at ``ep`` ranks on ``cluster_name``."""
    return kernel_s(cluster_name, ep, phase, "uccl-ep", costs, model=benchmark_model(),
                    bytes_per_elem=dict(_PHASES)[phase])


def logical_rdma_bytes(ranks: int, experts: int, tokens: int = _TOKENS, hidden: int = 7168, top_k: int = 8,
                       ranks_per_node: int = 8, bytes_per_elem: float = 2.0) -> float:
    """DeepEP's test's logical RDMA bytes of one rank's kernel: each token counted once per node it reaches (its own
    included) under uniform top-k routing over ``experts`` spread evenly over the nodes."""
    nodes = ranks // ranks_per_node
    per_node = experts // nodes
    miss = math.comb(experts - per_node, top_k) / math.comb(experts, top_k)
    return tokens * nodes * (1.0 - miss) * hidden * bytes_per_elem


def p5_rows(costs: CommCosts | None = None) -> list[tuple[int, str, str, float, float]]:
    """(ranks, backend, phase, measured GB/s, model GB/s) for :data:`P5_NORMAL_LOGICAL_GBPS`, the model's kernel timed
    on ``p5-h100`` at the benchmark's case and put in the same logical GB/s."""
    costs = costs or CommCosts.default()
    out = []
    for (ranks, backend), measured in sorted(P5_NORMAL_LOGICAL_GBPS.items()):
        logical = logical_rdma_bytes(ranks, load_model("deepseek-v3-671b").n_routed_experts)
        for phase, gbps in zip(("dispatch", "combine"), measured):
            out.append((ranks, backend, phase, gbps, logical / kernel_s("p5-h100", ranks, phase, backend, costs) / 1e9))
    return out


def campaign_kernel_s(ranks: int, dtype: str, phase: str, backend: str, costs: CommCosts) -> float:
    """Seconds of one ``backend`` kernel in :data:`B200_CAMPAIGN_US`'s case on p6-b200, as the simulator times it."""
    return kernel_s("p6-b200", ranks, phase, backend, costs,
                    bytes_per_elem=FP8_WITH_SCALES_BYTES_PER_ELEM if dtype == "fp8" else 2.0)


@dataclass(frozen=True)
class ShareFit:
    """One fitted RDMA share of the line, its 1-sigma, the residuals."""

    fraction: float
    sigma: float
    residuals: tuple[float, ...]


def fit_gin_efa_share(base: CommCosts | None = None) -> ShareFit:
    """Least squares of ``gin_efa_rdma_fraction`` on the DeepEP v2 column of :data:`B200_CAMPAIGN_US`."""
    base = base or CommCosts.default()
    keys = sorted(B200_CAMPAIGN_US)
    measured = np.array([B200_CAMPAIGN_US[k][2] * 1e-6 for k in keys])

    def residuals(x: np.ndarray) -> np.ndarray:
        costs = dataclasses.replace(base, gin_efa_rdma_fraction=float(x[0]))
        times = np.array([campaign_kernel_s(*k, "deepep-v2", costs) for k in keys])
        return np.asarray(np.log(times / measured), dtype=float)

    x, sigma, ratios = _fit_log(residuals, [0.7], [0.1], [1.0])
    return ShareFit(float(x[0]), float(sigma[0]), ratios)


def _fit_log(residuals: Callable[[np.ndarray], np.ndarray], x0: list[float], lo: list[float], hi: list[float]
             ) -> tuple[np.ndarray, np.ndarray, tuple[float, ...]]:
    """Least squares of log(model / measured) residuals: the parameters, their 1-sigma (the Jacobian and the residual
    variance over points less parameters) and each point's model / measured - 1."""
    res = least_squares(residuals, x0, bounds=(lo, hi), diff_step=1e-3)
    dof = max(res.fun.size - res.x.size, 1)
    cov = np.linalg.pinv(res.jac.T @ res.jac) * float(res.fun @ res.fun) / dof
    return res.x, np.sqrt(np.clip(np.diag(cov), 0.0, None)), tuple(float(np.expm1(r)) for r in res.fun)


def fit_proxy_normal(base: CommCosts | None = None) -> ProxyFit:
    """Least squares of the hop's two parameters on :data:`P6_B200_NORMAL_US` (sigma from the Jacobian and the
    residual variance, 6 points less 2 parameters)."""
    base = base or CommCosts.default()
    points = [(ep, phase, us * 1e-6) for ep, times in sorted(P6_B200_NORMAL_US.items())
              for (phase, _), us in zip(_PHASES, times)]

    def residuals(x: np.ndarray) -> np.ndarray:
        costs = dataclasses.replace(base, proxy_normal_s=float(x[0]) * 1e-6, proxy_rdma_fraction=float(x[1]))
        return np.array([np.log(normal_kernel_s("p6-b200", ep, phase, costs) / t) for ep, phase, t in points])

    x, sigma, ratios = _fit_log(residuals, [300.0, 0.7], [0.0, 0.2], [5000.0, 1.0])
    return ProxyFit(fixed_s=float(x[0]) * 1e-6, rdma_fraction=float(x[1]), fixed_sigma_s=float(sigma[0]) * 1e-6,
                    rdma_fraction_sigma=float(sigma[1]), residuals=ratios)


def report(fit: ProxyFit | None = None) -> str:
    """The fit as text: the two parameters with their sigma, then each benchmark point against the model."""
    fit = fit or fit_proxy_normal()
    costs = dataclasses.replace(CommCosts.default(), proxy_normal_s=fit.fixed_s, proxy_rdma_fraction=fit.rdma_fraction)
    lines = [f"proxy hop per normal kernel: {fit.fixed_s * 1e6:.0f} +- {fit.fixed_sigma_s * 1e6:.0f} us",
             f"RDMA share of the NIC line through the proxy: {fit.rdma_fraction:.3f} +- {fit.rdma_fraction_sigma:.3f}",
             "", f"{'platform':10s} {'EP':>3s} {'phase':9s} {'measured us':>12s} {'model us':>9s} {'error':>7s}"]
    for name, table, fitted in (("p6-b200", P6_B200_NORMAL_US, True), ("p5en-h200", P5EN_NORMAL_US, False)):
        for ep, times in sorted(table.items()):
            for (phase, _), us in zip(_PHASES, times):
                model_us = normal_kernel_s(name, ep, phase, costs) * 1e6
                tag = "" if fitted else "  (not fitted)"
                lines.append(f"{name:10s} {ep:3d} {phase:9s} {us:12.0f} {model_us:9.0f} {model_us / us - 1:+7.1%}{tag}")
    gin = fit_gin_efa_share()
    lines += ["", f"DeepEP v2 (NCCL GIN) RDMA share of the line on EFA: {gin.fraction:.3f} +- {gin.sigma:.3f}",
              "AWS's direct EP campaign on p6-b200 (August 2026): microseconds per kernel, measured / model (error);"
              " only deepep-v2 is fitted"]
    for key in sorted(B200_CAMPAIGN_US):
        cells = []
        for backend, us in zip(B200_CAMPAIGN_BACKENDS, B200_CAMPAIGN_US[key]):
            model_us = campaign_kernel_s(*key, backend, CommCosts.default()) * 1e6
            cells.append(f"{backend} {us:6.0f} / {model_us:6.0f} ({model_us / us - 1:+.1%})")
        lines.append(f"{key[0]:3d} {key[1]:4s} {key[2]:8s}  " + "   ".join(cells))
    lines += ["", "p5-h100 (AWS ep-backend-comparison, not fitted): logical RDMA GB/s as DeepEP's test prints them",
              f"{'ranks':>5s} {'backend':8s} {'phase':9s} {'measured':>9s} {'model':>7s} {'error':>7s}"]
    for ranks, backend, phase, measured, model_gbps in p5_rows(costs):
        lines.append(f"{ranks:5d} {backend:8s} {phase:9s} {measured:9.1f} {model_gbps:7.1f} {model_gbps / measured - 1:+7.1%}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
