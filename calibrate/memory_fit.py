"""Memory-bound kernel rates from a real job's trace: ``quantize_bw_eff`` and ``mem_bw_eff``.

The trace records no shapes for memory-bound kernels (casts, norms, activations, permutes), so they cannot
be fitted one by one. Their *aggregate* can: the simulator's workload for the traced run's plan says how
many bytes those kernels move in the traced window (per MoE layer: forward, recompute and backward; the
window holds one forward and one backward chunk of ``layers`` layers each = ``layers`` full layers), and
the trace says how long the kernels of those families took. The ratio, against the GPU's HBM bandwidth,
is the achieved fraction the cost model multiplies by (:meth:`sim.costs.CostModel.quantize_time`,
:meth:`~sim.costs.CostModel.memory_time`). Fitted on the traced window only; the residual is the spread of
the per-layer ratios.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from calibrate.fit import residual_stats
from calibrate.rules import TraceReading

__all__ = ["QUANT_FAMILIES", "MEM_FAMILIES", "fit_memory_rates"]

#: Trace kernel families (:func:`calibrate.rules.classify`) the cost model times as quantize kernels, and as
#: other memory-bound kernels.
QUANT_FAMILIES = ("mem.quant",)
MEM_FAMILIES = ("mem.norm", "mem.other", "mem.attn", "mem.permute", "mem.unpermute", "mem.act")


def _modelled_bytes() -> tuple[float, float]:
    """(quantize bytes, other memory-bound bytes) of one full MoE layer (fwd + recompute + bwd) of the
    traced run's plan under the ``deepseek`` stack (:func:`calibrate.traced_plan.traced_run`)."""
    from calibrate.traced_plan import traced_run
    from sim.workload import Workload

    model, _cluster, plan, stack = traced_run()
    wl = Workload(model, plan, stack)
    quant = mem = 0.0
    for phase in ("fwd", "recompute", "bwd"):
        for op in wl.layer_ops("moe", phase):
            if op.kind == "quant":
                quant += op.elems * (2 + 1 + 1 / 32)
            elif op.kind == "mem":
                mem += op.nbytes
    return quant, mem


def fit_memory_rates(reading: TraceReading, gpu: Any) -> tuple[dict[str, float], dict[str, Any]]:
    """``({"quantize_bw_eff": x, "mem_bw_eff": y}, residuals)`` from the trace's memory-bound kernels.

    Per traced layer: the modelled bytes of one full layer at the GPU's HBM bandwidth over the measured
    seconds of that layer's kernels of the family (forward and backward chunks together). The fitted value
    is the median over layers; empty when the trace has no such kernels.
    """
    quant_bytes, mem_bytes = _modelled_bytes()
    per_layer: dict[str, dict[int, float]] = {"quant": defaultdict(float), "mem": defaultdict(float)}
    for k in reading.kernels:
        if k.layer < 0:
            continue
        if k.family in QUANT_FAMILIES:
            per_layer["quant"][k.layer] += k.seconds
        elif k.family in MEM_FAMILIES:
            per_layer["mem"][k.layer] += k.seconds
    bw = float(gpu.hbm_bw_bytes_per_s)
    out: dict[str, float] = {}
    residuals: dict[str, Any] = {}
    for key, table, nbytes in (("quantize_bw_eff", "quant", quant_bytes), ("mem_bw_eff", "mem", mem_bytes)):
        secs = [s for s in per_layer[table].values() if s > 0]
        if not secs or nbytes <= 0:
            continue
        effs = [nbytes / bw / s for s in secs]
        eff = min(1.0, statistics.median(effs))
        out[key] = round(eff, 6)
        residuals[key] = residual_stats([e / eff - 1 for e in effs])
    return out, residuals
