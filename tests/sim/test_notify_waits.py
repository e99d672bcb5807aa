"""Issue 14, Must show 2: the notify (barrier) waits on the traced plan come out of the arrival-spread model
(sim.comm.barrier), not a stored duration: their median within 25% of the trace's 16 notify kernels; with
zero variability they are DeepEP's benchmark overhead (10 us). The spread is too narrow (p90: strict xfail)."""

from __future__ import annotations

import dataclasses
import statistics

import numpy as np
import pytest

from calibrate.traced_plan import traced_run
from sim.calibration import calibrated_inputs, load_calibration
from sim.comm.barrier import sampled_waits
from sim.predict.timing import Context
from tests.shared_trace import NEEDS_TRACE, TRACE

pytestmark = NEEDS_TRACE


def _trace_notify_us() -> list[float]:
    """The notify_dispatch / cached_notify kernels of DeepSeek's H800 trace (measured-runs.md s3), in us."""
    from calibrate.rules import read_job_trace
    from calibrate.traces import load_trace

    reading = read_job_trace(load_trace(str(TRACE)))
    return [k.seconds * 1e6 for k in reading.kernels if k.family == "deepep.notify"]


def _predicted_notify_s(cv_scale: float = 1.0, n: int = 4000) -> list[float]:
    model, cluster, plan, stack = traced_run()
    costs, stack = calibrated_inputs(load_calibration("h800-deepseek-trace"), cluster.gpu, stack)
    ctx = Context(model, cluster, plan, costs, stack)
    cc = dataclasses.replace(ctx.ccosts, arrival_cv=ctx.ccosts.arrival_cv * cv_scale)
    sigma = cc.arrival_cv * ctx.barrier_work_s
    return [w + cc.deepep_overhead_s for w in sampled_waits(plan.ep, [sigma] * n, seed=0)]


def test_notify_median_within_25_percent_of_the_trace() -> None:
    assert len(_trace_notify_us()) == 16
    predicted = statistics.median(_predicted_notify_s())
    assert predicted == pytest.approx(statistics.median(_trace_notify_us()) * 1e-6, rel=0.25)


def test_zero_variability_leaves_the_benchmark_overhead() -> None:
    assert max(_predicted_notify_s(cv_scale=0.0, n=16)) == pytest.approx(10e-6)


def test_waits_are_seeded_and_reproducible() -> None:
    assert _predicted_notify_s(n=16) == _predicted_notify_s(n=16)


@pytest.mark.xfail(strict=True, reason="issue 14 open: predicted notify p90 1.9 ms against 3.6 ms in the trace")
def test_notify_p90_within_25_percent_of_the_trace() -> None:
    predicted = float(np.percentile(_predicted_notify_s(), 90))
    assert predicted == pytest.approx(float(np.percentile(_trace_notify_us(), 90)) * 1e-6, rel=0.25)
