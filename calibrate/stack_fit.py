"""Fit a stack profile's kernel efficiency on one architecture to one measured run.

:func:`fit_arch_efficiency` finds the value of ``efficiency[arch]["default"]`` (the fraction of the
calibration's kernel rates the framework reaches on that architecture, every op class alike) at which
:func:`sim.predict.predict` reproduces a measured tokens/s per GPU, by bisection (step time falls
monotonically as the efficiency grows). Everything else stays at its datasheet / microbenchmark / trace
value. :func:`fit_seed` is the seed protocol's fit (docs/seed-protocol.md): TorchTitan's sm100 number from
the BF16 baseline, whose measured tokens/s is data with its source in ``sim/scenarios/dsv3-671b-b200.toml``
(the ``fitted = true`` variant); the fitted value is stored in ``sim/stack_profiles/torchtitan.toml``;
``moesim calibrate fit-stack`` prints it. Torch-free, like :mod:`sim` (it only drives the simulator).
"""

from __future__ import annotations

import dataclasses

from sim.catalog import load_cluster, load_model
from sim.costs import CostModel, default_costs
from sim.loaders import derive_plan_fields, plan_from_mapping
from sim.predict import predict
from sim.scenarios import DEFAULT_SCENARIO, load_scenario
from sim.specs import ClusterSpec, ModelSpec, ParallelPlan
from sim.stacks import StackProfile, load_stack

__all__ = ["fit_arch_efficiency", "fit_seed", "with_arch_efficiency", "seed_baseline"]


def with_arch_efficiency(stack: StackProfile, arch: str, value: float) -> StackProfile:
    """``stack`` with ``efficiency[arch]`` replaced by one ``default`` of ``value`` (every op class)."""
    return dataclasses.replace(stack, efficiency={**stack.efficiency, arch: {"default": value}})


def fit_arch_efficiency(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, measured_tps: float,
                        stack: StackProfile, costs: CostModel | None = None, *, tol: float = 1e-5,
                        lo: float = 0.05, hi: float = 1.5) -> float:
    """The ``efficiency[cluster.gpu.arch]["default"]`` of ``stack`` at which ``predict`` gives ``measured_tps``.

    Raises ``ValueError`` when no value in ``[lo, hi]`` reaches the measured number (the gap is then
    outside what kernel efficiency can explain)."""
    costs = costs or default_costs(cluster.gpu)
    arch = cluster.gpu.arch

    def tps(value: float) -> float:
        return predict(model, cluster, plan, costs, stack=with_arch_efficiency(stack, arch, value)).tokens_per_s_per_gpu

    t_lo, t_hi = tps(lo), tps(hi)
    if not t_lo <= measured_tps <= t_hi:
        raise ValueError(f"measured {measured_tps} tok/s/GPU is outside what efficiency in [{lo}, {hi}] reaches "
                         f"on {arch} ({t_lo:.0f}..{t_hi:.0f})")
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


def fit_seed(tol: float = 1e-5) -> float:
    """TorchTitan's sm100 efficiency at which the seed's BF16 baseline predicts its measured tokens/s per GPU
    (read from the scenario file, :func:`seed_baseline`)."""
    model, cluster, plan, measured = seed_baseline()
    return fit_arch_efficiency(model, cluster, plan, measured, load_stack("torchtitan"), tol=tol)
