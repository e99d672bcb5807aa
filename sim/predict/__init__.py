"""Step-time prediction: workload + costs + stack + network -> engine -> pipeline schedule -> :class:`Prediction`.

The package, one job per module:

- :mod:`sim.predict.timing`: op timing (cost model x stack efficiency; all-to-alls of the slowest EP
  group; collectives; NIC flows; FSDP / ZeRO shard sizes);
- :mod:`sim.predict.layers`: one layer, or one overlapped F&B pair (DualPipe, Megatron's combined 1F1B),
  simulated op by op on the SimPy engine (:mod:`sim.engine`) with SM sharing, shared NIC, host stalls;
  each distinct (layer kind, phase) and pair simulated once per prediction;
- :mod:`sim.predict.pipeline`: chunks through the schedule (:mod:`sim.schedule`), then the step tail;
- :mod:`sim.predict.breakdown`: exposed seconds per category (sums to the step) and hidden communication.

Ranks with identical work and traffic form one symmetry class and are simulated once: with balanced
routing one rank stands for the whole step; skewed routing gives one class per EP rank, and every
all-to-all waits for the slowest member.

>>> from sim.catalog import load_model, load_cluster
>>> from sim.specs import ParallelPlan
>>> p = predict(load_model("debug"), load_cluster("hgx-b200", n_gpus=8),
...             ParallelPlan(ep=4, dp_shard=8, global_batch=16, seq_len=512))
>>> p.fits_in_memory, p.step_time_s > 0, p.stack
(True, True, 'torchtitan')
>>> abs(sum(p.breakdown.values()) - p.step_time_s) < 1e-9
True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sim.accounting import (
    memory_per_gpu,
    resolve_mtp_layers,
    torchtitan_flops_per_token,
)
from sim.comm.costs import SM_RESERVING_BACKENDS
from sim.costs import CostModel
from sim.errors import ConfigError, PlanError
from sim.joint import apply_params, launch_mode, shipped_values
from sim.predict.breakdown import bottleneck, breakdown, comm_report
from sim.predict.layers import SimResult, simulate_layer, simulate_pair
from sim.predict.memo import PIPELINE_FIELDS, SimMemo, layer_sim_key, plan_items
from sim.predict.pipeline import assemble, step_lower_bound_s
from sim.predict.timing import Context
from sim.specs import ClusterSpec, ModelSpec, ParallelPlan
from sim.stacks import StackProfile, load_stack

#: The public API studies/ and calibrate/ use (tests/test_import_hygiene.py: they import nothing below it):
#: a prediction, its plan check and engine context, one layer or one F&B pair simulated in that context, the
#: schedule's lower bound, and the memo a plan search shares with its bounds.
__all__ = ["Prediction", "SimResult", "SimMemo", "LayerResult", "Context", "predict", "validate_plan",
           "simulation_context", "simulate_layer", "simulate_pair", "step_lower_bound_s", "PIPELINE_FIELDS",
           "layer_sim_key", "plan_items"]

#: the former name of a simulated layer's result
LayerResult = SimResult


@dataclass
class Prediction:
    """A predicted training step. Times in seconds, memory in bytes; ``breakdown`` sums to the step and holds
    *exposed* time per category (``breakdown["comm.a2a"]``: exposed all-to-all seconds); ``hidden_comm``:
    communication seconds that ran under compute, by kind (not on the step's path). ``bottleneck``: what holds
    the largest share (``bottleneck_share``) of the step (:func:`sim.predict.breakdown.bottleneck`);
    ``comm``: per communication kind, bytes per step, link, achieved rate and what bounds it
    (:func:`sim.predict.breakdown.comm_report`). ``launch``: how its kernels reach the GPU (eager, compiled, partial
    or full-iteration graphs: :func:`sim.joint.launch_mode`), one of the axes of its distance from the evidence
    (:func:`sim.uncertainty.classify`)."""

    name: str
    model: str
    gpu: str
    n_gpus: int
    plan: dict[str, Any]
    step_time_s: float
    tokens_per_s_per_gpu: float
    tflops_per_gpu: float
    mfu: float
    breakdown: dict[str, float]
    peak_memory_bytes: float
    memory_capacity_bytes: float
    fits_in_memory: bool
    memory: dict[str, Any] = field(default_factory=dict)
    hidden_comm: dict[str, float] = field(default_factory=dict)
    bottleneck: str = ""
    bottleneck_share: float = 0.0
    comm: dict[str, dict[str, Any]] = field(default_factory=dict)
    stack: str = "torchtitan"
    stack_release: str = ""
    stack_provenance: str = ""
    launch: str = ""
    measured_tokens_per_s_per_gpu: float | None = None
    source: str = ""
    trace_data: Any = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in dataclasses.asdict(self).items() if k != "trace_data"}
        if self.measured_tokens_per_s_per_gpu is None:
            out.pop("measured_tokens_per_s_per_gpu")
            out.pop("source")
        return out


def validate_plan(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan,
                  stack: StackProfile | None = None) -> None:
    """Raise :class:`PlanError` if the plan cannot run (degrees, microbatches, backend, precision, overlap)."""
    plan.check_fits(model, cluster.n_gpus)
    if plan.pp_layout:
        from sim.pp_layout import check_layout

        try:
            check_layout(plan.pp_layout, n_chunks=plan.pp * plan.vpp, n_layers=model.n_layers,
                         mtp_layers=resolve_mtp_layers(model, plan, load_stack(stack) if stack is not None else None))
        except ConfigError as err:
            raise PlanError(str(err)) from None
    gpu = cluster.gpu
    if plan.ep_backend != "nccl" and not gpu.deepep:
        raise PlanError(f"plan: ep_backend {plan.ep_backend!r} needs a DeepEP-capable GPU; {gpu.name} is not")
    if plan.ep_backend in SM_RESERVING_BACKENDS and not 0 < plan.deepep_sms < gpu.num_sms:
        raise PlanError(f"plan: deepep_sms ({plan.deepep_sms}) must be below the GPU's {gpu.num_sms} SMs")
    if plan.precision in ("mxfp8", "mxfp8-grouped") and not gpu.mxfp8:
        raise PlanError(
            f"plan: precision {plan.precision!r} needs block-scaled FP8 tensor cores (SM100, e.g. b200); "
            f"{gpu.name} ({gpu.arch}) would only run TorchAO's emulated path, which is slower than bf16"
        )
    if plan.ep_overlap:
        stack = load_stack(stack)
        dual = plan.pp_schedule in ("dualpipe", "dualpipev")
        if not stack.ep_overlap_available and not dual:
            raise PlanError(f"plan: ep_overlap (combined 1F1B) is not available in stack {stack.name!r}; "
                            f"use a stack that has it (e.g. megatron) or a DualPipe schedule")
        if model.n_moe_layers == 0:
            raise PlanError(f"plan: ep_overlap needs MoE layers; {model.name} has none")
        if not dual and plan.pp > 1 and plan.pp_schedule != "interleaved-1f1b":
            # Megatron enters combined 1F1B only without pipelining or with the interleaved schedule
            # (schedules.py: combined_1f1b_schedule_for_no_pipelining / ..._for_interleave).
            raise PlanError(f"plan: ep_overlap (combined 1F1B) runs with pp = 1 or pp_schedule "
                            f"'interleaved-1f1b'; got pp ({plan.pp}) with {plan.pp_schedule!r}")


def simulation_context(model: ModelSpec, placed: ClusterSpec, plan: ParallelPlan, costs: CostModel,
                       stack: StackProfile, memo: SimMemo | None = None,
                       params: Mapping[str, float] | None = None) -> Context:
    """The engine's context for a plan on an already placed cluster: the joint calibration's parameters
    (``params``: the shipped fit, :func:`sim.joint.shipped_values`, with the values ``params`` names in place of
    its own; None: the shipped fit) applied to the cluster's GPU, the costs and the stack
    (:func:`sim.joint.apply_params`), the one way every prediction and bound gets them."""
    values = shipped_values() if params is None else {**shipped_values(), **params}
    sim_cluster, costs, stack = apply_params(values, placed, costs, stack, plan)
    return Context(model, sim_cluster, plan, costs, stack, memo)


def predict(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, costs: CostModel | None = None,
            *, stack: StackProfile | str | None = None, name: str = "", memo: SimMemo | None = None,
            params: Mapping[str, float] | None = None) -> Prediction:
    """Predict one training step of ``model`` on ``cluster`` under ``plan`` with framework ``stack`` (a
    profile, a built-in profile name or a profile file; None: the ``torchtitan`` profile).

    ``memo``: layer and pair simulations shared across predictions of one model, cluster, cost model and
    stack (a plan search's; :mod:`sim.predict.memo`); the prediction is the same with or without it.

    ``params``: joint-calibration parameters (:mod:`sim.joint`) in place of the shipped fit's, e.g.
    ``{"release.torchtitan": 1.0}`` for TorchTitan at the calibration's kernel rates; None: the shipped fit.

    Raises :class:`~sim.errors.PlanError` for plans that cannot run.
    """
    stack = load_stack(stack)
    cluster = stack.place(cluster)  # e.g. Megatron's 64 ranks per NVL72 rack
    validate_plan(model, cluster, plan, stack)
    if costs is None:  # the stack's own calibration where it was measured on this GPU, else the defaults
        from sim.calibration import default_inputs

        costs, stack = default_inputs(cluster.gpu, stack)
    ctx = simulation_context(model, cluster, plan, costs, stack, memo, params)
    step = assemble(ctx)
    parts, hidden = breakdown(step)
    bound, bound_share = bottleneck(parts)
    tokens = plan.tokens_per_step
    tps = tokens / step.step_s / cluster.n_gpus
    tflops = torchtitan_flops_per_token(model, plan.seq_len, resolve_mtp_layers(model, plan, stack)) * tps
    mem = memory_per_gpu(model, plan, cluster.gpu, stack)
    trace_data = {"step": step, "layers": step.layers, "pairs": step.pairs, "chunks": step.chunks,
                  "pipeline": step.pipe, "plan": plan, "step_s": step.step_s,
                  "tail": (step.rs_tail, step.dp_ar, step.opt)}
    return Prediction(
        name=name or f"{model.name} on {cluster.n_gpus}x {cluster.gpu.name}",
        model=model.name,
        gpu=cluster.gpu.name,
        n_gpus=cluster.n_gpus,
        plan=plan.as_dict(),
        step_time_s=step.step_s,
        tokens_per_s_per_gpu=tps,
        tflops_per_gpu=tflops / 1e12,
        mfu=tflops / cluster.gpu.bf16_flops,
        breakdown=parts,
        peak_memory_bytes=float(mem.total_bytes),
        memory_capacity_bytes=float(mem.capacity_bytes),
        fits_in_memory=bool(mem.fits),
        memory=mem.as_dict(),
        hidden_comm=hidden,
        bottleneck=bound,
        bottleneck_share=bound_share,
        comm=comm_report(ctx, step),
        stack=stack.name,
        stack_release=stack.release,
        stack_provenance=stack.provenance,
        launch=launch_mode(stack, plan),
        trace_data=trace_data,
    )
