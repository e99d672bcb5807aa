"""Validation: every run of a measured-runs dataset predicted and compared, with its source.

Each row is one run: predicted vs measured tokens/s per GPU, the error, and, where the run names a
``baseline``, the predicted and measured speedup over it. A run a number was fitted to alone is marked
``fitted`` and left out of the summary statistics; the shipped runs all enter the joint calibration
(:mod:`studies.joint_fit`), so their honest errors are the leave-one-group-out ones (:func:`logo_validation`). A run the simulator cannot predict in this build (a precision or plan it does not
support yet) is listed with the reason and counted, never silently dropped.

The shipped thresholds (``studies/data/validate_threshold.toml``) are today's errors plus a margin:
:func:`check_thresholds` says which one a result exceeds.

>>> result = validate_runs()
>>> result.rows[0].run_id, result.rows[0].fitted  # every shipped run enters the joint calibration, none alone
('titan-dsv3-b200-bf16', False)
>>> abs(result.rows[1].error) < 0.15  # the DeepEP seed run (README, issue 14)
True
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from sim.errors import ConfigError, MoesimError
from sim.loaders import read_toml
from sim.stacks import profile_for
from studies._sim import INTERVAL_NOTE, STACK_NOTE, interval_for, predict_run
from studies.dataset import MeasuredRun, load_runs, resolve_run

GIB = 2**30  # GiB, as TorchTitan logs memory

__all__ = ["ValidationRow", "ValidationResult", "Thresholds", "validate_runs", "load_thresholds",
           "check_thresholds", "format_result", "error_threshold_failures", "logo_intervals",
           "format_logo_intervals"]


@dataclass(frozen=True)
class ValidationRow:
    """One run: predicted vs measured (``predicted`` is None when the run cannot be predicted)."""

    run_id: str
    model: str
    gpu: str
    gpus: int
    stack: str
    fitted: bool
    measured_tokens_per_s_per_gpu: float
    predicted_tokens_per_s_per_gpu: float | None
    fits_in_memory: bool | None
    baseline: str | None
    predicted_speedup: float | None
    measured_speedup: float | None
    interval: tuple[float, float] | None
    source: str
    skipped: str = ""
    #: the framework's logged peak memory (GiB) and what the prediction's tensors take (GiB: its memory total
    #: less the runtime and communication-buffer allowance, which the allocator does not hold)
    measured_memory_gib: float | None = None
    predicted_tensor_memory_gib: float | None = None

    @property
    def memory_error(self) -> float | None:
        """Relative error of the predicted tensor memory against the logged peak (None without both)."""
        if self.measured_memory_gib is None or self.predicted_tensor_memory_gib is None:
            return None
        return self.predicted_tensor_memory_gib / self.measured_memory_gib - 1

    @property
    def error(self) -> float | None:
        """Relative error (positive: predicted faster than measured)."""
        if self.predicted_tokens_per_s_per_gpu is None:
            return None
        return self.predicted_tokens_per_s_per_gpu / self.measured_tokens_per_s_per_gpu - 1

    def ratio_over(self, other: ValidationRow) -> tuple[float, float]:
        """(predicted, measured) per-GPU throughput of this run over ``other``'s: a relative answer."""
        if self.predicted_tokens_per_s_per_gpu is None or other.predicted_tokens_per_s_per_gpu is None:
            raise ValueError(f"{self.run_id} over {other.run_id}: a run was not predicted")
        return (self.predicted_tokens_per_s_per_gpu / other.predicted_tokens_per_s_per_gpu,
                self.measured_tokens_per_s_per_gpu / other.measured_tokens_per_s_per_gpu)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "error": self.error, "memory_error": self.memory_error}


@dataclass(frozen=True)
class ValidationResult:
    """All rows, and statistics over the predicted held-out rows."""

    dataset: str
    rows: list[ValidationRow]
    fitted_from: str
    notes: list[str] = field(default_factory=list)

    @property
    def holdout_errors(self) -> list[float]:
        return [r.error for r in self.rows if not r.fitted and r.error is not None]

    @property
    def mape(self) -> float | None:
        errs = self.holdout_errors
        return sum(abs(e) for e in errs) / len(errs) if errs else None

    @property
    def max_abs_error(self) -> float | None:
        errs = self.holdout_errors
        return max(abs(e) for e in errs) if errs else None

    @property
    def loo_coverage(self) -> tuple[int, int, dict[str, tuple[int, int]]]:
        """Leave-one-out coverage of the held-out runs' p10-p90 intervals (each from the other runs of its
        stack): (covered, runs with an interval, per stack (covered, runs))."""
        per: dict[str, tuple[int, int]] = {}
        for r in self.rows:
            if r.fitted or r.interval is None or r.predicted_tokens_per_s_per_gpu is None:
                continue
            inside = r.interval[0] <= r.measured_tokens_per_s_per_gpu <= r.interval[1]
            c, n = per.get(r.stack, (0, 0))
            per[r.stack] = (c + int(inside), n + 1)
        return sum(c for c, _ in per.values()), sum(n for _, n in per.values()), per

    @property
    def unpredicted(self) -> list[ValidationRow]:
        return [r for r in self.rows if r.predicted_tokens_per_s_per_gpu is None]

    def as_dict(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "fitted_from": self.fitted_from, "notes": self.notes,
                "rows": [r.as_dict() for r in self.rows], "holdout_mape": self.mape,
                "holdout_max_abs_error": self.max_abs_error, "n_holdout": len(self.holdout_errors),
                "n_unpredicted": len(self.unpredicted),
                "loo_coverage": {"covered": self.loo_coverage[0], "runs": self.loo_coverage[1], "nominal": 0.8,
                                 "per_stack": {k: {"covered": c, "runs": n}
                                               for k, (c, n) in self.loo_coverage[2].items()}}}


@dataclass(frozen=True)
class _Point:
    """What an interval needs of a prediction."""

    tokens_per_s_per_gpu: float
    stack: str


def _row(run: MeasuredRun, fitted: bool, predicted: dict[str, float], evidence: bool = False) -> ValidationRow:
    try:
        model, cluster, plan = resolve_run(run)
        pred = predict_run(model, cluster, plan, profile_for(run.stack, run.release), name=run.id)
    except MoesimError as err:
        return ValidationRow(run.id, run.model, run.gpu, run.gpus, run.stack, fitted,
                             run.measured_tokens_per_s_per_gpu, None, None, run.baseline, None, None, None,
                             run.source, skipped=str(err))
    predicted[run.id] = pred.tokens_per_s_per_gpu
    tensors = (pred.memory["total_bytes"] - pred.memory["reserve_bytes"]) / GIB if pred.memory else None
    return ValidationRow(run.id, run.model, run.gpu, run.gpus, run.stack, fitted,
                         run.measured_tokens_per_s_per_gpu, pred.tokens_per_s_per_gpu, pred.fits_in_memory,
                         run.baseline, None, None, interval_for(pred, cluster=run.cluster) if evidence else None,
                         run.source, measured_memory_gib=run.measured_memory_gib, predicted_tensor_memory_gib=tensors)


def validate_runs(path: str | Path | None = None) -> ValidationResult:
    """Predict every run of the dataset at ``path`` (default: the shipped one)."""
    runs = load_runs(path)
    predicted: dict[str, float] = {}
    # A user's runs get the interval a prediction of them gets (by their distance from the shipped evidence);
    # the shipped runs keep the leave-one-out intervals below.
    rows = [_row(r, r.fitted, predicted, evidence=path is not None) for r in runs]
    measured = {r.id: r.measured_tokens_per_s_per_gpu for r in runs}
    held_out = {r.run_id: (r.stack, math.log(r.measured_tokens_per_s_per_gpu / r.predicted_tokens_per_s_per_gpu))
                for r in rows if not r.fitted and r.predicted_tokens_per_s_per_gpu}
    out = []
    for row in rows:
        if row.predicted_tokens_per_s_per_gpu is not None and path is None:
            # Leave-one-out: a run's interval comes from the other held-out runs of its stack only.
            others = [res for rid, (st, res) in held_out.items() if st == row.stack and rid != row.run_id]
            iv = interval_for(_Point(row.predicted_tokens_per_s_per_gpu, row.stack), row.stack, others)  # type: ignore[arg-type]
            row = ValidationRow(**{**asdict(row), "interval": iv})
        if row.baseline is not None:
            ms = row.measured_tokens_per_s_per_gpu / measured[row.baseline]
            ps = (row.predicted_tokens_per_s_per_gpu / predicted[row.baseline]
                  if row.predicted_tokens_per_s_per_gpu is not None and row.baseline in predicted else None)
            row = ValidationRow(**{**asdict(row), "predicted_speedup": ps, "measured_speedup": ms})
        out.append(row)
    if all(r.predicted_tokens_per_s_per_gpu is None for r in out):
        raise ConfigError(f"{path or 'dataset'}: no run could be predicted; first reason: {out[0].skipped}")
    return ValidationResult(str(path) if path else "shipped (studies/data/measured_runs.toml)", out,
                            "the dataset's `fitted` marks (docs/seed-protocol.md, docs/stack-protocol.md)",
                            [STACK_NOTE, INTERVAL_NOTE])


@dataclass(frozen=True)
class Thresholds:
    """Bounds a validation must stay within (percent), from ``validate_threshold.toml``."""

    holdout_mape_pct: float
    holdout_max_abs_error_pct: float
    max_unpredicted_runs: int
    margin_points: float = 0.0


def load_thresholds(path: str | Path | None = None) -> Thresholds:
    """The repository's thresholds (or the file at ``path``)."""
    path = Path(path) if path else Path(str(resources.files("studies").joinpath("data/validate_threshold.toml")))
    data = read_toml(path)
    keys = {"holdout_mape_pct", "holdout_max_abs_error_pct", "max_unpredicted_runs", "margin_points"}
    unknown = sorted(set(data) - keys)
    missing = sorted(keys - {"margin_points"} - set(data))
    if unknown or missing:
        raise ConfigError(f"{path}: unknown key(s) {unknown} / missing key(s) {missing}")
    for key in keys & set(data):
        v = data[key]
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
            raise ConfigError(f"{path}: {key} must be a number >= 0, got {v!r}")
    return Thresholds(float(data["holdout_mape_pct"]), float(data["holdout_max_abs_error_pct"]),
                      int(data["max_unpredicted_runs"]), float(data.get("margin_points", 0.0)))


def check_thresholds(result: ValidationResult, limits: Thresholds) -> list[str]:
    """Every bound ``result`` exceeds, as a sentence (empty: within all)."""
    bad = []
    if result.mape is not None and result.mape * 100 > limits.holdout_mape_pct:
        bad.append(f"holdout MAPE {result.mape * 100:.2f}% exceeds the threshold {limits.holdout_mape_pct}%")
    if result.max_abs_error is not None and result.max_abs_error * 100 > limits.holdout_max_abs_error_pct:
        bad.append(f"holdout max |error| {result.max_abs_error * 100:.2f}% exceeds the threshold "
                   f"{limits.holdout_max_abs_error_pct}%")
    if len(result.unpredicted) > limits.max_unpredicted_runs:
        bad.append(f"{len(result.unpredicted)} runs could not be predicted (threshold "
                   f"{limits.max_unpredicted_runs})")
    return bad


def error_threshold_failures(result: ValidationResult, pct: float) -> list[str]:
    """Every predicted run whose |error| exceeds ``pct`` percent (``moesim validate FILE --threshold PCT``), as a
    sentence with its interval (empty: all within)."""
    bad = []
    for r in result.rows:
        if r.error is not None and abs(r.error) * 100 > pct:
            ival = "" if r.interval is None else f"; interval {r.interval[0]:.0f}-{r.interval[1]:.0f}"
            bad.append(f"{r.run_id}: error {r.error * 100:+.1f}% exceeds --threshold {pct:g}% (predicted "
                       f"{r.predicted_tokens_per_s_per_gpu:.0f}, measured {r.measured_tokens_per_s_per_gpu:.0f}{ival})")
    return bad


def logo_intervals(logo: Mapping[str, Any]) -> dict[str, Any]:
    """Leave-one-group-out interval coverage of :func:`logo_validation`'s runs: each run's interval built as if
    its group were unseen, from the LOGO residuals of the other groups only
    (:func:`sim.uncertainty.logo_interval_coverage`): ``logo_interval_coverage``, ``median_p90_p10_ratio``, rows."""
    from sim.uncertainty import logo_interval_coverage

    return logo_interval_coverage([r for r in logo.get("runs", []) if "predicted" in r])


def format_logo_intervals(cov: Mapping[str, Any]) -> str:
    """One line: the leave-one-group-out interval coverage and the median p90/p10 ratio."""
    if not cov.get("runs"):
        return "leave-one-group-out interval coverage: none (no run has 2 or more runs in other groups to build its interval)"
    ratio = cov.get("median_p90_p10_ratio")
    return (f"leave-one-group-out interval coverage: {cov['covered']} of {cov['runs']} runs inside the p10-p90 built "
            f"as if their group were unseen ({cov['logo_interval_coverage']:.0%}, nominal 80%); median p90/p10 "
            + (f"{ratio:.2f}" if ratio is not None else "n/a (no other group's residuals to build one from)"))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


def format_result(result: ValidationResult, failures: Sequence[str] = ()) -> str:
    """The validation as a table (rich), the summary and the sources, as text."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"moesim validate: {result.dataset}", show_lines=False)
    for col, justify in (("run", "left"), ("stack", "left"), ("role", "left"), ("predicted tok/s/GPU", "right"),
                         ("measured", "right"), ("error", "right"), ("interval", "right"),
                         ("pred. speedup", "right"), ("meas. speedup", "right"), ("fits", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in result.rows:
        pred = "-" if r.predicted_tokens_per_s_per_gpu is None else f"{r.predicted_tokens_per_s_per_gpu:.1f}"
        ival = "-" if r.interval is None else f"{r.interval[0]:.0f}-{r.interval[1]:.0f}"
        fits = "-" if r.fits_in_memory is None else ("yes" if r.fits_in_memory else "NO")
        table.add_row(r.run_id, r.stack, "fitted" if r.fitted else ("skipped" if r.skipped else "predicted"), pred,
                      f"{r.measured_tokens_per_s_per_gpu:.0f}", _pct(r.error), ival,
                      "-" if r.predicted_speedup is None else f"{r.predicted_speedup:.3f}x",
                      "-" if r.measured_speedup is None else f"{r.measured_speedup:.3f}x", fits)
    console = Console(width=160, record=True, force_terminal=False, color_system=None)
    with console.capture() as cap:
        console.print(table)
    lines = [cap.get().rstrip()]
    lines.append(f"holdout runs: {len(result.holdout_errors)}   MAPE {_pct(result.mape).lstrip('+')}   "
                 f"max |error| {_pct(result.max_abs_error).lstrip('+')}   (fitted runs excluded; fitted list from "
                 f"{result.fitted_from})")
    covered, n, per = result.loo_coverage
    if n:
        lines.append(f"leave-one-out interval coverage: {covered} of {n} held-out runs inside their p10-p90 "
                     f"({covered / n * 100:.0f}% against a nominal 80%; "
                     + ", ".join(f"{k} {c}/{m}" for k, (c, m) in per.items()) + ")")
    for r in result.rows:
        if r.memory_error is not None:
            lines.append(f"memory [{r.run_id}]: predicted tensors {r.predicted_tensor_memory_gib:.1f} GiB, logged peak "
                         f"{r.measured_memory_gib:.2f} GiB ({_pct(r.memory_error)}; the logged peak is the caching "
                         "allocator's reserved bytes, fragmentation included)")
    for r in result.unpredicted:
        lines.append(f"not predicted [{r.run_id}]: {r.skipped}")
    lines.extend(result.notes)
    lines.extend(f"THRESHOLD EXCEEDED: {f}" for f in failures)
    lines.append("")
    lines.extend(f"source [{r.run_id}]: {r.source}" for r in result.rows)
    return "\n".join(lines)


def logo_validation(path: str | Path | None = None) -> dict[str, Any]:
    """Leave-one-group-out errors of the step-level runs (a group = system class x stack).

    For the shipped dataset every run is predicted with the joint calibration refitted without its group
    (the folds stored by ``python -m studies.joint_fit --write`` in ``sim/data/joint_fit.json``); a user's own
    dataset (``path``) was never seen by the fit, so its runs are predicted with the shipped parameters.
    Returns ``{"logo_mape", "logo_max", "runs": [{"id", "group", "measured", "predicted", "error"}],
    "params": the shipped parameters with their uncertainty and constraining runs, "stale": bool,
    "lomo_mape", "lomo_max"}`` (leave-one-model-out over the shipped dataset's models, from the stored folds;
    None for a user's dataset, whose runs no fit saw).
    """
    from sim.joint import joint_fit_record, shipped_values
    from studies.joint_fit import dataset_digest, load_cases, predict_cases

    record = joint_fit_record()
    folds = record.get("logo", {}) if path is None else {}
    stale = path is None and record.get("dataset_sha256") != dataset_digest()
    shipped = shipped_values()
    runs: list[dict[str, Any]] = []
    for case in load_cases(path):
        fold = folds.get(case.group)
        values = dict(shipped, **fold["params"]) if fold else shipped
        try:
            pred = float(predict_cases([case], values)[0])
        except MoesimError as err:
            runs.append({"id": case.run.id, "group": case.group, "skipped": str(err)})
            continue
        meas = case.run.measured_tokens_per_s_per_gpu
        runs.append({"id": case.run.id, "group": case.group, "measured": meas, "predicted": pred,
                     "error": pred / meas - 1, "held_out_fold": bool(fold)})
    errs = [abs(r["error"]) for r in runs if "error" in r]
    return {"logo_mape": sum(errs) / len(errs) if errs else None, "logo_max": max(errs) if errs else None,
            "lomo_mape": record.get("lomo_mape") if path is None else None,
            "lomo_max": record.get("lomo_max") if path is None else None,
            "runs": runs, "params": record.get("params", {}), "stale": stale,
            "note": ("each run predicted by the joint calibration refitted without its group "
                     "(python -m studies.joint_fit; docs/transfer.md)" if path is None else
                     "a user's dataset: every run predicted by the shipped joint calibration, which never saw it")}


def format_logo(logo: Mapping[str, Any], cells: Sequence[Mapping[str, Any]] = ()) -> str:
    """Text lines for the leave-one-group-out errors and the single-MoE-layer cells."""
    lines = []
    if logo.get("logo_mape") is not None:
        worst = max((r for r in logo["runs"] if "error" in r), key=lambda r: abs(r["error"]))
        lines.append(f"leave-one-group-out (groups = system class x stack; {logo['note']}): "
                     f"MAPE {logo['logo_mape']:.1%}, max |error| {logo['logo_max']:.1%} ({worst['id']})"
                     + ("  [STALE joint fit: run python -m studies.joint_fit --write]" if logo.get("stale") else ""))
    if logo.get("lomo_mape") is not None:
        lines.append(f"leave-one-model-out (each model's runs predicted by the calibration refitted without that "
                     f"model): MAPE {logo['lomo_mape']:.1%}, max |error| {logo['lomo_max']:.1%} (a release no other "
                     f"model measured predicted at its scalar's prior, its single-layer benchmark: docs/transfer.md)")
    for c in cells:
        m, p = c["measured"], c["predicted"]
        lines.append(f"moe-layer {c['id']}: forward {p['forward_ms']:.2f} ms vs {m['forward_ms']:.2f} "
                     f"({p['forward_ms'] / m['forward_ms'] - 1:+.1%}), backward {p['backward_ms']:.2f} vs "
                     f"{m['backward_ms']:.2f} ({p['backward_ms'] / m['backward_ms'] - 1:+.1%})"
                     + (" (fitted)" if c.get("fitted") else ""))
    return "\n".join(lines)
