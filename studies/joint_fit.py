"""One joint calibration of the named parameters (:mod:`sim.joint`) over every measured run, validated by
leave-one-group-out.

The fit: ``scipy.optimize.least_squares`` on the log errors ``log(predicted / measured)`` of every step-level
run of the shipped dataset, each predicted by the full simulator (:func:`sim.predict.predict`) under the
candidate parameters. A parameter that no run moves (its column of the Jacobian is ~0) is not fitted: it keeps
its sourced prior. Each fitted parameter is reported with its standard error and correlations (from the
Jacobian at the optimum, scaled by the residual variance) and with the runs that constrain it (those whose
prediction it moves most).

Leave-one-group-out (a group = system class x stack, e.g. ``gb200-nvl72 x megatron``): for each group the
parameters are refitted without its runs (least squares from the joint optimum) and the group's runs are
predicted by the full simulator under that calibration, which never saw them.

``python -m studies.joint_fit [--write] [--ablation]``: fit, LOGO, print; ``--write`` stores
``sim/data/joint_fit.json`` (read by every prediction); ``--ablation`` refits with each mechanism switched off
and reports its effect on the LOGO error.

Trials of another parameter structure, never written: ``--fix NAME=VALUE`` holds a parameter (or one of the
ablations' switches) in the fit and in every fold, ``--free NAME`` fits a parameter the shipped calibration holds
at its sourced value, and ``--heldout`` predicts every held-out file (:data:`studies.interval_check.HELD_OUT_FILES`)
under the fit, so one command says what a structure does to the leave-one-group-out error and to the runs no fit
saw, e.g. ``python -m studies.joint_fit --free chip.gb300_clock --heldout``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import numpy as np
from scipy.optimize import least_squares

from sim.costs import CostModel, default_costs
from sim.errors import ConfigError
from sim.joint import JOINT_FIT_FILE, PARAM_NAMES, PARAMS, prior_values, spec
from sim.layer_check import predict_moe_layer
from sim.limits import check_finite
from sim.measured_runs import MeasuredRun, resolve_run
from sim.predict import predict
from sim.specs import ClusterSpec, ModelSpec, ParallelPlan
from sim.stacks import (
    StackProfile,
    builtin_overrides,
    load_stack,
    profile_for,
    stack_names,
)
from studies.dataset import MEASURED_RUNS, load_runs
from studies.layer_cells import LayerCell, load_cells

__all__ = ["RunCase", "JointFit", "load_cases", "group_of", "fit_joint", "logo", "predict_cases", "main",
           "TRIAL_SWITCHES", "trial_structure", "trial_value", "stack_trial", "typed_value", "speedup_lines", "heldout_errors",
           "ABLATIONS", "STACK_ABLATIONS", "PLAN_ABLATIONS", "plan_variant", "dataset_digest", "write_release_scalars"]

#: A Jacobian column whose largest entry (log error per unit relative change) is below this constrains nothing.
_CONSTRAINED = 0.02
#: a run constrains a parameter when its sensitivity is at least this share of the parameter's largest one
_CONSTRAINS_SHARE = 0.25


@dataclass(frozen=True)
class RunCase:
    """A measured run resolved once: what the simulator needs to predict it."""

    run: MeasuredRun
    model: ModelSpec
    cluster: ClusterSpec
    plan: ParallelPlan
    stack: StackProfile
    costs: CostModel

    @property
    def group(self) -> str:
        return group_of(self.run)


def group_of(run: MeasuredRun) -> str:
    """A run's leave-one-group-out group: its system class (cluster template) x its stack."""
    return f"{run.cluster} x {run.stack}"


def load_cases(path: str | Path | None = None) -> list[RunCase]:
    """Every step-level run of the dataset at ``path`` (default: the shipped one), resolved."""
    cases = []
    for run in load_runs(path):
        model, cluster, plan = resolve_run(run)
        stack = load_stack(profile_for(run.stack, run.release))
        cases.append(RunCase(run, model, cluster, plan, stack, default_costs(cluster.gpu)))
    return cases


def predict_cases(cases: Sequence[RunCase], values: Mapping[str, float]) -> np.ndarray:
    """Predicted tokens/s per GPU of every case under parameter ``values``."""
    return np.array([predict(c.model, c.cluster, c.plan, c.costs, stack=c.stack, params=values).tokens_per_s_per_gpu
                     for c in cases])


def _measured(cases: Sequence[RunCase]) -> np.ndarray:
    return np.array([c.run.measured_tokens_per_s_per_gpu for c in cases], dtype=float)


@dataclass
class JointFit:
    """The result of one joint fit: values, which were fitted, their uncertainty and what constrains them."""

    values: dict[str, float]
    free: list[str]
    sigma: dict[str, float]
    correlation: list[list[float]]
    constrained_by: dict[str, list[str]]
    residuals: dict[str, float]
    run_ids: list[str]
    held_fixed: dict[str, str] = field(default_factory=dict)
    #: parameters the fit was told to hold (an ablation's): every refit of it (its LOGO folds) holds them too
    fixed: dict[str, float] = field(default_factory=dict)
    #: sourced parameters the fit was told to fit (a trial's): every refit of it fits them too
    also_free: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        params = {}
        for p in PARAMS:
            params[p.name] = {
                "value": self.values[p.name], "prior": p.prior, "fitted": p.name in self.free,
                "sigma": self.sigma.get(p.name), "constrained_by": self.constrained_by.get(p.name, []),
                "mechanism": p.mechanism, "source": p.source,
                "note": self.held_fixed.get(p.name, "fitted jointly" if p.name in self.free else ""),
            }
        return {"params": params, "free": self.free,
                "correlation": {"names": self.free, "matrix": self.correlation},
                "residuals": self.residuals}


def fitted_cells() -> list[LayerCell]:
    """The single-MoE-layer cells marked ``fitted`` (at most two; the rest are the layer-level test)."""
    return [c for c in load_cells() if c.fitted]


def _cell_log_errors(values: Mapping[str, float]) -> list[float]:
    out = []
    for cell in fitted_cells():
        p = predict_moe_layer(cell.spec, params=values)
        out += [math.log(p.forward_s * 1e3 / cell.forward_ms), math.log(p.backward_s * 1e3 / cell.backward_ms)]
    return out


def _log_errors(cases: Sequence[RunCase], values: Mapping[str, float]) -> np.ndarray:
    """Log errors of the step-level ``cases``, then of the fitted layer cells' forward and backward."""
    steps = np.log(predict_cases(cases, values) / _measured(cases))
    return np.concatenate([steps, np.array(_cell_log_errors(values))])


def _jacobian(cases: Sequence[RunCase], values: Mapping[str, float], names: Sequence[str],
              base: np.ndarray, step: float = 0.02) -> np.ndarray:
    """d log(pred) / d log(param) by one-sided differences (parameters at 0 take an absolute step of their upper
    bound x ``step``; a parameter at its upper bound steps down, inside its range)."""
    cols = []
    for name in names:
        v = values[name]
        h = v * step if v > 0 else spec(name).upper * step
        if v + h > spec(name).upper:
            h = -h
        moved = dict(values, **{name: v + h})
        rel = h / v if v > 0 else step
        cols.append((_log_errors(cases, moved) - base) / rel)
    return np.array(cols).T if cols else np.zeros((len(cases), 0))


def fit_joint(cases: Sequence[RunCase], start: Mapping[str, float] | None = None,
              fixed: Mapping[str, float] | None = None, max_nfev: int = 12,
              also_free: Sequence[str] = ()) -> JointFit:
    """Least-squares fit of every fitted parameter that some case constrains; ``fixed``: held at these values;
    ``also_free``: parameters the shipped calibration holds at their sourced value, fitted in this one (a trial)."""
    values = dict(start or prior_values())
    held: dict[str, str] = {}
    for name, v in (fixed or {}).items():
        values[name] = v
        held[name] = "held fixed (an ablation or a --fix trial)"
    fitted = {p.name for p in PARAMS if p.fitted} | set(also_free)
    candidates = [p.name for p in PARAMS if p.name in fitted and p.name not in held]
    for p in PARAMS:
        if p.name not in fitted:
            held[p.name] = "sourced, not fitted"
    base = _log_errors(cases, values)
    jac = _jacobian(cases, values, candidates, base)  # rows: the step runs, then the fitted cells' phases
    free = []
    for i, name in enumerate(candidates):
        if np.abs(jac[:, i]).max() >= _CONSTRAINED:
            free.append(name)
        else:
            held[name] = "no run constrains it: keeps its sourced prior"
            values[name] = spec(name).prior
    scale = np.array([values[n] if values[n] > 0 else spec(n).upper * 0.1 for n in free])

    def residual(z: np.ndarray) -> np.ndarray:
        trial = dict(values, **{n: float(x) for n, x in zip(free, z * scale, strict=True)})
        return _log_errors(cases, trial)

    lo = np.array([spec(n).lower for n in free]) / scale
    hi = np.array([spec(n).upper for n in free]) / scale
    z0 = np.clip(np.ones(len(free)), lo + 1e-9, hi - 1e-9)
    res = least_squares(residual, z0, bounds=(lo, hi), diff_step=0.02, max_nfev=max_nfev, x_scale=1.0)
    for n, x in zip(free, res.x * scale, strict=True):
        values[n] = float(x)
    r = res.fun
    j = res.jac  # d r / d z, z = value / scale
    dof = max(1, len(r) - len(free))
    s2 = float(r @ r) / dof
    try:
        cov_z = np.linalg.pinv(j.T @ j) * s2
    except np.linalg.LinAlgError:  # pragma: no cover - pinv does not raise on finite input
        cov_z = np.full((len(free), len(free)), np.nan)
    sd_z = np.sqrt(np.clip(np.diag(cov_z), 0.0, None))
    sigma = {n: float(sd * s) for n, sd, s in zip(free, sd_z, scale, strict=True)}
    denom = np.outer(sd_z, sd_z)
    corr = np.where(denom > 0, cov_z / np.where(denom > 0, denom, 1.0), 0.0)
    ids = [c.run.id for c in cases] + [f"{c.id}.{ph}" for c in fitted_cells() for ph in ("forward", "backward")]
    constrained_by = {}
    for i, n in enumerate(free):
        col = np.abs(j[:, i])
        top = col.max() if len(col) else 0.0
        constrained_by[n] = [ids[k] for k in np.argsort(-col) if top > 0 and col[k] >= _CONSTRAINS_SHARE * top]
    return JointFit(values, free, sigma, [[round(float(x), 3) for x in row] for row in corr], constrained_by,
                    {rid: float(x) for rid, x in zip(ids, r, strict=True)}, ids, held, dict(fixed or {}),
                    list(also_free))


def logo(cases: Sequence[RunCase], fit: JointFit, max_nfev: int = 4,
         by: Literal["group", "model"] = "group") -> dict[str, dict[str, Any]]:
    """Leave-one-group-out: per group, the parameters refitted without its runs (least squares from the joint
    optimum, ``max_nfev`` evaluations, holding what ``fit`` held) and its runs' errors predicted at them by the
    full simulator. A parameter only the held-out group constrained falls back to its sourced prior.
    ``by="model"``: leave one *model* out instead (what the calibration does on a model it never saw)."""
    groups: dict[str, list[int]] = {}
    for k, c in enumerate(cases):
        groups.setdefault(c.group if by == "group" else c.run.model, []).append(k)
    out: dict[str, dict[str, Any]] = {}
    for g, members in sorted(groups.items()):
        others = [c for k, c in enumerate(cases) if k not in members]  # the fitted layer cells stay in every fold
        refit = fit_joint(others, start=fit.values, fixed=fit.fixed, max_nfev=max_nfev, also_free=fit.also_free)
        values = dict(refit.values)
        for n in fit.free:
            if n not in refit.free:
                values[n] = spec(n).prior
        held = [cases[k] for k in members]
        errs = predict_cases(held, values) / _measured(held) - 1
        out[g] = {"runs": [c.run.id for c in held], "errors": [float(e) for e in errs],
                  "params": {n: values[n] for n in fit.free}}
    return out


def logo_summary(folds: Mapping[str, Mapping[str, Any]]) -> tuple[float, float]:
    """(mean |error|, max |error|) over every run predicted by a calibration that did not see its group."""
    errs = [abs(e) for f in folds.values() for e in f["errors"]]
    return (float(np.mean(errs)) if errs else math.nan, float(np.max(errs)) if errs else math.nan)


#: Mechanisms switched off for the ablation: parameter values that reduce each to the simpler model.
ABLATIONS: dict[str, dict[str, float]] = {
    "NVL72 parts at their datasheet rate (chip.nvl72_rate = 1)": {"chip.nvl72_rate": 1.0},
    "Blackwell Ultra clock (chip.sm103_clock = 1)": {"chip.sm103_clock": 1.0},
    "data-parallel scale (stragglers off)": {"dp.straggler_cv": 0.0},
    "launch modes (partial and full CUDA graphs cost as eager)": {"launch.graphs_s": -1.0},
    "alternative: the grouped GEMM roll-off the runs pulled it to when freed (grouped.half_rows = 2104, not its "
    "flashinfer source's 85)": {"grouped.half_rows": 2104.0},
    "grouped GEMMs launched per expert at their own half-point (off: at the one-kernel half-point, "
    "grouped.half_rows_per_expert_launch = 85)": {"grouped.half_rows_per_expert_launch": 85.25},
    "host syncs (host.sync_s = 0)": {"host.sync_s": 0.0},
    "EP barrier waits absent under forced balance (alternative: the real router's spread, "
    "ep.arrival_cv_balanced = 0.0731)": {"ep.arrival_cv_balanced": 0.0731},
    "a share of the grouped roll-off fixed per expert (grouped.per_expert_share = 0: rows alone, every shape)":
        {"grouped.per_expert_share": 0.0},
    "alternative: all of the grouped roll-off fixed per expert (grouped.per_expert_share = 1, the former rule)":
        {"grouped.per_expert_share": 1.0},
    "GB300's own clock (chip.gb300_clock = 1: a B300's)": {"chip.gb300_clock": 1.0},
    "NCCL all-to-all below the network's point-to-point rate (nccl.a2a_net_fraction = 1)":
        {"nccl.a2a_net_fraction": 1.0},
    "per-step fixed work at the step boundary (step.fixed_s = 0)": {"step.fixed_s": 0.0},
    "host floor of eagerly issued ops (host.eager_op_s = 0: the host always keeps ahead)": {"host.eager_op_s": 0.0},
    "NCCL rings spread their crossings over the group's NICs in each NVLink domain (off: one NIC per rank)":
        {"nccl.ring_nic_spread": 0.0},
}

#: Framework behaviours switched off for the ablation: stack-profile fields every built-in release reads with
#: (:func:`sim.stacks.builtin_overrides`; ``profiles``: only those releases); the runs are resolved again under them.
STACK_ABLATIONS: dict[str, dict[str, Any]] = {
    "Megatron-Core's parameter all-gather one bucket ahead of the first forward (off: every bucket but the first "
    "hidden; the first forward bucket's whole gather stays exposed)": {"param_gather_one_ahead": False},
    "TE grouped GEMM's per-expert launches and casts (one GEMM and one cast launch per call)":
        {"grouped_gemm_per_expert": False},
    "Megatron's fused gate/up GEMM (two GEMMs, two input casts)": {"fused_gate_up": False},
    "TE's fused top-K permute (an index gather and a scatter-add)": {"fused_permute": False},
    "TorchTitan's DeepEP path dispatching every token on every TP rank (off: each TP rank its share)":
        {"deepep_tp_token_split": True},
    "TorchTitan's document mask on C4 (off: causal over the packed sequence)": {"document_mask": False},
    "TorchTitan's accumulating steps at the joint step boundary (off: its profile's own, none, the former model)":
        {"joint_step_boundary": False, "profiles": ("torchtitan",)},
    "TorchTitan's eager MoE bookkeeping (FP32 weighted sum over every token's K slots, vstack copy, DeepEP score "
    "pass; off: one pass per permutation, the former model)": {"eager_moe_glue": False},
    "TorchTitan's shared experts beside the standard path's combine in the forward and recompute (off: after it)":
        {"shared_expert_beside_combine": False},
    "TorchTitan's sums by index at PyTorch's index kernels' measured rates (indexed_accumulate: DeepEP's scatter_add_ "
    "and index_add_ one atomic per element, the gathers' index_put_ backwards sorted; off: the bytes they move at the "
    "memory-bound rate)": {"indexed_accumulate": False, "profiles": ("torchtitan",)},
    "TorchTitan's standard-path combine bmm taking its backward in batched FP32 GEMMs (combine_bmm_batched, TorchTitan "
    "PR #2466; off: its gradients' bytes at the memory-bound rate)": {"combine_bmm_batched": False,
                                                                      "profiles": ("torchtitan",)},
}

#: Recipe facts switched off for the ablation: plan fields every run is resolved with (where its plan takes the
#: value); the former, simpler model of each.
PLAN_ABLATIONS: dict[str, dict[str, Any]] = {
    "Megatron-Bridge presets' CUDA-graph scopes per GPU (off: every partial plan captures attn, moe_router, "
    "moe_preprocess)": {"cuda_graph_scope": ""},
    "the LM head in BF16 unless fp8_output_proj (off: in the linears' MXFP8, the former model)":
        {"fp8_output_proj": True},
    "FP8 attention where the recipe sets it (fp8_attention; off: BF16 attention, the former model)":
        {"fp8_attention": False},
    "TE's fused grouped MLP where the recipe sets it (fused_grouped_mlp: the GLU and the casts between the grouped "
    "GEMMs in their epilogues, one launch each; off: TE's grouped linears, the former model)":
        {"fused_grouped_mlp": False},
}


def plan_variant(plan: ParallelPlan, change: Mapping[str, Any]) -> ParallelPlan:
    """``plan`` with each field of ``change`` it can take (a field its other fields refuse is left as it is)."""
    for name, value in change.items():
        try:
            plan = replace(plan, **{name: value})
        except ConfigError:
            continue
    return plan


def _ablation_fixed(fit: JointFit, fixed: Mapping[str, float]) -> dict[str, float]:
    out = dict(fixed)
    if out.get("launch.graphs_s") == -1.0:  # graphs launch like eager kernels: the launch mode does not matter
        out["launch.graphs_s"] = fit.values["launch.eager_s"]
    return out


def dataset_digest(path: str | Path | None = None) -> str:
    """SHA-256 of the dataset file the fit read (the shipped one by default)."""
    p = Path(path) if path else MEASURED_RUNS
    return hashlib.sha256(p.read_bytes()).hexdigest()


#: Where the stack profiles live (their efficiency section mirrors the joint fit's release scalars).
_PROFILES = Path(__file__).resolve().parents[1] / "sim" / "stack_profiles"


def write_release_scalars(values: Mapping[str, float], profiles: Path = _PROFILES) -> list[Path]:
    """Mirror each fitted ``release.<profile>`` scalar into its profile file's ``[efficiency."*"]`` (one number per
    release on every architecture), with its source, so ``load_stack`` shows what every prediction uses."""
    import re

    from sim.fileio import write_atomic

    written = []
    for name, value in values.items():
        if not name.startswith("release."):
            continue
        path = profiles / f"{name.removeprefix('release.')}.toml"
        text = path.read_text(encoding="utf-8")
        first = re.search(r"^(# [^\n]*\n)*\[efficiency\.", text, re.M)
        last = re.search(r"^\[sources\]", text, re.M)
        if first is None or last is None or first.start() > last.start():
            raise ConfigError(f"{path}: no [efficiency.*] table before [sources] to write the fitted scalar into")
        start, end = first.start(), last.start()
        block = ("# FITTED jointly (python -m studies.joint_fit --write; sim/data/joint_fit.json): this release's one "
                 "scalar, over its\n# runs on every GPU class; sim.joint applies the stored value to every prediction.\n"
                 f'[efficiency."*"]\ndefault = {value:.4f}\n\n')
        text = text[:start] + block + text[end:]
        text = re.sub(r'\n"efficiency\.[^"]*" = "[^\n]*', "", text)
        text = text.rstrip("\n") + ('\n"efficiency.*" = "FITTED jointly by python -m studies.joint_fit over every run of '
                                    'this release (sim/data/joint_fit.json: value, sigma, the runs that constrain it)"\n')
        write_atomic(path, text)
        written.append(path)
    return written


def _table(fit: JointFit, folds: Mapping[str, Mapping[str, Any]]) -> str:
    lines = [f"{'parameter':26s} {'value':>11s} {'sigma':>10s} {'prior':>11s}  constrained by / note"]
    for p in PARAMS:
        v, s = fit.values[p.name], fit.sigma.get(p.name)
        note = ", ".join(fit.constrained_by.get(p.name, [])[:4]) or fit.held_fixed.get(p.name, "")
        lines.append(f"{p.name:26s} {v:11.4g} {(f'{s:.3g}' if s is not None else '-'):>10s} {p.prior:11.4g}  {note}")
    lines.append("")
    for g, f in folds.items():
        errs = " ".join(f"{rid}={e:+.1%}" for rid, e in zip(f["runs"], f["errors"], strict=True))
        lines.append(f"LOGO {g}: {errs}")
    mape, mx = logo_summary(folds)
    lines.append(f"LOGO mean |error| {mape:.1%}, max {mx:.1%}; in-sample RMS log error "
                 f"{math.sqrt(np.mean(np.square(list(fit.residuals.values())))):.3f}")
    return "\n".join(lines)


#: One ablation row: (label, "param" or "stack", the values held or the stack fields changed, start, max_nfev).
AblationItem = tuple[str, str, dict[str, Any], dict[str, float], int]


def _ablation_row(item: AblationItem) -> tuple[float, float]:
    """(LOGO mean, LOGO max) with one mechanism off: the calibration and every fold refitted without it."""
    _, kind, change, start, max_nfev = item
    if kind == "param":
        cases = load_cases()
        fit = fit_joint(cases, start=start, fixed=change, max_nfev=max_nfev)
        return logo_summary(logo(cases, fit))
    if kind == "plan":
        variant = [replace(c, plan=plan_variant(c.plan, change)) for c in load_cases()]
        fit = fit_joint(variant, start=start, max_nfev=max_nfev)
        return logo_summary(logo(variant, fit))
    with builtin_overrides(**change):
        variant = load_cases()
        fit = fit_joint(variant, start=start, max_nfev=max_nfev)
        return logo_summary(logo(variant, fit))


def _ablation_rows(items: Sequence[AblationItem], workers: int) -> list[tuple[str, tuple[float, float]]]:
    """Every row of ``items``, in ``workers`` processes (:class:`studies.workers.WorkerPool`), as they finish."""
    if workers <= 1:
        return [(item[0], _ablation_row(item)) for item in items]
    from studies.workers import WorkerPool

    out: list[tuple[str, tuple[float, float]]] = []
    pending = list(items)
    size = min(workers, len(items))
    with WorkerPool(_ablation_row, workers=size) as pool:
        busy = 0
        while pending or busy:
            while pending and busy < size:
                item = pending.pop(0)
                pool.submit(item[0], item)
                busy += 1
            for label, result in pool.collect():
                busy -= 1
                out.append((label, result))
                print(f"  done: {label}", flush=True)
    return out


#: Switches the ablations pass in the joint values beside the parameters (:data:`ABLATIONS`; ``sim.joint``):
#: ``--fix`` takes them too.
TRIAL_SWITCHES: tuple[str, ...] = tuple(sorted(
    {k for change in ABLATIONS.values() for k in change if k not in PARAM_NAMES} | {"release.spares_benchmarked"}))


def trial_value(option: str, item: str, switches: Sequence[str] = ()) -> tuple[str, float]:
    """One ``NAME=VALUE`` trial option: a joint parameter (or one of ``switches``) and a finite value inside its
    bounds; raises :class:`~sim.errors.ConfigError` naming the option and the value.

    >>> trial_value("--grid", "host.sync_s=8e-4")
    ('host.sync_s', 0.0008)
    """
    name, sep, text = item.partition("=")
    if not sep:
        raise ConfigError(f"{option} {item!r}: expected NAME=VALUE")
    if name not in PARAM_NAMES and name not in switches:
        known = f"the parameters are {', '.join(PARAM_NAMES)}"
        raise ConfigError(f"{option} {item}: {name!r} is no joint parameter{' or switch' if switches else ''}; {known}"
                          + (f"; the switches {', '.join(switches)}" if switches else ""))
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{option} {item}: value {text!r} is not a number") from None
    check_finite(option, name, value)
    if name in PARAM_NAMES and not spec(name).lower <= value <= spec(name).upper:
        raise ConfigError(f"{option} {item}: outside the parameter's bounds [{spec(name).lower:g}, "
                          f"{spec(name).upper:g}]")
    return name, value


def start_values(items: Sequence[str]) -> dict[str, float]:
    """The ``--start NAME=VALUE`` options over the priors: where each fitted parameter's least squares begins. A
    parameter no run moves by 2% at its prior is held there (:func:`fit_joint`'s constraint test); started where
    the runs do feel it, the fit says whether they want it elsewhere.

    >>> start_values(["host.sync_s=5e-4"])["host.sync_s"]
    0.0005
    """
    values = prior_values()
    for item in items:
        name, value = trial_value("--start", item)
        if not spec(name).fitted:
            raise ConfigError(f"--start {item}: {name} is sourced, not fitted (--free it to fit it)")
        values[name] = value
    return values


def trial_structure(fix: Sequence[str], free: Sequence[str]) -> tuple[dict[str, float], list[str]]:
    """The ``--fix NAME=VALUE`` and ``--free NAME`` options as (held values, parameters to fit); raises
    :class:`~sim.errors.ConfigError` naming the option and the value it cannot take.

    >>> trial_structure(["chip.nvl72_rate=1"], ["chip.gb300_clock"])
    ({'chip.nvl72_rate': 1.0}, ['chip.gb300_clock'])
    >>> trial_structure(["step.fixed_s=9"], [])
    Traceback (most recent call last):
    ...
    sim.errors.ConfigError: --fix step.fixed_s=9: outside the parameter's bounds [0, 5]
    """
    held = dict(trial_value("--fix", item, TRIAL_SWITCHES) for item in fix)
    also: list[str] = []
    for name in free:
        if name not in PARAM_NAMES:
            raise ConfigError(f"--free {name}: no joint parameter of that name; they are {', '.join(PARAM_NAMES)}")
        if spec(name).fitted:
            raise ConfigError(f"--free {name}: the shipped calibration fits it already")
        if name in held:
            raise ConfigError(f"--free {name}: also held by --fix")
        if name not in also:
            also.append(name)
    return held, also


def heldout_errors(values: Mapping[str, float]) -> dict[str, tuple[int, float, float, float]]:
    """Each held-out file (:data:`studies.interval_check.HELD_OUT_FILES`) predicted under joint ``values``:
    (runs, mean |error|, mean signed error, max |error|), errors as fractions."""
    from studies.interval_check import HELD_OUT_FILES

    out: dict[str, tuple[int, float, float, float]] = {}
    for name in HELD_OUT_FILES:
        cases = load_cases(MEASURED_RUNS.parent / name)
        if not cases:
            continue
        errs = predict_cases(cases, values) / _measured(cases) - 1
        out[name] = (len(cases), float(np.mean(np.abs(errs))), float(np.mean(errs)), float(np.max(np.abs(errs))))
    return out


def typed_value(option: str, item: str, field_name: str, current: Any, text: str) -> Any:
    """``text`` as a value of the type of a field's ``current`` value (``true`` / ``false``, a finite number, a whole
    number, a word); raises :class:`~sim.errors.ConfigError` naming ``option``, the ``item`` and what it takes.

    >>> typed_value("--plan", "vpp=2", "vpp", 1, "2"), typed_value("--stack", "x=true", "x", False, "true")
    (2, True)
    """
    if isinstance(current, bool):
        if text.lower() not in ("true", "false"):
            raise ConfigError(f"{option} {item}: {field_name} takes true or false, got {text!r}")
        return text.lower() == "true"
    if isinstance(current, (int, float)):
        try:
            number = float(text)
        except ValueError:
            raise ConfigError(f"{option} {item}: {field_name} takes a number, got {text!r}") from None
        check_finite(option, field_name, number)
        if isinstance(current, int) and not number.is_integer():
            raise ConfigError(f"{option} {item}: {field_name} takes a whole number, got {text!r}")
        return int(number) if isinstance(current, int) else number
    if isinstance(current, str):
        return text
    raise ConfigError(f"{option} {item}: {field_name} is a {type(current).__name__}, not a trial's field")


def stack_trial(items: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The ``--stack NAME.FIELD=VALUE`` options as field changes by built-in profile (``true`` / ``false``, a
    number or a word); raises :class:`~sim.errors.ConfigError` naming the option and what it cannot take.

    >>> stack_trial(["torchtitan.indexed_accumulate=true", "megatron-26.04.host_op_s=0.0002"])
    {'torchtitan': {'indexed_accumulate': True}, 'megatron-26.04': {'host_op_s': 0.0002}}
    >>> stack_trial(["torchtitan.no_such_field=1"])
    Traceback (most recent call last):
    ...
    sim.errors.ConfigError: --stack torchtitan.no_such_field=1: 'no_such_field' is no field of torchtitan's profile
    """
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        target, sep, text = item.partition("=")
        name, dot, field_name = target.rpartition(".")
        if not sep or not dot or not name or not field_name:
            raise ConfigError(f"--stack {item!r}: expected NAME.FIELD=VALUE (e.g. torchtitan.indexed_accumulate=true)")
        if name not in stack_names():
            raise ConfigError(f"--stack {item}: {name!r} is no built-in stack profile ({', '.join(stack_names())})")
        profile = load_stack(name)
        if field_name not in {f.name for f in fields(StackProfile)} or field_name in ("efficiency", "sources"):
            raise ConfigError(f"--stack {item}: {field_name!r} is no field of {name}'s profile")
        value = typed_value("--stack", item, field_name, getattr(profile, field_name), text)
        out.setdefault(profile.name, {})[field_name] = value
    for name, change in out.items():  # the changed profile must still be one the stack loader accepts
        try:
            with builtin_overrides(profiles=(name,), **change):
                load_stack(name)
        except ConfigError as err:
            raise ConfigError(f"--stack: {name} with {change}: {err}") from None
    return out


def speedup_lines(cases: Sequence[RunCase], fit: JointFit) -> list[str]:
    """Each run with a ``baseline`` in ``cases``: its measured speedup over the baseline and the one the fit's
    in-sample predictions give (issue 27's Must-show 4 reads them)."""
    by_id = {c.run.id: c for c in cases}
    lines = []
    for c in cases:
        base = by_id.get(c.run.baseline or "")
        if base is None or c.run.id not in fit.residuals or base.run.id not in fit.residuals:
            continue
        measured = c.run.measured_tokens_per_s_per_gpu / base.run.measured_tokens_per_s_per_gpu
        predicted = measured * (1 + fit.residuals[c.run.id]) / (1 + fit.residuals[base.run.id])
        lines.append(f"speedup {c.run.id} over {base.run.id}: predicted {predicted - 1:+.1%}, measured "
                     f"{measured - 1:+.1%}")
    return lines


def _heldout_lines(values: Mapping[str, float]) -> list[str]:
    rows = heldout_errors(values)
    lines = ["held-out files under this fit (runs, mean |error|, mean signed, max |error|):"]
    for name, (n, mape, signed, mx) in rows.items():
        lines.append(f"  {name:24s} {n:4d} {mape:7.1%} {signed:+7.1%} {mx:7.1%}")
    pooled = [(n, mape) for name, (n, mape, _, _) in rows.items() if name != "efa_runs.toml"]
    if pooled:
        total = sum(n for n, _ in pooled)
        lines.append(f"  {'every file but EFA':24s} {total:4d} {sum(n * m for n, m in pooled) / total:7.1%}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m studies.joint_fit", description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help=f"store the fit in sim/{JOINT_FIT_FILE} and the release "
                    "scalars in their stack profiles")
    ap.add_argument("--ablation", action="store_true", help="refit with each mechanism off; LOGO error of each")
    ap.add_argument("--max-nfev", type=int, default=12, help="least-squares function evaluations (default 12)")
    ap.add_argument("--workers", type=int, default=1, help="processes for the ablation rows (default 1)")
    ap.add_argument("--fix", action="append", default=[], metavar="NAME=VALUE",
                    help="trial: hold a parameter (or an ablation switch) at VALUE in the fit and every fold")
    ap.add_argument("--free", action="append", default=[], metavar="NAME",
                    help="trial: fit a parameter the shipped calibration holds at its sourced value")
    ap.add_argument("--start", action="append", default=[], metavar="NAME=VALUE",
                    help="trial: start a fitted parameter's least squares at VALUE (its constraint test then reads "
                         "the runs' sensitivity there)")
    ap.add_argument("--stack", action="append", default=[], metavar="NAME.FIELD=VALUE",
                    help="trial: a built-in stack profile's field changed in the fit, every fold and the held-out "
                         "files (e.g. torchtitan.indexed_accumulate=true)")
    ap.add_argument("--heldout", action="store_true",
                    help="also predict every held-out file under the fit (mean, signed and max error per file)")
    args = ap.parse_args(argv)
    try:
        held, also_free = trial_structure(args.fix, args.free)
        start = start_values(args.start)
        changes = stack_trial(args.stack)
        if (held or also_free or changes or args.start) and (args.write or args.ablation):
            raise ConfigError("--fix / --free / --start / --stack run a trial: the shipped structure alone is written "
                              "or ablated (drop --write and --ablation)")
        if args.max_nfev < 1 or args.workers < 1:
            raise ConfigError(f"--max-nfev ({args.max_nfev}) and --workers ({args.workers}) must be at least 1")
    except ConfigError as err:
        print(f"python -m studies.joint_fit: error: {err}", file=sys.stderr)
        return 2
    with contextlib.ExitStack() as trial:
        for name, change in changes.items():
            trial.enter_context(builtin_overrides(profiles=(name,), **change))
        return _run(args, held, also_free, start)


def _run(args: argparse.Namespace, held: Mapping[str, float], also_free: Sequence[str],
         start: Mapping[str, float] | None = None) -> int:
    cases = load_cases()
    fit = fit_joint(cases, start=start, fixed=held, max_nfev=args.max_nfev, also_free=also_free)
    folds = logo(cases, fit)
    print(_table(fit, folds))
    print("\n".join(speedup_lines(cases, fit)))
    record: dict[str, Any] = {"version": 1, "dataset_sha256": dataset_digest(), **fit.as_dict(), "logo": folds}
    mape, mx = logo_summary(folds)
    record["logo_mape"], record["logo_max"] = mape, mx
    record["lomo"] = logo(cases, fit, by="model")  # leave one model out
    record["lomo_mape"], record["lomo_max"] = logo_summary(record["lomo"])
    print(f"leave-one-model-out: mean {record['lomo_mape']:.1%}, max {record['lomo_max']:.1%}")
    if args.ablation:  # each mechanism off: the calibration and every fold refitted, the mechanism held off in all
        items = [(label, "param", _ablation_fixed(fit, fixed), fit.values, args.max_nfev)
                 for label, fixed in ABLATIONS.items()]
        items += [(label, "stack", dict(changes), fit.values, args.max_nfev) for label, changes in STACK_ABLATIONS.items()]
        items += [(label, "plan", dict(changes), fit.values, args.max_nfev) for label, changes in PLAN_ABLATIONS.items()]
        done = dict(_ablation_rows(items, args.workers))
        rows: dict[str, dict[str, float]] = {"(every mechanism on)": {"logo_mape": mape, "logo_max": mx}}
        for label, *_ in items:  # in the table's order, whichever row finished first
            m2, x2 = done[label]
            rows[label] = {"logo_mape": m2, "logo_max": x2}
            print(f"without {label}: LOGO mean {m2:.1%} (with {mape:.1%}), max {x2:.1%} (with {mx:.1%})")
        record["ablation"] = rows
    if args.write:
        from sim.fileio import write_atomic

        path = Path(str(resources.files("sim").joinpath(JOINT_FIT_FILE)))
        write_atomic(path, json.dumps(record, indent=1, sort_keys=True) + "\n")
        print(f"wrote {path}")
        for p in write_release_scalars({n: v for n, v in fit.values.items() if n in fit.free}):
            print(f"wrote {p}")
    if args.heldout:
        print("\n".join(_heldout_lines(fit.values)))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
