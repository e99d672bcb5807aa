"""Runs no fit reads, predicted with the shipped calibration: how far its answers carry.

Files in the dataset's schema: ``studies/data/heldout_models.toml``, models no fit has seen (GPT-OSS-120B's and
Kimi-K2's Megatron-Bridge runs, with Megatron-Bridge PR #3561's backend and precision A/B on GB200), ``studies/data/heldout_runs.toml``, the other rows of the Megatron-Bridge
performance tables for the fitted models (containers, GPUs and plans the fit did not read), and
``studies/data/efa_runs.toml``, a fabric and a backend no fitted run uses (Qwen3-235B over AWS EFA with NCCL,
DeepEP and UCCL-EP; measured-runs.md s7), predicted with the transport's sourced costs alone
(:mod:`sim.comm.transport`), and ``studies/data/heldout_torchtitan.toml``, TorchTitan's short single-node steps
(DeepSeek-V3 16B from its tracker), steps of one microbatch that check they pay no step boundary, and
``studies/data/heldout_recent.toml``, Megatron-Bridge's newest containers (26.06 to 26.08), newer than every fitted
run and predicted with the newest profile, whose full-iteration-graph recipes show where the step boundary holds.

The joint calibration is fitted on DeepSeek-V3 and Qwen3 runs. GPT-OSS-120B differs where the cost model is
least tied down (64-wide attention heads, every other layer in a 128-token window, 128 experts of 2880 in BF16,
EP64 over a whole NVL72 rack); Kimi-K2 is DeepSeek-V3's architecture at 384 experts and 64 heads (MXFP8 on GB300,
trained with Muon). Their runs, predicted with the shipped calibration and nothing refitted, say how far a
prediction for a new model can be trusted. ``docs/transfer.md`` carries both sections
(``python -m studies.transfer --write``); ``moesim validate studies/data/heldout_models.toml`` (or
``heldout_runs.toml``) gives the rows.

>>> rows = heldout_rows()
>>> len(rows), sorted({r.model for r in rows})
(22, ['gpt-oss-120b', 'kimi-k2'])
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from sim.joint import shipped_values
from sim.stacks import profile_for
from studies._sim import predict_run
from studies.change_budget import plan_changes
from studies.dataset import MeasuredRun, load_runs, resolve_run
from studies.validate import ValidationRow, validate_runs

__all__ = ["EFA_RUNS", "HELDOUT_MODELS", "HELDOUT_RECENT", "HELDOUT_RUNS", "HELDOUT_EARLY", "recent_releases_markdown", "early_release_markdown", "container_rows_markdown", "boundary_pair",
           "BOUNDARY_FILES", "boundary_gaps", "boundary_gaps_markdown", "HELDOUT_TORCHTITAN", "MLPERF_GPT_OSS", "mlperf_gpt_oss_markdown", "collapsed_router_error",
           "torchtitan_markdown", "ladder_markdown",
           "ladder_rungs", "heldout_rows", "heldout_markdown", "heldout_runs_markdown",
           "efa_markdown", "summary", "SAME_PLAN_PAIRS"]

#: Runs of models no fitted run uses (the dataset's schema; no fit reads them).
HELDOUT_MODELS = Path(__file__).resolve().parent / "data" / "heldout_models.toml"
#: Other Megatron-Bridge table rows of the fitted models (the dataset's schema; no fit reads them).
HELDOUT_RUNS = Path(__file__).resolve().parent / "data" / "heldout_runs.toml"
#: TorchTitan's short steps on one node: DeepSeek-V3 16B from TorchTitan's tracker (the dataset's schema; no fit
#: reads them): steps of one microbatch, which check that such steps pay no step boundary.
HELDOUT_TORCHTITAN = Path(__file__).resolve().parent / "data" / "heldout_torchtitan.toml"
#: MLPerf Training v6.0 GPT-OSS-20B: one recipe cell per (GPU, GPU count, plan), every submitter's median (the
#: dataset's schema; no fit reads them). Steps of one microbatch: they bound the step boundary there.
MLPERF_GPT_OSS = Path(__file__).resolve().parent / "data" / "mlperf_gpt_oss.toml"
#: Megatron-Bridge's newest containers (26.06 to 26.08), newer than every fitted run (the dataset's schema; no fit
#: reads them): predicted with the newest profile, as a user would.
HELDOUT_RECENT = Path(__file__).resolve().parent / "data" / "heldout_recent.toml"
#: Megatron-Bridge's 25.11 container, older than every fitted run (the dataset's schema; no fit reads them): predicted
#: with the oldest profile.
HELDOUT_EARLY = Path(__file__).resolve().parent / "data" / "heldout_early.toml"
#: Runs over AWS EFA, three all-to-all backends (the dataset's schema; no fit reads them).
EFA_RUNS = Path(__file__).resolve().parent / "data" / "efa_runs.toml"
#: (GPU, over GPU) pairs of GPT-OSS-120B that run the same plan in every container (EP8 on HGX, EP64 on the rack).
SAME_PLAN_PAIRS = (("b300", "b200"), ("gb300", "gb200"))
#: Chip -> the chips it is compared with at one plan (measured-runs.md s5: a rack part over its HGX part; an Ultra
#: part over its predecessor), nearest first.
CHIP_PAIRS = {"gb300": ("b300", "gb200"), "gb200": ("b200",), "b300": ("b200",)}
PAIRS_MODEL = "gpt-oss-120b"


def heldout_rows(path: Path = HELDOUT_MODELS) -> list[ValidationRow]:
    """Every held-out run predicted with the shipped calibration (:func:`studies.validate.validate_runs`)."""
    return validate_runs(path).rows


def _error(row: ValidationRow) -> float:
    """:attr:`ValidationRow.error` of a predicted row."""
    assert row.error is not None
    return row.error


def _inside(row: ValidationRow) -> str:
    if row.interval is None:
        return "-"
    low, high = row.interval
    return "yes" if low <= row.measured_tokens_per_s_per_gpu <= high else "no"


def _plan(run: MeasuredRun, backend: bool = True) -> str:
    p = run.plan
    tp, cp, vpp = (int(p.get(key, 1) or 1) for key in ("tp", "cp", "vpp"))
    sizes = [f"TP{tp}"] * (tp > 1) + [f"CP{cp}"] * (cp > 1)
    sizes += [f"PP{p.get('pp', 1)}" + (f" VP{vpp}" if vpp > 1 else ""), f"EP{p.get('ep', 1)}",
              f"MBS{p.get('micro_batch', 1)}"]
    parts = [" ".join(sizes)]
    if backend:
        parts.append(str(p.get("ep_backend", "nccl")))
    if p.get("ep_overlap"):
        parts.append("a2a overlap")
    if p.get("cuda_graphs") == "partial":
        parts.append("TE graphs")
    if p.get("cuda_graphs") == "full":
        parts.append("full-iteration graphs")
    if p.get("recompute_modules"):
        parts.append(f"recompute {p['recompute_modules']}")
    return ", ".join(parts)


def summary(rows: Sequence[ValidationRow], key: Callable[[ValidationRow], str]) -> dict[str, dict[str, float]]:
    """Per ``key`` (a model, a GPU): runs, mean |error|, max |error|, mean signed error, runs inside their
    p10-p90 interval."""
    out: dict[str, dict[str, float]] = {}
    for name in sorted({key(r) for r in rows}):
        mine = [r for r in rows if key(r) == name]
        errors = [_error(r) for r in mine]
        out[name] = {"runs": len(mine), "mean_abs": statistics.fmean(abs(e) for e in errors),
                     "max_abs": max(abs(e) for e in errors), "mean": statistics.fmean(errors),
                     "inside": sum(_inside(r) == "yes" for r in mine)}
    return out


def _summary_lines(title: str, table: dict[str, dict[str, float]]) -> list[str]:
    lines = [f"| {title} | runs | mean abs error | max abs error | mean signed | inside p10-p90 |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, s in table.items():
        lines.append(f"| {name} | {s['runs']:.0f} | **{s['mean_abs'] * 100:.1f}%** | {s['max_abs'] * 100:.1f}% | "
                     f"{s['mean'] * 100:+.1f}% | {s['inside']:.0f} of {s['runs']:.0f} |")
    return lines


def _run_lines(rows: Sequence[ValidationRow], runs: dict[str, MeasuredRun], inside: bool = True,
               extra: tuple[str, Callable[[ValidationRow, MeasuredRun], float]] | None = None) -> list[str]:
    """One table row per run: its GPU, plan, prediction, measurement, error, whether inside its p10-p90 (``inside``)
    and an ``extra`` column (title, the error it shows)."""
    head = ["run", "GPU", "plan", "predicted", "measured", "error"] + ["inside p10-p90"] * inside + (
        [extra[0]] if extra else [])
    align = ["---"] * 3 + ["---:"] * 3 + ["---"] * inside + ["---:"] * bool(extra)
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    for r in rows:
        run = runs[r.run_id]
        assert r.predicted_tokens_per_s_per_gpu is not None
        cells = [r.run_id, run.gpu, _plan(run), f"{r.predicted_tokens_per_s_per_gpu:.0f}",
                 f"{r.measured_tokens_per_s_per_gpu:.0f}", f"{_error(r) * 100:+.1f}%"]
        cells += [_inside(r)] * inside + ([f"{extra[1](r, run) * 100:+.1f}%"] if extra else [])
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _predicted(path: Path) -> tuple[dict[str, MeasuredRun], list[ValidationRow]]:
    runs = {r.id: r for r in load_runs(path)}
    return runs, [r for r in heldout_rows(path) if r.predicted_tokens_per_s_per_gpu is not None]


def heldout_markdown(path: Path = HELDOUT_MODELS) -> list[str]:
    """The held-out models' section of ``docs/transfer.md``: per model the summary, each run's error and p10-p90
    interval, and the same-plan chip ratios."""
    runs, rows = _predicted(path)
    lines = ["## Models the fit never saw (held out)", "",
             f"`{path.relative_to(path.parents[2])}`: Megatron-Bridge's runs of two models no fitted run uses, each "
             "with its container's published preset (sources in the file): GPT-OSS-120B in BF16 on 64 GPUs of five "
             "systems in three containers, Kimi-K2 in MXFP8 on 256 GB300 in three. Predicted with the shipped joint "
             "calibration; no parameter was refitted and no run of these models was looked at while fitting. A plan "
             "on a model no run measured is placed beyond the validated envelope (its interval widened).", "",
             *_summary_lines("model", summary(rows, lambda r: r.model)), "", *_run_lines(rows, runs),
             "", "GPT-OSS-120B, same plan on two chips (per-GPU throughput ratio, predicted against measured):", "",
             "| container | pair | predicted | measured | error |", "|---|---|---:|---:|---:|"]
    lines += _pair_lines(rows, runs)
    return lines + [""]


def heldout_runs_markdown(path: Path = HELDOUT_RUNS) -> list[str]:
    """The held-out table rows' section of ``docs/transfer.md``: the summary by model and by GPU, each run."""
    runs, rows = _predicted(path)
    every = summary(rows, lambda r: "all")["all"]
    return ["## Other table rows of the fitted models (held out)", "",
            f"`{path.relative_to(path.parents[2])}`: the rows of Megatron-Bridge's performance tables (26.02 to "
            "26.04.01 containers) for DeepSeek-V3, Qwen3-235B and Qwen3-30B that the dataset does not hold, each "
            "with its container's published preset (sources in the file). No fit reads them; their models, "
            "releases and systems are fitted, so they say how well the calibration carries to the plans, GPUs "
            "and containers next to its runs.", "",
            f"{every['runs']:.0f} runs: mean |error| **{every['mean_abs'] * 100:.1f}%**, max "
            f"**{every['max_abs'] * 100:.1f}%**, mean signed {every['mean'] * 100:+.1f}%, inside p10-p90 "
            f"{every['inside']:.0f} of {every['runs']:.0f}.", "",
            *_summary_lines("model", summary(rows, lambda r: r.model)), "",
            *_summary_lines("GPU", summary(rows, lambda r: r.gpu)), "", *_run_lines(rows, runs), ""]


def _with_boundary_error(row: ValidationRow, run: MeasuredRun, fixed_s: float) -> float:
    """``row``'s error had its step paid ``fixed_s`` more (the fitted step boundary added back)."""
    tokens = row.predicted_tokens_per_s_per_gpu
    assert tokens is not None
    step = resolve_run(run)[2].tokens_per_step / run.gpus / tokens
    return tokens * step / (step + fixed_s) / row.measured_tokens_per_s_per_gpu - 1


def _charged_boundary(run: MeasuredRun) -> float:
    """Seconds of Megatron's step boundary the shipped model charges ``run``'s step (0 for a one-microbatch step)."""
    from studies._sim import step_boundary_seconds

    return step_boundary_seconds(profile_for(run.stack, run.release), resolve_run(run)[2])


def boundary_pair(path: Path = HELDOUT_RECENT) -> tuple[str, str, float, float] | None:
    """Two runs of ``path`` with one plan and container but their global batch (so their microbatch count): (run,
    run, seconds per microbatch, intercept). A step of m microbatches takes slope x m + intercept, so the intercept
    bounds what a step spends once (its boundary, with the pipeline's fill and drain), whatever the model says."""
    runs = load_runs(path)
    for i, a in enumerate(runs):
        for b in runs[i + 1:]:
            same = {k: v for k, v in a.plan.items() if k != "global_batch"} == {
                k: v for k, v in b.plan.items() if k != "global_batch"}
            if not (same and a.model == b.model and a.gpu == b.gpu and a.gpus == b.gpus and a.release == b.release
                    and a.plan.get("global_batch") != b.plan.get("global_batch")):
                continue
            steps = []
            for r in (a, b):
                plan = resolve_run(r)[2]
                m = plan.n_microbatches
                steps.append((m, plan.global_batch * plan.seq_len / r.gpus / r.measured_tokens_per_s_per_gpu))
            (m1, s1), (m2, s2) = sorted(steps)
            slope = (s2 - s1) / (m2 - m1)
            return a.id, b.id, slope, s1 - slope * m1
    return None


def _same_plan_chip_lines(rows: Sequence[ValidationRow], runs: dict[str, MeasuredRun]) -> list[str]:
    """Runs of one model, container, GPU count and plan on two chips (a rack part over its HGX part, an Ultra part over
    its predecessor): the per-GPU ratio, predicted against measured."""
    by_key = {(runs[r.run_id].model, runs[r.run_id].release, runs[r.run_id].gpus,
               tuple(sorted(runs[r.run_id].plan.items())), runs[r.run_id].gpu): r for r in rows}
    out = []
    for (model, release, gpus, plan, gpu), a in sorted(by_key.items()):
        for base in CHIP_PAIRS.get(gpu, ()):
            b = by_key.get((model, release, gpus, plan, base))
            if b is not None:
                break
        else:
            continue
        predicted, measured = a.ratio_over(b)
        out.append(f"| {model} | {release} | {gpu} / {base} | {_plan(runs[a.run_id])} | {predicted:.3f}x | "
                   f"{measured:.3f}x | {(predicted / measured - 1) * 100:+.1f}% |")
    if not out:
        return []
    return ["", "Same plan on two chips (per-GPU ratio):", "",
            "| model | container | pair | plan | predicted | measured | error |", "|---|---|---|---|---:|---:|---:|",
            *out]


def recent_releases_markdown(path: Path = HELDOUT_RECENT) -> list[str]:
    """The newest containers' section of ``docs/transfer.md`` (:func:`container_rows_markdown`)."""
    intro = ("every pre-training row of Megatron-Bridge's performance tables for the catalog's MoE models in the "
             "26.06, 26.06.01 and 26.08 containers, each with its container's preset (sources in the file). These "
             "containers are newer than every fitted run; moesim predicts them with its newest Megatron-Bridge profile "
             "(`megatron-26.04`, `sim.stacks.profile_for`) and the shipped calibration, as a user would. Their presets "
             "changed on the NVL72 racks: full-iteration CUDA graphs (the optimizer outside the graph) with padded "
             "experts and paged stash, the combined 1F1B all-to-all overlap, the cuteDSL fused grouped MLP (modelled: "
             "`fused_grouped_mlp` in the plans of the rows whose preset sets it), FP8 attention.")
    return container_rows_markdown(path, "Megatron-Bridge's newest containers, 26.06 to 26.08 (held out)", intro)


def early_release_markdown(path: Path = HELDOUT_EARLY) -> list[str]:
    """The 25.11 container's section of ``docs/transfer.md`` (:func:`container_rows_markdown`)."""
    intro = ("every pre-training row of Megatron-Bridge's performance tables for the catalog's MoE models in the 25.11 "
             "container (sources in the file). It is older than every fitted run; moesim predicts it with its oldest "
             "Megatron-Bridge profile (`megatron-26.02`, `sim.stacks.profile_for`) and the shipped calibration. A weaker "
             "check than the newer containers: 13 of its 17 rows print plans the container's own presets (v0.2.0) do not "
             "produce, so their other settings are the presets' (each row's notes).")
    return container_rows_markdown(path, "Megatron-Bridge's 25.11 container (held out)", intro)


def container_rows_markdown(path: Path, title: str, intro: str) -> list[str]:
    """A section of ``docs/transfer.md`` for one file of Megatron-Bridge table rows of containers no fit read: the
    summary by model, GPU and container, each run with its error and, beside it, its error were the step boundary the
    model charges left out; the same-plan chip pairs; and a pair of runs that measures a recipe's boundary without the
    model, where the file has one."""
    runs, rows = _predicted(path)
    every = summary(rows, lambda r: "all")["all"]
    fixed = shipped_values()["step.fixed_s"]
    lines = [f"## {title}", "", f"`{path.relative_to(path.parents[2])}`: {intro}", "",
             f"{every['runs']:.0f} runs: mean |error| **{every['mean_abs'] * 100:.1f}%**, max "
             f"**{every['max_abs'] * 100:.1f}%**, mean signed {every['mean'] * 100:+.1f}%, inside p10-p90 "
             f"{every['inside']:.0f} of {every['runs']:.0f}.", "",
             *_summary_lines("model", summary(rows, lambda r: r.model)), "",
             *_summary_lines("GPU", summary(rows, lambda r: r.gpu)), "",
             *_summary_lines("container", summary(rows, lambda r: runs[r.run_id].release)), "",
             "The last column leaves out the step boundary the model charges each accumulating step (the fitted "
             f"`step.fixed_s`, {fixed:.2f} s): where the two columns bracket the measurement, the recipe's boundary "
             "lies between 0 and the fitted one.", "",
             *_run_lines(rows, runs, extra=("without the boundary",
                                            lambda r, run: _with_boundary_error(r, run, -_charged_boundary(run))))]
    lines += _same_plan_chip_lines(rows, runs)
    pair = boundary_pair(path)
    if pair is not None:
        a, b, slope, intercept = pair
        lines += ["", f"One recipe at two global batches, measured only ({a}, {b}): a step takes "
                  f"{slope:.3f} s a microbatch plus **{intercept:.2f} s** once, its pipeline's fill and drain "
                  f"included, where the model charges {fixed:.2f} s."]
    return lines + [""]


#: Every file whose Megatron runs accumulate microbatches: the fitted dataset (None), then the held-out ones.
BOUNDARY_FILES: tuple[Path | None, ...] = (None, HELDOUT_RUNS, HELDOUT_MODELS, HELDOUT_RECENT, HELDOUT_EARLY,
                                           Path(__file__).resolve().parent / "data" / "scale_checks.toml")


def boundary_gaps() -> list[tuple[str, str, bool, float]]:
    """Per Megatron run that accumulates microbatches, in the fitted dataset and every held-out file: (run, launch
    mode, recomputes something, seconds its measured step exceeds its predicted step without the step boundary).
    The gap is what the boundary would have to be for the run to come out exact; it carries the rest of the model's
    error too (in-sample for the fitted runs)."""
    from sim.joint import launch_mode
    from sim.stacks import load_stack

    out = []
    for path in BOUNDARY_FILES:
        runs = {r.id: r for r in load_runs(path)}
        for row in validate_runs(path).rows:
            run = runs[row.run_id]
            if run.stack != "megatron" or row.predicted_tokens_per_s_per_gpu is None:
                continue
            charged = _charged_boundary(run)
            if not charged:
                continue
            plan = resolve_run(run)[2]
            tokens = plan.tokens_per_step / run.gpus
            gap = tokens / row.measured_tokens_per_s_per_gpu - (tokens / row.predicted_tokens_per_s_per_gpu - charged)
            launch = launch_mode(load_stack(profile_for(run.stack, run.release)), plan)
            out.append((run.id, launch, plan.ac != "none", gap))
    return out


def boundary_gaps_markdown() -> list[str]:
    """The step boundary's evidence by launch mode and recompute, for ``docs/transfer.md``."""
    gaps = boundary_gaps()
    fixed = shipped_values()["step.fixed_s"]
    lines = ["## What Megatron's accumulating steps spend beyond the model, by launch mode", "",
             "Every Megatron run that accumulates microbatches (fitted, in sample, and held out): its measured step less "
             "its predicted step without the step boundary, the boundary it would need to come out exact (the rest of "
             f"the model's error rides along). The model charges every one of them the fitted `step.fixed_s`, "
             f"{fixed:.2f} s. Under full-iteration CUDA graphs the steps that recompute nothing spend about half of it "
             "(every one of those recipes also runs TE's fused grouped MLP, modelled: `fused_grouped_mlp`); those "
             "that recompute a module spend what eager and partial-graph steps do. No mechanism is identified "
             "(`boundary_gaps` in `studies/heldout.py`); the launch mode is one of the axes of an interval's distance "
             "from the evidence.", "",
             "| launch mode | recompute | runs | median | range |", "|---|---|---:|---:|---|"]
    keys = sorted({(launch, rc) for _, launch, rc, _ in gaps})
    for launch, rc in keys:
        mine = sorted(g for _, lm, r, g in gaps if (lm, r) == (launch, rc))
        lines.append(f"| {launch} | {'yes' if rc else 'no'} | {len(mine)} | {statistics.median(mine):+.2f} s | "
                     f"{mine[0]:+.2f} to {mine[-1]:+.2f} s |")
    return lines + [""]


def torchtitan_markdown(path: Path = HELDOUT_TORCHTITAN) -> list[str]:
    """The held-out TorchTitan section of ``docs/transfer.md``: each short-step run as the shipped model predicts it
    (a step of one microbatch pays no step boundary, ``StackProfile.step_boundary_s``) and, beside it, with the
    fitted ``step.fixed_s`` charged anyway (what TorchTitan's accumulating steps pay; what the model once charged every
    step)."""
    runs, rows = _predicted(path)
    fixed = shipped_values()["step.fixed_s"]
    lines = ["## TorchTitan's short steps (held out)", "",
             f"`{path.relative_to(path.parents[2])}`: DeepSeek-V3 16B on one node from TorchTitan's own tracker, "
             "about a second a step (sources in the file). No fit reads them. Each step is one microbatch (no "
             "pipeline, no gradient accumulation), so it pays none of the fitted step boundary (`step.fixed_s`, "
             f"{fixed:.2f} s), which TorchTitan's accumulating steps pay as Megatron-Bridge's do "
             "(`joint_step_boundary`; `StackProfile.step_boundary_s`): these steps leave no room for it, as the "
             "last column, which charges it anyway, shows.", "",
             *_run_lines(rows, runs, inside=False,
                         extra=("with step.fixed_s charged", lambda r, run: _with_boundary_error(r, run, fixed)))]
    return lines + [""]


def _signed_or_dash(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:+.1f}%"


def collapsed_router_error(run: MeasuredRun) -> float | None:
    """``run``'s error (predicted / measured - 1) with its router collapsed onto the first EP rank's experts
    (``routing = "collapse:<experts per rank>"``) within the plan's token capacities: the most any router skew can
    slow the step as the recipe runs it (a capacity or a receive budget caps it). None at ``ep`` 1 (one rank holds
    every expert: no skew moves work between ranks)."""
    model, cluster, plan = resolve_run(run)
    if plan.ep == 1:
        return None
    per_rank = model.n_routed_experts // plan.ep
    collapsed = replace(plan, routing=f"collapse:{max(per_rank, model.top_k)}")
    pred = predict_run(model, cluster, collapsed, profile_for(run.stack, run.release))
    return pred.tokens_per_s_per_gpu / run.measured_tokens_per_s_per_gpu - 1.0


def mlperf_gpt_oss_markdown(path: Path = MLPERF_GPT_OSS) -> list[str]:
    """The MLPerf GPT-OSS-20B section of ``docs/transfer.md``: the summary by GPU, each recipe cell predicted as the
    shipped model does (one microbatch a step: no step boundary, :meth:`sim.stacks.StackProfile.step_boundary_s`)
    and, beside it, with the fitted ``step.fixed_s`` added back (what the model did before)."""
    runs, rows = _predicted(path)
    every = summary(rows, lambda r: "all")["all"]
    fixed = shipped_values()["step.fixed_s"]
    lines = ["## MLPerf Training v6.0 GPT-OSS-20B, every submitter (held out)", "",
             f"`{path.relative_to(path.parents[2])}`: the `gpt_oss_20b` benchmark (NVIDIA's NeMo recipe: MXFP8, "
             "full-iteration CUDA graphs, HybridEP with 128 SMs, attention recomputed, the distributed optimizer) on "
             "GB300, GB200, B300, B200 and H100 (FP8, DeepEP), 8 to 512 GPUs, one run per recipe cell: where several "
             "organisations submitted a cell, its median (their spread: 1.3-3.4% of it; sources in the file). No fit reads "
             "them. Every step takes one microbatch (0.09-0.57 s): Megatron's fitted step boundary "
             f"(`step.fixed_s`, {fixed:.2f} s), measured only on steps that accumulate 8-512 microbatches, leaves no "
             "room in them, so it is charged only to accumulating steps (`StackProfile.step_boundary_s`); these runs "
             "set that rule, so they check the rest of the model, not the rule. The last column adds the boundary "
             "back. Context parallelism's exchange is the recipe's (`cp_comm_type` a2a: all-to-alls around the "
             "attention core); the recipe's BF16 gradient reduction and 768M-parameter buckets are the plans' "
             "(`grad_reduce_dtype`, `ddp_bucket_params`), and so are its token capacities where a config read sets "
             "one that can bind (`expert_capacity_factor` 1.25 on H100, dropping past it; the 512-GB300 cell's "
             "`ep_rank_capacity_factor` 7; the EP4 cells' budget of 5 cannot bind: a rank receives at most 4 shares). "
             "Not modelled: the router's skew: the recipe routes for real (no forced balance, no auxiliary loss), the "
             "plans balanced, and where experts sit on several ranks (ep > 1) the busiest one sets the pace: those "
             "cells come out fast, the one-rank cells do not. The column \"router collapsed\" bounds it: each ep > 1 "
             "cell with its router collapsed onto one rank's experts (`--routing collapse:<experts per rank>`), as "
             "far as its capacities let a rank fill: the slowest any skew can make it. Where that stays fast, no "
             "router skew the recipe allows explains the gap.", "",
             f"{every['runs']:.0f} cells: mean |error| **{every['mean_abs'] * 100:.1f}%**, max "
             f"**{every['max_abs'] * 100:.1f}%**, mean signed {every['mean'] * 100:+.1f}%, inside p10-p90 "
             f"{every['inside']:.0f} of {every['runs']:.0f}.", "",
             *_summary_lines("GPU", summary(rows, lambda r: r.gpu)), "",
             "| cell | GPU | GPUs | plan | predicted | measured | error | inside p10-p90 | with step.fixed_s | "
             "router collapsed |",
             "|---|---|---:|---|---:|---:|---:|---|---:|---:|"]
    for r in rows:
        run = runs[r.run_id]
        assert r.predicted_tokens_per_s_per_gpu is not None
        p = run.plan
        plan = (f"TP{p.get('tp', 1)} CP{p.get('cp', 1)} EP{p.get('ep', 1)} MBS{p.get('micro_batch', 1)}, "
                f"{p.get('precision', 'bf16')}, {p.get('ep_backend', 'nccl')}")
        lines.append(f"| {r.run_id.removeprefix('mlperf-v6.0-gpt-oss-20b-')} | {run.gpu} | {run.gpus} | {plan} | "
                     f"{r.predicted_tokens_per_s_per_gpu:.0f} | {r.measured_tokens_per_s_per_gpu:.0f} | "
                     f"{_error(r) * 100:+.1f}% | {_inside(r)} | {_with_boundary_error(r, run, fixed) * 100:+.1f}% | "
                     f"{_signed_or_dash(collapsed_router_error(run))} |")
    lines += _same_plan_chip_lines(rows, runs)
    return lines + [""]


def ladder_rungs(path: Path = HELDOUT_TORCHTITAN) -> list[tuple[ValidationRow, MeasuredRun, str]]:
    """Each held-out run that names a ``baseline`` (a rung of a one-machine ladder) with its run and the plan change
    from that baseline, in file order."""
    runs, rows = _predicted(path)
    def change(run: MeasuredRun, baseline: MeasuredRun) -> str:
        return ", ".join(f"{k}: {old} -> {new}" for k, old, new in plan_changes(baseline, run)) or "none in the plan"

    return [(r, runs[r.run_id], change(runs[r.run_id], runs[r.baseline])) for r in rows
            if r.baseline is not None and r.measured_speedup is not None and r.predicted_speedup is not None]


def ladder_markdown(path: Path = HELDOUT_TORCHTITAN) -> list[str]:
    """The ladder section of ``docs/transfer.md``: each rung's measured and predicted throughput ratio over the rung
    before it (one machine, one change at a time), the check of what one change does that no fit reads."""
    lines = ["## One machine, one change at a time (held out)", "",
             f"`{path.relative_to(path.parents[2])}`: TorchTitan PR #1993's ladder, DeepSeek-V3 16B on the same "
             "8 B200, each rung one change from the one before (MFU given to about half a point: each ratio is good "
             "to about 4%). No fit reads them. The compile rung is priced in part: eager TorchTitan's host issues each op "
             "in series with the GPU after its blocking syncs (`StackProfile.host_serial_syncs`); torch.compile's "
             "fusion of the eager elementwise kernels is not modelled.", "",
             "| rung | change | measured ratio | predicted ratio | ratio error |", "|---|---|---:|---:|---:|"]
    for r, _run, change in ladder_rungs(path):
        assert r.measured_speedup is not None and r.predicted_speedup is not None
        lines.append(f"| {r.run_id} | {change} | {r.measured_speedup:.3f} | {r.predicted_speedup:.3f} | "
                     f"{(r.predicted_speedup / r.measured_speedup - 1) * 100:+.1f}% |")
    return lines + [""]


def efa_markdown(path: Path = EFA_RUNS) -> list[str]:
    """The EFA section of ``docs/transfer.md``: the summary by backend and by microbatch size, each run, and each
    backend's throughput over NCCL's at the same plan, predicted against measured."""
    runs, rows = _predicted(path)
    every = summary(rows, lambda r: "all")["all"]

    def backend(r: ValidationRow) -> str:
        return str(runs[r.run_id].plan.get("ep_backend", "nccl"))

    lines = ["## A fabric and backends the fit never saw: AWS EFA (held out)", "",
             f"`{path.relative_to(path.parents[2])}`: AWS EFA, Megatron-Bridge 26.04.01 (awslabs/awsome-distributed-ai): "
             "Qwen3-235B on 32 B300 (p6-b300, 800 Gb/s EFA per GPU) with TP8 and full recompute, EP16 and EP32, "
             "microbatch 4 and 1, each with NCCL's all-to-all, DeepEP over NVSHMEM's libfabric proxy and UCCL-EP "
             "(measured-runs.md s7); DeepSeek-V3 on 256 B300 (TP8 PP8 EP32), NCCL against UCCL-EP at microbatch 1 "
             "and 4 with full recompute, and at microbatch 4 with the all-to-all overlap; Kimi-K2 (384 experts) on "
             "256 B300 with the same layout and the three backends at those three cells; Qwen3-30B on 64 H100 "
             "(p5, 400 Gb/s EFA per GPU) with TP8, the three backends at EP16 and EP32, microbatch 4 and 1, overlap "
             "off and on (sources in the file). No "
             "fit reads them: EFA's costs are sourced only (`sim/comm/transport.py`: NCCL's all-to-all rate and "
             "per-call cost from nccl-tests on p5, the CPU proxy's hop and RDMA share of a normal kernel fitted to "
             "UCCL-EP's own p6-b200 benchmark by `calibrate.proxy_fit`, within 8% of its six kernel times). What the "
             "DeepEP-API rows lack is not their kernels as benchmarked. Qwen3-30B at EP32 and microbatch 4 on p5 makes "
             "1,536 dispatches and combines a step; NVSHMEM's step takes 8.0 s more than NCCL's and UCCL-EP's 17.3 s "
             "more: were it all in the kernels, 6.7 and 12.8 ms a kernel, where the benchmark-fitted kernel takes "
             "1.0 ms (NCCL's 1.5 ms), and AWS's own EP benchmark on p5 runs such kernels at most 2.3x slower than the "
             "model does (`python -m calibrate.proxy_fit`). Where the layer passes are host-bound in the model "
             "(eager Megatron on these hosts: the microbatch-1 rows) a longer kernel hides under the host's issue "
             "(`host_issue`), unless the blocking syncs before each dispatch put host and GPU in series; that "
             "serialization is not modelled.",
             "",
             f"{every['runs']:.0f} runs: mean |error| **{every['mean_abs'] * 100:.1f}%**, max "
             f"**{every['max_abs'] * 100:.1f}%**, mean signed {every['mean'] * 100:+.1f}%.", "",
             *_summary_lines("model", summary(rows, lambda r: r.model)), "",
             *_summary_lines("backend", summary(rows, backend)), "",
             *_summary_lines("microbatch", summary(rows, lambda r: f"MBS {runs[r.run_id].plan.get('micro_batch', 1)}")),
             "", *_run_lines(rows, runs), "",
             "Each backend over NCCL at the same plan (per-GPU throughput ratio):", "",
             "| plan | backend | predicted | measured | error |", "|---|---|---:|---:|---:|"]
    by_plan = {(_plan_key(runs[r.run_id]), backend(r)): r for r in rows}
    for (plan, name), r in sorted(by_plan.items()):
        base = by_plan.get((plan, "nccl"))
        if name == "nccl" or base is None:
            continue
        assert r.predicted_tokens_per_s_per_gpu is not None and base.predicted_tokens_per_s_per_gpu is not None
        predicted = r.predicted_tokens_per_s_per_gpu / base.predicted_tokens_per_s_per_gpu
        measured = r.measured_tokens_per_s_per_gpu / base.measured_tokens_per_s_per_gpu
        lines.append(f"| {plan} | {name} | {predicted:.3f}x | {measured:.3f}x | {(predicted / measured - 1) * 100:+.1f}% |")
    return lines + [""]


def _plan_key(run: MeasuredRun) -> str:
    """A run's model and plan without its backend: the runs a backend is compared at."""
    return f"{run.model} {_plan(run, backend=False)}"


def _pair_lines(rows: Sequence[ValidationRow], runs: dict[str, MeasuredRun]) -> list[str]:
    by_key = {(runs[r.run_id].release, runs[r.run_id].gpu): r for r in rows if r.model == PAIRS_MODEL}
    out = []
    for release in sorted({k[0] for k in by_key}):
        for gpu, base in SAME_PLAN_PAIRS:
            a, b = by_key.get((release, gpu)), by_key.get((release, base))
            if a is None or b is None:
                continue
            predicted, measured = a.ratio_over(b)
            out.append(f"| {release} | {gpu} / {base} | {predicted:.3f}x | {measured:.3f}x | "
                       f"{(predicted / measured - 1) * 100:+.1f}% |")
    return out
