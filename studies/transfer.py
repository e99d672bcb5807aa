"""The transfer table (``docs/transfer.md``): the joint calibration's parameters with their uncertainty and the
runs that constrain them, every run predicted by a calibration that did not see its group (leave-one-group-out),
the ablation of each mechanism, ratios between runs, where a change's seconds go (:mod:`studies.change_budget`), every run's error grouped by architecture, fabric,
all-to-all backend and stack, and runs no fit reads (:mod:`studies.heldout`). A number says nothing until runs it was not fitted to are predicted with it;
this table is that check, regenerated from today's code and data:

    python -m studies.transfer            # print the table
    python -m studies.transfer --write    # rewrite docs/transfer.md (tests/studies/test_transfer.py fails on drift)
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sim.stacks import profile_for
from studies.change_budget import (
    HELD_OUT_TITLE,
    budget_markdown,
    budget_summary_markdown,
    held_out_budgets,
)
from studies.dataset import MeasuredRun, load_runs
from studies.heldout import (
    EFA_RUNS,
    boundary_gaps_markdown,
    early_release_markdown,
    efa_markdown,
    heldout_markdown,
    heldout_runs_markdown,
    ladder_markdown,
    mlperf_gpt_oss_markdown,
    recent_releases_markdown,
    torchtitan_markdown,
)
from studies.interval_check import interval_markdown
from studies.precision_pairs import pair_markdown
from studies.ratio_check import ratio_markdown
from studies.torchtitan_layer import layer_markdown
from studies.validate import ValidationRow, validate_runs

__all__ = ["transfer_markdown", "joint_markdown", "RATIO_CHECKS", "DOC"]

DOC = Path(__file__).resolve().parents[1] / "docs" / "transfer.md"


def _fabric(run: MeasuredRun) -> str:
    return "NVL72 rack" if "nvl72" in run.cluster else "HGX node (8 GPUs) + IB"


def _backend(run: MeasuredRun) -> str:
    return str(run.plan.get("ep_backend", "nccl"))


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


#: Ratios between runs the cost-model issue checks (issue 27): same plan on two chips, same chip at two scales.
RATIO_CHECKS = (
    ("mcore-26.02.01-qwen3-30b-8xgb200-sameplan", "mcore-26.02.01-qwen3-30b-8xb200-sameplan"),
    ("mcore-26.04-qwen3-30b-8xgb200-sameplan", "mcore-26.04-qwen3-30b-8xb200-sameplan"),
    ("mcore-26.02.01-qwen3-30b-8xgb300-sameplan", "mcore-26.02.01-qwen3-30b-8xb300-sameplan"),
    ("mcore-26.04-qwen3-30b-8xgb300-sameplan", "mcore-26.04-qwen3-30b-8xb300-sameplan"),
    ("mcore-26.02-dsv3-256xb300", "mcore-26.02-dsv3-256xb200"),
    ("mlperf-v6.0-dsv3-2048xgb200", "mlperf-v6.0-dsv3-512xgb200"),
)


def joint_markdown() -> list[str]:
    """The joint calibration's section: every parameter with its uncertainty and constraining runs, the
    leave-one-group-out errors, the ablation, and the ratio checks."""
    from sim.joint import PARAMS, joint_fit_record
    from studies.validate import logo_validation

    record = joint_fit_record()
    params = record.get("params", {})
    lines = ["## Joint calibration", "",
             "One least-squares fit (`python -m studies.joint_fit --write`, stored in `sim/data/joint_fit.json`) of "
             "the named parameters of `sim/joint.py` over every step-level run; a parameter no run moves keeps its "
             "sourced prior; sigma from the Jacobian at the optimum and the residual variance.", "",
             "| parameter | value | sigma | prior | fitted | constrained by (strongest first) | mechanism |",
             "|---|---:|---:|---:|---|---|---|"]
    for p in PARAMS:
        rec = params.get(p.name, {})
        value = rec.get("value", p.prior)
        sigma = rec.get("sigma")
        runs = ", ".join(rec.get("constrained_by", [])[:4]) or rec.get("note", "")
        lines.append(f"| `{p.name}` | {value:.4g} | {f'{sigma:.2g}' if sigma is not None else '-'} | {p.prior:.4g} | "
                     f"{'yes' if rec.get('fitted') else 'no'} | {runs} | {p.mechanism} ({p.source}) |")
    corr = record.get("correlation", {})
    names, matrix = corr.get("names", []), corr.get("matrix", [])
    strong = [f"`{a}` ~ `{b}` {matrix[i][j]:+.2f}" for i, a in enumerate(names) for j, b in enumerate(names)
              if j > i and abs(matrix[i][j]) >= 0.5]
    lines += ["", "Correlations of fitted parameters with |r| >= 0.5: " + ("; ".join(strong) or "none") + ".", ""]
    logo = logo_validation()
    lines += ["### Leave-one-group-out (groups = system class x stack)", "",
              f"Each run predicted by the calibration refitted without its group: **MAPE "
              f"{logo['logo_mape'] * 100:.1f}%, max |error| {logo['logo_max'] * 100:.1f}%** "
              f"over {sum('error' in r for r in logo['runs'])} runs (`moesim validate --json`: `logo_mape`, "
              "`logo_max`).", "", "| group | run | LOGO error |", "|---|---|---:|"]
    for r in sorted(logo["runs"], key=lambda r: (r["group"], r["id"])):
        if "error" in r:
            lines.append(f"| {r['group']} | {r['id']} | {_pct(r['error'])} |")
    lines += _lomo_lines(record.get("lomo", {}))
    ablation = record.get("ablation", {})
    if ablation:
        lines += ["", "### Ablation: each mechanism switched off, the calibration refitted", "",
                  "Each row refits the joint calibration with one mechanism off (its parameter at the value that "
                  "reduces it to the simpler model, or to its alternative; a framework behaviour: every built-in "
                  "stack profile read without it, `sim.stacks.builtin_overrides`) and repeats the "
                  "leave-one-group-out check, every fold refitted.", "",
                  "| mechanism off | LOGO MAPE | LOGO max |", "|---|---:|---:|"]
        for label, row in ablation.items():
            lines.append(f"| {label} | {row['logo_mape'] * 100:.1f}% | {row['logo_max'] * 100:.1f}% |")
    lines += ["", "### Ratios between runs (the shipped calibration)", "",
              "| run | over | predicted | measured | error |", "|---|---|---:|---:|---:|"]
    for (a, b), (pr, mr) in ratio_checks().items():
        lines.append(f"| {a} | {b} | {pr:.3f}x | {mr:.3f}x | {_pct(pr / mr - 1)} |")
    return lines + [""]


def ratio_checks() -> dict[tuple[str, str], tuple[float, float]]:
    """(run, over) -> (predicted, measured) per-GPU ratio of each :data:`RATIO_CHECKS` pair the shipped dataset has,
    at the shipped calibration."""
    rows = validate_runs().rows
    pred = {r.run_id: r.predicted_tokens_per_s_per_gpu for r in rows}
    meas = {r.run_id: r.measured_tokens_per_s_per_gpu for r in rows}
    out: dict[tuple[str, str], tuple[float, float]] = {}
    for a, b in RATIO_CHECKS:
        pa, pb, ma, mb = pred.get(a), pred.get(b), meas.get(a), meas.get(b)
        if pa and pb and ma and mb:
            out[(a, b)] = (pa / pb, ma / mb)
    return out


def unmeasured_release_runs(fold: dict[str, Any], runs: dict[str, MeasuredRun]) -> dict[str, list[str]]:
    """The runs of a leave-one-model-out ``fold`` whose framework release no other model measured, by release
    profile: the fold predicts them at the release scalar's sourced prior (``sim.joint``), not at a fit.

    >>> from studies.dataset import load_runs
    >>> everything = {r.id: r for r in load_runs()}
    >>> titan = [i for i in everything if i.startswith("titan-")]
    >>> unmeasured_release_runs({"runs": titan + ["mcore-26.04-dsv3-256xb200"]}, everything) == {"torchtitan": titan}
    True
    >>> unmeasured_release_runs({"runs": titan[:1]}, everything)
    {}
    """
    left_out = set(fold["runs"])

    def release(run: MeasuredRun) -> str:
        return profile_for(run.stack, run.release)

    elsewhere = {release(r) for rid, r in runs.items() if rid not in left_out}
    out: dict[str, list[str]] = defaultdict(list)
    for rid in fold["runs"]:
        if rid in runs and release(runs[rid]) not in elsewhere:
            out[release(runs[rid])].append(rid)
    return dict(out)


def _lomo_lines(folds: dict[str, dict[str, Any]]) -> list[str]:
    """Leave-one-model-out: each model's runs predicted by the calibration refitted without that model; the runs of a
    release no other model measured are counted apart (the fold has nothing to fit their release scalar on)."""
    if not folds:
        return []
    runs = {r.id: r for r in load_runs()}
    lines = ["", "### Leave-one-model-out", "",
             "Each model's runs predicted by the calibration refitted without any run of that model (the other "
             "models' runs only): what a prediction for a model no run measured can expect. A plan on a model "
             "never measured is placed beyond the validated envelope (`sim.uncertainty.classify`); the held-out "
             "GPT-OSS-120B section below is the check on a fourth model. A framework release that no other model "
             "measured has no run left in the fold to fit its scalar on: the fold predicts its runs at the scalar's "
             "sourced prior, the release's single-layer benchmark at the calibration's rates (`sim.joint`: "
             "TorchTitan's MoE layer alone on a B200), so their error is what a release's layer benchmark says of "
             "its training steps; the last column gives them apart.", "",
             "| model left out | runs | mean abs error | max abs error | mean signed | runs on a release no other model measured |",
             "|---|---:|---:|---:|---:|---|"]
    for model, fold in sorted(folds.items()):
        errs = [float(e) for e in fold["errors"]]
        by_id = dict(zip(fold["runs"], errs, strict=True))
        apart = []
        for release, ids in sorted(unmeasured_release_runs(fold, runs).items()):
            mine = [by_id[i] for i in ids]
            apart.append(f"{len(ids)} ({release}): mean {_pct(statistics.fmean(mine))}")
        lines.append(f"| {model} | {len(errs)} | {statistics.fmean(abs(e) for e in errs) * 100:.1f}% | "
                     f"{max(abs(e) for e in errs) * 100:.1f}% | {_pct(statistics.fmean(errs))} | "
                     f"{'; '.join(apart) or '-'} |")
    return lines


def transfer_markdown() -> str:
    """The document: the joint calibration, every run's error, and the errors grouped."""
    runs = {r.id: r for r in load_runs()}
    result = validate_runs()
    rows = [r for r in result.rows if r.predicted_tokens_per_s_per_gpu is not None]

    def err(row: ValidationRow) -> float:
        assert row.error is not None
        return row.error

    lines = [
        "# Transfer: the joint calibration and the runs it did not see",
        "",
        "Regenerated by `python -m studies.transfer --write` (`tests/studies/test_transfer.py` fails on drift).",
        "Every number below comes from `moesim validate` on the shipped dataset (`studies/data/measured_runs.toml`).",
        "",
        *joint_markdown(),
        "## Every run (in the joint fit: in-sample errors; the honest ones are the leave-one-group-out errors above)",
        "",
        "| run | stack | GPU | fabric | backend | predicted | measured | error |",
        "|---|---|---|---|---|---:|---:|---:|"]
    for row in rows:
        run = runs[row.run_id]
        assert row.predicted_tokens_per_s_per_gpu is not None
        lines.append(f"| {row.run_id} | {profile_for(run.stack, run.release)} | {run.gpu} | {_fabric(run)} | "
                     f"{_backend(run)} | {row.predicted_tokens_per_s_per_gpu:.0f} | "
                     f"{row.measured_tokens_per_s_per_gpu:.0f} | {_pct(err(row))} |")
    held = rows
    groups: list[tuple[str, Callable[[MeasuredRun], str]]] = [
        ("architecture (GPU)", lambda r: r.gpu), ("fabric", _fabric), ("all-to-all backend", _backend),
        ("stack", lambda r: r.stack)]
    lines += ["", "## In-sample errors, grouped", ""]
    for title, key in groups:
        lines += [f"### by {title}", "", "| group | runs | mean abs error | max abs error | mean signed |",
                  "|---|---:|---:|---:|---:|"]
        table: dict[str, list[float]] = defaultdict(list)
        for r in held:
            table[key(runs[r.run_id])].append(err(r))
        for name in sorted(table):
            errs = table[name]
            lines.append(f"| {name} | {len(errs)} | {statistics.fmean(abs(e) for e in errs) * 100:.1f}% | "
                         f"{max(abs(e) for e in errs) * 100:.1f}% | {_pct(statistics.fmean(errs))} |")
        lines.append("")
    speedups = [r for r in rows if r.predicted_speedup is not None and r.measured_speedup is not None]
    if speedups:
        lines += ["## Speedups over a baseline run (relative answers)", "",
                  "| run | over | predicted | measured | error (points) |", "|---|---|---:|---:|---:|"]
        for r in speedups:
            assert r.predicted_speedup is not None and r.measured_speedup is not None
            lines.append(f"| {r.run_id} | {r.baseline} | {r.predicted_speedup:.3f}x | {r.measured_speedup:.3f}x | "
                         f"{(r.predicted_speedup - r.measured_speedup) * 100:+.1f} |")
        lines.append("")
    lines += budget_markdown()
    lines += _across_gpus(rows, runs)
    lines += heldout_markdown()
    lines += heldout_runs_markdown()
    lines += recent_releases_markdown()
    lines += early_release_markdown()
    lines += boundary_gaps_markdown()
    lines += torchtitan_markdown()
    lines += ladder_markdown()
    lines += mlperf_gpt_oss_markdown()
    lines += efa_markdown()
    lines += budget_summary_markdown(EFA_RUNS, "The EFA matrix's one-field changes: which way each moves the step "
                                     "(`python -m studies.change_budget studies/data/efa_runs.toml`)")
    lines += budget_summary_markdown(budgets=held_out_budgets(), title=HELD_OUT_TITLE)
    lines += interval_markdown()
    lines += ratio_markdown()
    lines += layer_markdown()
    lines += pair_markdown()
    lines += _layer_cells()
    return "\n".join(lines).rstrip() + "\n"


def _layer_cells() -> list[str]:
    """The single-MoE-layer cells (measured-runs.md s8) as ``moesim validate --json`` lists them."""
    from studies.layer_cells import layer_cell_rows

    out = ["", "## Single MoE layers (Megatron-LM's H100 regression cells; the release's step-level scalar not applied)",
           "", "| cell | fitted | forward predicted / measured (ms) | error | backward predicted / measured (ms) | error |",
           "|---|---|---:|---:|---:|---:|"]
    for c in layer_cell_rows():
        m, p = c["measured"], c["predicted"]
        out.append(f"| {c['id']} | {'yes' if c['fitted'] else 'no'} | {p['forward_ms']:.2f} / {m['forward_ms']:.2f} | "
                   f"{_pct(p['forward_ms'] / m['forward_ms'] - 1)} | {p['backward_ms']:.2f} / {m['backward_ms']:.2f} | "
                   f"{_pct(p['backward_ms'] / m['backward_ms'] - 1)} |")
    return out


#: The reference GPU of the cross-GPU ratios: every stack's efficiency is fitted on a B200 run.
_REFERENCE_GPU = "b200"


def _across_gpus(rows: Sequence[ValidationRow], runs: dict[str, MeasuredRun]) -> list[str]:
    """The relative answer across GPUs: each run over the B200 run of the same profile, model, all-to-all
    backend family and precision (each with its own published plan), predicted against measured."""
    def key(run: MeasuredRun) -> tuple[str, str, str]:
        if run.stack == "megatron":  # its recipes pick backend and precision per GPU (FP8-CS on Hopper)
            return profile_for(run.stack, run.release), run.model, "-"
        return profile_for(run.stack, run.release), run.model, f"{_backend(run)}/{run.plan.get('precision', 'bf16')}"

    by_key: dict[tuple[str, str, str], list[ValidationRow]] = defaultdict(list)
    for r in rows:
        by_key[key(runs[r.run_id])].append(r)
    out: list[str] = []
    for k in sorted(by_key):
        group = by_key[k]
        refs = [r for r in group if runs[r.run_id].gpu == _REFERENCE_GPU]
        others = [r for r in group if runs[r.run_id].gpu != _REFERENCE_GPU]
        if len(refs) != 1 or not others:
            continue
        ref = refs[0]
        for r in others:
            predicted, measured = r.ratio_over(ref)
            out.append(f"| {r.run_id} | {ref.run_id} | {predicted:.3f}x | {measured:.3f}x | "
                       f"{_pct(predicted / measured - 1)} |")
    if not out:
        return []
    return ["## Across GPUs: each run over the B200 run of its profile and model (relative answers)", "",
            "Each run keeps its own published plan (the recipes differ by GPU); the ratio is per-GPU throughput, "
            "the question a user asks when choosing hardware. Megatron's recipes choose the backend and precision per GPU "
            "(FP8 current scaling on Hopper, MXFP8 on Blackwell); TorchTitan pairs share both.",
            "", "| run | over | predicted | measured | ratio error |", "|---|---|---:|---:|---:|", *out, ""]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.transfer", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite {DOC}")
    args = parser.parse_args(argv)
    text = transfer_markdown()
    if args.write:
        from sim.fileio import write_atomic

        write_atomic(DOC, text)
        print(f"wrote {DOC}")
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
