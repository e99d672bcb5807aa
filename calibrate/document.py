"""Assemble a calibration document (:mod:`sim.calibration` schema) from fitted tables and provenance.

``fit_traces`` is ``moesim calibrate fit``: read traces (a real job's by kernel-name rules, or ours by the
shared op names with shapes in their args), fit, validate the document with :func:`sim.calibration.
parse_calibration`, write it atomically.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from calibrate.barrier_fit import fit_arrival_cv
from calibrate.fit import Sample, fit_tables, residual_stats, samples_from_ours
from calibrate.fit_checks import check_clock, check_document, usable_samples
from calibrate.memory_fit import fit_memory_rates
from calibrate.rules import RunShapes, TraceReading, launch_gaps
from calibrate.steps import read_steps
from calibrate.traces import load_document
from sim.calibration import SCHEMA, VERSION, parse_calibration
from sim.catalog import gpu_names, load_gpu
from sim.errors import ConfigError
from sim.fileio import write_atomic

__all__ = ["build_document", "file_digest", "fit_document", "fit_traces", "git_revision", "gpu_from_device_name", "read_any"]

#: DeepEP's own benchmark rate at EP64 on H800 (published.md s5: 51 / 50 GB/s logical, dispatch / combine).
_DEEPEP_BENCH_EP64 = {"dispatch": 51e9, "combine": 50e9}


def git_revision() -> str | None:
    """The moesim checkout's commit (``+dirty`` when modified), or None outside git."""
    root = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10, check=False)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if rev.returncode != 0:
        return None
    return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def file_digest(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def gpu_from_device_name(device: str) -> str | None:
    """The catalog GPU of a CUDA device name (``NVIDIA H800`` -> ``h800``), or None."""
    low = device.lower()
    for name in sorted(gpu_names(), key=len, reverse=True):
        if name in low.replace(" ", "").replace("-", ""):
            return name
    return None


def read_any(path: str | Path, shapes: RunShapes | None = None, step: int | str | None = None,
             ) -> tuple[TraceReading | None, list[Sample], dict[str, Any]]:
    """Read one trace: ours (shared op names with work in args) when it has such events, else a real job's
    by kernel-name rules, step by step (``step``: :func:`calibrate.steps.read_steps`). Returns (job reading
    or None, samples, top-level metadata)."""
    events, meta = load_document(path)
    ours = samples_from_ours(events)
    if ours:
        return None, ours, meta
    check_clock(events, str(path))
    reading = read_steps(events, shapes, step, source=str(path))
    if not reading.kernels:
        raise ConfigError(f"{path}: no GPU kernels and no moesim op events with shapes: nothing to fit")
    return reading, reading.samples, meta


def build_document(name: str, gpu: str, tables: Mapping[str, Any], provenance: Mapping[str, Any],
                   *, kernels: Mapping[str, str] | None = None, sources: Mapping[str, str] | None = None,
                   notes: Sequence[str] = ()) -> dict[str, Any]:
    doc: dict[str, Any] = {"schema": SCHEMA, "version": VERSION, "name": name, "gpu": gpu,
                           "provenance": dict(provenance)}
    if kernels:
        doc["kernels"] = dict(kernels)
    doc.update(tables)
    if sources:
        doc["sources"] = dict(sources)
    if notes:
        doc["notes"] = list(notes)
    return doc


def _comm_tables(tables: dict[str, Any], reading: TraceReading) -> None:
    """The DeepEP kernels' in-training slowdown and arrival spread, from the trace's DeepEP rates.

    The kernels ran beside the other chunk's compute. A kernel bound by its NIC would move every kind at
    one byte rate, but the trace's FP8 dispatches and BF16 combines move at different rates, so the
    slowdown against DeepEP's benchmark is not the link's. It is the compute beside them (HBM, L2, SMs),
    ``CommCosts.overlap_kernel_slowdown``. That slowdown applies only where a schedule overlaps a kernel
    with compute, and leaves the link rates (and any NIC what-if) as the benchmark's. One slowdown for
    every kind: the geometric mean of their ratios to the benchmark, each kind's ratio its residual.
    """
    rates = tables.get("comm_rates", {})
    deepep = {k: v for k, v in rates.items() if k.startswith("deepep.")}
    if not deepep:
        return
    for kind, row in deepep.items():
        bench = _DEEPEP_BENCH_EP64["dispatch" if ".dispatch." in kind else "combine"]
        row["benchmark_bytes_per_s"] = bench
        row["training_slowdown"] = round(bench / row["bytes_per_s"], 4)
    ratios = [row["training_slowdown"] for row in deepep.values()]
    mean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    tables["comm"] = {"overlap_kernel_slowdown": round(mean - 1.0, 4)}
    tables["residuals"]["comm.overlap_kernel_slowdown"] = residual_stats([mean / r - 1 for r in ratios])
    fitted = fit_arrival_cv(reading, reading.shapes.ep)
    if fitted is not None:
        tables["comm"]["arrival_cv"], tables["residuals"]["comm.arrival_cv"] = fitted


def fit_traces(paths: Sequence[str | Path], out: str | Path, *, gpu: str | None = None, name: str | None = None,
               shapes: RunShapes | None = None, step: int | str | None = None) -> dict[str, Any]:
    """``moesim calibrate fit``: fit every trace's samples into one calibration file at ``out``."""
    doc = fit_document(paths, gpu=gpu, name=name or Path(out).stem, shapes=shapes, step=step)
    text = json.dumps(doc, indent=1, sort_keys=False, allow_nan=False)
    parse_calibration(text, str(out))  # fit_document checked it; the file we write must be one we read
    write_atomic(out, text + "\n")
    return doc


def fit_document(paths: Sequence[str | Path], *, gpu: str | None = None, name: str = "fitted",
                 shapes: RunShapes | None = None, exclude_layer: int | None = None,
                 step: int | str | None = None) -> dict[str, Any]:
    """The calibration document fitted from ``paths`` (``exclude_layer``: leave that layer's samples out;
    ``step``: which ProfilerSteps of a multi-step trace, :func:`calibrate.steps.read_steps`). Its
    self-checks (:func:`calibrate.fit_checks.check_document`) raise :class:`ConfigError` naming what
    went wrong in the fit."""
    if not paths:
        raise ConfigError("calibrate fit: give at least one trace")
    samples: list[Sample] = []
    readings: list[TraceReading] = []
    device = None
    sources = []
    for p in paths:
        reading, got, meta = read_any(p, shapes, step)
        samples.extend(s for s in got if exclude_layer is None or s.layer != exclude_layer)
        if reading is not None:
            readings.append(reading)
        props = meta.get("deviceProperties")
        if isinstance(props, list) and props and isinstance(props[0], Mapping):
            device = device or str(props[0].get("name", ""))
        steps = next((n[len("steps: "):] for n in (reading.notes if reading else []) if n.startswith("steps: ")), "")
        sources.append(f"{Path(p).name} (sha256 {file_digest(p)}" + (f"; {steps})" if steps else ")"))
    gpu_name = gpu or (gpu_from_device_name(device) if device else None)
    if gpu_name is None:
        raise ConfigError("calibrate fit: the trace names no known device; pass --gpu (one of "
                          f"{', '.join(gpu_names())})")
    spec = load_gpu(gpu_name)
    samples, left_out = usable_samples(samples)
    tables = fit_tables(samples, spec)
    notes: list[str] = [left_out] if left_out else []
    for reading in readings:
        _comm_tables(tables, reading)
        rates, rate_residuals = fit_memory_rates(reading, spec)
        tables.update(rates)
        tables["residuals"].update(rate_residuals)
        gaps = launch_gaps(reading.kernels, _compute_stream(reading))
        tables["launch_overhead_s"] = float(f"{gaps['launch_gap_s']:.6g}")
        notes += reading.notes
        notes.append(f"compute stream: {gaps['busy_s'] * 1e3:.2f} ms busy, {gaps['small_gaps']:.0f} launch gaps "
                     f"(median {gaps['launch_gap_s'] * 1e6:.1f} us), {gaps['large_gaps']:.0f} gaps over 50 us "
                     f"totalling {gaps['large_gap_total_s'] * 1e3:.2f} ms; window {reading.window_s * 1e3:.2f} ms")
    real = {"fp8": "real", "bf16": "real", "mxfp8": "absent"} if readings else None
    provenance = {"device": device, "driver": None, "torch": None, "torchao": None, "deep_ep": None,
                  "git": git_revision(), "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                  "sources": sources, "method": "moesim calibrate fit (kernel-name rules, shapes from the run's "
                                                "known config)" if readings else "moesim calibrate fit (moesim op events)"}
    src = {"gemm_eff": "fitted: dense forward GEMM kernels of the trace(s), peak x efficiency(FLOPs per call)",
           "grouped_gemm_eff": "fitted: grouped GEMM kernels (rows = token copies per rank)",
           "comm": "fitted: DeepEP kernels as they ran in training against DeepEP's EP64 benchmark (published.md s5): one overlap slowdown (their geometric mean); arrival_cv from the notify kernels' median wait (calibrate/barrier_fit.py)",
           "op_seconds": "measured: memory-bound kernels per launch slot (the trace records no shapes)",
           "sm_sharing": "fitted: slowdown of repeated compute ops vs their overlap with DeepEP kernels",
           "launch_overhead_s": "fitted: median idle gap under 50 us between compute-stream kernels",
           "quantize_bw_eff": "fitted (calibrate/memory_fit.py): the workload's quantize bytes per traced layer "
                              "at HBM bandwidth over the trace's cast/quantize kernel seconds (median of layers)",
           "mem_bw_eff": "fitted (calibrate/memory_fit.py): the workload's other memory-bound bytes per traced "
                         "layer at HBM bandwidth over the trace's norm/activation/permute/elementwise seconds"}
    if exclude_layer is not None:
        notes.append(f"layer {exclude_layer} left out of the fit (held out)")
    doc = build_document(name, gpu_name, tables, provenance, kernels=real, sources=src, notes=notes)
    check_document(doc, ", ".join(str(p) for p in paths))
    return doc


def _compute_stream(reading: TraceReading) -> str:
    counts: dict[str, int] = {}
    for k in reading.kernels:
        if not k.family.startswith("deepep."):
            counts[k.stream] = counts.get(k.stream, 0) + 1
    return max(counts, key=lambda s: counts[s]) if counts else ""

