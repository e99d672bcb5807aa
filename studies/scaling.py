"""Weak-to-strong scaling at a fixed global batch: DeepSeek-V3 671B tokens/s per GPU from 256 to 8,192 GPUs
on GB200 NVL72 racks and on HGX B200 nodes (``docs/scaling.md``).

The global batch is held at :data:`GLOBAL_BATCH` sequences of 4,096 tokens, so as GPUs are added the data-
parallel degree grows and each pipeline rank runs fewer microbatches: the pipeline bubble's share grows,
the per-step ZeRO-1 gather and gradient reduce-scatter run over more ranks and more switch layers, and
nothing is refitted. Each system keeps the parallel plan of its Megatron-Bridge 26.04 recipe (GB200: PP4
VP4 EP64 HybridEP over the rack; B200: PP16 EP8 HybridEP in the node) with the ``megatron-26.04`` stack.
The data-parallel work at scale is :mod:`sim.predict.dp_scale`'s (exposed ZeRO-1 buckets, once-per-step
reductions, stragglers) and the step boundary's fixed seconds, under the shipped joint calibration
(:mod:`sim.joint`). The doc ends with the two measured scale points, MLPerf Training v6.0 DeepSeek-V3 on 512 and
2,048 GB200s (:data:`MLPERF_RUNS`), predicted as the validation predicts them and split into those mechanisms,
and with NVIDIA's other MLPerf results as held-out runs (:data:`SCALE_CHECKS`: the GB200 recipe at 4,096 and
8,192 GPUs, the GB300 recipe at 256 and 512; not in the dataset, never fitted).

    python -m studies.scaling            # print the table
    python -m studies.scaling --write    # rewrite docs/scaling.md (tests/studies/test_scaling.py fails on drift)
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sim.catalog import load_cluster, load_model
from sim.predict import predict
from sim.specs import ParallelPlan
from sim.stacks import profile_for
from studies._sim import predict_run
from studies.dataset import MeasuredRun, load_runs, resolve_run

__all__ = ["GLOBAL_BATCH", "GPU_COUNTS", "SYSTEMS", "ScalePoint", "scaling_points", "MLPERF_RUNS", "MeasuredPoint", "submitted_by",
           "mlperf_points", "heldout_points", "SCALE_CHECKS", "scaling_markdown", "DOC", "DP_COMM_KEYS",
           "AFTER_PIPELINE_KEYS"]

DOC = Path(__file__).resolve().parents[1] / "docs" / "scaling.md"
#: Sequences per step at every size (16,384 x 4,096 = 67M tokens; 8 microbatches per rank at 8,192 GB200s).
GLOBAL_BATCH = 16384
GPU_COUNTS = (256, 512, 1024, 2048, 4096, 8192)
STACK = "megatron-26.04"

#: system name -> (cluster template, plan fields of its Megatron-Bridge 26.04 DeepSeek-V3 recipe).
SYSTEMS: dict[str, tuple[str, dict[str, object]]] = {
    "GB200 NVL72": ("gb200-nvl72", {"pp": 4, "vpp": 4, "pp_schedule": "interleaved-1f1b", "ep": 64,
                                    "ac": "selective", "recompute_modules": "mlp"}),
    "HGX B200": ("hgx-b200", {"pp": 16, "ep": 8, "ac": "selective", "recompute_modules": "mla_up_proj"}),
}


#: Breakdown keys counted as data-parallel communication: the ZeRO-1 buckets left exposed and the once-per-step
#: reductions (:mod:`sim.predict.dp_scale`), and the per-layer FSDP / DDP collectives of other stacks.
DP_COMM_KEYS = ("comm.dp_exposed", "comm.dp_once", "comm.dp", "comm.fsdp")
#: Breakdown keys that run after the pipeline (the step ends once the pipeline is done and these are).
AFTER_PIPELINE_KEYS = ("comm.dp_exposed", "comm.dp_once", "straggler", "optimizer", "step_fixed")
#: The measured scale points of studies/data/measured_runs.toml: the same MLPerf recipe at two sizes.
MLPERF_RUNS = ("mlperf-v6.0-dsv3-512xgb200", "mlperf-v6.0-dsv3-2048xgb200")
#: Held-out MLPerf runs (the dataset's schema; not in the dataset, never fitted): GB200 at 4,096 and 8,192, GB300.
SCALE_CHECKS = Path(__file__).resolve().parent / "data" / "scale_checks.toml"


@dataclass(frozen=True)
class ScalePoint:
    """One predicted size of one system; ``*_s`` are seconds per step of the predicted breakdown."""

    system: str
    gpus: int
    microbatches: int
    tokens_per_s_per_gpu: float
    step_s: float
    bubble_s: float
    dp_comm_s: float
    straggler_s: float
    after_pipeline_s: float

    @property
    def bubble_share(self) -> float:
        """Pipeline bubble over the whole step."""
        return self.bubble_s / self.step_s

    @property
    def dp_comm_share(self) -> float:
        """Exposed data-parallel communication (:data:`DP_COMM_KEYS`) over the whole step."""
        return self.dp_comm_s / self.step_s

    @property
    def straggler_share(self) -> float:
        """Waiting for the slowest data-parallel rank, over the whole step."""
        return self.straggler_s / self.step_s

    @property
    def pipeline_bubble_share(self) -> float:
        """Pipeline bubble over the pipeline phase alone (the step less :data:`AFTER_PIPELINE_KEYS`)."""
        return self.bubble_s / (self.step_s - self.after_pipeline_s)


@dataclass(frozen=True)
class MeasuredPoint:
    """One measured run predicted as the validation predicts it, with its mechanisms' seconds per step."""

    run_id: str
    gpus: int
    microbatches: int
    predicted_tokens_per_s_per_gpu: float
    measured_tokens_per_s_per_gpu: float
    step_s: float
    bubble_s: float
    dp_exposed_s: float
    dp_once_s: float
    straggler_s: float
    fixed_s: float = 0.0

    @property
    def error(self) -> float:
        """Signed relative error of the prediction, (predicted - measured) / measured."""
        return self.predicted_tokens_per_s_per_gpu / self.measured_tokens_per_s_per_gpu - 1.0

    @property
    def measured_step_s(self) -> float:
        """The measured step: the predicted step scaled by predicted over measured throughput."""
        return self.step_s * self.predicted_tokens_per_s_per_gpu / self.measured_tokens_per_s_per_gpu


def submitted_by(points: Sequence[MeasuredPoint], submitter: str) -> list[MeasuredPoint]:
    """The points another company submitted (run ids ending in ``-<submitter>``), smallest GPU count first."""
    return sorted((p for p in points if p.run_id.endswith(f"-{submitter}")), key=lambda p: p.gpus)


def scaling_points() -> list[ScalePoint]:
    """Every (system, GPU count) prediction, in table order."""
    model = load_model("deepseek-v3-671b")
    out: list[ScalePoint] = []
    for system, (template, fields) in SYSTEMS.items():
        for n in GPU_COUNTS:
            cluster = load_cluster(template, n_gpus=n)
            pp = int(str(fields["pp"]))
            plan = ParallelPlan(tp=1, dp_shard=n // pp, seq_len=4096, micro_batch=1, global_batch=GLOBAL_BATCH,
                                precision="mxfp8", ep_backend="hybridep", deepep_sms=32, **fields)  # type: ignore[arg-type]
            pred = predict(model, cluster, plan, stack=STACK)
            parts = pred.breakdown
            step = pred.step_time_s
            out.append(ScalePoint(system, n, plan.n_microbatches, pred.tokens_per_s_per_gpu, step,
                                  parts.get("pipeline_bubble", 0.0), sum(parts.get(k, 0.0) for k in DP_COMM_KEYS),
                                  parts.get("straggler", 0.0), sum(parts.get(k, 0.0) for k in AFTER_PIPELINE_KEYS)))
    return out


def mlperf_points(run_ids: Sequence[str] = MLPERF_RUNS) -> list[MeasuredPoint]:
    """The measured runs ``run_ids`` of the shipped dataset, predicted under their release's stack profile."""
    runs = {r.id: r for r in load_runs()}
    missing = [i for i in run_ids if i not in runs]
    if missing:
        raise KeyError(f"studies/data/measured_runs.toml has no run(s) {', '.join(missing)}")
    return [_measured_point(runs[run_id]) for run_id in run_ids]


def _measured_point(run: MeasuredRun) -> MeasuredPoint:
    """``run`` predicted under its release's stack profile and the shipped joint calibration."""
    model, cluster, plan = resolve_run(run)
    pred = predict_run(model, cluster, plan, profile_for(run.stack, run.release), name=run.id)
    parts = pred.breakdown
    return MeasuredPoint(run.id, run.gpus, plan.n_microbatches, pred.tokens_per_s_per_gpu,
                         run.measured_tokens_per_s_per_gpu, pred.step_time_s,
                         parts.get("pipeline_bubble", 0.0), parts.get("comm.dp_exposed", 0.0),
                         parts.get("comm.dp_once", 0.0), parts.get("straggler", 0.0), parts.get("step_fixed", 0.0))


def heldout_points(path: Path = SCALE_CHECKS) -> list[MeasuredPoint]:
    """The held-out runs at ``path`` (the dataset's schema; no fit reads them), predicted as
    :func:`mlperf_points` predicts the dataset's runs."""
    return [_measured_point(run) for run in load_runs(path)]


def _mlperf_markdown(points: Sequence[MeasuredPoint]) -> list[str]:
    """The measured-scale-points section: per run, then the large/small per-GPU ratio and each mechanism."""
    lines = ["## Measured scale points: MLPerf Training v6.0 (GB200 NVL72)", "",
             "NVIDIA's MLPerf Training v6.0 DeepSeek-V3 submissions run one recipe (TP2 PP4 VP4 EP32, MXFP8, "
             "HybridEP, full-iteration CUDA graphs, 15,360 sequences of 4,096 tokens per step) at two sizes "
             "(`studies/data/measured_runs.toml`). Each is predicted as `moesim validate` predicts it: the "
             "run's plan under its release's stack profile and the shipped joint calibration.", "",
             "| run | GPUs | microbatches per rank | predicted step s | predicted tok/s/GPU | "
             "measured tok/s/GPU | error |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for p in points:
        lines.append(f"| `{p.run_id}` | {p.gpus:,} | {p.microbatches} | {p.step_s:.2f} | "
                     f"{p.predicted_tokens_per_s_per_gpu:.0f} | {p.measured_tokens_per_s_per_gpu:.0f} | "
                     f"{p.error * 100:+.1f}% |")
    lines.append("")
    if len(points) < 2:
        return lines
    small, large = points[0], points[-1]
    pred_ratio = large.predicted_tokens_per_s_per_gpu / small.predicted_tokens_per_s_per_gpu
    meas_ratio = large.measured_tokens_per_s_per_gpu / small.measured_tokens_per_s_per_gpu
    lines += [f"Per GPU, {large.gpus:,} GPUs keep {meas_ratio:.3f} of the {small.gpus:,}-GPU throughput measured "
              f"and {pred_ratio:.3f} predicted: the simulator accounts for "
              f"{(1 - pred_ratio) / (1 - meas_ratio) * 100:.0f}% of the measured per-GPU loss.", "",
              f"| mechanism (seconds per step) | {small.gpus:,} GPUs | {large.gpus:,} GPUs |",
              "|---|---:|---:|"]
    for label, attr in (("pipeline bubble (`pipeline_bubble`)", "bubble_s"),
                        ("DP exposed: ZeRO-1 reduce-scatter and the first forward's wait for parameter all-gathers (`comm.dp_exposed`)",
                         "dp_exposed_s"),
                        ("DP once-per-step reductions (`comm.dp_once`)", "dp_once_s"),
                        ("stragglers (`straggler`)", "straggler_s"),
                        ("the step boundary, fixed per step (`step_fixed`, joint `step.fixed_s`)", "fixed_s")):
        a, b = getattr(small, attr), getattr(large, attr)
        lines.append(f"| {label} | {a:.4f} | {b:.4f} |")
    totals = [sum((p.bubble_s, p.dp_exposed_s, p.dp_once_s, p.straggler_s, p.fixed_s)) for p in (small, large)]
    lines += [f"| all five, share of the step | {totals[0] / small.step_s * 100:.1f}% | "
              f"{totals[1] / large.step_s * 100:.1f}% |", ""]
    return lines


def _heldout_markdown(points: Sequence[MeasuredPoint]) -> list[str]:
    """The held-out section: the other MLPerf results of NVIDIA's recipes (other sizes, another GPU class, other
    submitters), which no fit reads."""
    if not points:
        return []
    coreweave = submitted_by(points, "coreweave")
    boundary = ""
    if coreweave:
        largest = coreweave[-1]
        boundary = (f"CoreWeave's points refuse Megatron's fitted step boundary (`step.fixed_s`, {largest.fixed_s:.2f} s "
                    f"of each step): {largest.microbatches} microbatches per rank take {largest.measured_step_s:.2f} s a "
                    f"step at {largest.gpus:,} GPUs, and the rest of the predicted step is "
                    f"{largest.step_s - largest.fixed_s:.2f} s; ")
    lines = ["## Held-out MLPerf runs (never fitted)", "",
             "The other MLPerf Training v6.0 DeepSeek-V3 results of NVIDIA's recipes: the GB200 recipe above at "
             "4,096 and 8,192 GPUs (16,384 sequences per step) and on 256 GPUs submitted by Google (over RoCE), the "
             "GB300 recipe (TP1, no recompute, an MXFP8 LM head) at 256 and 512 GPUs and, submitted by CoreWeave, at "
             "2,048, 4,096 and 8,192 GPUs (16,384 sequences per step) (`studies/data/scale_checks.toml`, with the "
             "result logs and configs they come from). They are not in the dataset and no fit reads them; each is "
             "predicted as the dataset's runs are (`moesim validate studies/data/scale_checks.toml` prints them with "
             f"their p10-p90 intervals). {boundary}MLPerf's GB300 recipe shows no such boundary at any size, its GB200 recipe "
             "shows 1.3-2.3 s (the 512- and 2,048-GPU pair in the fit, 4,096 and 8,192 here). What the boundary "
             "is, is not identified (docs/transfer.md).", "",
             "| run | GPUs | microbatches per rank | predicted step s | predicted tok/s/GPU | measured tok/s/GPU | "
             "error |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for p in points:
        lines.append(f"| `{p.run_id}` | {p.gpus:,} | {p.microbatches} | {p.step_s:.2f} | "
                     f"{p.predicted_tokens_per_s_per_gpu:.0f} | {p.measured_tokens_per_s_per_gpu:.0f} | "
                     f"{p.error * 100:+.1f}% |")
    return lines + [""]


def scaling_markdown(points: Sequence[ScalePoint] | None = None,
                     measured: Sequence[MeasuredPoint] | None = None,
                     heldout: Sequence[MeasuredPoint] | None = None) -> str:
    """docs/scaling.md from today's code (``points``, ``measured``, ``heldout``: precomputed, else predicted
    now)."""
    points = list(points) if points is not None else scaling_points()
    measured = list(measured) if measured is not None else mlperf_points()
    heldout = list(heldout) if heldout is not None else heldout_points()
    lines = [
        "# Scaling DeepSeek-V3 at a fixed global batch",
        "",
        "Generated by `python -m studies.scaling --write` (`tests/studies/test_scaling.py` fails on drift).",
        "",
        f"DeepSeek-V3 671B, MXFP8, {GLOBAL_BATCH:,} sequences of 4,096 tokens per step at every size, the "
        f"`{STACK}` stack, each system on its Megatron-Bridge 26.04 recipe plan (GB200 NVL72: PP4 VP4 EP64, "
        "64 ranks per rack; HGX B200: PP16 EP8), HybridEP. Adding GPUs grows data parallelism only, so each "
        "pipeline rank runs fewer microbatches: the bubble's share grows, the step's data-parallel "
        "gathers and reductions span more ranks and switch layers, the slowest of more ranks sets the "
        "step (stragglers; `sim/predict/dp_scale.py`), and the step boundary's fixed seconds weigh more in a "
        "shorter step. Nothing is refitted along the curve; "
        "the 256-GPU points sit near the measured recipe runs (docs/stack-protocol.md), the rest is "
        "prediction.",
        "",
        "| system | GPUs | microbatches per rank | tok/s/GPU | vs 256 | bubble share | DP comm share | "
        "straggler share |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base: dict[str, float] = {}
    for p in points:
        base.setdefault(p.system, p.tokens_per_s_per_gpu)
        lines.append(f"| {p.system} | {p.gpus:,} | {p.microbatches} | {p.tokens_per_s_per_gpu:.0f} | "
                     f"{p.tokens_per_s_per_gpu / base[p.system]:.2f}x | {p.bubble_share * 100:.1f}% | "
                     f"{p.dp_comm_share * 100:.1f}% | {p.straggler_share * 100:.1f}% |")
    lines += ["", "Shares are of the predicted step (exposed time on the critical rank, `moesim predict` "
              "breakdown keys: bubble `pipeline_bubble`; DP comm " + " + ".join(f"`{k}`" for k in DP_COMM_KEYS)
              + "; straggler `straggler`).", ""]
    last = {p.system: p for p in points}
    if {"GB200 NVL72", "HGX B200"} <= set(last):
        rack, hgx = last["GB200 NVL72"], last["HGX B200"]
        lines += [f"Reading it: at {rack.gpus:,} GPUs the NVL72 plan keeps "
                  f"{rack.tokens_per_s_per_gpu / base[rack.system] * 100:.0f}% of its 256-GPU throughput per GPU "
                  "(4 virtual stages per rank, 16 in all, keep the bubble small); the B200 plan's 16 "
                  f"physical stages without interleaving keep {hgx.tokens_per_s_per_gpu / base[hgx.system] * 100:.0f}%"
                  f", the bubble taking {hgx.bubble_share * 100:.0f}% of its step. At that scale a planner would "
                  "raise the global batch, interleave or shorten the pipeline (`moesim plan` searches those).", ""]
    lines += _mlperf_markdown(measured)
    lines += _heldout_markdown(heldout)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite {DOC.name}")
    args = parser.parse_args(argv)
    text = scaling_markdown()
    if args.write:
        DOC.write_text(text, encoding="utf-8")
        print(f"wrote {DOC}")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
