"""Models no fit has seen: GPT-OSS-120B's and Kimi-K2's Megatron-Bridge runs (``studies/data/heldout_models.toml``).

The joint calibration is fitted on DeepSeek-V3 and Qwen3 runs. GPT-OSS-120B differs where the cost model is
least tied down (64-wide attention heads, every other layer in a 128-token window, 128 experts of 2880 in BF16,
EP64 over a whole NVL72 rack); Kimi-K2 is DeepSeek-V3's architecture at 384 experts and 64 heads (MXFP8 on GB300,
trained with Muon). Their runs, predicted with the shipped calibration and nothing refitted, say how far a
prediction for a new model can be trusted. ``docs/transfer.md`` carries the section
(``python -m studies.transfer --write``); ``moesim validate studies/data/heldout_models.toml`` gives the rows.

>>> rows = heldout_rows()
>>> len(rows), sorted({r.model for r in rows})
(18, ['gpt-oss-120b', 'kimi-k2'])
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

from studies.dataset import MeasuredRun, load_runs
from studies.validate import ValidationRow, validate_runs

__all__ = ["HELDOUT_MODELS", "heldout_rows", "heldout_markdown", "model_summary", "SAME_PLAN_PAIRS"]

#: The held-out runs (the dataset's schema; no fit reads them).
HELDOUT_MODELS = Path(__file__).resolve().parent / "data" / "heldout_models.toml"
#: (GPU, over GPU) pairs of GPT-OSS-120B that run the same plan in every container (EP8 on HGX, EP64 on the rack).
SAME_PLAN_PAIRS = (("b300", "b200"), ("gb300", "gb200"))
PAIRS_MODEL = "gpt-oss-120b"


def heldout_rows(path: Path = HELDOUT_MODELS) -> list[ValidationRow]:
    """Every held-out run predicted with the shipped calibration (:func:`studies.validate.validate_runs`)."""
    return validate_runs(path).rows


def _error(row: ValidationRow) -> float:
    assert row.predicted_tokens_per_s_per_gpu is not None
    return row.predicted_tokens_per_s_per_gpu / row.measured_tokens_per_s_per_gpu - 1


def _inside(row: ValidationRow) -> str:
    if row.interval is None:
        return "-"
    low, high = row.interval
    return "yes" if low <= row.measured_tokens_per_s_per_gpu <= high else "no"


def _plan(run: MeasuredRun) -> str:
    p = run.plan
    parts = [f"PP{p.get('pp', 1)} EP{p.get('ep', 1)} MBS{p.get('micro_batch', 1)}", str(p.get("ep_backend", "nccl"))]
    if p.get("ep_overlap"):
        parts.append("a2a overlap")
    if p.get("cuda_graphs") == "partial":
        parts.append("TE graphs")
    if p.get("recompute_modules"):
        parts.append(f"recompute {p['recompute_modules']}")
    return ", ".join(parts)


def model_summary(rows: Sequence[ValidationRow]) -> dict[str, dict[str, float]]:
    """Per model: runs, mean |error|, max |error|, mean signed error, runs inside their p10-p90 interval."""
    out: dict[str, dict[str, float]] = {}
    for model in sorted({r.model for r in rows}):
        mine = [r for r in rows if r.model == model]
        errors = [_error(r) for r in mine]
        out[model] = {"runs": len(mine), "mean_abs": statistics.fmean(abs(e) for e in errors),
                      "max_abs": max(abs(e) for e in errors), "mean": statistics.fmean(errors),
                      "inside": sum(_inside(r) == "yes" for r in mine)}
    return out


def heldout_markdown(path: Path = HELDOUT_MODELS) -> list[str]:
    """The section of ``docs/transfer.md``: per model the summary, each run's error and p10-p90 interval, and the
    same-plan chip ratios."""
    runs = {r.id: r for r in load_runs(path)}
    rows = [r for r in heldout_rows(path) if r.predicted_tokens_per_s_per_gpu is not None]
    lines = ["## Models the fit never saw (held out)", "",
             f"`{path.relative_to(path.parents[2])}`: Megatron-Bridge's runs of two models no fitted run uses, each "
             "with its container's published preset (sources in the file): GPT-OSS-120B in BF16 on 64 GPUs of five "
             "systems in three containers, Kimi-K2 in MXFP8 on 256 GB300 in three. Predicted with the shipped joint "
             "calibration; no parameter was refitted and no run of these models was looked at while fitting. A plan "
             "on a model no run measured is placed beyond the validated envelope (its interval widened).", "",
             "| model | runs | mean abs error | max abs error | mean signed | inside p10-p90 |",
             "|---|---:|---:|---:|---:|---:|"]
    for model, s in model_summary(rows).items():
        lines.append(f"| {model} | {s['runs']:.0f} | **{s['mean_abs'] * 100:.1f}%** | {s['max_abs'] * 100:.1f}% | "
                     f"{s['mean'] * 100:+.1f}% | {s['inside']:.0f} of {s['runs']:.0f} |")
    lines += ["", "| run | GPU | plan | predicted | measured | error | inside p10-p90 |", "|---|---|---|---:|---:|---:|---|"]
    for r in rows:
        run = runs[r.run_id]
        assert r.predicted_tokens_per_s_per_gpu is not None
        lines.append(f"| {r.run_id} | {run.gpu} | {_plan(run)} | {r.predicted_tokens_per_s_per_gpu:.0f} | "
                     f"{r.measured_tokens_per_s_per_gpu:.0f} | {_error(r) * 100:+.1f}% | {_inside(r)} |")
    lines += ["", "GPT-OSS-120B, same plan on two chips (per-GPU throughput ratio, predicted against measured):", "",
              "| container | pair | predicted | measured | error |", "|---|---|---:|---:|---:|"]
    lines += _pair_lines(rows, runs)
    return lines + [""]


def _pair_lines(rows: Sequence[ValidationRow], runs: dict[str, MeasuredRun]) -> list[str]:
    by_key = {(runs[r.run_id].release, runs[r.run_id].gpu): r for r in rows if r.model == PAIRS_MODEL}
    out = []
    for release in sorted({k[0] for k in by_key}):
        for gpu, base in SAME_PLAN_PAIRS:
            a, b = by_key.get((release, gpu)), by_key.get((release, base))
            if a is None or b is None:
                continue
            assert a.predicted_tokens_per_s_per_gpu is not None and b.predicted_tokens_per_s_per_gpu is not None
            predicted = a.predicted_tokens_per_s_per_gpu / b.predicted_tokens_per_s_per_gpu
            measured = a.measured_tokens_per_s_per_gpu / b.measured_tokens_per_s_per_gpu
            out.append(f"| {release} | {gpu} / {base} | {predicted:.3f}x | {measured:.3f}x | "
                       f"{(predicted / measured - 1) * 100:+.1f}% |")
    return out
