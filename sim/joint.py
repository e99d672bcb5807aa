"""The joint calibration: a few named parameters of mechanisms, each shared by every run it applies to.

A prediction's costs come from three inputs (a :class:`~sim.costs.CostModel` per GPU architecture, a
:class:`~sim.stacks.StackProfile` per framework release, the cluster's GPU). What the public record does not
pin down is left to a small set of *named* parameters, fitted jointly by least squares over every measured run
(``python -m studies.joint_fit --write``) and stored with their uncertainty, correlations and the runs that
constrain them in ``sim/data/joint_fit.json``. This module is the one place they enter a prediction
(:func:`apply_params`), so a parameter means the same thing in every run.

Parameters (``PARAMS``; the prior is the sourced value a parameter keeps where no run constrains it):

- ``release.<profile>``: what is left of how fast a framework release is, one scalar per release, fitted over
  that release's runs on every GPU class, on every op class alike (the alternative that spares the
  microbenchmarked library kernels, :data:`BENCHMARKED_CLASSES`, is a switch: :func:`release_efficiency`);
- ``chip.nvl72_rate``: the tensor rate a 1200 W Grace-Blackwell part (GB200, GB300) sustains in training, as a
  fraction of its datasheet rate (its datasheet says +11% over the HGX part; same-plan runs say ~0);
- ``chip.sm103_clock``: Blackwell Ultra's sustained tensor rate over Blackwell's in training (prior: the clock
  ratio, B300 2032 MHz / B200 1965 MHz; fitted on the same-plan B300 runs);
- ``chip.gb300_clock``: a GB300's clock over a B300's (2070 MHz at 1400 W / 2032 MHz at 1100 W);
- ``launch.<mode>_s``: time per kernel by launch mode (eager, CUDA graphs; under Megatron's partial TE scopes the
  captured ops, ``OpSpec.graphed``, cost a graph node and the rest launch as the stack does; a compiled stack's
  kernels cost its own sourced ``kernel_overhead_s``);
- ``host.sync_s``: the GPU idle time of one blocking device-to-host sync (copy, then the CPU relaunching);
- ``host.eager_op_s``: the host time to issue one modelled op eagerly: a layer pass takes at least the host time of
  its eager ops (:func:`sim.predict.layers.host_floor`);
- ``nccl.a2a_net_fraction``: the share of the network rate NCCL's all-to-all reaches across NVLink domains;
- ``dp.straggler_cv``: how much a microbatch's time varies across data-parallel ranks (the step waits for the
  slowest rank; :mod:`sim.predict.dp_scale`);
- ``step.fixed_s``: what a step that accumulates gradients spends once at its boundary, whatever its microbatch
  count and data-parallel size, in Megatron-Bridge's and TorchTitan's train loops alike
  (``StackProfile.joint_step_boundary``; steps of one microbatch pay none, ``StackProfile.step_boundary_s``);
- ``grouped.half_rows_per_expert_launch``: the rows per expert at which a DeepSeek-V3-shaped BF16 grouped GEMM
  (7168 x 2048 per expert) launched as one GEMM per expert (Transformer Engine) runs at half its large-shape
  efficiency on a B200 SM; one grouped kernel over every expert takes its microbenchmark's instead
  (:data:`GROUPED_HALF_ROWS_ONE_KERNEL`); FP8 curves at twice the rows (:func:`grouped_half_rows`); the large-shape
  efficiencies are the cost model's, and Transformer Engine's MXFP8 one: :data:`GROUPED_LARGE_TE`;
- ``grouped.per_expert_share``: the share of that loss that is a fixed time per expert, so its part of the
  half-point shrinks with the expert's work per row (:meth:`sim.costs.CostModel.grouped_work_scale`); the rest
  follows the rows alone. Both grow with the chip's tensor rate per SM (:func:`half_rows_on`).

>>> v = prior_values()
>>> round(v["chip.sm103_clock"], 4), v["launch.graphs_s"]
(1.0341, 1.34e-06)
>>> launch_s("graphs", v), launch_s("eager", v)
(1.34e-06, 4e-06)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Any

from sim.costs import (
    GROUPED_PER_EXPERT_SHARE,
    GROUPED_REF_GROUPS,
    CostModel,
    Curve,
    torchao_mxfp8_curves,
)
from sim.errors import ConfigError
from sim.routing import BALANCED_ROUTINGS
from sim.specs import ClusterSpec, GPUSpec, ParallelPlan
from sim.stacks import StackProfile

__all__ = ["ParamSpec", "PARAMS", "PARAM_NAMES", "prior_values", "shipped_values", "apply_params",
           "launch_mode", "issues_eagerly", "te_grouped_large", "half_rows_on", "grouped_half_rows", "FLASHINFER_HALF_ROWS_FP4", "GROUPED_HALF_ROWS_ONE_KERNEL", "REF_TENSOR_FLOPS_PER_SM", "JOINT_FIT_FILE", "NVL72_PARTS", "BALANCED_ARRIVAL_CV", "covers", "step_fixed_s", "joint_fit_record", "grouped_curve", "GROUPED_LARGE_TE", "launch_s", "BENCHMARKED_CLASSES", "release_efficiency",
           "TORCHTITAN_LAYER_RATE", "MEGATRON_LAYER_RATE"]

#: The registry of fitted numbers (values, uncertainties, correlations, constraining runs, LOGO folds).
JOINT_FIT_FILE = "data/joint_fit.json"
#: GPUs that are the 1200 W Grace-Blackwell parts of NVL72 racks (``chip.nvl72_rate``).
NVL72_PARTS = ("gb200", "gb300")


@dataclass(frozen=True)
class ParamSpec:
    """One named parameter: its mechanism, its sourced prior, its bounds, whether the fit may move it."""

    name: str
    prior: float
    lower: float
    upper: float
    mechanism: str
    source: str
    fitted: bool = True


#: Op classes an *alternative* release scalar would not slow (switch ``release.spares_benchmarked`` = 1 in the
#: joint values; off in the shipped fit): library kernels whose cost-model rate is a microbenchmark of the kernel the
#: framework calls (grouped GEMMs: torch._grouped_mm / TE's grouped GEMM against the shape roll-off ``grouped.*``;
#: ``quant``: TorchAO's MXFP8 quantize and scale-rearrange kernels at their measured share of HBM bandwidth,
#: published.md s4; ``accum``: PyTorch's index kernels, where a stack prices them apart,
#: :attr:`sim.stacks.StackProfile.indexed_accumulate`). The seed's MXFP8 pair argues for it: its 9.8 s saving a step over the MXFP8 / BF16 kernel ratio
#: at its shape (1.27x, TorchAO's chart at G = 8) is the saving at the microbenchmark's rates; a release scalar on
#: them doubles it. Refitted with it (issue 27, twentieth session's note) the
#: leave-one-group-out error falls from 4.6% / 19.3% to 3.4% / 12.4% (2.9% / 8.4% with NCCL's all-to-all share held
#: at 1), every seed row comes within 3%, but TorchTitan's scalar drops to 0.30 and the checks off the fitted runs
#: move the wrong way: the held-out one-node TorchTitan 16B steps -32% on H100 (-13% shipped), the B300 / B200 ratio
#: at PP16 past 3%, a layer cell past 10%, the H100 DeepEP speedup past 10%. Again on today's model, with the release
#: priors at the layer benchmarks (``python -m studies.joint_fit --fix release.spares_benchmarked=1 --heldout``,
#: 2026-12-06): leave-one-group-out 3.2% / 11.4% against 4.6% / 16.8%, leave-one-model-out 11.2% / 54.1% against
#: 10.5% / 67.7%, TorchTitan's scalar 0.302, the seed rows -4.5% / +0.9% / -0.0% but its speedups +39.3% / +47.6%
#: (+32% / +41% measured), the 512-H100 DeepEP speedup 1.53x (1.67x), the held-out one-node TorchTitan steps 15.9%
#: (8.3%; -15.9% signed) and every held-out file 11.2% (10.9%). Not
#: shipped until what the 671B runs lack beside the kernels is modelled; whoever ships it also writes the spared
#: classes into the profiles' ``[efficiency."*"]`` (``studies.joint_fit.write_release_scalars`` writes the scalar alone).
BENCHMARKED_CLASSES: tuple[str, ...] = ("grouped_gemm", "quant", "accum")


def release_efficiency(scalar: float, values: Mapping[str, float]) -> dict[str, dict[str, float]]:
    """A covered release's :attr:`~sim.stacks.StackProfile.efficiency` table under ``values``: ``scalar`` on
    every architecture and op class; with the switch ``release.spares_benchmarked`` set, every class but
    :data:`BENCHMARKED_CLASSES`, which then run at the cost model's rates.

    >>> release_efficiency(0.5, {})
    {'*': {'default': 0.5}}
    >>> release_efficiency(0.5, {"release.spares_benchmarked": 1.0})
    {'*': {'default': 0.5, 'grouped_gemm': 1.0, 'quant': 1.0, 'accum': 1.0}}
    """
    table = {"default": float(scalar)}
    if values.get("release.spares_benchmarked", 0.0):
        table |= {op_class: 1.0 for op_class in BENCHMARKED_CLASSES}
    return {"*": table}


#: Rows per expert at which flashinfer PR #2503's NVFP4 masked grouped GEMM on a B200 reaches half its large-shape
#: rate (published.md s8: 431 TFLOPS at 28 rows, 3,249 at 455, DeepSeek-V3's expert shape). FP4 by the benchmark's
#: own byte count: 4.5 TB/s over 18 x 4096 x 7168 half-byte weights in 67 us.
FLASHINFER_HALF_ROWS_FP4 = 341.0
#: Rows per expert at which one grouped kernel over every local expert (torch._grouped_mm, TorchAO's, DeepGEMM's) in
#: BF16, of DeepSeek-V3's expert shape (7168 x 2048), reaches half its large-shape efficiency on a B200 SM: the
#: flashinfer half-point at BF16's quarter of FP4's rate per SM (an SM needs rows in proportion to its tensor rate
#: to amortise a tile's fixed time). Other chips, precisions and expert shapes move it as :func:`half_rows_on`,
#: :func:`grouped_half_rows` and ``grouped.per_expert_share`` say. A sourced constant, not a joint parameter: when
#: one fitted half-point served every stack the runs (Megatron's, whose experts launch one GEMM each) pulled it to
#: 2,104 +- 730, which TE PR #2045's CUTLASS grouped kernel (H100, 16 x 2,048 rows, K 2048, N 768: 637 TFLOPS) and
#: TorchTitan PR #1993's 16B ladder on 8 B200 (EP8 -> EP1, 12,288 -> 1,536 rows per expert: 17.5% -> 18% MFU
#: measured, 44% slower at 2,104; studies/data/heldout_torchtitan.toml) refuse. Joint values may override it under
#: the key ``grouped.half_rows`` (the ablation's alternative). B200 dense rates: BF16 2,250, NVFP4 9,000 TFLOPS.
GROUPED_HALF_ROWS_ONE_KERNEL = FLASHINFER_HALF_ROWS_FP4 * 2250 / 9000

#: A release scalar's prior is a measurement outside the step runs, so that a fold left without any run of the release
#: (a new model on a release no other model measured) predicts it from evidence it was not fitted on: TorchTitan's
#: MoE layer alone on one B200 runs at 0.877 (BF16) / 0.899 (MXFP8) of the calibration's kernel rates (TorchAO's
#: single-layer timing, ``studies.torchtitan_layer``; 0.799 / 0.809 until its index sums took their kernels' measured
#: rates, 2026-12-07), and the Megatron-Core single-MoE-layer cells predicted at those
#: rates take 1.03x their measured time (``studies.layer_cells``, geometric mean of forward and backward);
#: ``tests/studies/test_joint_fit.py`` checks both constants against those checks. Until 2026-12-06 the priors were
#: one-run fits on step runs of the dataset, which the leave-one-model-out fold without DeepSeek-V3 then read back.
TORCHTITAN_LAYER_RATE = 0.89
MEGATRON_LAYER_RATE = 1.03

PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec("release.torchtitan", TORCHTITAN_LAYER_RATE, 0.1, 1.5, "TorchTitan (1a36996b) kernel speed relative to "
              "the calibration's rates, every op class", "prior: TorchAO's timing of TorchTitan's MoE layer alone on one "
              "B200 (studies/data/torchtitan_layer_cells.toml; `python -m studies.transfer`), where the layer runs at "
              "0.89 of the calibration's rates (BF16 0.877, MXFP8 0.899; 0.80 before its index sums took their "
              "measured rates): what a fold without any TorchTitan step run predicts them with "
              "(leave-one-model-out, DeepSeek-V3: every TorchTitan run is one)"),
    ParamSpec("release.megatron-26.02", MEGATRON_LAYER_RATE, 0.1, 1.5, "Megatron-Bridge 26.02 kernel speed relative to "
              "the calibration's rates", "prior: the 12 Megatron-Core single-MoE-layer cells on 8 H100 (measured-runs.md "
              "s8, Must-show 5) predicted at the calibration's rates take 1.03x their measured time (geometric mean of "
              "forward and backward)"),
    ParamSpec("release.megatron-26.04", MEGATRON_LAYER_RATE, 0.1, 1.5, "Megatron-Bridge 26.04 kernel speed relative to "
              "the calibration's rates", "prior: the 12 Megatron-Core single-MoE-layer cells on 8 H100 (measured-runs.md "
              "s8, Must-show 5) predicted at the calibration's rates take 1.03x their measured time (geometric mean of "
              "forward and backward)"),
    ParamSpec("chip.nvl72_rate", 2250 / 2500, 0.7, 1.15, "tensor rate a GB200/GB300 sustains in training over its "
              "datasheet rate (2500/5000 TFLOPS at 1200 W)", "the HGX part's datasheet rate (2250/4500): the same "
              "Blackwell die at the clock training sustains (B200 1965 MHz, sglang PR #28460); at the same plan a "
              "GB200 runs 0.97-0.99x a B200 and a GB300 1.03x a B300 (measured-runs.md s5). Not fitted: freed "
              "(`python -m studies.joint_fit --free chip.nvl72_rate --heldout`, 2026-12-06) it stays at 0.895 +- 0.04 "
              "and the leave-one-group-out error rises (4.6% -> 5.7%; held-out files 10.9% either way). The datasheet "
              "rate (1.0) does worse (ablation row: 6.3%; held-out files 11.2%) and puts GB200 7-9% ahead of B200 at the "
              "same plan under partial CUDA graphs, though under full-iteration graphs a GB300 runs 1.11-1.14x a B300 "
              "at one plan (held out; chip.gb300_clock)", fitted=False),
    ParamSpec("chip.sm103_clock", 2032 / 1965, 0.9, 1.3, "Blackwell Ultra (sm103) tensor rate over its datasheet "
              "(the same dense TFLOPS as B200) in training: its sustained clock under load", "prior: sglang PR #28460 "
              "(published.md s7), the maximum clocks B300 1100 W 2032 MHz / B200 1000 W 1965 MHz. Fitted: the B300 and "
              "GB300 runs constrain it, most the same-plan ones (DeepSeek-V3 TP1 PP16 EP8 B300/B200 1.109-1.112 in "
              "three containers; Qwen3-30B at MBS 8 vs 4, measured-runs.md s5); a pair outside the dataset agrees "
              "(GPT-OSS-120B BF16 EP8 MBS4, B300/B200 1.095-1.159, Megatron-Bridge performance-summary-archive.md "
              "@067f987); so does cuDNN's own attention benchmark (cudnn-frontend sdpa_benchmark_training results/dsv3, "
              "cuDNN 9.22: DeepSeek-V3's MLA at sequence 4,096, GB300 over GB200 1.13x forward and 1.08x backward in "
              "BF16, 1.12x backward in MXFP8, against 1.12x for this factor times chip.gb300_clock). What it holds "
              "beyond the clock ratio is not identified (the 1100 W power class under MXFP8 GEMMs)"),
    ParamSpec("chip.gb300_clock", 2070 / 2032, 0.9, 1.3, "GB300 (NVL72, 1400 W) tensor rate over a B300's (HGX, "
              "1100 W): its higher sustained clock", "facebookexperimental/triton PR #2023: a GB300 locks its 2070 MHz "
              "maximum clock at its 1400 W rated power (measured cuBLAS GEMM 1600-2174 TFLOPS there); sglang PR #28460 "
              "(published.md s7): B300 2032 MHz at 1100 W. Not fitted. Freed (`python -m studies.joint_fit --free "
              "chip.gb300_clock --heldout`, 2026-12-06), the three GB300 runs take it to 1.075 +- 0.076: leave-one-group-out "
              "4.6% -> 4.3%, leave-one-model-out 10.5% -> 10.4%, the held-out files 10.9% -> 10.8%, the same-plan GB300 / "
              "B300 pairs -2.6% -> -0.5%; but chip.sm103_clock falls 1.101 -> 1.083 and B300 over B200 at PP16 goes from "
              "-2.4% to -3.7% (the issue's bound is 3%): the runs do not separate the two clocks. Held out, at one plan under "
              "full-iteration CUDA graphs a GB300 runs 1.111x a B300 (Qwen3-30B, Megatron-Bridge 26.06) and 1.136x "
              "(GPT-OSS-20B, MLPerf v6.0), where partial graphs give 1.03x",
              fitted=False),
    ParamSpec("launch.eager_s", 4e-6, 0.0, 40e-6, "time per kernel launched by eager PyTorch / TE on an x86 "
              "host (the CPU's launch path; the GPU waits when kernels are short)", "prior: assumed 4 us (the "
              "former stack profiles' gap); GB200 raw cuLaunchKernel 3.0 us, Triton 4.7 us (tritonbench PR "
              "#1017); 13.5 us CPU per TE Linear forward on an H100 Xeon host (TE #2053; published.md s8)"),
    ParamSpec("launch.graphs_s", 1.34e-6, 0.0, 10e-6, "device time per serialized CUDA-graph node",
              "Megatron-LM PR #6064: 1.34 us per node, 0.55 us gap (published.md s8)", fitted=False),
    ParamSpec("host.sync_s", 100e-6, 0.0, 3e-3, "GPU idle per blocking device-to-host sync (the copy, then the "
              "CPU relaunching the next kernels)", "prior: assumed 100 us; TorchTitan PR #2207: one sync "
              "less per MoE layer gave +12% on GB200 (published.md s7)"),
    ParamSpec("host.eager_op_s", 195e-6, 0.0, 1e-3, "host (CPU) seconds to issue one modelled op launched eagerly "
              "(Megatron-Core / Transformer Engine in Python, outside CUDA graphs): a layer pass takes at least the host "
              "time of its eager ops (StackProfile.host_op_s; sim.predict.layers.host_issue_s)", "prior: 195 us, the "
              "value at which Megatron-Bridge 26.02's Qwen3-30B on 8 B200 at MBS 1 with NCCL's all-to-all "
              "(studies/data/heldout_runs.toml, 9,691 tok/s/GPU, 2.75x below the same model, GPUs and container family "
              "at MBS 4) is host-bound at its measured step; no fit reads that run. Constrained by the fitted runs "
              "whose layer passes sit at the floor (Qwen3-235B at MBS 1 on B200 and H100, Qwen3-30B on 16 H100): "
              "above ~200 us they come out slow"),
    ParamSpec("step.fixed_s", 0.0, 0.0, 5.0, "seconds a training step that accumulates gradients spends once, "
              "whatever its microbatch count (from two: StackProfile.step_boundary_s) and data-parallel size, beyond "
              "the per-step work modelled apart (pipeline fill and drain, exposed "
              "data-parallel buckets, the optimizer, once-per-step reductions): the train loop's step boundary, "
              "where the GPU idles while the host finishes one step and starts the next (StackProfile.step_fixed_s): "
              "Megatron-Bridge's and TorchTitan's train loops alike (StackProfile.joint_step_boundary); what it is, "
              "is not identified in either",
              "prior: 0 (no published figure). What tells it from the release scalars: the runs whose steps are "
              "short (the 8-GPU Qwen3-30B runs, 8-10 s a step) and the MLPerf Training v6.0 GB200 pair, one recipe at "
              "240 and 60 microbatches per rank (step = 0.120 s x microbatches + 1.89 s, measured-runs.md s6); "
              "on TorchTitan, its pipelined runs (the seed's 64 microbatches a step, PR #2107's 16 on 512 H100). "
              "Steps of one microbatch pay none: NeMo's MLPerf GPT-OSS-20B steps (studies/data/mlperf_gpt_oss.toml) "
              "and TorchTitan's public one-node steps of about a second (studies/data/heldout_torchtitan.toml) leave "
              "no room for it"),
    ParamSpec("nccl.a2a_net_fraction", 1.0, 0.2, 1.0, "NCCL all-to-all's share of the network rate NCCL reaches "
              "point to point (CommCosts.ib_fraction: 48.5 of 50 GB/s per NDR NIC) on the flows that leave an NVLink "
              "domain (the standard EP path's dispatch and combine across nodes; sim.comm.nccl)",
              "prior: 1, the point-to-point rate. An all-to-all cannot aggregate NICs (nccl-tests #267: its "
              "performance is that of a single NIC) and keeps 2(n-1) PXN-routed connections busy at once; no "
              "published all-to-all busbw at the runs' EP groups. Constrained by the runs whose NCCL all-to-all "
              "crosses nodes: TorchTitan's standard EP on B200 and H100 (EP32 over 4 nodes) and Megatron's "
              "Qwen3-235B on H100 (EP32 over 8 nodes)"),
    ParamSpec("dp.straggler_cv", 0.0731, 0.0, 0.5, "per-microbatch time variation across data-parallel ranks: "
              "the step waits for the slowest of N ranks, each averaging m microbatches (sim.predict.dp_scale)",
              "ASSUMED: the EP-barrier arrival cv fitted on DeepSeek's H800 trace (CommCosts.arrival_cv); not fitted: "
              "freed (`python -m studies.joint_fit --free dp.straggler_cv --heldout`, 2026-12-06) it stays near its "
              "prior, 0.093 +- 0.156 (the runs barely constrain it), and the leave-one-group-out error rises (4.6% -> "
              "4.9%; leave-one-model-out 10.5% -> 13.4%; held-out files 10.9% -> 10.6%); an earlier model took it to 0.3 "
              "as a stand-in for what the 8-GPU runs lacked", fitted=False),
    ParamSpec("grouped.half_rows_per_expert_launch", 2104.0, 8.0, 8192.0,
              "rows per expert at which a BF16 grouped GEMM of DeepSeek-V3's expert shape (7168 x 2048) run as one "
              "GEMM launch per local expert (Transformer Engine's multi-stream cuBLAS, "
              "StackProfile.grouped_gemm_per_expert) reaches half its large-shape efficiency on a B200 SM: each "
              "expert's kernel fills and drains the GPU on its own (one grouped kernel over every expert: "
              "sim.joint.GROUPED_HALF_ROWS_ONE_KERNEL, 85 rows, sourced). Transformer Engine's fused grouped MLP "
              "(ParallelPlan.fused_grouped_mlp: cuDNN front-end CuTe DSL grouped GEMMs, one launch each) keeps this "
              "roll-off: no public benchmark gives the fused kernels' own, and the runs that use them (MLPerf v6.0's "
              "GB200 DeepSeek-V3 pair, fitted; its GPT-OSS-20B cells, held out) come out 16-34% fast at the one-kernel "
              "half-point",
              "prior: the former joint value (2,104 +- 730), fitted when one half-point served every stack and the "
              "Megatron runs, the only ones that launch per expert, set it; fitted on them. TE PR #2045's "
              "multi-stream cuBLAS on H100 (16 x 2,048 rows, K 2048, N 768: 554 TFLOPS; 8 x 4,096: 628) sits "
              "between this curve and the one-kernel curve"),
    ParamSpec("grouped.per_expert_share", GROUPED_PER_EXPERT_SHARE, 0.0, 1.0, "share of a grouped GEMM's roll-off half-point (at "
              "DeepSeek-V3's expert shape) that is a fixed time per expert, amortised over the expert's work per row "
              "(K x N); the rest follows its rows alone (weight tiles, the partial last row tile): an expert of w "
              "times the reference work per row has its half-point at (1 - s) + s / w of the reference's "
              "(CostModel.grouped_work_scale); 0: rows alone, 1: all fixed per expert",
              "0.39 +- 0.08: least squares over flashinfer PR #2503's Blackwell masked grouped GEMM at two expert "
              "shapes (N 4096 x K 7168 and N 7168 x K 2048, 18 groups, 28-455 rows per expert; 13 points of e_large "
              "x r / (r + h x ((1 - s) + s / w)), residuals within 11%). Consistent with tgale96/grouped_gemm PR #37 "
              "(H100, 2048 x 1536 experts at 512 rows: CUTLASS sm90 160.5 TFLOPS) and TE PR #2045 (H100, N 768: "
              "554-628 TFLOPS; published.md s7-s8). Not fitted to the runs: freed (`python -m studies.joint_fit --free grouped.per_expert_share --heldout`, "
              "2026-12-06) they give 0.52 +- 0.33, the leave-one-group-out error rises from 4.6% to 4.8% and the held-out "
              "files go from 10.9% to 11.0%",
              fitted=False),
)
PARAM_NAMES = tuple(p.name for p in PARAMS)

#: Spread of the EP ranks' arrival at a DeepEP barrier under forced load balance, per second of compute since the
#: previous barrier (:mod:`sim.comm.barrier`): 0, every rank runs the same work. Not a joint parameter, since the
#: mechanism lowers no run's error (the issue's rule): at the real router's spread (0.0731, DeepSeek's H800 trace,
#: ``CommCosts.arrival_cv``) the leave-one-group-out max rises (the ablation row that passes
#: ``ep.arrival_cv_balanced`` in the values, docs/transfer.md); freed, the step runs gave 0.031 +- 0.063
#: (2026-12-04); the single-layer cells, forced balance from a common start, show DeepEP 0.29 ms over Hybrid-EP
#: (measured-runs.md s8). A calibration that sets its own ``arrival_cv`` keeps it.
BALANCED_ARRIVAL_CV = 0.0
_BY_NAME = {p.name: p for p in PARAMS}


def prior_values() -> dict[str, float]:
    """Every parameter at its sourced prior."""
    return {p.name: p.prior for p in PARAMS}


@cache
def joint_fit_record() -> dict[str, Any]:
    """The stored joint fit (``sim/data/joint_fit.json``); an empty record when none is shipped."""
    path = resources.files("sim").joinpath(JOINT_FIT_FILE)
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:  # a shipped file: a bug, but name it
        raise ConfigError(f"sim/{JOINT_FIT_FILE}: malformed JSON: {err}") from None
    return data if isinstance(data, dict) else {}


def shipped_values() -> dict[str, float]:
    """The parameters every prediction uses: the stored joint fit over its priors."""
    values = prior_values()
    for name, rec in joint_fit_record().get("params", {}).items():
        if name in values and isinstance(rec, dict) and isinstance(rec.get("value"), (int, float)):
            values[name] = float(rec["value"])
    return values


def launch_mode(stack: StackProfile, plan: ParallelPlan) -> str:
    """How the plan's kernels reach the GPU: the plan's ``cuda_graphs`` when it says, else the stack's launch; a
    compiled stack's blocks launch eagerly when the plan does not compile the model (``compile_model`` False)."""
    graphs = getattr(plan, "cuda_graphs", "stack")
    if graphs == "full":
        return "graphs"
    if graphs == "partial":
        return "partial"
    if stack.launch == "compiled" and not getattr(plan, "compile_model", True):
        return "eager"
    if graphs == "none":
        return "eager" if stack.launch == "cuda_graphs" else stack.launch
    return {"cuda_graphs": "graphs"}.get(stack.launch, stack.launch)


def issues_eagerly(stack: StackProfile, plan: ParallelPlan) -> bool:
    """Whether the plan's kernels outside CUDA graphs are issued by eager Python (the host floor of
    ``host.eager_op_s`` applies): eager launch, or a partial plan of an eager stack; not compiled regions, not
    full-iteration graphs."""
    mode = launch_mode(stack, plan)
    return mode == "eager" or (mode == "partial" and stack.launch != "compiled")


def launch_s(mode: str, values: Mapping[str, float], base: str = "eager", compiled_s: float | None = None) -> float:
    """Seconds per kernel for launch ``mode`` (eager, compiled, graphs) of the kernels that are not captured; under
    ``partial`` (Megatron's TE scopes) those launch as the stack's ``base`` mode, eager or compiled, while the
    captured scopes' kernels (``OpSpec.graphed``) cost ``launch.graphs_s`` (``StackProfile.graph_node_s``).
    Compiled kernels cost ``compiled_s``, the stack's own sourced ``kernel_overhead_s`` (no run constrains a compiled
    launch, so it is no joint parameter), unless ``values`` holds a ``launch.compiled_s`` (the layer check's hidden
    launches, :data:`sim.layer_check.HIDDEN_LAUNCH`)."""
    if mode == "graphs":
        return values["launch.graphs_s"]
    if mode == "partial":
        mode = "compiled" if base == "compiled" else "eager"
    if mode != "compiled":
        return values["launch.eager_s"]
    if "launch.compiled_s" in values:
        return values["launch.compiled_s"]
    if compiled_s is None:
        raise ValueError("launch_s: a compiled launch costs the stack's own kernel_overhead_s; pass compiled_s")
    return compiled_s


#: Grouped GEMM efficiency at the large reference shape (16,384 rows per expert) is the cost model's own there
#: (BF16 0.50 and the MXFP8 curves derived from TorchAO's per-kernel breakdown of the seed era, published.md s4;
#: FP8 blockwise 0.9 x BF16; TorchAO's later README, @0b1bb117: 74.6% forward at 16,384 rows, is a newer kernel
#: than the seed runs' torchao 0.17), except for Transformer Engine's MXFP8 grouped GEMM
#: (Megatron: cuBLAS grouped / multi-stream cuBLAS, weights quantised once
#: per step) at the large shape: cuBLAS MXFP8 on B200, 2,810-2,886 of 4,500 TFLOPS (published.md s3) -> 0.633 for
#: forward/dgrad; wgrad at TorchAO's measured wgrad/forward ratio at 16,384 rows (56.9 / 74.6, published.md s8).
GROUPED_LARGE_TE = {"mxfp8": 2848 / 4500, "mxfp8_wgrad": 2848 / 4500 * 0.569 / 0.746}


def te_grouped_large(costs: CostModel) -> dict[str, float]:
    """Transformer Engine's grouped GEMM efficiency at the large reference shape, per curve key.

    TE's grouped linear runs one cuBLAS GEMM per local expert, spread over four streams
    (``nvte_multi_stream_cublas_gemm``, ``num_streams = 4``, transformer_engine/common/gemm/cublaslt_gemm.cu):
    at large per-expert shapes each expert is a large dense cuBLAS GEMM, so BF16 and FP8 run at the cost model's
    dense cuBLAS asymptote on the chip (H100 BF16 0.80, FP8 0.709, blockwise FP8 0.536; B200 0.607, 0.616), not at
    ``torch._grouped_mm``'s; MXFP8 keeps :data:`GROUPED_LARGE_TE`. Below the large shape the roll-off of GEMMs
    launched per expert (``grouped.half_rows_per_expert_launch``) applies.

    >>> from sim.catalog import load_gpu
    >>> from sim.costs import default_costs
    >>> round(te_grouped_large(default_costs(load_gpu("h100")))["bf16"], 3)
    0.8
    """
    large = {k: c.values[-1] for k, c in costs.gemm_eff.items() if k in costs.grouped_gemm_eff and k not in GROUPED_LARGE_TE}
    return {**large, **GROUPED_LARGE_TE}


_REF_ROWS = 16384.0  # rows per expert of the large reference shape
_CURVE_GROUPS = GROUPED_REF_GROUPS  # the cost model reads its grouped curves at rows per expert x this
_ROWS_GRID = tuple(float(2 ** k) for k in range(4, 18))  # 16 .. 131072 rows per expert


#: Dense BF16 tensor rate per SM of the chip the grouped half-points are stated for: an HGX B200 (2,250 TFLOPS over
#: 148 SMs; published.md s3), the chip of its flashinfer prior and of most runs that constrain it.
REF_TENSOR_FLOPS_PER_SM = 2250e12 / 148


def half_rows_on(gpu: GPUSpec, half_rows: float) -> float:
    """A grouped half-point (stated for DeepSeek-V3's expert shape on a B200 SM) on ``gpu``, at that shape.

    What a grouped GEMM loses below its large shape is time on each SM (its tiles' pipeline fill and drain, the
    partial last row tile and wave, the epilogue), so the rows that amortise it grow with what an SM computes per
    second: a Hopper SM (989 TFLOPS / 132 SMs) does half of a Blackwell SM's work in that time, so its grouped
    GEMMs reach the same share of their asymptote at half the rows per expert. How the half-point moves with the
    expert's shape is :meth:`sim.costs.CostModel.grouped_work_scale` (``grouped.per_expert_share``). The
    single-MoE-layer cells (H100, 8,192 rows per expert, measured-runs.md s8) run their TE GEMMs within a few % of
    the dense asymptote and TE PR #2045's H100 grouped GEMMs reach 56-63% of peak at 2,048-4,096 rows.

    >>> from sim.catalog import load_gpu
    >>> round(half_rows_on(load_gpu("b200"), 1000.0)), round(half_rows_on(load_gpu("h100"), 1000.0))
    (1000, 493)
    """
    per_sm: float = (gpu.bf16_flops / gpu.num_sms) / REF_TENSOR_FLOPS_PER_SM
    return float(half_rows * per_sm)


def grouped_half_rows(gpu: GPUSpec, half_rows: float, curve_key: str) -> float:
    """The half-point of ``gpu``'s grouped GEMM curve ``curve_key`` (``bf16``, ``fp8``, ``mxfp8``, ...): the BF16
    half-point ``half_rows`` on ``gpu`` (:func:`half_rows_on`) times the precision's tensor rate over BF16's. An
    FP8 tile does twice a BF16 tile's math in the same time on the same SM, so it needs twice the rows to amortise
    the same fixed time per tile.

    >>> from sim.catalog import load_gpu
    >>> b200 = load_gpu("b200")
    >>> grouped_half_rows(b200, 100.0, "bf16"), grouped_half_rows(b200, 100.0, "mxfp8_wgrad")
    (100.0, 200.0)
    """
    rate = gpu.fp8_flops / gpu.bf16_flops if "fp8" in curve_key and gpu.bf16_flops > 0 else 1.0
    return half_rows_on(gpu, half_rows) * rate


def grouped_curve(large_eff: float, half_rows: float) -> Curve:
    """A grouped GEMM efficiency curve (indexed like the cost model's: rows per expert x 8) that is
    ``large_eff`` at 16,384 rows per expert and follows r / (r + ``half_rows``) below and above it."""
    ref = _REF_ROWS / (_REF_ROWS + half_rows)
    vals = tuple(max(1e-3, min(1.0, large_eff * (r / (r + half_rows)) / ref)) for r in _ROWS_GRID)
    return Curve(tuple(r * _CURVE_GROUPS for r in _ROWS_GRID), vals)


def _is_shipped(stack: StackProfile) -> bool:
    """``stack`` is a built-in release profile as shipped (not a user's file or a changed copy of one)."""
    from sim.stacks import load_stack

    try:
        return stack == load_stack(stack.name)
    except ConfigError:
        return False


def covers(stack: StackProfile, values: Mapping[str, float]) -> bool:
    """Whether the joint parameters ``values`` apply to ``stack``: a release the fit covers, as shipped (a user's
    own stack file, or a changed copy of a shipped one, keeps its numbers)."""
    return f"release.{stack.name}" in values and _is_shipped(stack)


def step_fixed_s(stack: StackProfile, values: Mapping[str, float]) -> float:
    """Seconds a step of ``stack`` pays once at its boundary under ``values`` (an accumulating step: which steps pay
    it is :meth:`sim.stacks.StackProfile.step_boundary_s`): the joint ``step.fixed_s`` for a release the fit covers
    (:func:`covers`) whose train loop it describes (``StackProfile.joint_step_boundary``), else the stack's own
    ``step_fixed_s``."""
    if covers(stack, values) and stack.joint_step_boundary:
        return float(values["step.fixed_s"])
    return stack.step_fixed_s


def apply_params(values: Mapping[str, float], cluster: ClusterSpec, costs: CostModel, stack: StackProfile,
                 plan: ParallelPlan) -> tuple[ClusterSpec, CostModel, StackProfile]:
    """The cluster, costs and stack a prediction runs with under joint parameters ``values``.

    Release scalars, launch, host-sync and step-boundary costs apply to the stack releases the joint fit covers
    (:func:`covers`); chip rates to the parts they name; the grouped-GEMM roll-off to the default
    (datasheet-and-microbenchmark) cost model, never to a calibration fitted from a trace.
    """
    gpu = datasheet_gpu = cluster.gpu
    if covers(stack, values):
        per_kernel = launch_s(launch_mode(stack, plan), values, base=stack.launch, compiled_s=stack.kernel_overhead_s)
        stack = replace(stack, efficiency=release_efficiency(values[f"release.{stack.name}"], values),
                        kernel_overhead_s=float(per_kernel), graph_node_s=float(values["launch.graphs_s"]),
                        host_sync_s=float(values["host.sync_s"]),
                        host_op_s=float(values["host.eager_op_s"]),
                        step_fixed_s=step_fixed_s(stack, values))
    rate = 1.0
    if gpu.name in NVL72_PARTS:
        rate *= values["chip.nvl72_rate"]
    if gpu.arch == "sm103":
        rate *= values["chip.sm103_clock"]
    if gpu.name == "gb300":
        rate *= values["chip.gb300_clock"]
    if rate != 1.0:
        gpu = replace(gpu, bf16_flops=gpu.bf16_flops * rate, fp8_flops=gpu.fp8_flops * rate,
                      fp4_flops=gpu.fp4_flops * rate, exp_per_s=gpu.exp_per_s * rate)
        cluster = replace(cluster, gpu=gpu)
    comm = dict(costs.comm)
    if "straggler_cv" not in comm:  # a calibration that sets its own keeps it
        comm["straggler_cv"] = float(values["dp.straggler_cv"])
    if "nccl_a2a_net_fraction" not in comm:
        comm["nccl_a2a_net_fraction"] = float(values["nccl.a2a_net_fraction"])
    if "nccl.ring_nic_spread" in values:  # the ablation's flat ring (not a parameter: a switch)
        comm["nccl_ring_nic_spread"] = bool(values["nccl.ring_nic_spread"])
    if "arrival_cv" not in comm and plan.routing in BALANCED_ROUTINGS:
        comm["arrival_cv"] = float(values.get("ep.arrival_cv_balanced", BALANCED_ARRIVAL_CV))
    if comm != costs.comm:
        costs = replace(costs, comm=comm)
    if costs.provenance.startswith("moesim defaults"):  # a trace-fitted calibration keeps its measured curves
        # The chip-rate factors above are sustained clocks: a faster clock shortens a tile's fixed time per SM as
        # much as its math, so the rows that amortise it follow the datasheet rate per SM, not the clock.
        half = (float(values["grouped.half_rows_per_expert_launch"]) if stack.grouped_gemm_per_expert
                else float(values.get("grouped.half_rows", GROUPED_HALF_ROWS_ONE_KERNEL)))
        te = stack.quantize_weights == "per_step"
        large = te_grouped_large(costs) if te else {}
        base = costs.grouped_gemm_eff
        curves = {k: grouped_curve(large.get(k, c(_REF_ROWS * _CURVE_GROUPS)), grouped_half_rows(datasheet_gpu, half, k))
                  for k, c in base.items()}
        if not te and {"bf16", "mxfp8", "mxfp8_wgrad"} <= set(base):
            # TorchAO's MXFP8 kernels: their published speedup over BF16 at each shape, over the joint BF16 curve
            # (the roll-off shared with BF16 would flatten it to the large-shape speedup)
            curves["mxfp8"], curves["mxfp8_wgrad"] = torchao_mxfp8_curves(curves["bf16"])
        costs = replace(costs, grouped_gemm_eff=curves)
    share = float(values["grouped.per_expert_share"])
    if costs.grouped_per_expert_share != share:
        costs = replace(costs, grouped_per_expert_share=share)
    return cluster, costs, stack


def spec(name: str) -> ParamSpec:
    """The :class:`ParamSpec` called ``name`` (a :class:`KeyError` naming it otherwise)."""
    return _BY_NAME[name]
