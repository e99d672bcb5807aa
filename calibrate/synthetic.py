"""Synthetic traces with known parameters: the fitting's ground truth.

:func:`synthetic_trace` emits complete events named with the shared op names (:mod:`sim.ops`) whose
durations follow chosen efficiency curves (``work / (peak * eff(size))``), chosen communication rates
and a chosen SM-sharing slowdown, times log-normal noise. :mod:`calibrate.fit` must recover them.

>>> events = synthetic_trace(seed=0, noise=0.0)
>>> sorted({e["args"]["kind"] for e in events})
['comm', 'gemm', 'grouped_gemm']
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

from sim import ops

__all__ = ["TRUE_GEMM", "TRUE_GROUPED", "TRUE_COMM_BPS", "synthetic_trace"]

#: (size, efficiency) knots of the true curves (dense: FLOPs per call; grouped: rows).
TRUE_GEMM: tuple[tuple[float, float], ...] = ((1e9, 0.25), (1e10, 0.55), (1e11, 0.78), (1e12, 0.85))
TRUE_GROUPED: tuple[tuple[float, float], ...] = ((4096.0, 0.35), (16384.0, 0.55), (65536.0, 0.70))
TRUE_COMM_BPS = 40e9


def _interp(knots: Sequence[tuple[float, float]], size: float) -> float:
    for (s0, v0), (s1, v1) in zip(knots, knots[1:]):
        if s0 <= size <= s1:
            f = (math.log10(size) - math.log10(s0)) / (math.log10(s1) - math.log10(s0))
            return v0 + (v1 - v0) * f
    return knots[0][1] if size < knots[0][0] else knots[-1][1]


def synthetic_trace(*, seed: int = 0, noise: float = 0.03, repeats: int = 6, peak: float = 1e15,
                    slowdown: float = 0.0, held_sms: int = 20, num_sms: int = 132,
                    gemm: Sequence[tuple[float, float]] = TRUE_GEMM,
                    grouped: Sequence[tuple[float, float]] = TRUE_GROUPED,
                    comm_bps: float = TRUE_COMM_BPS) -> list[dict[str, Any]]:
    """Events of ``repeats`` layers: dense GEMMs at every knot size, grouped GEMMs at every knot, one
    dispatch per layer; half the compute events overlap communication (``overlap`` 0 or 1) and run
    ``1 + slowdown`` times longer there. Noise: log-normal with sigma ``noise`` (seeded)."""
    rng = random.Random(seed)
    events: list[dict[str, Any]] = []
    t = 0.0

    def emit(name: str, kind: str, dtype: str, size: float, work: float, seconds: float, layer: int,
             overlap: float, label: str) -> None:
        nonlocal t
        dur = seconds * math.exp(rng.gauss(0.0, noise)) if noise > 0 else seconds
        events.append({"ph": "X", "name": name, "cat": "kernel", "pid": 0, "tid": 1, "ts": t * 1e6, "dur": dur * 1e6,
                       "args": {"kind": kind, "dtype": dtype, "size": size, "work": work, "layer": layer,
                                "overlap": overlap, "held_sms": held_sms if overlap else 0, "label": label,
                                "phase": "fwd"}})
        t += dur + 5e-6

    for layer in range(repeats):
        for i, (size, _) in enumerate(gemm):
            overlap = float((i + layer) % 2)
            clean = size / (peak * _interp(gemm, size))
            # the engine model: rate (N - held) / N while overlapped, plus any extra measured slowdown
            secs = clean / (1.0 - overlap * held_sms / num_sms) * (1.0 + slowdown * overlap)
            emit(ops.ATTN_O_PROJ, "gemm", "bf16", size, size, secs, layer, overlap, "attn.o_proj.fwd")
        for rows, _ in grouped:
            flops = 2.0 * rows * 2048 * 7168
            clean = flops / (peak * _interp(grouped, rows))
            emit(ops.MOE_EXPERT_GEMM, "grouped_gemm", "bf16", rows, flops, clean, layer, 0.0, "moe.expert_gemm.fwd")
        nbytes = 4096 * 8 * 7168.0
        emit(ops.MOE_DISPATCH, "comm", "bf16", nbytes, nbytes, nbytes / comm_bps, layer, 0.0, "a2a.dispatch")
    return events
