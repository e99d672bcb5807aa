"""Fit kernel-rate tables from measured samples: efficiency curves, SM sharing, comm rates, residuals.

A :class:`Sample` is one measured op instance with its work (FLOPs or bytes) and shape index; trace
readers (:mod:`calibrate.rules` for real jobs, :func:`samples_from_ours` for our own and synthetic traces)
produce them, and :func:`fit_tables` turns them into the tables of a calibration file
(:mod:`sim.calibration`), each with its residual statistics.

Efficiency of a compute sample: ``work / (peak * clean_s)``, where ``clean_s`` removes the slowdown the
simulator's engine applies while communication kernels hold SMs (``rate = (N - held) / N``), so the
engine reproduces the measured time: ``clean_s = seconds * (1 - overlap * held / N)``.

>>> s = [Sample("attn.q_proj", "fwd", "gemm", "fp8", 1e11, 1e11, 1e11 / 5e14) for _ in range(3)]
>>> curve, stats = fit_curve(s, peak=1e15)
>>> curve["values"], stats["n"]
([0.5], 3.0)
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sim.costs import log_interpolate
from sim.errors import ConfigError
from sim.ops import ALL_OPS

__all__ = ["Sample", "fit_curve", "residual_stats", "fit_sm_sharing", "fit_tables", "samples_from_ours",
           "clean_seconds", "COMPUTE_KINDS"]

COMPUTE_KINDS = ("gemm", "grouped_gemm", "attn")
_MERGE_DEX = 0.05  # sizes within 10^0.05 (12%) of each other share one curve knot


@dataclass(frozen=True)
class Sample:
    """One measured op instance.

    ``kind``: gemm, grouped_gemm, attn, mem, comm, notify. ``size``: the curve index (FLOPs per call for
    gemm/attn, rows for grouped_gemm, bytes for comm/mem). ``work``: FLOPs (compute) or bytes (comm/mem).
    ``overlap``: fraction of the measured duration during which communication kernels holding ``held_sms``
    SMs ran. ``layer``: which repetition (for leave-one-out and residuals by layer).
    """

    op: str
    phase: str
    kind: str
    dtype: str
    size: float
    work: float
    seconds: float
    overlap: float = 0.0
    held_sms: int = 0
    layer: int = 0
    label: str = ""
    start_s: float = 0.0
    stream: str = "compute"


def clean_seconds(s: Sample, num_sms: int) -> float:
    """The sample's duration with the engine's SM-sharing slowdown removed."""
    if s.held_sms <= 0 or s.overlap <= 0:
        return s.seconds
    return s.seconds * (1.0 - s.overlap * s.held_sms / num_sms)


def residual_stats(rel_errors: Sequence[float]) -> dict[str, float]:
    """Summary of relative errors (predicted / measured - 1): count, median |error|, p10 and p90.

    >>> residual_stats([-0.1, 0.0, 0.1, 0.2])["median_abs_rel"]
    0.1
    """
    if not rel_errors:
        return {"n": 0.0, "median_abs_rel": 0.0, "p10_rel": 0.0, "p90_rel": 0.0}
    xs = sorted(rel_errors)
    return {"n": float(len(xs)), "median_abs_rel": round(statistics.median(abs(x) for x in xs), 6),
            "p10_rel": round(_quantile(xs, 0.1), 6), "p90_rel": round(_quantile(xs, 0.9), 6)}


def _quantile(sorted_xs: Sequence[float], q: float) -> float:
    if len(sorted_xs) == 1:
        return sorted_xs[0]
    pos = q * (len(sorted_xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def fit_curve(samples: Sequence[Sample], peak: float, num_sms: int = 1) -> tuple[dict[str, list[float]],
                                                                             dict[str, float]]:
    """An efficiency curve over ``samples`` (peak x eff(size)): knots at clusters of sizes (within 12%),
    each the median efficiency of its cluster (geometric-mean size); residuals are the relative errors of
    each sample's time predicted from the curve."""
    if not samples:
        raise ConfigError("fit: no samples to fit a curve to")
    if peak <= 0:
        raise ConfigError(f"fit: peak rate must be positive, got {peak}")
    pts = sorted((s.size, s.work / (peak * clean_seconds(s, num_sms))) for s in samples if s.seconds > 0)
    if not pts:
        raise ConfigError("fit: every sample has zero duration")
    clusters: list[list[tuple[float, float]]] = [[pts[0]]]
    for p in pts[1:]:
        if math.log10(p[0]) - math.log10(clusters[-1][0][0]) <= _MERGE_DEX:
            clusters[-1].append(p)
        else:
            clusters.append([p])
    sizes = [10 ** statistics.fmean(math.log10(s) for s, _ in c) for c in clusters]
    values = [min(1.5, max(1e-6, statistics.median(e for _, e in c))) for c in clusters]
    errors = []
    for s in samples:
        if s.seconds > 0:
            pred = s.work / (peak * log_interpolate(sizes, values, s.size))
            errors.append(pred / clean_seconds(s, num_sms) - 1.0)
    return {"sizes": [float(f"{x:.6g}") for x in sizes], "values": [float(f"{v:.6g}") for v in values]}, \
        residual_stats(errors)


def fit_sm_sharing(samples: Sequence[Sample]) -> dict[str, float]:
    """The compute slowdown per unit of overlap with SM-holding communication, by least squares over
    repeated instances of the same op (same op, phase, size; different layers, different overlap):
    ``seconds = base * (1 + slowdown * overlap)``. Returns ``fitted_slowdown`` and the sample count."""
    groups: dict[tuple[str, str, float], list[Sample]] = defaultdict(list)
    for s in samples:
        if s.kind in COMPUTE_KINDS and s.seconds > 0:
            groups[(s.op, s.phase, round(math.log10(max(s.size, 1.0)), 2))].append(s)
    xs, ys, overlaps = [], [], []
    for group in groups.values():
        if len(group) < 2:
            continue
        mt = statistics.fmean(g.seconds for g in group)
        mo = statistics.fmean(g.overlap for g in group)
        for g in group:
            xs.append(g.overlap - mo)
            ys.append(g.seconds / mt - 1.0)
            overlaps.append(mo)
    sxx = sum(x * x for x in xs)
    if len(xs) < 3 or sxx < 1e-6:
        return {"fitted_slowdown": 0.0, "samples": float(len(xs))}
    slope = sum(x * y for x, y in zip(xs, ys)) / sxx
    # seconds / mean = (1 + s f) / (1 + s mean_f): the pooled slope is s / (1 + s mean_f)
    mean_f = statistics.fmean(overlaps)
    slow = slope / (1.0 - slope * mean_f) if slope * mean_f < 1 else slope
    return {"fitted_slowdown": round(slow, 4), "samples": float(len(xs))}


def _peak(gpu: Any, dtype: str) -> float:
    return float(gpu.bf16_flops if dtype in ("bf16", "fp32") else gpu.fp8_flops)


def fit_tables(samples: Sequence[Sample], gpu: Any) -> dict[str, Any]:
    """Calibration tables (see :mod:`sim.calibration`) fitted from ``samples`` measured on ``gpu``.

    - ``gemm_eff[dtype]``: dense forward GEMMs; ``stack_efficiency[arch]["gemm.dgrad"/"gemm.wgrad"]``:
      the dgrad / wgrad passes relative to that curve (median time ratio);
    - ``grouped_gemm_eff[dtype]`` from forward + dgrad grouped GEMMs, ``[dtype + "_wgrad"]`` from wgrad;
    - ``attn_fwd_eff`` / ``attn_bwd_eff``: median efficiency of the attention kernels;
    - ``comm_rates[kind]``: bytes / seconds of the communication kernels as they ran, and the median
      ``notify`` time before them;
    - ``op_seconds``: memory-bound ops by label (median clean seconds per instance) where no shape is known;
    - ``sm_sharing``: the fitted slowdown vs the engine's ``held / (N - held)`` model.
    """
    n = int(gpu.num_sms)
    tables: dict[str, Any] = {"gemm_eff": {}, "grouped_gemm_eff": {}, "residuals": {}, "comm_rates": {},
                              "op_seconds": {}}
    by: dict[tuple[str, str, str], list[Sample]] = defaultdict(list)
    for s in samples:
        by[(s.kind, s.dtype, s.phase if s.kind == "gemm" else ("wgrad" if s.phase == "wgrad" else "main"))].append(s)
    for (kind, dtype, phase), group in sorted(by.items()):
        if kind == "gemm" and phase == "fwd":
            curve, stats = fit_curve(group, _peak(gpu, dtype), n)
            tables["gemm_eff"][dtype] = curve
            tables["residuals"][f"gemm_eff.{dtype}"] = stats
        elif kind == "grouped_gemm":
            key = dtype if phase == "main" else f"{dtype}_wgrad"
            curve, stats = fit_curve(group, _peak(gpu, dtype), n)
            tables["grouped_gemm_eff"][key] = curve
            tables["residuals"][f"grouped_gemm_eff.{key}"] = stats
    arch = str(getattr(gpu, "arch", "*"))
    for dtype, curve in tables["gemm_eff"].items():
        for phase in ("dgrad", "wgrad"):
            group = by.get(("gemm", dtype, phase), [])
            if not group:
                continue
            ratios = [s.work / (_peak(gpu, dtype) * log_interpolate(curve["sizes"], curve["values"], s.size))
                      / clean_seconds(s, n) for s in group if clean_seconds(s, n) > 0]
            ratios = [r for r in ratios if r > 0]  # a sample of no work says nothing of the rate
            if not ratios:
                continue
            eff = min(1.5, statistics.median(ratios))
            tables.setdefault("stack_efficiency", {}).setdefault(arch, {})[f"gemm.{phase}"] = round(eff, 4)
            tables["residuals"][f"stack_efficiency.{arch}.gemm.{phase}.{dtype}"] = residual_stats(
                [r / eff - 1 for r in ratios])
    for backward, key in ((False, "attn_fwd_eff"), (True, "attn_bwd_eff")):
        group = [s for s in samples if s.kind == "attn" and (s.phase != "fwd") == backward
                 and clean_seconds(s, n) > 0]
        if group:
            effs = [e for e in (s.work / (gpu.bf16_flops * clean_seconds(s, n)) for s in group) if e > 0]
            if not effs:
                continue
            eff = min(1.5, statistics.median(effs))
            tables[key] = round(eff, 6)
            tables["residuals"][key] = residual_stats([eff / e - 1 for e in effs])
    comm_groups: dict[str, list[Sample]] = defaultdict(list)
    notify: dict[str, list[float]] = defaultdict(list)
    for s in samples:
        if s.kind == "comm":
            comm_groups[s.label or s.op].append(s)
        elif s.kind == "notify":
            notify[s.label or s.op].append(s.seconds)
    for kind, group in sorted(comm_groups.items()):
        rates = [s.work / s.seconds for s in group if s.seconds > 0]
        if not rates:
            continue
        rate = statistics.median(rates)
        row = {"bytes": statistics.median(s.work for s in group), "seconds": statistics.median(s.seconds for s in group),
               "bytes_per_s": rate}
        if notify.get(kind):
            row["overhead_s"] = statistics.median(notify[kind])
            tables["residuals"][f"comm_rates.{kind}.overhead_s"] = residual_stats(
                [row["overhead_s"] / x - 1 for x in notify[kind] if x > 0])
        tables["comm_rates"][kind] = {k: float(f"{v:.6g}") for k, v in row.items()}
        tables["residuals"][f"comm_rates.{kind}"] = residual_stats([rate / r - 1 for r in rates])
    mem: dict[str, list[float]] = defaultdict(list)
    for s in samples:
        if s.kind == "mem":
            mem[s.label or f"{s.op}@{s.phase}"].append(clean_seconds(s, n))
    for label, secs in sorted(mem.items()):
        med = statistics.median(secs)
        tables["op_seconds"][label] = float(f"{med:.6g}")
        if med > 0:
            tables["residuals"][f"op_seconds.{label}"] = residual_stats([med / x - 1 for x in secs if x > 0])
    held = [s.held_sms for s in samples if s.kind == "comm" and s.held_sms > 0]
    if held:
        h = statistics.median(held)
        tables["sm_sharing"] = {"comm_sms": float(h), "model_slowdown": round(h / (n - h), 4),
                                **fit_sm_sharing(samples)}
    return {k: v for k, v in tables.items() if v}


_KEYS = ("kind", "dtype", "size", "work")


def samples_from_ours(events: Iterable[Mapping[str, Any]], *, num_sms: int = 1) -> list[Sample]:
    """Samples from a trace whose complete events carry the shared op names (:mod:`sim.ops`) and their
    work in ``args`` (``kind``, ``dtype``, ``size``, ``work``, optional ``phase``, ``layer``, ``overlap``,
    ``held_sms``, ``label``): moesim's own simulated and synthetic traces, and profiled runs whose
    calibrator attached shapes. Events without those args are skipped."""
    del num_sms
    wanted = set(ALL_OPS)
    out = []
    for index, e in enumerate(events):
        name, args = e.get("name"), e.get("args") or {}
        if e.get("ph") != "X" or name not in wanted or not all(k in args for k in _KEYS):
            continue
        try:
            size, work = float(args["size"]), float(args["work"])
            overlap = float(args.get("overlap", 0.0))
            held = int(args.get("held_sms", 0))
            layer = int(args.get("layer", 0))
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"trace event {index} ({name}): args size/work/overlap/held_sms/layer must be "
                              f"numbers, got {dict(args)!r}"[:200]) from None
        if not (math.isfinite(size) and math.isfinite(work)) or size <= 0 or work <= 0:
            raise ConfigError(f"trace event {index} ({name}): size and work must be positive, "
                              f"got size={args['size']!r} work={args['work']!r}")
        if not 0 <= held <= 1 << 16:
            raise ConfigError(f"trace event {index} ({name}): held_sms must be a count of SMs, got {held!r}"[:200])
        kind = str(args["kind"])
        if kind not in (*COMPUTE_KINDS, "mem", "comm", "notify"):
            raise ConfigError(f"trace event {index} ({name}): unknown kind {kind!r}")
        out.append(Sample(str(name), str(args.get("phase", "fwd")), kind, str(args["dtype"]), size, work,
                          float(e["dur"]) * 1e-6, overlap, held, layer, str(args.get("label", "")),
                          float(e["ts"]) * 1e-6))
    return out


def without_layer(samples: Sequence[Sample], layer: int) -> list[Sample]:
    """The samples of every other layer (leave-one-layer-out fits)."""
    return [s for s in samples if s.layer != layer]


def relabel(samples: Sequence[Sample], **changes: Any) -> list[Sample]:
    return [replace(s, **changes) for s in samples]
