"""Fit a stack profile's kernel efficiency on one architecture to one measured run.

:func:`fit_arch_efficiency` finds the value of ``efficiency[arch]["default"]`` (the fraction of the
calibration's kernel rates the framework reaches on that architecture, every op class alike) at which
the simulator reproduces a measured tokens/s per GPU, by bisection (step time is monotone in it).
Everything else stays at its datasheet / microbenchmark / sourced value.
:func:`fit_compute_scale` is the seed protocol's fit (docs/seed-protocol.md): TorchTitan's sm100 number
from the BF16 baseline (651 tok/s/GPU). Run ``python -m sim.fit_stack`` to refit it and print the
value to store in ``sim/stack_profiles/torchtitan.toml`` (``[efficiency.sm100] default``).
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

__all__ = ["fit_arch_efficiency", "fit_compute_scale", "with_arch_efficiency", "seed_baseline"]


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
        s = with_arch_efficiency(stack, arch, value)
        return predict(model, cluster, plan, costs, stack=s).tokens_per_s_per_gpu

    if not tps(lo) <= measured_tps <= tps(hi):
        raise ValueError(f"measured {measured_tps} tok/s/GPU is outside what efficiency in [{lo}, {hi}] reaches "
                         f"on {arch} ({tps(lo):.0f}..{tps(hi):.0f})")
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tps(mid) < measured_tps else (lo, mid)
    return (lo + hi) / 2


def fit_compute_scale(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, measured_tps: float,
                      costs: CostModel | None = None, *, tol: float = 1e-5) -> float:
    """TorchTitan's efficiency on the cluster's architecture at which ``predict`` gives ``measured_tps``."""
    return fit_arch_efficiency(model, cluster, plan, measured_tps, load_stack("torchtitan"), costs, tol=tol)


def seed_baseline() -> tuple[ModelSpec, ClusterSpec, ParallelPlan, float]:
    """The seed scenario's ``fitted = true`` variant (the BF16 baseline) and its measured tokens/s per GPU."""
    sc = load_scenario(DEFAULT_SCENARIO)
    (v,) = [v for v in sc.variants if v.fitted]
    assert v.measured_tokens_per_s_per_gpu is not None
    plan = plan_from_mapping(derive_plan_fields({**sc.base, **v.plan}, sc.gpus))
    return load_model(sc.model), load_cluster(sc.cluster, n_gpus=sc.gpus), plan, v.measured_tokens_per_s_per_gpu


def main() -> None:
    model, cluster, plan, measured = seed_baseline()
    costs = default_costs(cluster.gpu)
    scale = fit_compute_scale(model, cluster, plan, measured, costs)
    print(f"baseline: {model.name} on {cluster.n_gpus}x {cluster.gpu.name}, measured {measured} tok/s/GPU")
    print(f"fitted efficiency = {scale:.4f}  (store in sim/stack_profiles/torchtitan.toml [efficiency.{cluster.gpu.arch}])")
    stack = with_arch_efficiency(load_stack("torchtitan"), cluster.gpu.arch, round(scale, 4))
    check = predict(model, cluster, plan, costs, stack=stack)
    print(f"check: predicted {check.tokens_per_s_per_gpu:.1f} tok/s/GPU at efficiency {round(scale, 4)}")


if __name__ == "__main__":
    main()
