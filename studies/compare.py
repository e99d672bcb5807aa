"""Comparisons: the compare file (variants side by side, the first the reference) and the p10-p90 interval
of each variant's throughput ratio to the reference, from the residuals of *ratios* in the validation data.

**The compare file** is a scenario file (:mod:`sim.scenarios`) whose variants may change anything::

    [scenario]          # optional: name, description, and defaults of every variant: model, gpu, cluster,
    name = "..."        # gpus, stack, nic_gbps, calibration
    model = "qwen3-235b-a22b"
    stack = "megatron-26.04"
    gpus = 256
    [base]              # ParallelPlan fields shared by every variant
    seq_len = 4096
    [[variant]]         # name; optional model, gpu, cluster, gpus, stack, nic_gbps, calibration (each
    name = "HGX B200"   # overriding [scenario]), plan = {overrides of [base]}, measured_tokens_per_s_per_gpu,
    gpu = "b200"        # source, fitted
    [variant.plan]
    ep = 8

Every scenario file (and built-in scenario name) is a compare file. Unknown keys, wrong types and
missing model or GPU count are a :class:`~sim.errors.ConfigError` naming the key and the file.

**The ratio interval.** Errors two predictions share cancel in their ratio, those they do not share
remain. The evidence is every ordered pair (a, b) of predicted measured runs
(``studies/data/measured_runs.toml``, predicted by :func:`studies.validate.validate_runs`):
``r = log(predicted_a / predicted_b) - log(measured_a / measured_b)``. The pairs used are those that relate as
the two variants do (same model or not, same GPU or not); a class with fewer than :data:`MIN_PAIRS` pairs
falls back to all pairs of the same model relation, then to all pairs. Ordered pairs make the residuals
symmetric, so the interval ``ratio * exp(-q90(r)) .. ratio * exp(-q10(r))`` is centred on the predicted
ratio (on a log scale). The measured runs a variant reproduces are left out of its pairs (as a prediction's
own residual is left out of its interval). Leave-two-out (measured when this was written), they held the
measured ratio of 294 of 378 pairs of the shipped runs (77.8%, nominal 80%; :func:`ratio_coverage`). A variant
identical to the reference (same resolved inputs) has ratio 1 and a zero-width interval; any other variant gets
the spread, whatever its ratio.

Fitted runs are kept: a stack's efficiency is one scalar per release, which cancels (to first order) in the
ratio of two runs of that release, so their ratio residuals are real out-of-sample evidence.

>>> pts = [MeasuredPoint("a", "m", "b200", 100.0, 100.0), MeasuredPoint("b", "m", "gb200", 120.0, 150.0),
...        MeasuredPoint("c", "m", "b200", 90.0, 80.0)]
>>> [round(r, 3) for r in ratio_residuals(pts, same_model=True, same_gpu=True)]
[-0.118, 0.118]
>>> iv = ratio_interval(1.2, [-0.1, 0.1, -0.2, 0.2], basis="demo")
>>> round(iv.p10, 3), iv.ratio, round(iv.p90, 3)
(1.012, 1.2, 1.422)
>>> ratio_interval(1.0, [-0.1, 0.1], identical=True).p90
1.0
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from sim.errors import ConfigError
from sim.limits import CLUSTER_BOUNDS, MAX_COMPARE_VARIANTS, env_limit
from sim.loaders import check_plan_fields, read_toml
from sim.uncertainty import BEYOND_FACTOR

#: The least multiplier of a ratio's spread (the fitted runs' pair errors) where a variant lies beyond the validated
#: envelope; a variant on a transport no run measured widens it by its own, larger factor. A ratio's interval carries
#: no step-boundary band (two plans of one stack share the boundary, which cancels in part), so it is sized on its
#: own evidence: the held-out pairs of one model within one held-out file with a run beyond the envelope
#: (``python -m studies.ratio_check``; docs/transfer.md, "Ratio intervals on the held-out runs"), the multiplier at
#: which 80% of them fall inside: 5.12 over 390 pairs (2026-12-07, thirty-second session, with the step boundary's
#: part, :func:`sim.uncertainty.ratio_boundary_shift`; 6.09 without it). Until then a ratio took its variant's own
#: factor (3.67), under which 61% of those pairs fell inside (63% of all 543 pairs).
RATIO_BEYOND_FACTOR = 5.1
#: The multiplier of a ratio's spread where both variants lie inside the envelope: the fitted runs' pair errors
#: understate a new pair's, as a measured group's errors do a new run's (:data:`sim.uncertainty.GROUP_FACTOR`). Sized
#: on the held-out pairs with both runs inside the envelope (``python -m studies.ratio_check``): the multiplier at
#: which 80% of them fall inside, 1.30 over 153 pairs (2026-12-07, thirty-second session; at 1, 112 were); 1.07
#: since the forty-first session (2026-12-08, the refit with TorchTitan's eager MoE passes priced).
RATIO_GROUP_FACTOR = 1.07

__all__ = [
    "HEAD_KEYS",
    "MIN_PAIRS",
    "RATIO_BEYOND_FACTOR",
    "RATIO_GROUP_FACTOR",
    "VARIANT_KEYS",
    "CompareFile",
    "CompareVariant",
    "MeasuredPoint",
    "RatioInterval",
    "compare_from_mapping",
    "inputs_key",
    "load_compare",
    "measured_points",
    "pair_interval",
    "ratio_coverage",
    "ratio_interval",
    "ratio_residuals",
]

#: The fewest ordered pairs a class of measured-run pairs needs to give an interval on its own.
MIN_PAIRS = 6
#: Where the variant runs: a default in [scenario], overridden per variant.
_WHERE_KEYS = ("model", "gpu", "cluster", "gpus", "stack", "nic_gbps", "calibration")
HEAD_KEYS = frozenset({"name", "description", *_WHERE_KEYS})
VARIANT_KEYS = frozenset({"name", "plan", "measured_tokens_per_s_per_gpu", "source", "fitted", *_WHERE_KEYS})
_TABLES = ("scenario", "base", "variant")
_NIC_GBPS_MAX = 8e6  # as moesim predict --nic-gbps (sim.limits.CLUSTER_BOUNDS nic_bw_bytes_per_s, in Gb/s)


@dataclass(frozen=True)
class CompareVariant:
    """One variant as written (defaults of [scenario] and [base] applied): what to predict, where, and what
    was measured, if anything. ``None`` fields take ``moesim predict``'s defaults."""

    name: str
    model: str
    gpus: int
    gpu: str | None = None
    cluster: str | None = None
    stack: str | None = None
    nic_gbps: float | None = None
    calibration: str | None = None
    plan: dict[str, Any] = field(default_factory=dict)
    measured_tokens_per_s_per_gpu: float | None = None
    source: str = ""
    fitted: bool = False


@dataclass(frozen=True)
class CompareFile:
    """A compare file: its name, description, where it was read, and its variants (the first the reference)."""

    name: str
    description: str
    path: str
    variants: tuple[CompareVariant, ...]


def load_compare(name_or_path: str) -> CompareFile:
    """A compare file by path, or a built-in scenario by name (:class:`ConfigError` naming key and file)."""
    from sim.scenarios import scenario_names

    if not isinstance(name_or_path, str) or not name_or_path:
        raise ConfigError(f"compare: expected a TOML path or a built-in scenario name, got {name_or_path!r}")
    if name_or_path in scenario_names():
        import tomllib

        text = resources.files("sim.scenarios").joinpath(f"{name_or_path}.toml").read_text(encoding="utf-8")
        return compare_from_mapping(tomllib.loads(text), name_or_path)
    if not Path(name_or_path).exists() and not name_or_path.endswith(".toml"):
        raise ConfigError(f"compare: no file {name_or_path!r} and no built-in scenario of that name "
                          f"(built in: {', '.join(scenario_names())})")
    return compare_from_mapping(read_toml(name_or_path), name_or_path)


def _string(where: str, owner: str, key: str, value: Any, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not empty and not value):
        raise ConfigError(f"{where}: {owner}: {key} must be a {'' if empty else 'non-empty '}string, got {value!r}")
    return value


def _where_fields(where: str, owner: str, table: Mapping[str, Any]) -> dict[str, Any]:
    """The model / gpu / cluster / gpus / stack / nic_gbps / calibration keys of ``table``, checked."""
    out: dict[str, Any] = {}
    for key in _WHERE_KEYS:
        if key not in table:
            continue
        value = table[key]
        if key == "gpus":
            low, high = CLUSTER_BOUNDS["n_gpus"]
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ConfigError(f"{where}: {owner}: gpus must be an integer in [{low:g}, {high:g}], got {value!r}")
        elif key == "nic_gbps":
            if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                    or not 0 < value <= _NIC_GBPS_MAX):
                raise ConfigError(f"{where}: {owner}: nic_gbps must be a number in (0, {_NIC_GBPS_MAX:g}] Gb/s, "
                                  f"got {value!r}")
            value = float(value)
        else:
            value = _string(where, owner, key, value)
        out[key] = value
    return out


def _unknown(where: str, owner: str, table: Mapping[str, Any], allowed: Iterable[str]) -> None:
    extra = sorted(set(map(str, table)) - set(allowed))
    if extra:
        raise ConfigError(f"{where}: {owner}: unknown key(s) {', '.join(extra)}; allowed: "
                          f"{', '.join(sorted(allowed))}")


def _variant(where: str, index: int, data: Any, head: dict[str, Any], base: dict[str, Any]) -> CompareVariant:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: [[variant]] #{index + 1} must be a table, got {data!r}")
    if "name" not in data:
        raise ConfigError(f"{where}: [[variant]] #{index + 1} needs a name")
    name = _string(where, f"[[variant]] #{index + 1}", "name", data["name"])
    owner = f"variant {name!r}"
    _unknown(where, owner, data, VARIANT_KEYS)
    fields = {**head, **_where_fields(where, owner, data)}
    for key in ("model", "gpus"):
        if key not in fields:
            raise ConfigError(f"{where}: {owner}: needs {key} (in [scenario] or in the variant)")
    plan = check_plan_fields(data.get("plan", {}), f"{where}: {owner}: plan")
    measured = data.get("measured_tokens_per_s_per_gpu")
    if measured is not None and (isinstance(measured, bool) or not isinstance(measured, (int, float))
                                 or not 0 < measured < 1e12):
        raise ConfigError(f"{where}: {owner}: measured_tokens_per_s_per_gpu must be a positive number, got {measured!r}")
    fitted = data.get("fitted", False)
    if not isinstance(fitted, bool):
        raise ConfigError(f"{where}: {owner}: fitted must be true or false, got {fitted!r}")
    source = _string(where, owner, "source", data.get("source", ""), empty=True)
    return CompareVariant(name=name, plan={**base, **plan},
                          measured_tokens_per_s_per_gpu=None if measured is None else float(measured),
                          source=source, fitted=fitted, **fields)


def compare_from_mapping(data: Any, where: str) -> CompareFile:
    """A :class:`CompareFile` from a parsed TOML table (``where``: the file, named in every error)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a table, got {data!r}")
    extra = sorted(set(map(str, data)) - set(_TABLES))
    if extra:
        raise ConfigError(f"{where}: unknown table(s) {', '.join(extra)}; allowed: {', '.join(_TABLES)}")
    head = data.get("scenario", {})
    if not isinstance(head, dict):
        raise ConfigError(f"{where}: [scenario] must be a table, got {head!r}")
    _unknown(where, "[scenario]", head, HEAD_KEYS)
    name = _string(where, "[scenario]", "name", head.get("name", Path(where).stem))
    description = _string(where, "[scenario]", "description", head.get("description", ""), empty=True)
    defaults = _where_fields(where, "[scenario]", head)
    base = check_plan_fields(data.get("base", {}), f"{where}: [base]")
    raw = data.get("variant")
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{where}: needs one or more [[variant]] tables (the first is the reference), got "
                          f"{raw!r}")
    limit = env_limit("MOESIM_MAX_COMPARE_VARIANTS", MAX_COMPARE_VARIANTS)
    if len(raw) > limit:
        raise ConfigError(f"{where}: {len(raw):,} [[variant]] tables; at most {limit} are compared at once "
                          "(MOESIM_MAX_COMPARE_VARIANTS=<N> raises it)")
    variants = tuple(_variant(where, i, v, defaults, base) for i, v in enumerate(raw))
    counts = Counter(v.name for v in variants)
    dup = sorted(n for n, c in counts.items() if c > 1)
    if dup:
        raise ConfigError(f"{where}: variant names must be unique; repeated: {', '.join(dup)}")
    return CompareFile(name, description, str(where), variants)


# --- ratio residuals ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MeasuredPoint:
    """One measured run as the validation predicts it (tokens/s per GPU); ``inputs``: its
    :func:`inputs_key`, so that a variant that *is* this run can leave its own evidence out."""

    run_id: str
    model: str
    gpu: str
    predicted: float
    measured: float
    inputs: str = ""


def inputs_key(model: str, gpu: str, n_gpus: int, cluster: str, stack: str, plan: Mapping[str, Any]) -> str:
    """What names one prediction at moesim's default costs: model, GPU, GPU count, cluster template, stack
    profile and the resolved plan (``ParallelPlan.as_dict()``).

    >>> inputs_key("m", "b200", 8, "hgx-b200", "torchtitan", {"ep": 4}) == inputs_key("m", "b200", 8, "hgx-b200", "torchtitan", {"ep": 4})
    True
    """
    return json.dumps([model, gpu, int(n_gpus), cluster, stack, dict(plan)], sort_keys=True, default=str)


def _run_keys(path: str | Path | None) -> dict[str, str]:
    """:func:`inputs_key` of every run of the dataset that resolves (the others are not predicted anyway)."""
    from sim.errors import MoesimError
    from sim.stacks import profile_for
    from studies.dataset import load_runs, resolve_run

    out = {}
    for run in load_runs(path):
        try:
            _, cluster, plan = resolve_run(run)
        except MoesimError:
            continue
        out[run.id] = inputs_key(run.model, run.gpu, run.gpus, cluster.name, profile_for(run.stack, run.release),
                                 plan.as_dict())
    return out


def measured_points(path: str | Path | None = None) -> list[MeasuredPoint]:
    """Every predicted run of the measured-runs dataset at ``path`` (default: the shipped one), predicted as
    ``moesim validate`` predicts it (:func:`studies.validate.validate_runs`); runs it cannot predict are left out."""
    from studies.validate import validate_runs

    keys = _run_keys(path)
    out = []
    for row in validate_runs(path).rows:
        pred = row.predicted_tokens_per_s_per_gpu
        if pred is not None and pred > 0 and row.measured_tokens_per_s_per_gpu > 0:
            out.append(MeasuredPoint(row.run_id, row.model, row.gpu, float(pred), row.measured_tokens_per_s_per_gpu,
                                     keys.get(row.run_id, "")))
    return out


def _log_error(p: MeasuredPoint) -> float:
    return math.log(p.predicted / p.measured)


def ratio_residuals(points: Sequence[MeasuredPoint], *, same_model: bool | None = None,
                    same_gpu: bool | None = None, exclude: Iterable[str] = ()) -> list[float]:
    """``log(predicted_a / predicted_b) - log(measured_a / measured_b)`` over every ordered pair (a, b), a != b,
    of ``points`` whose model (GPU) relation is ``same_model`` (``same_gpu``; None: either), leaving out runs
    named in ``exclude``."""
    skip = set(exclude)
    pts = [p for p in points if p.run_id not in skip]
    out = []
    for a in pts:
        for b in pts:
            if a is b:
                continue
            if same_model is not None and (a.model == b.model) != same_model:
                continue
            if same_gpu is not None and (a.gpu == b.gpu) != same_gpu:
                continue
            out.append(_log_error(a) - _log_error(b))
    return out


@dataclass(frozen=True)
class RatioInterval:
    """A variant's tokens/s-per-GPU ratio to the reference and its p10-p90 (None without evidence)."""

    ratio: float
    p10: float | None
    p90: float | None
    n_pairs: int
    basis: str

    def contains(self, value: float) -> bool:
        return self.p10 is not None and self.p90 is not None and self.p10 <= value <= self.p90


def ratio_interval(ratio: float, residuals: Sequence[float], *, identical: bool = False,
                   basis: str = "", widen: float = 1.0,
                   boundary_shift: tuple[float, float] = (0.0, 0.0)) -> RatioInterval:
    """The p10-p90 of the measured ratio given the predicted ``ratio`` and the ratio ``residuals``
    (``log(predicted ratio / measured ratio)``): ``ratio * exp(-q90) .. ratio * exp(-q10)``, widened to contain
    ``ratio``; ``widen`` scales the residuals (a variant beyond the validated envelope:
    :data:`sim.uncertainty.BEYOND_FACTOR`, as its own interval is). ``boundary_shift``: (down, up) log moves of the
    ratio from the step boundary's band (:func:`sim.uncertainty.ratio_boundary_shift`), added in quadrature to each
    side. ``identical``: the two variants are the same, so the ratio is exactly 1 with zero width."""
    if identical:
        return RatioInterval(1.0, 1.0, 1.0, 0, "identical to the reference")
    if not (ratio > 0 and math.isfinite(ratio)):
        raise ConfigError(f"ratio interval: the ratio must be a positive finite number, got {ratio!r}")
    rs = np.array([r for r in residuals if math.isfinite(r)], dtype=float)
    if rs.size == 0:
        return RatioInterval(ratio, None, None, 0, basis or "no measured pairs")
    q10, q90 = (float(q) * widen for q in np.percentile(rs, [10.0, 90.0]))
    down, up = max(0.0, q90), max(0.0, -q10)  # log half-widths below and above the predicted ratio
    lo = ratio * math.exp(-math.hypot(down, boundary_shift[0]))
    hi = ratio * math.exp(math.hypot(up, boundary_shift[1]))
    return RatioInterval(ratio, lo, hi, int(rs.size), basis)


def _relation(same: bool, what: str) -> str:
    return f"the same {what}" if same else f"different {what}s"


def pair_interval(ratio: float, points: Sequence[MeasuredPoint], *, same_model: bool, same_gpu: bool,
                  identical: bool = False, exclude: Iterable[str] = (), beyond: str = "",
                  widen: float = BEYOND_FACTOR, floor: float = RATIO_BEYOND_FACTOR,
                  group: float = RATIO_GROUP_FACTOR,
                  boundary_shift: tuple[float, float] = (0.0, 0.0)) -> RatioInterval:
    """:func:`ratio_interval` from the measured pairs that relate as the two variants do (same model or not,
    same GPU or not), falling back to the model relation alone, then to every pair, while a class has fewer
    than :data:`MIN_PAIRS` pairs. ``beyond``: why a variant lies beyond the validated envelope (its interval
    was widened): the ratio's spread is widened by ``widen`` (the variant's own, the larger of two; default
    :data:`sim.uncertainty.BEYOND_FACTOR`), at least ``floor`` (:data:`RATIO_BEYOND_FACTOR`); inside it by
    ``group`` (:data:`RATIO_GROUP_FACTOR`). ``boundary_shift``: the step boundary's part (:func:`ratio_interval`).
    ``basis`` says which pairs were used."""
    if identical:
        return ratio_interval(ratio, [], identical=True)
    exclude = tuple(exclude)
    classes: list[tuple[bool | None, bool | None, str]] = [
        (same_model, same_gpu, f"{_relation(same_model, 'model')}, {_relation(same_gpu, 'GPU')}"),
        (same_model, None, _relation(same_model, "model")),
        (None, None, "any two runs"),
    ]
    residuals: list[float] = []
    label = "any two runs"
    for sm, sg, label in classes:
        residuals = ratio_residuals(points, same_model=sm, same_gpu=sg, exclude=exclude)
        if len(residuals) >= MIN_PAIRS:
            break
    left = f"; {', '.join(exclude)} left out (the variants' own runs)" if exclude else ""
    widen = max(widen, floor)
    widened = f"; spread x{widen:g}: {beyond}" if beyond else f"; spread x{group:g}"
    basis = f"{len(residuals)} ordered pairs of measured runs ({label}{left}{widened})"
    return ratio_interval(ratio, residuals, basis=basis, widen=widen if beyond else group, boundary_shift=boundary_shift)


def ratio_coverage(points: Sequence[MeasuredPoint]) -> dict[str, Any]:
    """Leave-two-out coverage of the ratio intervals over the measured runs: for every unordered pair (a, b),
    the interval of ``predicted_a / predicted_b`` from the pairs of the *other* runs, and whether it holds
    ``measured_a / measured_b``. Returns ``{"pairs", "covered", "coverage", "nominal", "median_width"}``
    (``median_width``: the median p90/p10)."""
    covered = total = 0
    widths = []
    for i, a in enumerate(points):
        for b in points[i + 1:]:
            iv = pair_interval(a.predicted / b.predicted, points, same_model=a.model == b.model,
                               same_gpu=a.gpu == b.gpu, exclude=(a.run_id, b.run_id))
            if iv.p10 is None or iv.p90 is None:
                continue
            total += 1
            covered += int(iv.contains(a.measured / b.measured))
            widths.append(iv.p90 / iv.p10)
    return {"pairs": total, "covered": covered, "coverage": covered / total if total else 0.0, "nominal": 0.8,
            "median_width": float(np.median(widths)) if widths else None}
