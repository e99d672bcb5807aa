"""Every model figure quoted in README.md and docs/*.md, regenerated from the code.

    python benchmarks/readme_numbers.py           # list every figure: quoted vs today's; exit 1 on drift
    python benchmarks/readme_numbers.py --write   # rewrite the quoted figures with today's values

A figure is a regular expression with one group in one file and a function that formats today's value
the way the text quotes it (same rounding), so "drifted by more than its rounding" is "the formatted
text differs". ``tests/test_readme_numbers.py`` fails on drift. Wall times and machine measurements
(README "Measured numbers" speed bullets) are not here: ``benchmarks/bench_sim.py`` prints them with
their targets.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

__all__ = ["Figure", "FIGURES", "check", "write", "main"]


@dataclass(frozen=True)
class Figure:
    """One quoted figure: ``pattern`` (one group: the figure's text) in ``file``, and today's text."""

    name: str
    file: str
    pattern: str
    value: Callable[[], str]


# --- what the figures are computed from (each once per process) ----------------------------------

@cache
def seed() -> tuple[list[Any], list[Any]]:
    """The seed `moesim predict` predictions and intervals, as the command computes them."""
    from moesim.predict_cmd import _compute, _intervals, add_predict_arguments

    parser = argparse.ArgumentParser()
    add_predict_arguments(parser)
    args = parser.parse_args([])
    run = _compute(args)
    return run.predictions, _intervals(run.predictions, args)[0]


def _seed_row(i: int) -> str:
    preds, ivs = seed()
    p, iv, base = preds[i], ivs[i], preds[0]
    meas = p.measured_tokens_per_s_per_gpu
    fitted = p.name.endswith("[fitted]")
    err = "(fitted)" if fitted else (f"{(p.tokens_per_s_per_gpu / meas - 1) * 100:+.1f}%" if meas else "-")
    sp = "-" if i == 0 else f"{(p.tokens_per_s_per_gpu / base.tokens_per_s_per_gpu - 1) * 100:+.1f}%"
    msp = "-" if i == 0 or not meas else f"{(meas / base.measured_tokens_per_s_per_gpu - 1) * 100:+.0f}%"
    return (f" {p.tokens_per_s_per_gpu:.1f} | {iv.p10:.0f}-{iv.p90:.0f} | {f'{meas:g}' if meas else '-'} | {err} | "
            f"{sp} | {msp} | {p.step_time_s:.1f} s |")


def _seed_errors() -> str:
    """The three published seed rows' errors, "BF16 / DeepEP / MXFP8"."""
    preds, _ = seed()
    return " / ".join(f"{(p.tokens_per_s_per_gpu / p.measured_tokens_per_s_per_gpu - 1) * 100:+.1f}%"
                      for p in preds[:3])


def _speedup_gaps() -> str:
    preds, _ = seed()
    base = preds[0]
    gaps = [abs((p.tokens_per_s_per_gpu / base.tokens_per_s_per_gpu) - (p.measured_tokens_per_s_per_gpu
                                                                         / base.measured_tokens_per_s_per_gpu)) * 100
            for p in preds[1:3]]
    return f"{gaps[0]:.1f} and {gaps[1]:.1f}"


@cache
def validation() -> Any:
    from studies.validate import validate_runs

    return validate_runs()


def _coverage(fmt: str) -> str:
    covered, n, per = validation().loo_coverage
    stacks = ", ".join(f"{k} {c}/{m}" for k, (c, m) in per.items())
    return fmt.format(covered=covered, n=n, pct=covered / n * 100, stacks=stacks)


def _held_out_interval_totals() -> str:
    """Held-out runs inside their p10-p90 as ``python -m studies.interval_check`` counts them, with and without the
    AWS EFA matrix."""
    from studies.interval_check import held_out_intervals

    rows = held_out_intervals()
    no_efa = [r for r in rows if r.file != "efa_runs.toml"]
    inside = sum(r.covered for r in rows)
    return (f"{len(rows)} held-out runs **{inside} fall inside their interval ({100 * inside / len(rows):.0f}%)**; "
            f"without the EFA matrix {sum(r.covered for r in no_efa)} of {len(no_efa)}")


def _held_out_ratio_totals() -> str:
    """Held-out same-model pairs inside their ratio's p10-p90 as ``python -m studies.ratio_check`` counts them."""
    from studies.ratio_check import held_out_ratios

    rows = held_out_ratios()
    near = [r for r in rows if not r.beyond]
    inside = sum(r.covered for r in rows)
    return (f"**{inside} fall inside ({100 * inside / len(rows):.0f}%)**, {sum(r.covered for r in near)} of "
            f"{len(near)} inside the envelope")


def _leave_one_file_out() -> str:
    """Held-out runs inside their interval with the factors sized on the other held-out files."""
    from studies.interval_check import held_out_intervals, leave_one_file_out

    lofo = leave_one_file_out(held_out_intervals())
    inside, n = sum(r[3] for r in lofo), sum(r[4] for r in lofo)
    return f"**{inside} of {n} ({100 * inside / n:.0f}%)**"


def _ratio_leave_one_file_out() -> str:
    """Held-out pairs inside their ratio's interval with the ratio factors sized on the other held-out files."""
    from studies.ratio_check import held_out_ratios, leave_one_file_out

    lofo = leave_one_file_out(held_out_ratios())
    inside, n = sum(r[3] for r in lofo), sum(r[4] for r in lofo)
    return f"{inside} of {n}, {100 * inside / n:.0f}%"


def _seed_compare() -> str:
    """The seed's speedups with their p10-p90 as ``moesim compare examples/seed-deepep-mxfp8.toml`` gives them."""
    from moesim.compare_cmd import compare
    from studies.compare import load_compare, measured_points

    ratios = compare(load_compare(str(ROOT / "examples" / "seed-deepep-mxfp8.toml")), measured_points())["ratios"]
    deepep, mxfp8 = ratios[1], ratios[2]
    return (f"DeepEP {deepep['ratio']:.3f}x ({deepep['p10']:.3f}-{deepep['p90']:.3f}x) against the measured "
            f"{deepep['measured_ratio']:.2f}x, MXFP8 + DeepEP {mxfp8['ratio']:.3f}x ({mxfp8['p10']:.3f}-"
            f"{mxfp8['p90']:.3f}x) against {mxfp8['measured_ratio']:.2f}x")


def _recent_mean() -> str:
    """Mean |error| of the held-out newest Megatron-Bridge containers (``studies/data/heldout_recent.toml``)."""
    from studies.heldout import HELDOUT_RECENT, heldout_rows, summary

    return f"{summary([r for r in heldout_rows(HELDOUT_RECENT) if r.error is not None], lambda r: 'all')['all']['mean_abs'] * 100:.1f}%"


def _recent_signed() -> str:
    from studies.heldout import HELDOUT_RECENT, heldout_rows, summary

    return f"{summary([r for r in heldout_rows(HELDOUT_RECENT) if r.error is not None], lambda r: 'all')['all']['mean'] * 100:+.1f}%"


def _recent_pair() -> str:
    """The measured-only boundary of the pair of newest-container runs at two global batches."""
    from studies.heldout import boundary_pair

    pair = boundary_pair()
    assert pair is not None
    return f"{pair[2]:.3f} s a microbatch plus **{pair[3]:.2f} s"


def _lean_boundary() -> str:
    """Median boundary gap of the full-iteration-graph Megatron steps that recompute nothing (docs/transfer.md)."""
    import statistics

    from studies.heldout import boundary_gaps

    return f"{statistics.median(g for _, lm, rc, g in boundary_gaps() if lm == 'graphs' and not rc):+.2f} s"


def _early_mean() -> str:
    """Mean |error| of the held-out 25.11 container (``studies/data/heldout_early.toml``)."""
    from studies.heldout import HELDOUT_EARLY, heldout_rows, summary

    return f"{summary([r for r in heldout_rows(HELDOUT_EARLY) if r.error is not None], lambda r: 'all')['all']['mean_abs'] * 100:.1f}%"


def _recent_chip_pair() -> str:
    """Measured GB300 over B300 per-GPU ratio of the newest containers' one same-plan pair (Qwen3-30B, 26.06)."""
    from studies.dataset import load_runs
    from studies.heldout import HELDOUT_RECENT

    runs = {r.id: r.measured_tokens_per_s_per_gpu for r in load_runs(HELDOUT_RECENT)}
    return f"{runs['mcore-26.06-qwen3-30b-8xgb300'] / runs['mcore-26.06-qwen3-30b-8xb300']:.3f}x"


def _memory_pair() -> str:
    """Predicted tensor memory against the logged peak of the two TorchTitan 512-H100 runs (``moesim validate``)."""
    rows = {r.run_id: r for r in validation().rows}
    a, b = rows["titan-dsv3-h100-bf16"], rows["titan-dsv3-h100-bf16-deepep"]
    assert a.memory_error is not None and b.memory_error is not None
    return (f"{a.predicted_tensor_memory_gib:.1f} and {b.predicted_tensor_memory_gib:.1f} GiB against "
            f"{a.measured_memory_gib:.2f} and {b.measured_memory_gib:.2f} ({a.memory_error * 100:+.1f}% and "
            f"{b.memory_error * 100:+.1f}%)")


@cache
def deepseek(extra: tuple[str, ...] = ()) -> Any:
    """DeepSeek's own plan on 2048 H800 (README command), with the deepseek stack and its calibration."""
    from moesim.predict_cmd import _compute, add_predict_arguments

    parser = argparse.ArgumentParser()
    add_predict_arguments(parser)
    args = parser.parse_args(
        "--model deepseek-v3-671b --gpu h800 --gpus 2048 --stack deepseek --pp 16 --pp-schedule dualpipe --ep 64 "
        "--tp 1 --seq-len 4096 --global-batch 15360 --precision fp8-blockwise --ep-backend deepep --ac selective".split()
        + list(extra))
    return _compute(args).predictions[0]


def _deepseek_window() -> str:
    """The traced pair predicted from the bundled calibration (``calibrate compare``'s ``window.predicted``)."""
    from calibrate.traced_plan import predicted_pair
    from sim.calibration import load_calibration

    w = predicted_pair(load_calibration("h800-deepseek-trace"))
    return " | ".join(f"{v * 1e3:.1f}" for v in (w.compute_busy_s, w.comm_busy_s, w.exposed_comm_s, w.span_s))


#: The DeepSeek-V3 report (s3): 180K H800 GPU-hours per trillion training tokens.
REPORT_TOKENS_PER_S_PER_GPU = 1e12 / (180e3 * 3600)


def _deepseek_pair_ms() -> str:
    """A DualPipe pair of 4 MoE layers forward + 4 backward in DeepSeek's plan, simulated."""
    from sim.calibration import STACK_CALIBRATIONS, load_calibration, to_cost_model
    from sim.catalog import default_cluster, load_cluster, load_model
    from sim.loaders import derive_plan_fields, plan_from_mapping
    from sim.predict.layers import simulate_pair
    from sim.predict.timing import Context
    from sim.stacks import load_stack

    stack = load_stack("deepseek")
    cluster = stack.place(load_cluster(default_cluster("h800"), n_gpus=2048, gpu="h800"))
    plan = plan_from_mapping(derive_plan_fields(dict(
        pp=16, pp_schedule="dualpipe", ep=64, tp=1, seq_len=4096, global_batch=15360, precision="fp8-blockwise",
        ep_backend="deepep", ac="selective"), 2048), "plan")
    ctx = Context(load_model("deepseek-v3-671b"), cluster, plan,
                  to_cost_model(load_calibration(STACK_CALIBRATIONS["deepseek"]), cluster.gpu), stack)
    return f"{simulate_pair(ctx, ['moe'] * 4, ['moe'] * 4).time_s * 1e3:.0f}"


@cache
def _change_budgets() -> dict[tuple[str, str], Any]:
    from studies.change_budget import change_budgets

    return {(b.before, b.after): b for b in change_budgets()}


def _kernel_rate_move(before: str, after: str) -> str:
    """The move of one seed change at the calibration's kernel rates and the measured move over it."""
    b = _change_budgets()[(before, after)]
    return f"{abs(b.kernel_rate_delta_s):.2f} s / {b.kernel_rate_ratio:.2f}x"


def _shipped_move(before: str, after: str) -> str:
    """The move of one seed change under the shipped fit and the measured move over it."""
    b = _change_budgets()[(before, after)]
    return f"{abs(b.predicted_delta_s):.2f} s / {b.move_ratio:.2f}x"


def _release_scalar(name: str) -> str:
    from sim.joint import shipped_values

    return f"{shipped_values()[f'release.{name}']:.4f}"


def _param(name: str, fmt: str, scale: float = 1.0) -> str:
    """The shipped joint value of ``name`` times ``scale``, formatted with ``fmt``."""
    from sim.joint import shipped_values

    return fmt.format(shipped_values()[name] * scale)


def _ablation(label: str) -> str:
    """The ablation row whose label starts with ``label`` (docs/transfer.md's table, from the shipped fit's record):
    "LOGO mean% / LOGO max%" as the README quotes it."""
    from sim.joint import joint_fit_record

    rows = [row for name, row in joint_fit_record()["ablation"].items() if name.startswith(label)]
    if len(rows) != 1:
        raise KeyError(f"ablation row {label!r}: {len(rows)} rows start so")
    return f"{rows[0]['logo_mape'] * 100:.1f}% / {rows[0]['logo_max'] * 100:.1f}%"


def _logo_group_runs(group: str) -> list[dict[str, Any]]:
    """The LOGO fold of ``group``: each run with its error, from the stored joint fit."""
    from sim.joint import joint_fit_record

    fold = joint_fit_record()["logo"][group]
    return [{"id": i, "error": e} for i, e in zip(fold["runs"], fold["errors"], strict=True)]


def _param_with_sigma(name: str) -> str:
    """A fitted parameter as the README quotes it: value +- sigma, both rounded to whole units with thousands
    separators (the grouped-GEMM half-point in rows)."""
    from sim.joint import joint_fit_record

    rec = joint_fit_record()["params"][name]
    return f"{rec['value']:,.0f} +- {rec['sigma']:,.0f}"


@cache
def logo() -> dict[str, Any]:
    from studies.validate import logo_validation

    return logo_validation()


def _validate_summary() -> str:
    rows = [r for r in validation().rows if r.error is not None]
    errs = [abs(r.error) for r in rows]
    lg = logo()
    return (f"{len(rows)} runs, in-sample MAPE {sum(errs) / len(errs) * 100:.1f}%, max |error| {max(errs) * 100:.1f}%; "
            f"leave-one-group-out MAPE {lg['logo_mape'] * 100:.1f}%, max |error| {lg['logo_max'] * 100:.1f}%")


def _logo_by_group() -> str:
    groups: dict[str, list[float]] = {}
    for r in logo()["runs"]:
        if "error" in r:
            groups.setdefault(r["group"], []).append(r["error"] * 100)
    return "; ".join(f"{g} {min(e):+.0f}..{max(e):+.0f}%" for g, e in sorted(groups.items()))


def _ratio(i: int) -> str:
    from studies.transfer import RATIO_CHECKS

    a, b = RATIO_CHECKS[i]
    rows = {r.run_id: r for r in validation().rows}
    pa, pb = rows[a], rows[b]
    assert pa.predicted_tokens_per_s_per_gpu is not None and pb.predicted_tokens_per_s_per_gpu is not None
    pred = pa.predicted_tokens_per_s_per_gpu / pb.predicted_tokens_per_s_per_gpu
    meas = pa.measured_tokens_per_s_per_gpu / pb.measured_tokens_per_s_per_gpu
    return f"{pred:.3f}x vs {meas:.3f}x"


@cache
def _scale_heldout() -> list[Any]:
    """The held-out MLPerf scale points (``studies.scaling.heldout_points``), predicted once per process."""
    from studies.scaling import heldout_points

    return heldout_points()


def _heldout(gpu: str) -> str:
    return " and ".join(f"{p.error * 100:+.1f}%" for p in _scale_heldout() if p.run_id.endswith(f"x{gpu}"))


def _heldout_submitter(submitter: str) -> str:
    """The held-out MLPerf points another company submitted, by GPU count: "a", "a and b", "a, b and c"."""
    from studies.scaling import submitted_by

    errors = [f"{p.error * 100:+.1f}%" for p in submitted_by(_scale_heldout(), submitter)]
    return " and ".join(errors) if len(errors) < 3 else f"{', '.join(errors[:-1])} and {errors[-1]}"


def _coreweave_rest_s() -> str:
    """At CoreWeave's largest point, the predicted step less the step boundary the model charges."""
    from studies.scaling import submitted_by

    largest = submitted_by(_scale_heldout(), "coreweave")[-1]
    return f"{largest.step_s - largest.fixed_s:.2f}"


def _collapsed(*cells: str) -> str:
    """The MLPerf GPT-OSS-20B cells' errors with the router collapsed onto one rank (``studies.heldout``)."""
    from studies.dataset import load_runs
    from studies.heldout import MLPERF_GPT_OSS, collapsed_router_error

    runs = {r.id: r for r in load_runs(MLPERF_GPT_OSS)}
    errors = [collapsed_router_error(runs[f"mlperf-v6.0-gpt-oss-20b-{cell}"]) for cell in cells]
    return " and ".join(f"{e * 100:+.1f}%" for e in errors if e is not None)


@cache
def _heldout_model_summary() -> dict[str, dict[str, float]]:
    from studies.heldout import heldout_rows, summary

    return summary(heldout_rows(), lambda r: r.model)


@cache
def _heldout_table_summary() -> dict[str, dict[str, float]]:
    from studies.heldout import HELDOUT_RUNS, heldout_rows, summary

    rows = heldout_rows(HELDOUT_RUNS)
    return {**summary(rows, lambda r: "all"), **summary(rows, lambda r: r.gpu)}


def _heldout_table_mean(key: str) -> str:
    return f"{_heldout_table_summary()[key]['mean_abs'] * 100:.1f}%"


@cache
def _heldout_rows_by_id(path: str) -> dict[str, Any]:
    """The held-out file ``path``'s rows by run id, predicted once per process."""
    from studies.heldout import heldout_rows

    return {r.run_id: r for r in heldout_rows(Path(path))}


def _heldout_errors(path: Path, *run_ids: str, digits: int = 0) -> str:
    rows = _heldout_rows_by_id(str(path))
    return " and ".join(f"{(rows[i].error or 0.0) * 100:+.{digits}f}%" for i in run_ids)


def _heldout_table_errors(*run_ids: str, digits: int = 0) -> str:
    from studies.heldout import HELDOUT_RUNS

    return _heldout_errors(HELDOUT_RUNS, *run_ids, digits=digits)


def _kimi_mean() -> str:
    return f"{_heldout_model_summary()['kimi-k2']['mean_abs'] * 100:.1f}%"


def _torchtitan_short_steps() -> str:
    """The held-out TorchTitan short steps' errors (H100, then B200), as the README quotes them."""
    from studies.heldout import HELDOUT_TORCHTITAN, heldout_rows

    errors = {r.run_id: r.error for r in heldout_rows(HELDOUT_TORCHTITAN)}
    h100, b200 = errors["titan-dsv3-16b-8xh100-issue1789"], errors["titan-dsv3-16b-8xb200-pr1993"]
    assert h100 is not None and b200 is not None
    return f"{h100 * 100:+.1f}% and {b200 * 100:+.1f}%".lstrip("+")


def _heldout_model_errors() -> str:
    s = _heldout_model_summary()["gpt-oss-120b"]
    return f"{s['mean_abs'] * 100:.1f}%, max {s['max_abs'] * 100:.1f}%"


def _heldout_model_signed() -> str:
    return f"{_heldout_model_summary()['gpt-oss-120b']['mean'] * 100:.1f}%"


def _lomo_split() -> tuple[list[float], list[float]]:
    """Leave-one-model-out: each fold's mean |error| over the runs whose release another model measured, and the
    signed errors of the runs of a release no other model measured (predicted at its layer-benchmark prior)."""
    from sim.joint import joint_fit_record
    from studies.dataset import load_runs
    from studies.transfer import unmeasured_release_runs

    runs = {r.id: r for r in load_runs()}
    means, apart = [], []
    for fold in joint_fit_record()["lomo"].values():
        by_id = dict(zip(fold["runs"], fold["errors"], strict=True))
        alone = {i for ids in unmeasured_release_runs(fold, runs).values() for i in ids}
        kept = [abs(e) for i, e in by_id.items() if i not in alone]
        means.append(sum(kept) / len(kept))
        apart += [by_id[i] for i in sorted(alone)]
    return means, apart


def _lomo_range() -> str:
    means, _apart = _lomo_split()
    return f"{min(means) * 100:.1f}-{max(means) * 100:.1f}%"


def _lomo_unmeasured_release() -> str:
    _means, apart = _lomo_split()
    return f"{sum(apart) / len(apart) * 100:+.0f}%"


SEED_PAIR = ("titan-dsv3-b200-mxfp8-deepep", "titan-dsv3-b200-bf16-deepep")


@cache
def _seed_pair() -> dict[str, float]:
    """``python -m studies.release_per_run --pair`` on the seed's MXFP8 pair: the scalar, and each TorchTitan run's
    missing seconds at it."""
    from sim.joint import shipped_values
    from studies.dataset import load_runs
    from studies.heldout import HELDOUT_TORCHTITAN
    from studies.release_per_run import lacks, pair_scalar

    runs = {r.id: r for r in load_runs()}
    values = dict(shipped_values())
    scalar = pair_scalar(runs[SEED_PAIR[0]], runs[SEED_PAIR[1]], values)
    assert scalar is not None
    at = dict(values, **{"release.torchtitan": scalar})
    out: dict[str, float] = {"scalar": scalar}
    for rid in ("titan-dsv3-b200-bf16", "titan-dsv3-b200-bf16-deepep", "titan-dsv3-h100-bf16", "titan-dsv3-h100-bf16-deepep"):
        measured, predicted, ms = lacks(runs[rid], at)
        assert ms is not None
        out[rid], out[f"{rid} ms/layer"] = measured - predicted, ms
    one_node = [ms for run in load_runs(HELDOUT_TORCHTITAN) if (ms := lacks(run, at)[2]) is not None]
    return {**out, "one-node min ms/layer": min(one_node), "one-node max ms/layer": max(one_node)}


@cache
def _titan_layer() -> dict[str, float]:
    from studies.torchtitan_layer import layer_rows, speedups

    rows = layer_rows()
    return {**speedups(rows), "bf16_ratio": {r["precision"]: r["ratio"] for r in rows}["bf16"]}


@cache
def _efa_summary() -> dict[str, dict[str, float]]:
    from studies.dataset import load_runs
    from studies.heldout import EFA_RUNS, summary

    rows = list(_heldout_rows_by_id(str(EFA_RUNS)).values())
    mbs = {r.id: str(r.plan.get("micro_batch", 1)) for r in load_runs(EFA_RUNS)}
    return {**summary(rows, lambda r: "all"), **summary(rows, lambda r: mbs[r.run_id])}


@cache
def _proxy_fit() -> Any:
    from calibrate.proxy_fit import fit_proxy_normal

    return fit_proxy_normal()


@cache
def _gin_fit() -> Any:
    from calibrate.proxy_fit import fit_gin_efa_share

    return fit_gin_efa_share()


def _campaign_check() -> float:
    from calibrate.proxy_fit import (
        B200_CAMPAIGN_BACKENDS,
        B200_CAMPAIGN_US,
        campaign_kernel_s,
    )
    from sim.comm import CommCosts

    errors = [abs(campaign_kernel_s(*key, backend, CommCosts.default()) / (times[i] * 1e-6) - 1)
              for key, times in B200_CAMPAIGN_US.items() for i, backend in enumerate(B200_CAMPAIGN_BACKENDS)
              if backend != "deepep-v2"]
    return max(errors)


def _efa_model_summary() -> dict[str, dict[str, float]]:
    from studies.heldout import EFA_RUNS, summary

    return summary(list(_heldout_rows_by_id(str(EFA_RUNS)).values()), lambda r: r.model)


def _efa_error(run_id: str) -> str:
    from studies.heldout import EFA_RUNS

    return _heldout_errors(EFA_RUNS, run_id, digits=1)


def _heldout_model_coverage() -> str:
    s = _heldout_model_summary()["gpt-oss-120b"]
    return f"{s['inside']:.0f} of {s['runs']:.0f}"


def _logo_coverage() -> str:
    from studies.validate import logo_intervals

    cov = logo_intervals(logo())
    return (f"{cov['covered']} of {cov['runs']} inside ({cov['logo_interval_coverage'] * 100:.0f}% against a nominal "
            f"80%), median p90/p10 {cov['median_p90_p10_ratio']:.2f}")


@cache
def _precision_pairs() -> dict[str, Any]:
    """The precision pairs' rows (``studies.precision_pairs.pair_rows``) by a short key: fitted, blog, noac, 2layer."""
    from studies.precision_pairs import pair_rows

    rows = pair_rows(with_fitted=True)
    keys = {"fitted": lambda r: r.fitted, "blog": lambda r: "blog" in r.id, "noac": lambda r: "noac" in r.id,
            "2layer": lambda r: "2layer" in r.id}
    return {k: next(r for r in rows if match(r)) for k, match in keys.items()}


@cache
def _grouped_curve() -> list[dict[str, float]]:
    from studies.torchtitan_layer import grouped_speedup_curve

    return grouped_speedup_curve()


def _layer_cells() -> list[dict[str, Any]]:
    """Every layer cell's row (``studies.layer_cells.layer_cell_rows``), predicted once for the three figures."""
    from studies.layer_cells import layer_cell_rows

    return layer_cell_rows()


def _layer_cell_errors() -> list[float]:
    """Signed percent errors of every layer cell's forward and backward."""
    from studies.layer_cells import cell_errors

    return [e * 100 for c in _layer_cells() for e in cell_errors(c)]


def _layer_cell_range() -> str:
    errs = _layer_cell_errors()
    return f"{min(errs):+.0f}% to {max(errs):+.0f}%"


def _layer_cells_within() -> str:
    from studies.layer_cells import within

    rows = _layer_cells()
    return f"{within(rows)} of {sum(not r['fitted'] for r in rows)}"


def _layer_cell_mean() -> str:
    errs = [abs(e) for e in _layer_cell_errors()]
    return f"{sum(errs) / len(errs):.0f}"


# --- the figures ------------------------------------------------------------------------------------

_SEED_LABELS = ("BF16, standard EP", "BF16 + DeepEP", "MXFP8 grouped GEMMs + DeepEP",
                "MXFP8 grouped GEMMs, standard EP (not published)")

FIGURES: list[Figure] = [
    *(Figure(f"README seed row {i}", "README.md", r"^\| " + re.escape(label).replace("\\ ", " ") + r" \|(.*)$",
             lambda i=i: _seed_row(i)) for i, label in enumerate(_SEED_LABELS)),
    Figure("seed row errors (docs/seed-protocol.md)", "docs/seed-protocol.md", r"Today the rows come out \*\*(.*?)\*\*",
           _seed_errors),
    Figure("seed speedup gaps (docs/seed-protocol.md)", "docs/seed-protocol.md",
           r"and the speedups \*\*([\d.]+ and [\d.]+)\*\* points", _speedup_gaps),
    Figure("Megatron release scalars (docs/stack-protocol.md)", "docs/stack-protocol.md",
           r"what is left of that in the release scalars: ([\d.]+ -> [\d.]+)\)",
           lambda: f"{_release_scalar('megatron-26.02')} -> {_release_scalar('megatron-26.04')}"),
    Figure("torchtitan release scalar (README)", "README.md", r"one scalar\s+\((\d\.\d+), fitted jointly",
           lambda: _release_scalar("torchtitan")),
    Figure("seed speedup gaps", "README.md", r"the speedups come out ([\d.]+ and [\d.]+) points from",
           _speedup_gaps),
    Figure("seed MXFP8 move at kernel rates", "README.md", r"the seed's MXFP8 step then saves \*\*(.*?)\*\*",
           lambda: _kernel_rate_move("titan-dsv3-b200-bf16-deepep", "titan-dsv3-b200-mxfp8-deepep")),
    Figure("seed DeepEP move at kernel rates", "README.md", r"and DeepEP's \*\*(.*?)\*\* where the shipped",
           lambda: _kernel_rate_move("titan-dsv3-b200-bf16", "titan-dsv3-b200-bf16-deepep")),
    Figure("seed MXFP8 saving at kernel rates", "README.md", r"about the kernel-rate one \(\*\*([\d.]+) s\*\*",
           lambda: f"{abs(_change_budgets()[('titan-dsv3-b200-bf16-deepep', 'titan-dsv3-b200-mxfp8-deepep')].kernel_rate_delta_s):.2f}"),
    Figure("seed MXFP8 move shipped", "README.md", r"the shipped fit saves\s+\*([^*]*)\*, and DeepEP's",
           lambda: _shipped_move("titan-dsv3-b200-bf16-deepep", "titan-dsv3-b200-mxfp8-deepep")),
    Figure("seed DeepEP move shipped", "README.md", r"where the shipped fit saves \*([^*]*)\*\. MXFP8's",
           lambda: _shipped_move("titan-dsv3-b200-bf16", "titan-dsv3-b200-bf16-deepep")),
    Figure("validate summary", "README.md", r"Today: \*\*(.*?)\*\* \(`moesim validate --json`", _validate_summary),
    *(Figure(f"ratio check {i}", "README.md", pattern, lambda i=i: _ratio(i)) for i, pattern in enumerate((
        r"GB200 over B200\n(\S+x vs \S+x) and", r"GB200 over B200\n\S+x vs \S+x and (\S+x vs \S+x),",
        r"GB300 over B300 (\S+x vs \S+x) and", r"GB300 over B300 \S+x vs \S+x and (\S+x vs \S+x);",
        r"PP16 plan\n(\S+x vs \S+x);", r"512 GB200 per GPU (\S+x vs \S+x)\."))),
    Figure("held-out GB200 MLPerf runs", "README.md", r"no fit reads\n.*?comes out ([+-][\d.]+% and [+-][\d.]+%);",
           lambda: _heldout("gb200")),
    *(Figure(f"ablation row: {label}", "README.md", pattern, lambda label=label: _ablation(label)) for label, pattern in (
        ("alternative: the grouped GEMM roll-off the runs pulled it to", r"\(([\d.]+% / [\d.]+%) with the shared half-point;"),
        ("grouped GEMMs launched per expert at their own half-point", r"half-point; ([\d.]+% / [\d.]+%) with both at\n85 rows"),
        ("host floor of eagerly issued ops", r"Without it the leave-one-group-out error is ([\d.]+% / [\d.]+%)\n\(ablation"),
        ("NCCL rings spread their crossings", r"leave-one-group-out error is ([\d.]+% / [\d.]+%) against [\d.]+% / [\d.]+% \(docs/transfer\.md's ablation; before"),
        ("TorchTitan's accumulating steps at the joint step boundary", r"against ([\d.]+% / [\d.]+%) with\nTorchTitan's own 0 s"),
        ("TorchTitan's eager MoE bookkeeping", r"with it and\n([\d.]+% / [\d.]+%) without \(docs/transfer\.md's ablation, today\)"),
        ("TorchTitan's shared experts beside", r"with it and ([\d.]+% / [\d.]+%) without \(docs/transfer\.md's ablation\)\. Kept"),
        ("TorchTitan's sums by index", r"without the index sums it is \*\*([\d.]+% / [\d.]+%)\*\* \(docs/transfer\.md's ablation\)"),
        ("TorchTitan's standard-path combine bmm", r"without the bmm's rate \*\*([\d.]+% / [\d.]+%)\*\*, with both"))),
    *(Figure(f"LOGO with every mechanism on {i}", "README.md", pattern,
             lambda: _ablation("(every mechanism on)")) for i, pattern in enumerate((
        r"half-point\)\. Leave-one-group-out ([\d.]+% / [\d.]+%) \(",
        r"error is [\d.]+% / [\d.]+% against ([\d.]+% / [\d.]+%) \(docs/transfer\.md's ablation; before",
        r"shared boundary: the leave-one-group-out error is ([\d.]+% / [\d.]+%) against",
        r"\+7\.5% on B200 \(-3\.4% / \+16\.8% before\)\. On the fitted runs the leave-one-group-out error is ([\d.]+% / [\d.]+%) with",
        r"today the\nleave-one-group-out error is ([\d.]+% / [\d.]+%) with it and",
        r"with both \*\*([\d.]+% / [\d.]+%)\*\*\) and TorchTitan's held-out"))),
    Figure("LOGO fold of the H100 TorchTitan group", "README.md", r"the 512-H100 pair's fold went from \S+ / \S+ to (\S+ / \S+)\)",
           lambda: " / ".join(f"{r['error'] * 100:+.1f}%" for r in _logo_group_runs("hgx-h100 x torchtitan"))),
    Figure("TE grouped-GEMM half-point (README)", "README.md", r"launch per expert\n\(\*\*([\d,]+ \+- [\d,]+)\*\* rows\)",
           lambda: _param_with_sigma("grouped.half_rows_per_expert_launch")),
    *(Figure(f"step boundary (README, {where})", "README.md", pattern, lambda: _param("step.fixed_s", "{:.2f}"))
      for where, pattern in (
        ("scale", r"\(`step.fixed_s`, ([\d.]+) s, fitted jointly"),
        ("seed section", r"pay the joint step boundary \(([\d.]+) s a step;"),
        ("TorchTitan's", r"the fitted `step.fixed_s` \(([\d.]+) s\) is what a step that"),
        ("host floor", r"\(([\d.]+) s\) rather than into `launch.eager_s`"),
        ("accumulating rule", r"that constrains `step.fixed_s` \(([\d.]+) s\) accumulates"),
        ("newest containers", r"model charges ([\d.]+) s, so it comes out"))),
    Figure("eager launch (README, host floor)", "README.md", r"rather than into `launch.eager_s` \(([\d.]+) us\)",
           lambda: _param("launch.eager_s", "{:.1f}", scale=1e6)),
    Figure("Blackwell Ultra rate (README)", "README.md", r"\(`chip.sm103_clock`,\n?([\d.]+)x;",
           lambda: _param("chip.sm103_clock", "{:.3f}")),
    Figure("held-out GB300 MLPerf runs", "README.md", r"also held out, ([+-][\d.]+% and [+-][\d.]+%):",
           lambda: _heldout("gb300")),
    Figure("held-out CoreWeave MLPerf runs", "README.md",
           r"8,192 GPUs \(held out\) come out ([+-][\d.]+%, [+-][\d.]+% and [+-][\d.]+%):",
           lambda: _heldout_submitter("coreweave")),
    Figure("CoreWeave step less the boundary", "README.md", r"the rest of the predicted step, ([\d.]+) s\)",
           _coreweave_rest_s),
    Figure("held-out Google MLPerf run", "README.md", r"Google's 256 GB200 of the GB200 recipe ([+-][\d.]+%)",
           lambda: _heldout_submitter("google")),
    Figure("LOGO interval coverage", "README.md", r"as if each run's group were unseen: \*\*(.*?)\*\*",
           _logo_coverage),
    Figure("held-out model family errors", "README.md", r"mean \|error\| \*\*([\d.]+%, max [\d.]+%)\*\* \(predicted too",
           _heldout_model_errors),
    Figure("held-out TorchTitan short steps", "README.md", r"come out\n(\S+ and \S+) as predicted and",
           _torchtitan_short_steps),
    Figure("held-out Kimi-K2 errors", "README.md", r"three held-out GB300 runs\) comes out\n\*\*([\d.]+%)\*\*", _kimi_mean),
    Figure("held-out table rows", "README.md", r"no fit reads them\) come\nout mean \|error\| \*\*([\d.]+%)\*\*",
           lambda: _heldout_table_mean("all")),
    Figure("TorchTitan layer MXFP8 speedup predicted", "README.md", r"gives an MXFP8 speedup of \*\*([\d.]+x)\*\* predicted",
           lambda: f"{_titan_layer()['predicted']:.3f}x"),
    Figure("TorchTitan layer MXFP8 speedup measured", "README.md", r"predicted\nagainst \*\*([\d.]+x)\*\* measured",
           lambda: f"{_titan_layer()['measured']:.3f}x"),
    Figure("TorchTitan layer BF16 ratio", "README.md", r"at \*\*([\d.]+x)\*\* of the measured time",
           lambda: f"{_titan_layer()['bf16_ratio']:.3f}x"),
    Figure("TorchTitan's fitted scalar (stack protocol)", "docs/stack-protocol.md",
           r"sit from its layer benchmark \(([\d.]+) against", lambda: _param("release.torchtitan", "{:.2f}")),
    Figure("seed pair scalar", "README.md", r"TorchTitan's kernels run at \*\*([\d.]+)\*\* of the calibration's rates",
           lambda: f"{_seed_pair()['scalar']:.2f}"),
    Figure("seed pair: DeepEP step lacks", "README.md", r"each DeepEP step of the seed then lacks \*\*(\d+ s)\*\*",
           lambda: f"{_seed_pair()['titan-dsv3-b200-bf16-deepep']:.0f} s"),
    Figure("seed pair: BF16 step lacks", "README.md", r"the standard-EP step (\d+ s)",
           lambda: f"{_seed_pair()['titan-dsv3-b200-bf16']:.0f} s"),
    Figure("seed pair: H100 steps lack", "README.md", r"TorchTitan's 512-H100 steps (\d+ and \d+ s)",
           lambda: f"{_seed_pair()['titan-dsv3-h100-bf16']:.0f} and {_seed_pair()['titan-dsv3-h100-bf16-deepep']:.0f} s"),
    Figure("seed pair: lack per MoE layer, seed", "README.md", r"the seed's DeepEP steps and (\d+ ms) for its standard-EP",
           lambda: f"{_seed_pair()['titan-dsv3-b200-bf16 ms/layer']:.0f} ms"),
    Figure("seed pair: lack per MoE layer, seed DeepEP", "README.md", r"that is (\d+ ms) a layer for the seed's DeepEP",
           lambda: f"{_seed_pair()['titan-dsv3-b200-bf16-deepep ms/layer']:.0f} ms"),
    Figure("seed pair: lack per MoE layer, one-node 16B", "README.md", r"one-node 16B steps (\d+-\d+ ms) on H100 and B200",
           lambda: f"{_seed_pair()['one-node min ms/layer']:.0f}-{_seed_pair()['one-node max ms/layer']:.0f} ms"),
    Figure("seed pair: lack per MoE layer, 512 H100", "README.md", r"PR #2107's 512-H100 steps lack (\d+-\d+ ms) a layer",
           lambda: f"{_seed_pair()['titan-dsv3-h100-bf16-deepep ms/layer']:.0f}-{_seed_pair()['titan-dsv3-h100-bf16 ms/layer']:.0f} ms"),
    Figure("held-out MXFP8 pair (Scout, GB200) measured", "README.md", r"full\nrecompute, MXFP8 on the experts and linears\) measured \*\*([+-][\d.]+%)\*\*",
           lambda: f"{(_precision_pairs()['blog'].measured - 1) * 100:+.1f}%"),
    Figure("held-out MXFP8 pair (Scout, GB200) predicted", "README.md", r"and moesim gives \*\*([\d.]+x)\*\*",
           lambda: f"{_precision_pairs()['blog'].predicted:.3f}x"),
    Figure("held-out MXFP8 pair (Scout, GB200) error", "README.md", r"\(\*\*([+-][\d.]+%)\*\* on the ratio\)",
           lambda: f"{_precision_pairs()['blog'].error * 100:+.1f}%"),
    Figure("fitted MXFP8 pair error", "README.md", r"where the seed's own pair comes out \*\*([+-][\d.]+%)\*\*",
           lambda: f"{_precision_pairs()['fitted'].error * 100:+.1f}%"),
    Figure("older MXFP8 pair (Scout, no recompute) error", "README.md", r"run without\nrecompute: ([+-][\d.]+%);",
           lambda: f"{_precision_pairs()['noac'].error * 100:+.1f}%"),
    Figure("older MXFP8 pair (2 layers) error", "README.md", r"debug model on 4 B200: ([+-][\d.]+%),",
           lambda: f"{_precision_pairs()['2layer'].error * 100:+.1f}%"),
    Figure("TorchTitan routed-expert MXFP8 speedup curve", "README.md",
           r"routed experts' MXFP8 speedup alone\ncomes out \*\*(.*?)\*\* at 16k",
           lambda: " / ".join(f"{r['predicted']:.3f}x" for r in _grouped_curve())),
    Figure("EFA NCCL EP16 MBS4", "README.md", r"NCCL at EP16 on B300 \*\*([+-][\d.]+%)\*\*",
           lambda: _efa_error("aws-26.04.01-qwen3-235b-32xb300-ep16-mbs4-nccl")),
    Figure("EFA UCCL-EP DSV3 MBS4", "README.md", r"DeepSeek-V3 at microbatch 4 \*\*([+-][\d.]+%)\*\* and",
           lambda: _efa_error("aws-26.04.01-dsv3-256xb300-mbs4-nooverlap-uccl-ep")),
    Figure("EFA UCCL-EP DSV3 MBS4 overlap", "README.md", r"and \*\*([+-][\d.]+%)\*\* \(with the all-to-all overlap\)",
           lambda: _efa_error("aws-26.04.01-dsv3-256xb300-mbs4-overlap-uccl-ep")),
    Figure("UCCL-EP proxy hop fit", "README.md", r"kernel \((\d+ \+- \d+ us)\) and its RDMA share",
           lambda: f"{_proxy_fit().fixed_s * 1e6:.0f} +- {_proxy_fit().fixed_sigma_s * 1e6:.0f} us"),
    Figure("UCCL-EP proxy share fit", "README.md", r"RDMA share of the line \(([\d.]+ \+- [\d.]+)\)",
           lambda: f"{_proxy_fit().rdma_fraction:.2f} +- {_proxy_fit().rdma_fraction_sigma:.2f}"),
    Figure("UCCL-EP proxy fit residual", "README.md", r"within (\d+%) of each",
           lambda: f"{math.ceil(_proxy_fit().max_abs_residual * 100):.0f}%"),
    Figure("DeepEP v2 GIN share on EFA", "README.md", r"where it reaches\n([\d.]+ \+- [\d.]+) of the line",
           lambda: f"{_gin_fit().fraction:.2f} +- {_gin_fit().sigma:.2f}"),
    Figure("AWS campaign proxy check", "README.md", r"come out within (\d+%) of the proxy model",
           lambda: f"{math.ceil(_campaign_check() * 100):.0f}%"),
    Figure("EFA Kimi-K2 mean", "README.md", r"Kimi-K2's nine runs \*\*([\d.]+%)\*\* on",
           lambda: f"{_efa_model_summary()['kimi-k2']['mean_abs'] * 100:.1f}%"),
    Figure("EFA runs mean", "README.md", r"\*\*([\d.]+%)\*\*\nover all 44 ",
           lambda: f"{_efa_summary()['all']['mean_abs'] * 100:.1f}%"),
    Figure("EFA MBS1 mean", "README.md", r"far too fast \(mean \|error\| \*\*([\d.]+%)\*\*\)",
           lambda: f"{_efa_summary()['1']['mean_abs'] * 100:.1f}%"),
    Figure("held-out table rows GB200", "README.md", r"\*\*: GB200 \*\*([\d.]+%)\*\*", lambda: _heldout_table_mean("gb200")),
    Figure("held-out table rows GB300", "README.md", r"and GB300 \*\*([\d.]+%)\*\*, while", lambda: _heldout_table_mean("gb300")),
    Figure("held-out table rows: Qwen3-235B B300 at 26.02", "README.md", r"B300 at 26\.02, ([+-]\d+% and [+-]\d+%);",
           lambda: _heldout_table_errors("mcore-26.02-qwen3-235b-256xb300", "mcore-26.02.01-qwen3-235b-256xb300")),
    Figure("held-out table rows: Qwen3-30B at 26.02", "README.md", r"on\nH100, ([+-]\d+% and [+-]\d+%)\)",
           lambda: _heldout_table_errors("mcore-26.02-qwen3-30b-8xb200", "mcore-26.02-qwen3-30b-16xh100")),
    Figure("held-out table rows: DeepSeek-V3 26.04.01 B200", "README.md", r"overlap\) runs (\d+%) faster than predicted",
           lambda: _heldout_table_errors("mcore-26.04.01-dsv3-256xb200").lstrip("+-")),
    Figure("held-out model family bias", "README.md", r"\(predicted too fast by ([\d.]+%) on average",
           _heldout_model_signed),
    Figure("leave-one-model-out range", "README.md", r"Leaving each fitted model out in turn gives ([\d.]+-[\d.]+%)",
           _lomo_range),
    Figure("leave-one-model-out, a release no other model measured", "README.md",
           r"they come out ([+-]\d+%) on average", _lomo_unmeasured_release),
    Figure("GPT-OSS-20B H100 cells, router collapsed", "README.md", r"so even then they come out \*\*([+-][\d.]+% and "
           r"[+-][\d.]+%)\*\* fast", lambda: _collapsed("64xh100", "128xh100")),
    Figure("GPT-OSS-20B 512-GB300 cell, router collapsed", "README.md", r"cell \(\*\*([+-][\d.]+%)\*\* collapsed",
           lambda: _collapsed("512xgb300")),
    Figure("held-out model family coverage", "README.md", r"inside it: \*\*(\d+ of \d+)\*\* of the GPT-OSS",
           _heldout_model_coverage),
    Figure("LOGO by group", "README.md", r"Leave-one-group-out by group: ([^\n]*)\n", _logo_by_group),
    Figure("layer cells range", "README.md", r"the cells come out ([+-]\d+% to [+-]\d+%)\n", _layer_cell_range),
    Figure("layer cells mean", "README.md", r"\(mean \|error\| (\d+)%;", _layer_cell_mean),
    Figure("layer cells within 10%", "README.md", r"; (\d+ of \d+) within 10% forward", _layer_cells_within),
    Figure("TorchTitan H100 memory", "README.md", r"TorchTitan 512-H100\npair's tensors: (.*?\)), where",
           _memory_pair),
    Figure("newest containers mean", "README.md", r"as a user would, they come out mean \|error\| \*\*([\d.]+%)\*\*",
           _recent_mean),
    Figure("newest containers signed", "README.md", r"\*\* \(mean signed\n?([+-][\d.]+%)\)\. Their presets", _recent_signed),
    Figure("newest containers boundary pair", "README.md", r"measured only, takes ([\d.]+ s a microbatch plus \*\*[\d.]+ s)\*\* once",
           _recent_pair),
    Figure("lean full-graph boundary", "README.md", r"graphs without recompute \*\*([+-][\d.]+ s)\*\* median", _lean_boundary),
    Figure("25.11 container mean", "README.md", r"`megatron-26\.02`\), comes out mean \|error\|\n?\*\*([\d.]+%)\*\*",
           _early_mean),
    Figure("newest containers GB300/B300 pair", "README.md", r"GB300 over B300 \*\*([\d.]+x)\*\* \(Qwen3-30B, 26\.06\)",
           _recent_chip_pair),
    Figure("held-out ratio totals", "README.md", r"EFA aside\), (\*\*\d+ fall inside \(\d+%\)\*\*, \d+ of \d+ inside "
           r"the envelope)", _held_out_ratio_totals),
    Figure("leave-one-file-out interval coverage", "README.md", r"each file's runs fall inside (\*\*\d+ of \d+ "
           r"\(\d+%\)\*\*)", _leave_one_file_out),
    Figure("ratio leave-one-file-out", "README.md", r"each file's pairs fall inside (\d+ of \d+, \d+%)",
           _ratio_leave_one_file_out),
    Figure("seed compare", "README.md", r"`moesim compare examples/seed-deepep-mxfp8\.toml`: (DeepEP [\d.]+x \([\d.-]+x\) "
           r"against the measured [\d.]+x, MXFP8 \+ DeepEP [\d.]+x \([\d.-]+x\) against [\d.]+x)", _seed_compare),
    Figure("held-out interval totals", "README.md", r"On the (\d+ held-out runs \*\*\d+ fall inside their interval "
           r"\(\d+%\)\*\*; without the EFA matrix \d+ of \d+)\.", _held_out_interval_totals),
    Figure("LOO coverage (README)", "README.md", r"Leave-one-out coverage on the held-out runs \(`moesim validate`\):\n"
           r"\*\*(.*?)\.", lambda: _coverage("{covered} of {n} inside their interval ({pct:.0f}% against a nominal "
                                              "80%)**; {stacks}")),
    Figure("DeepSeek 2048-H800 tok/s/GPU", "README.md", r"gives \*\*(\d+) tok/s/GPU\*\*",
           lambda: f"{deepseek().tokens_per_s_per_gpu:.0f}"),
    Figure("DeepSeek 2048-H800 memory", "README.md", r"tok/s/GPU\*\*, ([\d.]+ of \d+) GiB per GPU",
           lambda: f"{deepseek().peak_memory_bytes / 2**30:.1f} of {deepseek().memory_capacity_bytes / 2**30:.0f}"),
    Figure("DeepSeek report tok/s/GPU", "README.md", r"GPU-hours per trillion tokens imply (\d+)\s+tok/s/GPU",
           lambda: f"{REPORT_TOKENS_PER_S_PER_GPU:.0f}"),
    Figure("DeepSeek vs report", "README.md", r"tok/s/GPU \(([+-][\d.]+)%; not a fitted number",
           lambda: f"{(deepseek().tokens_per_s_per_gpu / REPORT_TOKENS_PER_S_PER_GPU - 1) * 100:+.1f}"),
    Figure("DeepSeek pair predicted window", "README.md", r"\| predicted \| ([\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+) \|",
           _deepseek_window),
    Figure("DeepSeek pair predicted window (measured numbers)", "README.md",
           r"comm busy, exposed communication and span ([\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+)\s+ms", _deepseek_window),
    Figure("DeepSeek NIC what-if", "README.md", r"`--nic-gbps 800` gains ([+-][\d.]+)%, within",
           lambda: f"{(deepseek(('--nic-gbps', '800')).tokens_per_s_per_gpu / deepseek().tokens_per_s_per_gpu - 1) * 100:+.1f}"),
    Figure("DeepSeek 4-layer pair", "README.md", r"forward/backward pair takes (\d+) ms where", _deepseek_pair_ms),
    Figure("LOO coverage (docs/calibration.md)", "docs/calibration.md",
           r"prints the leave-one-out coverage: ([^.]*)\.",
           lambda: _coverage("{covered} of {n} held-out runs inside their\np10-p90 ({pct:.0f}% against a nominal "
                             "80%; {stacks})")),
]


def _match(fig: Figure, text: str) -> re.Match[str]:
    pattern = fig.pattern.replace(" ", r"\s+")  # prose wraps: a space in a pattern matches any line break
    found = list(re.finditer(pattern, text, flags=re.MULTILINE))
    if len(found) != 1:
        raise SystemExit(f"{fig.file}: figure {fig.name!r}: pattern {fig.pattern!r} matches {len(found)} times, not once")
    return found[0]


def check(figures: list[Figure] | None = None) -> list[tuple[Figure, str, str]]:
    """(figure, quoted text, today's text) for every figure."""
    out = []
    for fig in figures or FIGURES:
        text = (ROOT / fig.file).read_text(encoding="utf-8")
        out.append((fig, _match(fig, text).group(1), fig.value()))
    return out


def write(figures: list[Figure] | None = None) -> int:
    """Rewrite every drifted figure in place; returns how many changed."""
    changed = 0
    for fig, quoted, today in check(figures):
        if quoted == today:
            continue
        path = ROOT / fig.file
        text = path.read_text(encoding="utf-8")
        m = _match(fig, text)
        path.write_text(text[:m.start(1)] + today + text[m.end(1):], encoding="utf-8")
        changed += 1
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite drifted figures in README.md and docs/")
    args = parser.parse_args(argv)
    if args.write:
        print(f"{write()} figure(s) rewritten")
    drift = 0
    for fig, quoted, today in check():
        ok = quoted == today
        drift += not ok
        print(f"{'ok   ' if ok else 'DRIFT'} {fig.file}: {fig.name}: quoted {quoted.strip()!r}"
              + ("" if ok else f", today {today.strip()!r}"))
    print(f"{len(FIGURES)} figures, {drift} drifted")
    return 1 if drift else 0


if __name__ == "__main__":
    raise SystemExit(main())
