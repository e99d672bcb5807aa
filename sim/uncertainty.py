"""How far to trust a prediction: a p10-p90 interval of tokens/s per GPU, and its leave-one-out coverage.

Two sources of error, combined in log space:

- the stack's **validation residuals**: ``r = log(measured / predicted)`` of the measured runs of the same
  framework stack (``studies/data/measured_runs.toml``); their mean is the stack's systematic error and
  their spread its scatter. With ``n`` runs the interval is a Student-t prediction interval,
  ``mean +- t(0.90, n-1) * sd * sqrt(1 + 1/n)`` (wide when ``n`` is small, as it should be);
- the **calibration residuals**: the spread of the calibration's fitted tables (their p10-p90 relative
  residuals, as a normal sd), added in quadrature.

The point is the model's prediction, never shifted. The interval is ``predicted * exp(mean +- half_width)``
(where the stack's measured runs have fallen around its predictions), widened where needed so that it
contains the prediction: ``p10 <= predicted <= p90`` always. Coverage is checked by leave-one-out: each
measured run's interval is built from the other runs only, and a prediction of a measured run (same model,
GPU, GPU count, plan and stack) never uses that run's own residual.

The residuals are data (:mod:`sim.interval_data`, written by ``moesim validate --write-intervals``), so a
prediction reads them and never re-predicts the dataset.

>>> iv = interval(1000.0, [0.0, 0.02, -0.02, 0.01], calibration_sd=0.0)
>>> round(iv.p10), round(iv.point), round(iv.p90)
(972, 1000, 1034)
>>> iv = interval(1000.0, [0.30, 0.32, 0.28], calibration_sd=0.0)  # the stack runs faster than predicted
>>> round(iv.p10), round(iv.point), iv.p90 > 1300
(1000, 1000, True)
>>> loo_coverage([("a", "s", 100.0, 101.0), ("b", "s", 100.0, 99.0), ("c", "s", 100.0, 100.5)])["covered"]
2
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.errors import ConfigError, MoesimError
from sim.measured_runs import MEASURED_RUNS

__all__ = ["Interval", "interval", "prediction_interval", "stack_family", "calibration_sd", "loo_coverage",
           "measured_run_pairs", "residuals_by_stack", "MEASURED_RUNS", "T90"]


#: One-sided 90% Student-t quantiles by degrees of freedom (1..30); the normal 1.2816 beyond.
T90 = (3.078, 1.886, 1.638, 1.533, 1.476, 1.440, 1.415, 1.397, 1.383, 1.372, 1.363, 1.356, 1.350, 1.345, 1.341,
       1.337, 1.333, 1.330, 1.328, 1.325, 1.323, 1.321, 1.319, 1.318, 1.316, 1.315, 1.314, 1.313, 1.311, 1.310)
_Z90 = 1.2816


@dataclass(frozen=True)
class Interval:
    """p10 / p90 of tokens/s per GPU around the (unshifted) prediction ``point``, and where the spread comes from.

    ``mean_log_residual``: the mean ``log(measured / predicted)`` of the runs used (where the interval sits,
    never applied to the point); ``left_out``: the measured run whose own residual was left out (its own
    prediction), or ``""``."""

    p10: float
    point: float
    p90: float
    n_runs: int
    stack: str
    calibration_sd: float
    validation_sd: float
    mean_log_residual: float = 0.0
    left_out: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: an unbounded end (a spread past float's range) is ``None``, never ``Infinity``."""
        def finite(x: float) -> float | None:
            return x if math.isfinite(x) else None

        return {"p10_tokens_per_s_per_gpu": finite(self.p10), "prediction_tokens_per_s_per_gpu": self.point,
                "p90_tokens_per_s_per_gpu": finite(self.p90), "validation_runs": self.n_runs, "stack": self.stack,
                "calibration_log_sd": finite(self.calibration_sd), "validation_log_sd": finite(self.validation_sd),
                "mean_log_residual": finite(self.mean_log_residual), "left_out_run": self.left_out or None}

    def contains(self, value: float) -> bool:
        return self.p10 <= value <= self.p90


def _t90(df: int) -> float:
    return T90[df - 1] if 1 <= df <= len(T90) else _Z90


def interval(predicted: float, log_residuals: Sequence[float], *, calibration_sd: float = 0.0,
             stack: str = "", left_out: str = "") -> Interval:
    """The p10-p90 interval of ``predicted`` tokens/s per GPU given validation log-residuals: the Student-t
    interval of the residuals, widened to contain ``predicted`` (which it never moves)."""
    if predicted <= 0 or not math.isfinite(predicted):
        raise ConfigError(f"interval: predicted tokens/s must be positive, got {predicted!r}")
    rs = [r for r in log_residuals if math.isfinite(r)]
    n = len(rs)
    mean = statistics.fmean(rs) if rs else 0.0
    if n >= 2:
        sd = statistics.stdev(rs)
        val = _t90(n - 1) * sd * math.sqrt(1 + 1 / n)
    else:
        sd, val = float("nan"), float("inf") if n == 0 and calibration_sd == 0 else 0.0
        if n == 1:
            val = abs(rs[0]) * _t90(1)  # one run: its error, widened as a 1-df t would
    try:
        half = math.sqrt(val ** 2 + (_Z90 * calibration_sd) ** 2) if math.isfinite(val) else val
        centre = predicted * math.exp(mean)
        lo = min(predicted, centre * math.exp(-half)) if math.isfinite(half) else 0.0
        hi = max(predicted, centre * math.exp(half)) if math.isfinite(half) else float("inf")
    except OverflowError:  # a spread (or shift) past float's range: unbounded, as with no data at all
        lo, hi = 0.0, float("inf")
    return Interval(lo, predicted, hi, n, stack, calibration_sd, sd if n >= 2 else 0.0, mean, left_out)


def calibration_sd(residuals: Mapping[str, Mapping[str, float]]) -> float:
    """A log-sd from a calibration's residual tables: the median over fitted tables (op lookups excluded)
    of ``(p90 - p10) / (2 * 1.2816)`` (the normal sd whose p10-p90 spans the same width)."""
    widths = [(float(r.get("p90_rel", 0.0)) - float(r.get("p10_rel", 0.0))) / (2 * _Z90)
              for key, r in residuals.items() if not key.startswith("op_seconds.") and r.get("n", 0) >= 2]
    return max(0.0, statistics.median(widths)) if widths else 0.0


def residuals_by_stack(pairs: Iterable[tuple[str, str, float, float]], *, exclude: str | None = None) -> dict[str, list[float]]:
    """``stack -> [log(measured / predicted)]`` from ``(id, stack, predicted, measured)`` pairs."""
    out: dict[str, list[float]] = {}
    for rid, stack, pred, meas in pairs:
        if rid == exclude or pred <= 0 or meas <= 0:
            continue
        out.setdefault(stack, []).append(math.log(meas / pred))
    return out


def loo_coverage(pairs: Sequence[tuple[str, str, float, float]], *, calibration_sd: float = 0.0) -> dict[str, Any]:
    """Leave-one-out coverage of the p10-p90 intervals over ``(id, stack, predicted, measured)`` pairs:
    each run's interval comes from the other runs of its stack. Returns totals, per stack, and per run."""
    rows: list[dict[str, Any]] = []
    for rid, stack, pred, meas in pairs:
        others = residuals_by_stack(pairs, exclude=rid).get(stack, [])
        iv = interval(pred, others, calibration_sd=calibration_sd, stack=stack)
        rows.append({"id": rid, "stack": stack, "predicted": pred, "measured": meas, "p10": iv.p10, "p90": iv.p90,
                     "covered": iv.contains(meas), "others": len(others)})
    per_stack: dict[str, dict[str, int]] = {}
    for r in rows:
        s = per_stack.setdefault(r["stack"], {"runs": 0, "covered": 0})
        s["runs"] += 1
        s["covered"] += int(r["covered"])
    covered = sum(int(r["covered"]) for r in rows)
    return {"runs": len(rows), "covered": covered, "coverage": covered / len(rows) if rows else 0.0,
            "nominal": 0.8, "per_stack": per_stack, "rows": rows}


def held_out_predictions(path: str | Path = MEASURED_RUNS, costs: Any = None) -> tuple[list[tuple[Any, Any]], list[str]]:
    """``[(MeasuredRun, Prediction)]`` for every held-out run of ``path``, each with its own stack profile
    (``stack`` + ``release``; ``costs`` default: moesim's), and the runs left out with the reason: fitted runs
    (their residual is zero by construction) and runs the simulator cannot predict."""
    from sim.measured_runs import load_runs, resolve_run
    from sim.predict import predict
    from sim.stacks import profile_for

    out, skipped = [], []
    for run in load_runs(path):
        if run.fitted:
            skipped.append(f"{run.id}: fitted (its residual is zero by construction)")
            continue
        try:
            model, cluster, plan = resolve_run(run)
            out.append((run, predict(model, cluster, plan, costs, stack=profile_for(run.stack, run.release))))
        except MoesimError as err:  # unknown model or cluster, a plan that cannot run: reported, not fatal
            skipped.append(f"{run.id}: {err}")
    return out, skipped


def measured_run_pairs(path: str | Path = MEASURED_RUNS, costs: Any = None) -> tuple[list[tuple[str, str, float, float]],
                                                                                   list[str]]:
    """Predict every held-out measured run of ``path`` (read strictly, :func:`sim.measured_runs.load_runs`)
    with its own stack profile (``stack`` + ``release``; ``costs`` default: moesim's) -> ``(id, stack,
    predicted, measured)`` pairs, and the runs left out (fitted runs, whose residual is zero by
    construction, and runs the simulator cannot predict, with the reason)."""
    predicted, skipped = held_out_predictions(path, costs)
    pairs = [(run.id, run.stack, float(pred.tokens_per_s_per_gpu), run.measured_tokens_per_s_per_gpu)
             for run, pred in predicted]
    return pairs, skipped


def stack_family(stack_name: str) -> str:
    """The framework a profile belongs to (``megatron-26.04`` -> ``megatron``): its profiles share the
    framework's validation runs."""
    return stack_name.split("-")[0]


def prediction_interval(pred: Any, *, calibration_sd: float = 0.0, data: Any = None) -> Interval | None:
    """The p10-p90 interval of a :class:`~sim.predict.Prediction` from the stored residuals of its stack's
    framework (``data``: a :class:`sim.interval_data.IntervalData`; default: the shipped file, read once)
    and ``calibration_sd``. A prediction of a measured run leaves that run's residual out. None when there
    is no interval data (missing or unreadable file: :func:`sim.interval_data.interval_note` says why), and
    when the framework has no other held-out measured run and the calibration no spread: without evidence
    the spread is unknown, which is no interval, not an infinite one."""
    from sim.interval_data import load_shipped, run_signature

    data = load_shipped() if data is None else data
    if data is None:
        return None
    family = stack_family(pred.stack)
    own = run_signature(pred.model, pred.gpu, pred.n_gpus, pred.plan, pred.stack, pred.stack_release)
    rows = data.by_family.get(family, [])
    left = next((r.id for r in rows if r.signature == own), "")
    if not any(r.signature != own and math.isfinite(r.log_residual) for r in rows) and not calibration_sd > 0:
        return None
    return interval(pred.tokens_per_s_per_gpu, [r.log_residual for r in rows if r.signature != own],
                    calibration_sd=calibration_sd, stack=family, left_out=left)
