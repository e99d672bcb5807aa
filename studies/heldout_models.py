"""A model family no fit has seen: GPT-OSS-120B's Megatron-Bridge runs (``studies/data/heldout_models.toml``).

The joint calibration is fitted on DeepSeek-V3 and Qwen3 runs. GPT-OSS-120B differs where the cost model is
least tied down (64-wide attention heads, every other layer in a 128-token window, 128 experts of 2880 in BF16,
EP64 over a whole NVL72 rack), so its runs, predicted with the shipped calibration and nothing refitted, say how
far a prediction for a new model can be trusted. ``docs/transfer.md`` carries the section
(``python -m studies.transfer --write``); ``moesim validate studies/data/heldout_models.toml`` gives the rows.

>>> rows = heldout_rows()
>>> len(rows), {r.model for r in rows}
(15, {'gpt-oss-120b'})
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

from studies.dataset import MeasuredRun, load_runs
from studies.validate import ValidationRow, validate_runs

__all__ = ["HELDOUT_MODELS", "heldout_rows", "heldout_markdown", "SAME_PLAN_PAIRS"]

#: The held-out runs (the dataset's schema; no fit reads them).
HELDOUT_MODELS = Path(__file__).resolve().parent / "data" / "heldout_models.toml"
#: (GPU, over GPU) pairs that run the same plan in every container (EP8 on HGX, EP64 on the rack).
SAME_PLAN_PAIRS = (("b300", "b200"), ("gb300", "gb200"))


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


def heldout_markdown(path: Path = HELDOUT_MODELS) -> list[str]:
    """The section of ``docs/transfer.md``: each run's error and p10-p90 interval, the summary, the same-plan
    chip ratios."""
    runs = {r.id: r for r in load_runs(path)}
    rows = [r for r in heldout_rows(path) if r.predicted_tokens_per_s_per_gpu is not None]
    errors = [_error(r) for r in rows]
    inside = sum(_inside(r) == "yes" for r in rows)
    lines = ["## A model family the fit never saw: GPT-OSS-120B (held out)", "",
             f"`{path.relative_to(path.parents[2])}`: Megatron-Bridge's BF16 pre-training of GPT-OSS-120B on 64 GPUs "
             "of five systems in three containers, each run with its container's published preset (sources in the "
             "file). Predicted with the shipped joint calibration; no parameter was refitted and no run of this "
             "model was looked at while fitting.", "",
             f"{len(rows)} runs: mean |error| **{statistics.fmean(abs(e) for e in errors) * 100:.1f}%**, max "
             f"**{max(abs(e) for e in errors) * 100:.1f}%**, mean signed {statistics.fmean(errors) * 100:+.1f}%; "
             f"the measured value inside the p10-p90 interval `moesim predict` gives the run in {inside} of {len(rows)} "
             "(intervals by distance from the fitted evidence: a new model is not told apart from the fitted ones).", "",
             "| run | GPU | plan | predicted | measured | error | inside p10-p90 |", "|---|---|---|---:|---:|---:|---|"]
    for r in rows:
        run = runs[r.run_id]
        assert r.predicted_tokens_per_s_per_gpu is not None
        lines.append(f"| {r.run_id} | {run.gpu} | {_plan(run)} | {r.predicted_tokens_per_s_per_gpu:.0f} | "
                     f"{r.measured_tokens_per_s_per_gpu:.0f} | {_error(r) * 100:+.1f}% | {_inside(r)} |")
    lines += ["", "Same plan on two chips (per-GPU throughput ratio, predicted against measured):", "",
              "| container | pair | predicted | measured | error |", "|---|---|---:|---:|---:|"]
    lines += _pair_lines(rows, runs)
    return lines + [""]


def _pair_lines(rows: Sequence[ValidationRow], runs: dict[str, MeasuredRun]) -> list[str]:
    by_key = {(runs[r.run_id].release, runs[r.run_id].gpu): r for r in rows}
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
