"""How far to trust a prediction: a p10-p90 interval of tokens/s per GPU, by how far the plan lies from the
evidence, and the coverage of those intervals on the runs kept out.

The evidence is every measured run (``studies/data/measured_runs.toml``), stored with its in-sample residual
(the shipped joint calibration) and its leave-one-group-out (LOGO) residual (the calibration refitted without
the run's group, a group = system class x stack): :mod:`sim.interval_data`. Residuals are
``r = log(measured / predicted)``. A plan is placed (:func:`classify`) as

- **measured group** (same system class and stack family as a measured run, within [0.5x, 2x] of that
  group's GPU counts, backend, precision, launch mode and EP schedule measured on its class): the Student-t
  interval of the group's in-sample residuals pooled with every run's, widened by :data:`GROUP_FACTOR`;
- **new group** (a new GPU or rack class, a new stack): the Student-t interval of all LOGO residuals --
  what the calibration does on a group it never saw -- widened by :data:`GROUP_FACTOR` too;
- **beyond the envelope** (past 2x the largest GPU count measured on its class, a backend, precision, launch mode
  or EP schedule never measured there, a model no run measured, or a fabric transport no run used): the LOGO
  interval widened in log space by :data:`BEYOND_FACTOR` (:data:`TRANSPORT_FACTOR` on an unmeasured transport);

each factor sized on the held-out runs of its kind (:mod:`studies.interval_check`), so the width grows with
distance. On top of each, the step boundary's measured spread in proportion to its share of the step
(:func:`with_boundary_band`). The calibration's own spread adds in quadrature. The point is the model's
prediction, never shifted; the interval sits where the residuals put it and is widened where needed so that
``p10 <= predicted <= p90``. Every interval of a prediction carries an ``evidence`` record: the distance, the
nearest measured runs with their LOGO errors, and a note when the plan lies outside the validated envelope.
:func:`logo_interval_coverage` checks honesty: each run's interval built as if its group were unseen (LOGO
residuals of the other groups only) and whether its measured value is inside.

The residuals are data (written by ``moesim validate --write-intervals``), so a prediction reads them once
and never re-predicts the dataset.

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
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from sim.errors import ConfigError, MoesimError

__all__ = ["Interval", "interval", "prediction_interval", "stack_family", "calibration_sd", "loo_coverage", "transport_of",
           "measured_run_pairs", "residuals_by_stack", "T90", "DISTANCES", "BEYOND_FACTOR", "TRANSPORT_FACTOR",
           "SCALE_SPAN", "GROUP_FACTOR", "Placement", "classify", "placement", "nearest_runs", "distance_interval", "format_evidence",
           "logo_interval_coverage", "ep_schedule", "EP_SCHEDULES", "BOUNDARY_MIN_SHARE", "BOUNDARY_MIN_RUNS",
           "boundary_band", "with_boundary_band", "ratio_boundary_shift", "step_and_boundary"]


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
    #: how far the plan lies from the evidence (:data:`DISTANCES`; "" for an interval of given residuals)
    distance: str = ""
    #: ``{"distance", "nearest": [{"id", "error"}], "note"}`` (:func:`evidence_for`), or None
    evidence: dict[str, Any] | None = None
    #: the multiplier its distance's spread was widened by (:attr:`Placement.widen`: in a measured group the in-sample
    #: half-width's, beyond the envelope the leave-one-group-out one's)
    widen: float = 1.0
    #: the step boundary's seconds the interval allows (low, high) around the charged one (:func:`with_boundary_band`),
    #: or None where the step charges none or no band was measured
    boundary_band_s: tuple[float, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: an unbounded end (a spread past float's range) is ``None``, never ``Infinity``."""
        def finite(x: float) -> float | None:
            return x if math.isfinite(x) else None

        return {"p10_tokens_per_s_per_gpu": finite(self.p10), "prediction_tokens_per_s_per_gpu": self.point,
                "p90_tokens_per_s_per_gpu": finite(self.p90), "validation_runs": self.n_runs, "stack": self.stack,
                "calibration_log_sd": finite(self.calibration_sd), "validation_log_sd": finite(self.validation_sd),
                "mean_log_residual": finite(self.mean_log_residual), "left_out_run": self.left_out or None,
                **({"distance": self.distance} if self.distance else {}),
                **({"widen": self.widen} if self.widen != 1.0 else {}),
                **({"step_boundary_band_s": list(self.boundary_band_s)} if self.boundary_band_s else {})}

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


def held_out_predictions(path: str | Path, costs: Any = None) -> tuple[list[tuple[Any, Any]], list[str]]:
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


def measured_run_pairs(path: str | Path, costs: Any = None) -> tuple[list[tuple[str, str, float, float]],
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


#: How far a plan lies from the evidence, nearest first; the interval widens with each step.
DISTANCES = ("measured group", "new group", "beyond the envelope")
#: Beyond the envelope the leave-one-group-out half-width (log space) is multiplied by this: a plan past the largest
#: measured scale, with a backend, precision, launch mode or EP schedule never measured on its class, or on a model no
#: run measured extrapolates further than a new group does. Sized on the held-out runs that lie beyond the envelope for
#: any of those reasons (76 runs: GPT-OSS-120B and Kimi-K2 in five Megatron-Bridge containers, the newest containers'
#: full-iteration-graph recipes on GB300 and B300, MLPerf v6.0 GPT-OSS-20B's recipe cells, MLPerf's GB300 DeepSeek-V3
#: points (NVIDIA's and CoreWeave's), TorchTitan's DeepSeek-V3 16B steps and PR #1993's ladder, B300 NCCL rows, the
#: 8,192-GPU GB200 MLPerf point, the B300 EP-overlap rows): the multiplier at which 80% of them fall inside, 2.50
#: (2026-12-07, thirty-second session, once the step boundary's measured spread entered every interval in proportion
#: to its share of the step, :func:`with_boundary_band`: the launch-mode row fell from 6.8 to 2.5, the backend row
#: from 3.1 to 1.1, the model row from 3.6 to 2.7: the misses they shared were short steps the unidentified boundary
#: is most of) (``python -m studies.interval_check``; docs/transfer.md, "Intervals on the held-out runs"). It was
#: 3.67 without the band (twenty-eighth to thirty-first sessions), 2.30 at the twenty-third session's calibration,
#: 1.5 before that, an assumption, which covered 44% of them. 2.9 since the thirty-third session (2026-12-07): the
#: MLPerf GPT-OSS-20B cells' plans were corrected (BF16 gradient reduction and the recipe's 768M-parameter buckets, where
#: FP32 gradients had hidden the gap of their ep > 1 cells) and the parameter all-gather waits one bucket ahead: the
#: pooled row moved from 2.5 to 2.9. 2.3 since the forty-first session (2026-12-08): with TorchTitan's eager MoE
#: passes priced (StackProfile.indexed_accumulate, combine_bmm_batched) the leave-one-group-out half-widths widened
#: (3.1% -> 3.9% mean) and the pooled row fell from 2.9 to 2.32.
BEYOND_FACTOR = 2.3
#: In a measured group the in-sample half-width is multiplied by this, in a new group the leave-one-group-out one: the
#: fitted runs' errors understate a new run's, even of a measured class, stack and scale (a newer container, another
#: plan), and a new group is never narrower than a measured one. Sized as the others, on the
#: held-out runs that lie in a measured group (50 runs: Megatron-Bridge rows of fitted classes in the 25.11-26.08
#: containers, two MLPerf GB200 points): the multiplier at which 80% of them fall inside, 1.84 (2026-12-07,
#: thirty-second session; ``python -m studies.interval_check``); at 1, 36 of them were. 1.56 since the forty-first
#: session (2026-12-08, the refit with TorchTitan's eager MoE passes priced: the in-sample spread widened).
GROUP_FACTOR = 1.56
#: The same for a plan on a fabric transport no measured run used (EFA): sized on the only runs of such a
#: transport, the AWS EFA backend matrix (``studies/data/efa_runs.toml``, 44 runs), at which 80% of them fall
#: inside (12.2 with the step boundary's band at the 2026-12-07 thirty-fifth session, when Kimi-K2's nine runs joined
#: the matrix; 14.7 on its 35 runs before; 8.68 at the 2026-12-05 evening calibration). It is what those runs show,
#: not a check: no other unmeasured transport exists to check it on. 9.3 since the forty-first session (2026-12-08:
#: the same runs against the wider leave-one-group-out half-widths of the refit with TorchTitan's eager MoE passes).
TRANSPORT_FACTOR = 9.3
#: A GPU count within [1/SCALE_SPAN, SCALE_SPAN] x a measured run's is "measured scale"; beyond SCALE_SPAN x the
#: largest measured count of the class it is beyond the envelope.
SCALE_SPAN = 2.0
#: The step boundary's band is measured on the stored runs whose predicted step it is at least this share of (in a
#: longer step the rest of the model's error swamps it: the seed's 2 s of a 208 s step) ...
BOUNDARY_MIN_SHARE = 0.05
#: ... and only where at least this many such runs were stored.
BOUNDARY_MIN_RUNS = 5


def boundary_band(rows: Sequence[Any]) -> tuple[float, float] | None:
    """(p10, p90) seconds of the step boundary over the stored ``rows`` whose charged boundary is at least
    :data:`BOUNDARY_MIN_SHARE` of their predicted step: each row's :attr:`~sim.interval_data.ResidualRow.boundary_gap_s`,
    the boundary that would make it exact. None with fewer than :data:`BOUNDARY_MIN_RUNS` such rows.

    What a training step spends at its boundary is fitted as one number (``step.fixed_s``) but not identified
    (docs/transfer.md: 1.3-2.8 s on the fitted runs, 0-0.3 s on full-iteration-graph GB300 steps); the band is its
    measured spread, which an interval carries in proportion to the boundary's share of a plan's step.

    >>> from types import SimpleNamespace as R
    >>> rows = [R(boundary_s=2.0, step_s=10.0, boundary_gap_s=g) for g in (1.0, 1.5, 2.0, 2.5, 3.0)]
    >>> boundary_band(rows)
    (1.2, 2.8)
    >>> boundary_band(rows[:4]) is None
    True
    """
    gaps = sorted(float(r.boundary_gap_s) for r in rows
                  if r.boundary_gap_s is not None and r.step_s > 0 and r.boundary_s / r.step_s >= BOUNDARY_MIN_SHARE)
    if len(gaps) < BOUNDARY_MIN_RUNS:
        return None
    deciles = statistics.quantiles(gaps, n=10, method="inclusive")
    return round(deciles[0], 6), round(deciles[-1], 6)


def step_and_boundary(pred: Any) -> tuple[float, float]:
    """A :class:`~sim.predict.Prediction`'s step and the step boundary it charges (its breakdown's ``step_fixed``;
    0 for a step of one microbatch), in seconds."""
    return float(pred.step_time_s), float(pred.breakdown.get("step_fixed", 0.0))


def _band_ends(band: tuple[float, float], charged: float, beyond: bool) -> tuple[float, float]:
    """The boundary seconds an interval allows around the ``charged`` one: the band's p10-p90, beyond the envelope
    from 0, and never excluding the charged value."""
    return (0.0 if beyond else min(band[0], charged)), max(band[1], charged)


def with_boundary_band(iv: Interval, step_s: float, boundary_s: float, band: tuple[float, float] | None,
                       beyond: bool) -> Interval:
    """``iv`` widened by the step boundary's uncertainty: the step's ``boundary_s`` charged seconds may lie anywhere
    in ``band`` (its measured p10-p90 over the stored runs, :func:`boundary_band`); beyond the envelope from 0 (steps
    with none were measured: full-iteration-graph GB300 steps, steps of one microbatch) to the band's p90. Each
    side's log half-width adds in quadrature to ``iv``'s, so a step the boundary is most of widens most and a long
    step barely moves. No band, or a step charged none: ``iv`` unchanged.

    >>> iv = Interval(90.0, 100.0, 110.0, 5, "megatron", 0.0, 0.05)
    >>> short = with_boundary_band(iv, 4.0, 2.0, (1.5, 2.6), beyond=False)
    >>> long = with_boundary_band(iv, 200.0, 2.0, (1.5, 2.6), beyond=False)
    >>> short.p10 < long.p10 < iv.p10 + 1e-6 and short.p90 > long.p90 >= iv.p90
    True
    >>> with_boundary_band(iv, 4.0, 2.0, (1.5, 2.6), beyond=True).boundary_band_s
    (0.0, 2.6)
    """
    if band is None or boundary_s <= 0 or step_s <= boundary_s or not (math.isfinite(iv.p90) and iv.p10 > 0):
        return iv
    low, high = _band_ends(band, boundary_s, beyond)
    slow = math.log((step_s - boundary_s + high) / step_s)
    fast = -math.log((step_s - boundary_s + low) / step_s)
    down, up = math.log(iv.point / iv.p10), math.log(iv.p90 / iv.point)
    return replace(iv, p10=iv.point * math.exp(-math.hypot(down, slow)), p90=iv.point * math.exp(math.hypot(up, fast)),
                   boundary_band_s=(round(low, 6), round(high, 6)))


@dataclass(frozen=True)
class Placement:
    """Where a plan sits against the measured runs: its system class, stack family, the distance and why."""

    cluster: str
    family: str
    distance: str
    reasons: tuple[str, ...] = ()
    #: the multiplier of the distance's spread: in a measured group the in-sample one's, in a new group the
    #: leave-one-group-out one's (:data:`GROUP_FACTOR`); beyond the envelope the leave-one-group-out one's
    #: (:data:`BEYOND_FACTOR`, or :data:`TRANSPORT_FACTOR` on a transport never measured)
    widen: float = 1.0


#: :func:`ep_schedule`'s names: Megatron's combined 1F1B, which runs one microbatch's forward beside another's
#: backward so that each one's all-to-alls hide under the other's compute (``ParallelPlan.ep_overlap``), or not.
EP_SCHEDULES = ("ep-overlap", "sequential")


def ep_schedule(plan: Mapping[str, Any]) -> str:
    """How a plan's step orders its expert-parallel all-to-alls against compute: ``"ep-overlap"`` under Megatron's
    combined 1F1B (``ep_overlap``), else ``"sequential"``.

    >>> ep_schedule({"ep_overlap": True}), ep_schedule({})
    ('ep-overlap', 'sequential')
    """
    return EP_SCHEDULES[0] if plan.get("ep_overlap") else EP_SCHEDULES[1]


def classify(rows: Sequence[Any], cluster: str, family: str, n_gpus: int, ep_backend: str,
             precision: str, model: str = "", launch: str = "", schedule: str = "") -> Placement:
    """The distance of a plan (system class ``cluster``, stack ``family``, GPU count, EP backend, precision,
    catalog ``model`` name, ``launch`` mode, EP ``schedule``, :func:`ep_schedule`) from the measured ``rows``
    (:class:`sim.interval_data.ResidualRow`):

    - "beyond the envelope": more than 2x the largest GPU count measured on its class, a backend,
      precision, launch mode or EP schedule never measured on its class (a class never measured is compared with
      every measured run; launch modes and schedules only among rows that record one: full-iteration CUDA graphs
      change what a step spends at its boundary by 0-2 s, ``docs/transfer.md``, the newest containers; Megatron's
      EP overlap reorders a whole step, and the held-out plans that first turn it on where no measured run of
      their class did err by 13-50%, ``docs/transfer.md``), a
      fabric transport no run measured (EFA: its held-out runs, ``docs/transfer.md``), or a model no run
      measured (its shapes were never checked: GPT-OSS-120B's held-out runs, ``docs/transfer.md``, err by 13%
      on average where the measured models' groups err by 4%);
    - "measured group": same class and stack family as a measured run, within [0.5x, 2x] of one of that
      group's GPU counts;
    - "new group" otherwise (a new GPU or rack class, a new stack, a scale between the group's).

    >>> from types import SimpleNamespace as R
    >>> rows = [R(cluster="hgx-b200", family="megatron", gpus=256, ep_backend="nccl", precision="mxfp8")]
    >>> classify(rows, "hgx-b200", "megatron", 512, "nccl", "mxfp8").distance
    'measured group'
    >>> classify(rows, "hgx-b200", "torchtitan", 256, "nccl", "mxfp8").distance
    'new group'
    >>> classify(rows, "hgx-b200", "megatron", 1024, "nccl", "mxfp8").reasons
    ('1024 GPUs is beyond 2x the largest count measured on hgx-b200 (256)',)
    >>> rows = [R(cluster="hgx-b200", family="megatron", gpus=256, ep_backend="nccl", precision="mxfp8",
    ...           model="deepseek-v3-671b")]
    >>> classify(rows, "hgx-b200", "megatron", 256, "nccl", "mxfp8", "gpt-oss-120b").reasons
    ('model gpt-oss-120b was never measured (measured: deepseek-v3-671b)',)
    >>> rows = [R(cluster="hgx-b200", family="megatron", gpus=256, ep_backend="nccl", precision="mxfp8",
    ...           launch="partial")]
    >>> classify(rows, "hgx-b200", "megatron", 256, "nccl", "mxfp8", launch="graphs").reasons
    ('launch mode graphs was never measured on hgx-b200 (measured: partial)',)
    >>> rows = [R(cluster="hgx-b300", family="megatron", gpus=256, ep_backend="nccl", precision="mxfp8",
    ...           schedule="sequential")]
    >>> classify(rows, "hgx-b300", "megatron", 256, "nccl", "mxfp8", schedule="ep-overlap").reasons
    ('EP schedule ep-overlap was never measured on hgx-b300 (measured: sequential)',)
    """
    of_class = [r for r in rows if r.cluster == cluster]
    ref = of_class or list(rows)
    where = cluster if of_class else "any measured class"
    reasons = []
    if ref:
        largest = max(r.gpus for r in ref)
        if n_gpus > SCALE_SPAN * largest:
            reasons.append(f"{n_gpus} GPUs is beyond {SCALE_SPAN:g}x the largest count measured on {where} ({largest})")
        for what, value, attr in (("EP backend", ep_backend, "ep_backend"), ("precision", precision, "precision"),
                                  ("launch mode", launch, "launch"), ("EP schedule", schedule, "schedule")):
            seen = sorted({v for v in (getattr(r, attr, "") for r in ref) if v})
            if value and seen and value not in seen:
                reasons.append(f"{what} {value} was never measured on {where} (measured: {', '.join(seen)})")
    transports = sorted({transport_of(r.cluster) for r in rows})
    mine = transport_of(cluster)
    widen = BEYOND_FACTOR
    if transports and mine not in transports:
        reasons.append(f"fabric transport {mine} ({cluster}) was never measured (measured: {', '.join(transports)})")
        widen = TRANSPORT_FACTOR
    models = sorted({m for m in (getattr(r, "model", "") for r in rows) if m})
    if model and models and model not in models:
        reasons.append(f"model {model} was never measured (measured: {', '.join(models)})")
    if reasons:
        return Placement(cluster, family, DISTANCES[2], tuple(reasons), widen)
    group = [r for r in of_class if r.family == family]
    if any(r.gpus / SCALE_SPAN <= n_gpus <= r.gpus * SCALE_SPAN for r in group):
        return Placement(cluster, family, DISTANCES[0], widen=GROUP_FACTOR)
    if not of_class:
        why = f"no run was measured on {cluster}"
    elif not group:
        why = f"no {family} run was measured on {cluster}"
    else:
        why = (f"{n_gpus} GPUs is outside [0.5x, 2x] of the {cluster} x {family} runs' counts "
               f"({', '.join(str(g) for g in sorted({r.gpus for r in group}))})")
    return Placement(cluster, family, DISTANCES[1], (why,), GROUP_FACTOR)


@cache
def transport_of(cluster: str) -> str:
    """The scale-out transport of the built-in cluster template ``cluster`` (``"infiniband"`` for a name the
    catalog does not hold: a user's own cluster is judged by its template elsewhere)."""
    from sim.catalog import load_cluster

    try:
        return load_cluster(cluster).fabric.transport
    except MoesimError:
        return "infiniband"


def nearest_runs(rows: Sequence[Any], cluster: str, family: str, n_gpus: int, model: str,
                 k: int = 3, own: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The up-to-``k`` measured runs nearest a plan by group (class, then stack), GPU count (log2 ratio) and
    model (the plan's own runs, ``own`` ids, first among equals), each with its leave-one-group-out error
    (``predicted / measured - 1``; None without one)."""
    def score(r: Any) -> tuple[float, bool, str]:
        return (2.0 * (r.cluster != cluster) + 1.5 * (r.family != family) + 0.5 * abs(math.log2(n_gpus / r.gpus))
                + 1.0 * (r.model != model), r.id not in own, r.id)

    out = []
    for r in sorted(rows, key=score)[:k]:
        err = r.logo_error
        out.append({"id": r.id, "error": None if err is None else round(err, 4)})
    return out


def _pooled(group: Sequence[float], pool: Sequence[float]) -> tuple[float, float, int, int]:
    """(mean of ``group``, pooled sd of ``group`` about its mean and ``pool`` about its own, degrees of freedom,
    runs in the group)."""
    def ss(xs: Sequence[float]) -> float:
        m = statistics.fmean(xs)
        return sum((x - m) ** 2 for x in xs)

    df = max(len(group) - 1, 0) + max(len(pool) - 1, 0)
    total = (ss(group) if group else 0.0) + (ss(pool) if pool else 0.0)
    return statistics.fmean(group), math.sqrt(total / df) if df else float("nan"), df, len(group)


def distance_interval(predicted: float, distance: str, group_residuals: Sequence[float],
                      pool_residuals: Sequence[float], logo_residuals: Sequence[float], *,
                      calibration_sd: float = 0.0, stack: str = "", left_out: str = "",
                      widen: float | None = None) -> Interval:
    """The p10-p90 interval of ``predicted`` at ``distance`` (:data:`DISTANCES`), in log space, always
    containing ``predicted`` (which it never moves); the calibration's spread adds in quadrature:

    - "measured group": centred at the group's mean in-sample residual, half-width
      ``t(0.90, df) * sd * sqrt(1 + 1/n_group)`` with ``sd`` the group's in-sample spread pooled with every
      run's (``df = (n_group - 1) + (n_all - 1)``), times ``widen`` (default :data:`GROUP_FACTOR`: in-sample
      errors understate a new run's);
    - "new group" (and a measured group without residuals of its own): the Student-t interval of the
      leave-one-group-out residuals (:func:`interval`), its half-width times ``widen`` (default
      :data:`GROUP_FACTOR`: those residuals are of the fitted runs' own containers too);
    - "beyond the envelope": that interval's half-width times ``widen`` (:attr:`Placement.widen`: default
      :data:`BEYOND_FACTOR`) instead.

    >>> g = distance_interval(100.0, "measured group", [0.0, 0.02], [0.0, 0.02, -0.03, 0.01], [0.1, -0.1, 0.05])
    >>> n = distance_interval(100.0, "new group", [], [], [0.1, -0.1, 0.05])
    >>> b = distance_interval(100.0, "beyond the envelope", [], [], [0.1, -0.1, 0.05])
    >>> g.p90 / g.p10 < n.p90 / n.p10 < b.p90 / b.p10
    True
    """
    if distance == DISTANCES[0] and group_residuals:
        mean, sd, df, n = _pooled(list(group_residuals), list(pool_residuals))
        if df >= 1:
            factor = GROUP_FACTOR if widen is None else widen
            val = _t90(df) * sd * math.sqrt(1 + 1 / n) * factor
            half = math.sqrt(val ** 2 + (_Z90 * calibration_sd) ** 2)
            centre = predicted * math.exp(mean)
            return Interval(min(predicted, centre * math.exp(-half)), predicted, max(predicted, centre * math.exp(half)),
                            len(pool_residuals), stack, calibration_sd, sd, mean, left_out, distance, widen=factor)
    base = interval(predicted, logo_residuals, calibration_sd=calibration_sd, stack=stack, left_out=left_out)
    if not math.isfinite(base.p90) or base.p10 <= 0:
        return Interval(base.p10, predicted, base.p90, base.n_runs, stack, calibration_sd,
                        base.validation_sd, base.mean_log_residual, left_out, distance)
    widen = (BEYOND_FACTOR if distance == DISTANCES[2] else GROUP_FACTOR) if widen is None else widen
    centre = predicted * math.exp(base.mean_log_residual)
    half = max(math.log(base.p90 / centre), math.log(centre / base.p10)) * widen
    return Interval(min(predicted, centre * math.exp(-half)), predicted, max(predicted, centre * math.exp(half)),
                    base.n_runs, stack, calibration_sd, base.validation_sd, base.mean_log_residual, left_out, distance,
                    widen=widen)


def _evidence_note(place: Placement) -> str:
    if place.distance == DISTANCES[2]:
        return ("outside the validated envelope: " + "; ".join(place.reasons)
                + f" (interval: the leave-one-group-out spread x{place.widen:g})")
    if place.distance == DISTANCES[1]:
        return ("outside the validated envelope: " + "; ".join(place.reasons)
                + f" (interval: the leave-one-group-out spread x{place.widen:g})")
    return ""


def placement(pred: Any, data: Any, cluster: str | None = None) -> Placement:
    """Where a :class:`~sim.predict.Prediction` sits against the stored runs of ``data``
    (:class:`sim.interval_data.IntervalData`): :func:`classify` of its class (``cluster``; default: the template
    its GPU comes in), stack family, GPU count, backend, precision, model, launch mode and EP schedule, judged
    against every measured run (its own included: it was measured)."""
    from sim.catalog import default_cluster

    return classify(data.runs, cluster or default_cluster(pred.gpu), stack_family(pred.stack), int(pred.n_gpus),
                    str(pred.plan.get("ep_backend", "")), str(pred.plan.get("precision", "")), str(pred.model),
                    str(getattr(pred, "launch", "")), ep_schedule(pred.plan))


def prediction_interval(pred: Any, *, calibration_sd: float = 0.0, data: Any = None,
                        cluster: str | None = None, widen: float | None = None) -> Interval | None:
    """The p10-p90 interval of a :class:`~sim.predict.Prediction` by its distance from the evidence
    (:func:`classify`, :func:`distance_interval`), with its ``evidence`` record (the distance, the nearest
    measured runs with their leave-one-group-out errors, and a note outside the validated envelope), from the
    stored runs (``data``: a :class:`sim.interval_data.IntervalData`; default: the shipped file, read once).

    ``cluster``: the plan's system class (default: the template its GPU comes in, as ``predict --gpu`` picks
    it; a Prediction does not carry its template). A prediction of a measured run leaves that run's own
    residuals out of the spread (its nearest runs include it, with its LOGO error). The step boundary's measured
    spread widens it by the boundary's share of the step (:func:`with_boundary_band`). ``widen``: this multiplier of
    the distance's spread in place of the placement's (what ``studies.interval_check`` sizes the factors with).
    None when there is no interval data (:func:`sim.interval_data.interval_note` says why)."""
    from sim.interval_data import load_shipped, run_signature

    data = load_shipped() if data is None else data
    if data is None:
        return None
    own = run_signature(pred.model, pred.gpu, pred.n_gpus, pred.plan, pred.stack, pred.stack_release)
    # runs of the very same inputs (two releases' runs of one plan can share them) are all "its own"
    left = ", ".join(r.id for r in data.runs if r.signature == own)
    rows = [r for r in data.runs if r.signature != own]
    # its own residuals are left out of the spread, not out of where it sits
    place = placement(pred, data, cluster)
    cls, family = place.cluster, place.family
    group = [r.log_residual for r in rows if r.cluster == cls and r.family == family]
    pool = [r.log_residual for r in rows]
    logo = [x for x in (r.logo_log_residual for r in rows) if math.isfinite(x)]
    if not logo and not group and not calibration_sd > 0:
        return None
    beyond = place.distance == DISTANCES[2]
    iv = distance_interval(pred.tokens_per_s_per_gpu, place.distance, group, pool, logo,
                           calibration_sd=calibration_sd, stack=family, left_out=left,
                           widen=place.widen if widen is None else widen)
    step, boundary = step_and_boundary(pred)
    iv = with_boundary_band(iv, step, boundary, boundary_band(rows), beyond)
    notes = [n for n in (_evidence_note(place), _boundary_note(iv, boundary, step)) if n]
    evidence = {"distance": place.distance, "group": f"{cls} x {family}",
                "nearest": nearest_runs(data.runs, cls, family, int(pred.n_gpus), pred.model, own=left.split(", ")),
                "note": "; ".join(notes) or None}
    return replace(iv, evidence=evidence)


def ratio_boundary_shift(step_a: float, boundary_a: float, step_b: float, boundary_b: float,
                         band: tuple[float, float] | None, beyond: bool) -> tuple[float, float]:
    """(down, up): how far, in log, the ratio of plan a's tokens/s to plan b's moves when the step boundary both
    steps share (one stack's unidentified constant) lies anywhere in ``band`` instead of where it was charged
    (beyond the envelope from 0, as :func:`with_boundary_band`). Two steps the boundary is the same share of do not
    move; a short step against a long one moves most. (0, 0) without a band or a boundary.

    >>> down, up = ratio_boundary_shift(4.0, 2.0, 40.0, 2.0, (1.5, 2.6), beyond=False)
    >>> round(down, 3), round(up, 3)
    (0.125, 0.121)
    >>> ratio_boundary_shift(4.0, 2.0, 4.0, 2.0, (1.5, 2.6), beyond=True)
    (0.0, 0.0)
    """
    charged = max(boundary_a, boundary_b)
    if band is None or charged <= 0:
        return 0.0, 0.0
    low, high = _band_ends(band, charged, beyond)

    def shift(boundary: float) -> float:
        moved_a = boundary - boundary_a if boundary_a > 0 else 0.0
        moved_b = boundary - boundary_b if boundary_b > 0 else 0.0
        return math.log(step_a / (step_a + moved_a)) - math.log(step_b / (step_b + moved_b))

    ends = (shift(low), shift(high))
    return max(0.0, *(-e for e in ends)), max(0.0, *ends)


def _boundary_note(iv: Interval, boundary_s: float, step_s: float) -> str:
    """Where the step boundary is a large part of the step (a fifth or more), the note says so: the interval is
    then mostly that unidentified term's spread, and more microbatches per step would shrink it."""
    if iv.boundary_band_s is None or boundary_s < 0.2 * step_s:
        return ""
    low, high = iv.boundary_band_s
    return (f"the step boundary ({boundary_s:.2f} s charged, {low:.1f}-{high:.1f} s measured; not identified) is "
            f"{boundary_s / step_s:.0%} of this step")


def format_evidence(evidence: Mapping[str, Any]) -> str:
    """One line: the distance, the nearest measured runs with their leave-one-group-out errors, the note.

    >>> format_evidence({"distance": "new group", "group": "hgx-h800 x deepseek", "nearest": [{"id": "r1",
    ...                  "error": 0.05}], "note": None})
    'evidence: new group (hgx-h800 x deepseek); nearest measured: r1 (LOGO +5.0%)'
    """
    near = ", ".join(f"{n['id']} (LOGO {'n/a' if n['error'] is None else format(n['error'], '+.1%')})"
                     for n in evidence.get("nearest", []))
    note = f"; note: {evidence['note']}" if evidence.get("note") else ""
    return f"evidence: {evidence['distance']} ({evidence['group']}); nearest measured: {near or 'none'}{note}"


def logo_interval_coverage(runs: Sequence[Mapping[str, Any]], *, calibration_sd: float = 0.0) -> dict[str, Any]:
    """Leave-one-group-out interval coverage: each run's interval is built as if its group were unseen -- around
    its LOGO prediction, from the LOGO residuals of the OTHER groups only (a "new group" interval) -- and checked
    against its measured value. ``runs``: ``{"id", "group", "predicted", "measured"}`` rows (LOGO predictions;
    rows without ``predicted`` are skipped; a run with fewer than 2 runs in other groups has no interval and is
    not counted). Returns ``logo_interval_coverage`` (fraction), ``covered``,
    ``runs``, ``median_p90_p10_ratio`` and per-run ``rows``.

    >>> rs = [{"id": f"r{i}", "group": f"g{i % 3}", "predicted": 100.0, "measured": 100.0 + i} for i in range(6)]
    >>> out = logo_interval_coverage(rs)
    >>> out["runs"], out["logo_interval_coverage"] > 0.5
    (6, True)
    """
    ok = [r for r in runs if isinstance(r.get("predicted"), int | float) and r["predicted"] > 0 and r.get("measured")]
    res = [(r["group"], math.log(r["measured"] / r["predicted"])) for r in ok]
    rows = []
    for r in ok:
        others = [x for g, x in res if g != r["group"]]
        iv = distance_interval(float(r["predicted"]), DISTANCES[1], [], [], others, calibration_sd=calibration_sd)
        rows.append({"id": r["id"], "group": r["group"], "predicted": r["predicted"], "measured": r["measured"],
                     "p10": iv.p10 if math.isfinite(iv.p10) else None, "p90": iv.p90 if math.isfinite(iv.p90) else None,
                     "covered": iv.contains(r["measured"]) if len(others) >= 2 else None,
                     "other_groups_runs": len(others)})
    counted = [r for r in rows if r["covered"] is not None]  # fewer than 2 other runs: no spread, no interval
    ratios = [r["p90"] / r["p10"] for r in counted if r["p10"] and r["p90"]]
    covered = sum(int(r["covered"]) for r in counted)
    return {"logo_interval_coverage": covered / len(counted) if counted else None, "covered": covered,
            "runs": len(counted),
            "median_p90_p10_ratio": statistics.median(ratios) if ratios else None, "nominal": 0.8, "rows": rows}
