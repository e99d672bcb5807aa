"""The arrival spread behind DeepEP's notify barriers, fitted from a job trace (``CommCosts.arrival_cv``).

Each ``notify_dispatch`` / ``cached_notify`` kernel ends in a barrier over the EP group
(:mod:`sim.comm.barrier`): on the traced rank it lasts DeepEP's benchmark overhead plus the wait for the
slowest of ``ep`` peers, ``cv * W * E[max of ep normals]``, where ``W`` is the compute between two
barriers (the window's compute-kernel time over its notify kernels). The fit solves the median notify for
``cv``; the residuals are each kernel's ratio to the median (the spread the mean-wait model does not carry).
"""

from __future__ import annotations

import statistics
from typing import Any

from calibrate.rules import TraceReading
from sim.comm.barrier import expected_max_std_normal
from sim.comm.costs import CommCosts

__all__ = ["fit_arrival_cv"]


def fit_arrival_cv(reading: TraceReading, ep: int) -> tuple[float, dict[str, Any]] | None:
    """(cv, residual stats) from the trace's notify kernels, or None when it has none."""
    from calibrate.fit import residual_stats

    notify = [k.seconds for k in reading.kernels if k.family == "deepep.notify"]
    compute = sum(k.seconds for k in reading.kernels if not k.family.startswith("deepep."))
    if not notify or compute <= 0 or ep <= 1:
        return None
    work = compute / len(notify)
    waits = [max(0.0, s - CommCosts.default().deepep_overhead_s) for s in notify]
    median = statistics.median(waits)
    cv = median / (work * expected_max_std_normal(ep))
    return round(cv, 4), residual_stats([w / median - 1 for w in waits])
