"""Fit the software-stack profile to one measured run: the seed protocol's only fitted number.

:func:`fit_compute_scale` finds the :class:`~sim.costs.StackProfile` ``compute_scale`` (the fraction of
microbenchmark kernel rates the framework reaches) at which the simulator reproduces a measured
tokens/s per GPU, by bisection (step time is monotone in the scale). Everything else stays at its
datasheet / microbenchmark value. Run ``python -m sim.fit_stack`` to refit the seed baseline (BF16,
standard EP, 651 tok/s/GPU) and print the value to store in :data:`sim.costs.TORCHTITAN_COMPUTE_SCALE`.
"""

from __future__ import annotations

from sim.catalog import load_cluster, load_model
from sim.costs import CostModel, default_costs
from sim.loaders import derive_plan_fields, plan_from_mapping
from sim.predict import predict
from sim.scenarios import DEFAULT_SCENARIO, load_scenario
from sim.specs import ClusterSpec, ModelSpec, ParallelPlan

__all__ = ["fit_compute_scale", "seed_baseline"]


def fit_compute_scale(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, measured_tps: float,
                      costs: CostModel | None = None, *, tol: float = 1e-5) -> float:
    """The ``compute_scale`` at which ``predict`` gives ``measured_tps`` tokens/s per GPU."""
    costs = costs or default_costs(cluster.gpu)
    lo, hi = 0.05, 1.5

    def tps(scale: float) -> float:
        return predict(model, cluster, plan, costs.with_stack(compute_scale=scale)).tokens_per_s_per_gpu

    if not tps(lo) <= measured_tps <= tps(hi):
        raise ValueError(f"measured {measured_tps} tok/s/GPU is outside what compute_scale in [{lo}, {hi}] reaches")
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


def main() -> None:
    model, cluster, plan, measured = seed_baseline()
    costs = default_costs(cluster.gpu)
    scale = fit_compute_scale(model, cluster, plan, measured, costs)
    print(f"baseline: {model.name} on {cluster.n_gpus}x {cluster.gpu.name}, measured {measured} tok/s/GPU")
    print(f"fitted compute_scale = {scale:.4f}  (store in sim/costs.py TORCHTITAN_COMPUTE_SCALE)")
    check = predict(model, cluster, plan, costs.with_stack(compute_scale=round(scale, 4)))
    print(f"check: predicted {check.tokens_per_s_per_gpu:.1f} tok/s/GPU at compute_scale {round(scale, 4)}")


if __name__ == "__main__":
    main()
