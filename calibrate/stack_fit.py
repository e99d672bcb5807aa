"""Fit a stack profile's kernel efficiency to one measured run (the seed protocol's only fitted number).

:func:`fit_stack_efficiency` finds the efficiency ``x`` (``StackProfile.efficiency = {"*": {"default":
x}}``, every op class on every architecture) at which :func:`sim.predict.predict` reproduces a measured
tokens/s per GPU, by bisection (step time falls monotonically as ``x`` grows). Everything else stays at
its datasheet / microbenchmark / trace value. The cost model's legacy ``compute_scale`` is set to 1 while
fitting, so ``x`` is the whole framework factor. The ``moesim calibrate fit-stack`` command (the lead's)
calls it on the seed baseline (:func:`seed_baseline`: BF16, standard EP, 651 tok/s/GPU).

Torch-free, like :mod:`sim` (it only drives the simulator).
"""

from __future__ import annotations

import dataclasses

from sim.catalog import load_cluster, load_model
from sim.costs import CostModel, default_costs
from sim.loaders import derive_plan_fields, plan_from_mapping
from sim.predict import predict
from sim.scenarios import DEFAULT_SCENARIO, load_scenario
from sim.specs import ClusterSpec, ModelSpec, ParallelPlan
from sim.stacks import StackProfile

__all__ = ["fit_stack_efficiency", "seed_baseline", "with_efficiency"]


def with_efficiency(stack: StackProfile, value: float) -> StackProfile:
    """``stack`` with one efficiency for every op class and architecture."""
    return dataclasses.replace(stack, efficiency={"*": {"default": value}})


def _neutral(costs: CostModel) -> CostModel:
    stack = costs.stack
    if hasattr(stack, "compute_scale"):  # the legacy per-cost-model factor, replaced by the stack's
        return costs.with_stack(compute_scale=1.0)
    return costs


def fit_stack_efficiency(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, measured_tps: float,
                         costs: CostModel | None = None, stack: StackProfile | None = None, *,
                         tol: float = 1e-5) -> float:
    """The efficiency at which ``predict`` gives ``measured_tps`` tokens/s per GPU for ``stack``."""
    costs = _neutral(costs or default_costs(cluster.gpu))
    stack = stack or StackProfile()
    lo, hi = 0.05, 1.5

    def tps(x: float) -> float:
        return predict(model, cluster, plan, costs, stack=with_efficiency(stack, x)).tokens_per_s_per_gpu

    if not tps(lo) <= measured_tps <= tps(hi):
        raise ValueError(f"measured {measured_tps} tok/s/GPU is outside what efficiency in [{lo}, {hi}] reaches")
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tps(mid) < measured_tps else (lo, mid)
    return (lo + hi) / 2


def seed_baseline() -> tuple[ModelSpec, ClusterSpec, ParallelPlan, float]:
    """The seed scenario's ``fitted = true`` variant (the BF16 baseline) and its measured tokens/s per GPU."""
    sc = load_scenario(DEFAULT_SCENARIO)
    (v,) = [v for v in sc.variants if v.fitted]
    assert v.measured_tokens_per_s_per_gpu is not None
    plan = plan_from_mapping(derive_plan_fields({**sc.base, **v.plan}, sc.gpus))
    return load_model(sc.model), load_cluster(sc.cluster, n_gpus=sc.gpus), plan, v.measured_tokens_per_s_per_gpu
