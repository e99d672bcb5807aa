"""Measured vs simulated, per op and for the traced window, and a simulated trace for Perfetto.

The simulated window is built with :class:`sim.engine.Engine` directly (not through ``sim.predict``):
one rank, a ``compute`` stream with the trace's compute kernels in launch order and a ``comm`` stream with
its communication kernels, linked by the dependencies of one DualPipe forward/backward pair (forward
chunk: attn(F) -> dispatch(F) -> mlp(F) -> combine(F) -> next layer's attn(F); backward chunk:
combine(B) -> mlp(B) -> dispatch(B) -> attn(B) -> next layer's combine(B)). Durations come from the
calibration through :class:`sim.costs.CostModel` (GEMMs, attention), the fitted in-training comm rates,
and the measured per-slot times of memory-bound kernels whose shapes the trace does not record. While
DeepEP kernels run they hold their SMs and the engine slows compute accordingly.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from calibrate.fit import Sample
from calibrate.rules import TraceReading
from sim.calibration import (
    Calibration,
    device_gpu_spec,
    to_cost_model,
)
from sim.engine import Engine, Task
from sim.fileio import write_atomic

__all__ = ["OpRow", "Comparison", "WindowBusy", "compare_reading", "simulated_time", "window_busy",
           "write_simulated_trace"]

_F_CHAIN = ("attn(F)", "dispatch(F)", "mlp(F)", "combine(F)")
_B_CHAIN = ("combine(B)", "mlp(B)", "dispatch(B)", "attn(B)")


@dataclass(frozen=True)
class OpRow:
    """One op (label) of the comparison: median measured and simulated seconds per layer."""

    label: str
    kind: str
    measured_s: float
    simulated_s: float
    layers: int

    @property
    def error(self) -> float:
        return self.simulated_s / self.measured_s - 1.0 if self.measured_s > 0 else 0.0


@dataclass(frozen=True)
class WindowBusy:
    """Where one window's time goes on the traced rank: busy time of the compute stream(s) (union of their
    kernels), of the communication stream(s), the communication not under any compute kernel, and the span."""

    compute_busy_s: float
    comm_busy_s: float
    exposed_comm_s: float
    span_s: float

    def to_dict(self) -> dict[str, float]:
        return {"compute_busy_s": round(self.compute_busy_s, 9), "comm_busy_s": round(self.comm_busy_s, 9),
                "exposed_comm_s": round(self.exposed_comm_s, 9), "span_s": round(self.span_s, 9)}


def window_busy(compute: Sequence[tuple[float, float]], comm: Sequence[tuple[float, float]]) -> WindowBusy:
    """:class:`WindowBusy` of kernels given as ``(start, end)`` seconds on compute and communication streams.

    >>> w = window_busy([(0.0, 2.0), (1.0, 3.0)], [(2.5, 4.0)])
    >>> (w.compute_busy_s, w.comm_busy_s, w.exposed_comm_s, w.span_s)
    (3.0, 1.5, 1.0, 4.0)
    """
    from sim.trace import comm_under_compute, union_intervals

    cu = union_intervals(compute)
    hidden, exposed = comm_under_compute(compute, comm)
    comm_busy = hidden + exposed
    ends = [b for _, b in [*compute, *comm]]
    starts = [a for a, _ in [*compute, *comm]]
    span = max(ends) - min(starts) if ends else 0.0
    return WindowBusy(sum(b - a for a, b in cu), comm_busy, comm_busy - hidden, span)


@dataclass
class Comparison:
    rows: list[OpRow]
    measured_window_s: float
    simulated_window_s: float
    records: list[tuple[str, str, str, float, float, dict[str, Any]]] = field(default_factory=list)
    #: the window's busy/exposed breakdown: measured (the trace's kernels), replayed (this comparison's
    #: simulation: the calibration's rates with its in-training comm readings and per-slot memory-kernel
    #: times) and predicted (``moesim predict``'s path from the calibration alone: :mod:`calibrate.traced_plan`)
    measured_busy: WindowBusy | None = None
    replayed_busy: WindowBusy | None = None
    predicted_busy: WindowBusy | None = None

    @property
    def window_error(self) -> float:
        return self.simulated_window_s / self.measured_window_s - 1.0 if self.measured_window_s > 0 else 0.0

    @property
    def median_abs_error(self) -> float:
        errs = [abs(r.error) for r in self.rows if r.measured_s > 0]
        return statistics.median(errs) if errs else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"ops": [{"op": r.label, "kind": r.kind, "measured_s": r.measured_s, "simulated_s": r.simulated_s,
                         "error": round(r.error, 6), "layers": r.layers} for r in self.rows],
                "median_abs_op_error": round(self.median_abs_error, 6),
                "window": {"measured_s": self.measured_window_s, "simulated_s": self.simulated_window_s,
                           "error": round(self.window_error, 6),
                           "measured": self.measured_busy.to_dict() if self.measured_busy else None,
                           "replayed": self.replayed_busy.to_dict() if self.replayed_busy else None,
                           "predicted": self.predicted_busy.to_dict() if self.predicted_busy else None}}


def simulated_time(s: Sample, cal: Calibration, costs: Any, gpu: Any) -> float:
    """Clean (no SM sharing) seconds of one sample's op under the calibration."""
    t = cal.tables
    if s.kind == "gemm":
        peak = gpu.bf16_flops if s.dtype in ("bf16", "fp32") else gpu.fp8_flops
        secs = costs.gemm_time(s.work, peak, s.dtype)
        if s.phase in ("dgrad", "wgrad"):
            secs /= t.get("stack_efficiency", {}).get(gpu.arch, {}).get(f"gemm.{s.phase}", 1.0)
        return float(secs)
    if s.kind == "grouped_gemm":
        peak = gpu.bf16_flops if s.dtype in ("bf16", "fp32") else gpu.fp8_flops
        key = f"{s.dtype}_wgrad" if s.phase == "wgrad" and f"{s.dtype}_wgrad" in costs.grouped_gemm_eff else s.dtype
        return float(costs.grouped_gemm_time(s.work, s.size, peak, key))
    if s.kind == "attn":
        return float(costs.attention_time(s.work, gpu.bf16_flops, s.phase != "fwd"))
    row = t.get("comm_rates", {}).get(s.label)
    if s.kind == "comm":  # a kind the calibration has no rate for (its kernels all zero-duration): as measured
        return float(s.work / row["bytes_per_s"]) if row and row.get("bytes_per_s", 0) > 0 else s.seconds
    if s.kind == "notify":
        return float(row.get("overhead_s", 0.0)) if row else s.seconds
    return float(t.get("op_seconds", {}).get(s.label, s.seconds))


def compare_reading(reading: TraceReading, cal: Calibration, *, layer: int | None = None) -> Comparison:
    """Simulate the traced window under ``cal`` and compare it op by op with the measurement (every layer's
    median, or only ``layer``'s times: the held-out layer of a leave-one-layer-out fit)."""
    gpu = device_gpu_spec(cal)
    costs = to_cost_model(cal, gpu)
    sms = int(cal.tables.get("sm_sharing", {}).get("comm_sms", 0))
    eng = Engine(num_sms=gpu.num_sms)
    samples = sorted(reading.samples, key=lambda s: s.start_s)
    comm_streams = {s.stream for s in samples if s.kind in ("comm", "notify")}
    phase_first: dict[tuple[str, int], int] = {}
    phase_last: dict[tuple[str, int], int] = {}
    handles: list[tuple[int, Sample]] = []

    def deps_for(phase: str, layer: int) -> tuple[int, ...]:
        for chain in (_F_CHAIN, _B_CHAIN):
            if phase in chain:
                i = chain.index(phase)
                if i > 0:
                    prev = (chain[i - 1], layer)
                else:
                    prev = (chain[-1], layer - 1)
                if prev in phase_last:
                    return (phase_last[prev],)
        return ()

    for s in samples:
        on_comm = s.stream in comm_streams
        stream = "comm" if on_comm else "compute"
        phase = s.phase if "(" in s.phase else _phase_of(reading, s)
        key = (phase, s.layer)
        deps = deps_for(phase, s.layer) if key not in phase_first else ()
        held = sms if s.kind in ("comm", "notify") else 0
        dur = simulated_time(s, cal, costs, gpu)
        h = eng.add(0, Task(s.label or s.op, stream, dur, deps=deps, sms=held, phase=phase,
                            args={"layer": s.layer, "kind": s.kind}))
        handles.append((h, s))
        phase_first.setdefault(key, h)
        phase_last[key] = h
    span = eng.run()
    start = {r.handle: (r.start, r.end) for r in eng.log}
    meas: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    sim: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    kinds: dict[str, str] = {}
    records = []
    for h, s in handles:
        a, b = start[h]
        records.append((s.label or s.op, "comm" if s.stream in comm_streams else "compute", s.phase, a, b,
                        {"layer": s.layer, "kind": s.kind, "op": s.op}))
        if layer is not None and s.layer != layer:
            continue
        label = _row_label(s)
        kinds[label] = s.kind
        meas[label][s.layer] += s.seconds
        sim[label][s.layer] += b - a  # the replay adds no launch gap to a kernel (simulated_time)
    rows = []
    for label in sorted(meas):
        m = statistics.median(meas[label].values())
        p = statistics.median(sim[label].values())
        rows.append(OpRow(label, kinds[label], m, p, len(meas[label])))
    measured = window_busy([(k.start_s, k.start_s + k.seconds) for k in reading.kernels if k.stream not in comm_streams],
                           [(k.start_s, k.start_s + k.seconds) for k in reading.kernels if k.stream in comm_streams])
    replayed = window_busy([(a, b) for _l, st, _p, a, b, _x in records if st == "compute"],
                           [(a, b) for _l, st, _p, a, b, _x in records if st == "comm"])
    return Comparison(rows, reading.window_s, span, records, measured, replayed)


def _phase_of(reading: TraceReading, s: Sample) -> str:
    del reading
    return s.phase


def _row_label(s: Sample) -> str:
    if s.kind == "mem":
        return f"{s.op}[mem]"
    if s.kind == "notify":
        return f"{s.op}[{s.label}]"
    if s.kind == "comm":
        return f"{s.op}.{s.phase}"
    return f"{s.op}.{s.phase}"


def write_simulated_trace(comp: Comparison, path: str | Path, *, name: str = "simulated") -> None:
    """A Chrome/Perfetto trace of the simulated window, with the shared op names (written atomically)."""
    tids = {"compute": 1, "comm": 2}
    events: list[Mapping[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": name}},
        *({"ph": "M", "name": "thread_name", "pid": 0, "tid": tid, "args": {"name": stream}}
          for stream, tid in tids.items()),
    ]
    for label, stream, phase, a, b, args in comp.records:
        events.append({"ph": "X", "name": args.get("op", label), "cat": stream, "pid": 0, "tid": tids[stream],
                       "ts": a * 1e6, "dur": (b - a) * 1e6, "args": {"phase": phase, "slot": label, **args}})
    write_atomic(path, json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}, allow_nan=False))


def summary_lines(comp: Comparison, rows: Sequence[OpRow] | None = None) -> list[str]:
    """A side-by-side table: op, measured ms, simulated ms, error; then the window."""
    lines = [f"{'op':<44} {'kind':<12} {'measured ms':>12} {'simulated ms':>13} {'error':>8}"]
    for r in rows if rows is not None else comp.rows:
        lines.append(f"{r.label[:44]:<44} {r.kind:<12} {r.measured_s * 1e3:>12.3f} {r.simulated_s * 1e3:>13.3f} "
                     f"{r.error * 100:>+7.1f}%")
    lines.append(f"median |per-op error|: {comp.median_abs_error * 100:.1f}% over {len(comp.rows)} ops")
    lines.append(f"traced window: measured {comp.measured_window_s * 1e3:.2f} ms, simulated "
                 f"{comp.simulated_window_s * 1e3:.2f} ms ({comp.window_error * 100:+.1f}%)")
    if comp.measured_busy:
        cols = [("measured", comp.measured_busy), ("replayed", comp.replayed_busy), ("predicted", comp.predicted_busy)]
        cols = [(n, w) for n, w in cols if w is not None]
        lines.append("window (ms)     " + "".join(f"{n:>12}" for n, _ in cols))
        for name in ("compute_busy_s", "comm_busy_s", "exposed_comm_s", "span_s"):
            lines.append(f"  {name[:-2]:<14}" + "".join(f"{getattr(w, name) * 1e3:12.2f}" for _, w in cols))
    return lines
