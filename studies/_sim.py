"""The one place where studies meet the simulator's moving interfaces (stacks, intervals, compute times).

Every study predicts through :func:`predict_run`, asks for an interval through :func:`interval_for`, and
times compute ops through :func:`compute_seconds`, so when the engine, stacks and calibration work lands
only this module changes:

- ``sim.stacks.load_stack(name)`` (stacks helper) and ``predict(..., stack=...)`` (engine helper): used
  when present; until then the stack name is carried in the outputs and the default (TorchTitan-fitted)
  costs are used for every stack (:func:`stack_support` says which).
- ``sim.uncertainty`` (calibration helper): an interval per prediction when present, else ``None`` (and
  the outputs say "no interval").

>>> from sim.catalog import load_model, load_cluster
>>> from sim.specs import ParallelPlan
>>> p = predict_run(load_model("debug"), load_cluster("hgx-b200", n_gpus=8),
...                 ParallelPlan(ep=4, dp_shard=8, global_batch=16, seq_len=512), "torchtitan")
>>> p.step_time_s > 0
True
"""

from __future__ import annotations

import importlib
import inspect
from functools import cache
from typing import Any

from sim.costs import CostModel, default_costs
from sim.errors import ConfigError
from sim.predict import Prediction, predict
from sim.specs import ClusterSpec, GPUSpec, ModelSpec, ParallelPlan

__all__ = ["predict_run", "load_stack_or_none", "stack_support", "interval_for", "interval_support",
           "memory_fits", "layer_compute_seconds", "layer_sim_seconds",
           "compute_seconds", "costs_for", "KNOWN_STACKS"]

#: Stack names studies accept before ``sim.stacks.load_stack`` exists (the frameworks of the dataset).
KNOWN_STACKS = ("torchtitan", "megatron", "deepseek")


@cache
def _predict_takes_stack() -> bool:
    return "stack" in inspect.signature(predict).parameters


@cache
def load_stack_or_none(name: str) -> Any:
    """The :class:`sim.stacks.StackProfile` named ``name`` if ``sim.stacks.load_stack`` exists, else None.

    An unknown name is a :class:`ConfigError` either way."""
    stacks = importlib.import_module("sim.stacks")
    loader = getattr(stacks, "load_stack", None)
    if loader is None:
        if name not in KNOWN_STACKS:
            raise ConfigError(f"stack must be one of {', '.join(KNOWN_STACKS)}; got {name!r}")
        return None
    return loader(name)


def stack_support() -> str:
    """A line for reports: whether stack profiles reach the simulator in this build."""
    stacks = importlib.import_module("sim.stacks")
    if getattr(stacks, "load_stack", None) is not None and _predict_takes_stack():
        return "stack profiles: applied (sim.stacks.load_stack + predict(stack=...))"
    return ("stack profiles: not yet in this build of sim (no sim.stacks.load_stack / predict(stack=)); "
            "every stack is predicted with the default TorchTitan-fitted costs")


@cache
def costs_for(gpu: GPUSpec) -> CostModel:
    """The default cost model of ``gpu`` (cached: studies predict thousands of plans per GPU)."""
    return default_costs(gpu)


def predict_run(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, stack_name: str = "torchtitan",
                costs: CostModel | None = None, *, name: str = "") -> Prediction:
    """Predict one plan under the named framework stack (see the module docstring for the fallback)."""
    stack = load_stack_or_none(stack_name)
    costs = costs or costs_for(cluster.gpu)
    if stack is not None and _predict_takes_stack():
        return predict(model, cluster, plan, costs, name=name, stack=stack)  # type: ignore[call-arg]
    return predict(model, cluster, plan, costs, name=name)


def interval_for(pred: Prediction, stack_name: str = "torchtitan",
                 log_residuals: list[float] | None = None) -> tuple[float, float] | None:
    """(p10, p90) tokens/s per GPU of ``pred`` from ``sim.uncertainty`` when it exists, else None.

    ``sim.uncertainty.interval(predicted, log_residuals, ...)`` takes the stack's validation residuals
    (log measured / predicted of its held-out measured runs): ``log_residuals`` when given (validate passes
    leave-one-out residuals), else those of the shipped dataset (:func:`studies.validate.stack_log_residuals`).
    Fewer than two residuals, or an interface this adapter does not know, give None (never an error)."""
    try:
        unc = importlib.import_module("sim.uncertainty")
    except ImportError:
        return None
    fn = getattr(unc, "interval", None)
    if fn is None:
        return None
    try:
        if "log_residuals" in inspect.signature(fn).parameters:
            if log_residuals is None:
                from studies.validate import stack_log_residuals

                log_residuals = stack_log_residuals().get(stack_name, [])
            if len(log_residuals) < 2:
                return None
            out = fn(pred.tokens_per_s_per_gpu, log_residuals, stack=stack_name)
        else:
            out = fn(pred)
        if out is None:
            return None
        if hasattr(out, "p10") and hasattr(out, "p90"):
            return float(out.p10), float(out.p90)
        if isinstance(out, dict):
            return float(out["low"]), float(out["high"])
        return float(out[0]), float(out[1])
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, ArithmeticError):
        return None


def interval_support() -> str:
    """A line for reports: whether predictions carry intervals in this build."""
    try:
        importlib.import_module("sim.uncertainty")
    except ImportError:
        return "intervals: none (sim.uncertainty is not in this build of sim)"
    return "intervals: from sim.uncertainty"


def compute_seconds(op: Any, gpu: GPUSpec, costs: CostModel, stack_name: str) -> float:
    """Seconds of one compute op as the simulator times it (``CostModel.op_seconds``), under the stack
    the prediction uses (None until stacks reach predict, as in :func:`predict_run`)."""
    stack = load_stack_or_none(stack_name) if _predict_takes_stack() else None
    return costs.op_seconds(op, gpu, stack, 1.0)


def memory_fits(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, stack_name: str) -> bool:
    """Whether ``plan`` fits in the GPU's memory, by the memory model predict reports (``fits_in_memory``).

    (Memory follows the stack once the stacks work lands; the stack name is accepted for that.)"""
    from sim.accounting import memory_per_gpu

    return bool(memory_per_gpu(model, plan, cluster.gpu).fits)


def layer_compute_seconds(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, stack_name: str,
                          costs: CostModel | None = None) -> dict[str, tuple[float, float]]:
    """Per layer kind (embed, dense, moe, head): (forward, backward incl. recompute) seconds of the
    compute ops one microbatch runs on one rank, timed as the simulator times them (balanced routing).

    The simulator's compute stream runs these one after another and only ever slows them (SMs lent to
    communication, host stalls), so they are a lower bound of the time the layer takes in the engine."""
    from sim.workload import Workload

    costs = costs or costs_for(cluster.gpu)
    wl = Workload(model, plan)
    out: dict[str, tuple[float, float]] = {}
    for kind in ("embed", "dense", "moe", "head"):
        if kind == "dense" and not model.n_dense_layers:
            continue
        if kind == "moe" and not model.n_moe_layers:
            continue

        def total(phase: str) -> float:
            return sum(compute_seconds(op, cluster.gpu, costs, stack_name) for op in wl.layer_ops(kind, phase)
                       if op.kind not in ("comm", "host_sync"))

        bwd = total("bwd") + (total("recompute") if kind in ("dense", "moe") else 0.0)
        out[kind] = (total("fwd"), bwd)
    return out


def layer_sim_seconds(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, stack_name: str,
                      costs: CostModel | None = None) -> dict[str, tuple[float, float, float, float]] | None:
    """Per layer kind: (forward, backward) seconds as the simulator's layer level simulates them (compute and
    the communication it cannot hide inside the layer), and the (forward, backward) compute seconds in
    them, for one microbatch; None when this build of sim does not expose its layer simulation
    (``sim.predict._Context`` / ``_simulate_layer``): callers then fall back to
    :func:`layer_compute_seconds`.

    The pipeline level runs each plain forward or backward chunk for exactly the sum of its layers' times,
    so these give a pipeline lower bound far tighter than compute alone, at a fraction of a prediction."""
    try:
        from sim import predict as _p

        ctx = _p._Context(model, cluster, plan, costs or costs_for(cluster.gpu))  # type: ignore[attr-defined]
        kinds = {"embed", "head", "moe" if model.n_moe_layers else "dense"}
        if model.n_dense_layers:
            kinds.add("dense")
        out = {}
        for kind in sorted(kinds):
            f = _p._simulate_layer(ctx, kind, "fwd")  # type: ignore[attr-defined]
            b = _p._simulate_layer(ctx, kind, "bwd")  # type: ignore[attr-defined]
            out[kind] = (float(f.time_s), float(b.time_s), float(sum(f.compute_s.values())),
                         float(sum(b.compute_s.values())))
        return out
    except (ImportError, AttributeError, TypeError):
        return None
