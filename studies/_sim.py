"""The one place where studies meet the simulator: predictions under a named stack, intervals, compute
times and the layer simulation that the plan search's lower bounds use.

>>> from sim.catalog import load_model, load_cluster
>>> from sim.specs import ParallelPlan
>>> p = predict_run(load_model("debug"), load_cluster("hgx-b200", n_gpus=8),
...                 ParallelPlan(ep=4, dp_shard=8, global_batch=16, seq_len=512), "torchtitan")
>>> p.step_time_s > 0, p.stack
(True, 'torchtitan')
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING

from sim.calibration import default_inputs
from sim.costs import CostModel
from sim.predict import Prediction, SimMemo, predict
from sim.specs import ClusterSpec, ModelSpec, ParallelPlan
from sim.stacks import StackProfile, load_stack, stack_names

if TYPE_CHECKING:
    from sim.predict import Context

__all__ = ["predict_run", "stack_profile", "STACK_NOTE", "interval_for", "INTERVAL_NOTE",
           "memory_fits", "layer_compute_seconds", "layer_sim_seconds",
           "step_bound_seconds", "KNOWN_STACKS"]

#: Stack names studies accept: the built-in profiles and their aliases.
KNOWN_STACKS = tuple(stack_names())


@cache
def stack_profile(name: str) -> StackProfile:
    """The stack profile ``name`` (built-in name, alias or file); a :class:`ConfigError` when unknown."""
    return load_stack(name)


@cache
def _boundary_stack(stack_name: str) -> StackProfile:
    """Stack ``stack_name`` with the step boundary the shipped joint parameters give it (:func:`sim.joint.step_fixed_s`)."""
    from dataclasses import replace

    from sim.joint import shipped_values, step_fixed_s

    stack = stack_profile(stack_name)
    return replace(stack, step_fixed_s=step_fixed_s(stack, shipped_values()))


def step_boundary_seconds(stack_name: str, plan: ParallelPlan) -> float:
    """Seconds a step of ``plan`` under stack ``stack_name`` pays at its boundary with the shipped joint parameters,
    charged as :meth:`sim.stacks.StackProfile.step_boundary_s` charges it (only to a step that accumulates
    microbatches): a term of the plan's prediction, so of every lower bound of it too."""
    return _boundary_stack(stack_name).step_boundary_s(plan)


#: A line for reports: how stacks reach the simulator.
STACK_NOTE = "stack profiles: applied per run (sim.stacks; predict(stack=...))"


def _context(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, stack_name: str,
             costs: CostModel | None, memo: SimMemo | None = None) -> Context:
    """The engine context a prediction of ``plan`` runs in, as :func:`sim.predict.predict` builds it: the stack
    placed on the cluster, the stack's own calibration on its GPU or the defaults when ``costs`` is None, and
    the joint calibration's parameters applied (:func:`sim.predict.simulation_context`). The plan search's
    bounds take it from here, so a bound never times an op differently from the prediction it bounds."""
    from sim.predict import simulation_context

    stack = stack_profile(stack_name)
    placed = stack.place(cluster)
    if costs is None:
        costs, stack = default_inputs(placed.gpu, stack)
    return simulation_context(model, placed, plan, costs, stack, memo)


def predict_run(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, stack_name: str = "torchtitan",
                costs: CostModel | None = None, *, name: str = "", memo: SimMemo | None = None,
                params: Mapping[str, float] | None = None) -> Prediction:
    """Predict one plan under the named framework stack (``memo``, ``params``: see :func:`sim.predict.predict`)."""
    return predict(model, cluster, plan, costs, name=name, stack=stack_profile(stack_name), memo=memo, params=params)


def interval_for(pred: Prediction, stack_name: str | None = None,
                 log_residuals: list[float] | None = None, *, cluster: str | None = None) -> tuple[float, float] | None:
    """(p10, p90) tokens/s per GPU of ``pred``: from ``log_residuals`` when given (validate's leave-one-out),
    else by its distance from the stored evidence (:func:`sim.uncertainty.prediction_interval`; ``cluster``:
    its system class, default its GPU's template; a run's own residual left out). None without any residual
    (or without the interval file). One residual gives its error widened as a 1-df t would."""
    from sim.uncertainty import Interval, interval, prediction_interval, stack_family

    if log_residuals is not None:
        if not log_residuals:
            return None
        iv: Interval | None = interval(pred.tokens_per_s_per_gpu, log_residuals,
                                       stack=stack_family(stack_name or pred.stack))
    else:
        iv = prediction_interval(pred, cluster=cluster)
    if iv is None or iv.n_runs < 1:
        return None
    return float(iv.p10), float(iv.p90)


#: A line for reports: where intervals come from.
INTERVAL_NOTE = ("intervals: p10-p90 around each prediction, wider the farther it lies from the measured runs "
                 "(its group's in-sample residuals; a new group: the leave-one-group-out residuals; beyond the "
                 "envelope: those widened; sim/data/intervals.json; sim.uncertainty); a run's own residual left out")


def memory_fits(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, stack_name: str,
                headroom_bytes: float = 0.0) -> bool:
    """Whether ``plan`` fits in the GPU's memory, by the memory model predict reports (``fits_in_memory``),
    leaving ``headroom_bytes`` free."""
    from sim.accounting import memory_per_gpu

    mem = memory_per_gpu(model, plan, cluster.gpu, stack_profile(stack_name))
    return bool(mem.fits) and mem.total_bytes <= mem.capacity_bytes - headroom_bytes


def layer_compute_seconds(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, stack_name: str,
                          costs: CostModel | None = None) -> dict[str, tuple[float, float]]:
    """Per layer kind (embed, dense, moe, head): (forward, backward incl. recompute) seconds of the
    compute ops one microbatch runs on one rank, timed as the simulator times them (balanced routing).

    The simulator's compute stream runs these one after another and only ever slows them (SMs lent to
    communication, host stalls), so they are a lower bound of the time the layer takes in the engine."""
    ctx = _context(model, cluster, plan, stack_name, costs)
    out: dict[str, tuple[float, float]] = {}
    for kind in ("embed", "dense", "moe", "head"):
        if kind == "dense" and not model.n_dense_layers:
            continue
        if kind == "moe" and not model.n_moe_layers:
            continue

        def total(phase: str) -> float:
            return sum(ctx.costs.op_seconds(op, ctx.gpu, ctx.stack, 1.0) for op in ctx.wl.layer_ops(kind, phase)
                       if op.kind not in ("comm", "host_sync"))

        bwd = total("bwd") + (total("recompute") if kind in ("dense", "moe") else 0.0)
        out[kind] = (total("fwd"), bwd)
    return out


def layer_sim_seconds(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, stack_name: str,
                      costs: CostModel | None = None, memo: SimMemo | None = None
                      ) -> dict[str, tuple[float, float, float, float, float, float]]:
    """Per layer kind: (forward, backward) seconds as the simulator's layer level simulates them (compute and
    the communication it cannot hide inside the layer), the (forward, backward) compute seconds in them and
    the (forward, backward) busy seconds of their all-to-all stream, for one microbatch (:func:`sim.predict.layers.simulate_layer`).

    The pipeline level runs each plain forward or backward chunk for exactly the sum of its layers' times,
    so these give a pipeline lower bound far tighter than compute alone, at a fraction of a prediction;
    with ``memo`` (a search's) the predictions of the plans reuse these simulations."""
    from sim.predict import simulate_layer

    ctx = _context(model, cluster, plan, stack_name, costs, memo)
    kinds = {"embed", "head", "moe" if model.n_moe_layers else "dense"}
    if model.n_dense_layers:
        kinds.add("dense")
    out = {}
    for kind in sorted(kinds):
        f = simulate_layer(ctx, kind, "fwd")
        b = simulate_layer(ctx, kind, "bwd")
        out[kind] = (float(f.time_s), float(b.time_s), float(sum(f.compute_s.values())),
                     float(sum(b.compute_s.values())), float(f.comm_s), float(b.comm_s))
    return out


def step_bound_seconds(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, stack_name: str,
                       costs: CostModel | None = None, memo: SimMemo | None = None) -> float:
    """Seconds the predicted step of ``plan`` takes at least: its schedule run on simulated layers with each
    overlapped pair at its compute alone (:func:`sim.predict.pipeline.step_lower_bound_s`), a fraction of a
    prediction with ``memo`` holding the layers."""
    from sim.predict import step_lower_bound_s

    return step_lower_bound_s(_context(model, cluster, plan, stack_name, costs, memo))
