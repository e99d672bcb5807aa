"""The simulator's time for one reference-layer step (forward + backward of one MoE decoder layer).

Ops come from :class:`sim.workload.Workload` (the simulator's own op graph for the layer); compute ops
are timed by :meth:`sim.costs.CostModel.op_seconds` on the calibration's device; the EP all-to-alls by
the calibration's fitted all-to-all latency and bandwidth for the world size; a blocking host copy by
``host_sync_s``. Every op also pays the calibration's ``launch_overhead_s`` (on a CPU: the framework's
per-op overhead). Measured CPU steps are per-rank CPU time (``time.process_time``), so ranks sharing the
machine's cores do not slow each other's measured compute; with a wall-clock measurement pass ``cores`` and
compute slows by ``ranks * threads / cores`` when above 1.

:func:`fit_overhead` fits that per-op overhead on calibration runs; ``moesim validate-reference`` then
predicts runs the fit never saw.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from sim.calibration import (
    Calibration,
    calibration_stack,
    device_gpu_spec,
    to_cost_model,
)
from sim.costs import Curve
from sim.errors import ConfigError
from sim.specs import ModelSpec, ParallelPlan
from sim.workload import Workload

__all__ = ["LayerTime", "layer_time", "fit_overhead", "model_from_fields"]

#: fp32 elements (the reference's CPU precision) are twice the BF16 bytes the workload counts.
FP32_OVER_BF16 = 2.0


@dataclasses.dataclass(frozen=True)
class LayerTime:
    """Parts of one simulated step: compute (GEMMs, attention; ``mem_s`` memory-bound ops included),
    communication and host syncs (``comm_s``), and ``n_ops`` times the per-op overhead."""

    compute_s: float
    comm_s: float
    n_ops: int
    overhead_s: float
    mem_s: float = 0.0
    host_syncs: int = 0

    @property
    def total_s(self) -> float:
        return self.compute_s + self.comm_s + self.n_ops * self.overhead_s


def model_from_fields(fields: Mapping[str, Any], name: str = "case") -> ModelSpec:
    from sim.loaders import model_from_mapping

    return model_from_mapping(dict(fields), name)


def _a2a_seconds(cal: Calibration, world: int, nbytes: float) -> float:
    rates = cal.tables.get("comm_rates", {})
    row = rates.get(f"gloo.all_to_all.w{world}")
    if row is None:
        known = sorted(int(k.rsplit("w", 1)[1]) for k in rates if k.startswith("gloo.all_to_all.w"))
        if not known:
            raise ConfigError(f"calibration {cal.name}: no all-to-all rates (comm_rates.gloo.all_to_all.w*)")
        row = rates[f"gloo.all_to_all.w{min(known, key=lambda w: abs(w - world))}"]
    return float(row.get("overhead_s", 0.0)) + nbytes / float(row["bytes_per_s"])


def layer_time(cal: Calibration, model: ModelSpec, tokens: int, ep: int, *, cores: int | None = None,
               threads: int = 1, overhead_s: float | None = None) -> LayerTime:
    """Simulated seconds of one reference step of ``model``'s MoE layer at ``tokens`` per rank over ``ep`` ranks."""
    gpu = device_gpu_spec(cal)
    costs = to_cost_model(cal, gpu)
    stack = dataclasses.replace(calibration_stack(cal), kernel_overhead_s=0.0)
    seq = min(tokens, 4096)
    plan = ParallelPlan(ep=ep, dp_shard=ep, seq_len=seq, micro_batch=max(1, tokens // seq),
                        global_batch=max(1, tokens // seq) * ep, ac="none", precision="bf16", ep_backend="nccl")
    wl = Workload(model, plan)
    ops = wl.layer_ops("moe", "fwd") + wl.layer_ops("moe", "bwd")
    share = max(1.0, ep * threads / cores) if cores else 1.0
    # attention by its fitted curve vs FLOPs where the calibration has one (CostModel's is one number)
    attn_curves = {k: Curve(tuple(c["sizes"]), tuple(c["values"])) for k, c in cal.tables.get("attn_eff", {}).items()}
    compute = comm = mem = 0.0
    syncs = 0
    for op in ops:
        if op.kind in ("mem", "quant", "rearrange"):
            t = costs.op_seconds(op, gpu, stack) * share
            mem += t
            compute += t
        elif op.kind == "comm":
            nbytes = op.nbytes * FP32_OVER_BF16 if op.coll != "a2a.counts" else op.nbytes
            comm += _a2a_seconds(cal, ep, nbytes)
        elif op.kind == "host_sync":
            comm += float(cal.tables.get("host_sync_s", 0.0))
            syncs += 1
        elif op.kind == "attn" and attn_curves.get("bwd" if op.backward else "fwd"):
            curve = attn_curves["bwd" if op.backward else "fwd"]
            compute += op.flops / (gpu.bf16_flops * curve(op.flops)) * share
        else:
            compute += costs.op_seconds(op, gpu, stack) * share
    oh = float(cal.tables.get("launch_overhead_s", 0.0)) if overhead_s is None else overhead_s
    return LayerTime(compute, comm, len(ops), oh * share, mem, syncs)


def fit_overhead(cal: Calibration, runs: Sequence[Mapping[str, Any]], *, cores: int | None = None,
                 threads: int = 1) -> tuple[float, float, float, list[float]]:
    """Fit the host and memory-bound costs the microbenchmarks cannot see, on calibration runs.

    Single-rank runs: ``measured - gemm/attention time = n_ops * overhead + mem_s * k`` by least squares
    (``overhead``: the framework's per-op cost; ``k``: how much slower the layer's memory-bound ops run than
    the streaming microbenchmark, so ``mem_bw_eff = calibration mem_bw_eff / k``). EP > 1 runs then give the
    EP path's host cost per blocking host sync (``host_sync_s``, median). Returns (overhead_s, k,
    host_sync_s, each run's relative error)."""
    parts = []
    for r in runs:
        model = model_from_fields(r["model"], r["case"])
        lt = layer_time(cal, model, int(r["tokens"]), int(r["ep"]), cores=cores, threads=threads, overhead_s=0.0)
        share = max(1.0, int(r["ep"]) * threads / cores) if cores else 1.0
        parts.append((lt, share, float(r["measured_s"]), int(r["ep"])))
    single = [p for p in parts if p[3] == 1] or parts
    # least squares y = a * x1 + b * x2 with a, b >= 0 (2x2 normal equations; fall back to one term)
    x1 = [lt.n_ops * share for lt, share, _, _ in single]
    x2 = [lt.mem_s for lt, _, _, _ in single]
    y = [m - (lt.compute_s - lt.mem_s) - lt.comm_s for lt, _, m, _ in single]
    s11, s22, s12 = sum(a * a for a in x1), sum(b * b for b in x2), sum(a * b for a, b in zip(x1, x2))
    s1y, s2y = sum(a * c for a, c in zip(x1, y)), sum(b * c for b, c in zip(x2, y))
    det = s11 * s22 - s12 * s12
    a, b = ((s1y * s22 - s2y * s12) / det, (s2y * s11 - s1y * s12) / det) if det > 1e-30 else (s1y / s11, 0.0)
    if b < 1.0 or a < 0:  # memory-bound ops no faster than the microbenchmark; overhead non-negative
        b = max(b, 1.0)
        a = max(0.0, sum(xa * (c - b * xb) for xa, xb, c in zip(x1, x2, y)) / s11)
    overhead, k = a, b

    def total(lt: LayerTime, share: float, host: float) -> float:
        return (lt.compute_s - lt.mem_s) + lt.mem_s * k + lt.comm_s + lt.n_ops * overhead * share + lt.host_syncs * host

    multi = [p for p in parts if p[3] > 1 and p[0].host_syncs > 0]
    host = statistics.median(max(0.0, (m - total(lt, share, 0.0)) / lt.host_syncs)
                             for lt, share, m, _ in multi) if multi else 0.0
    errors = [total(lt, share, host) / m - 1 for lt, share, m, _ in parts]
    return overhead, k, host, errors
