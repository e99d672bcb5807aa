"""The plan of DeepSeek's traced job (measured-runs.md s3) as moesim specs, and its DualPipe pair predicted.

The trace is rank 0 of DeepSeek-V3 training on 2,048 H800 (the README's plan: PP16 DualPipe, EP64, TP1,
seq 4096, FP8 blockwise, DeepEP, selective recompute, ZeRO-1) holding one forward and one backward chunk
of 4 MoE layers. :func:`predicted_pair` predicts that window the way ``moesim predict`` does (same
calibration path, same engine), so ``moesim calibrate compare`` can set it beside the measurement.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TRACED_GPUS", "TRACED_PLAN", "traced_run", "predicted_pair"]

TRACED_GPUS = 2048
TRACED_PLAN: dict[str, Any] = {"pp": 16, "pp_schedule": "dualpipe", "ep": 64, "tp": 1, "seq_len": 4096,
                               "global_batch": 15360, "precision": "fp8-blockwise", "ep_backend": "deepep",
                               "ac": "selective"}


def traced_run() -> tuple[Any, Any, Any, Any]:
    """(model, cluster, plan, stack) of the traced job: DeepSeek-V3 671B on the ``h800-deepseek`` cluster
    under the ``deepseek`` stack."""
    from sim.catalog import load_cluster, load_model
    from sim.loaders import derive_plan_fields, plan_from_mapping
    from sim.stacks import load_stack

    plan = plan_from_mapping(derive_plan_fields(dict(TRACED_PLAN), TRACED_GPUS, "traced plan"), "traced plan")
    return (load_model("deepseek-v3-671b"), load_cluster("h800-deepseek", n_gpus=TRACED_GPUS), plan,
            load_stack("deepseek").for_plan(plan))


def predicted_pair(cal: Any, layers: int = 4) -> Any:
    """The traced window (one forward and one backward chunk of ``layers`` MoE layers) predicted from the
    calibration ``cal`` alone, through :func:`sim.calibration.calibrated_inputs` and the pair simulation
    :func:`sim.predict.layers.simulate_pair`: a :class:`calibrate.compare.WindowBusy`."""
    from calibrate.compare import WindowBusy
    from sim.calibration import calibrated_inputs
    from sim.predict import Context, simulate_pair

    model, cluster, plan, stack = traced_run()
    costs, stack = calibrated_inputs(cal, cluster.gpu, stack)
    res = simulate_pair(Context(model, cluster, plan, costs, stack), ["moe"] * layers, ["moe"] * layers)
    exposed = sum(v for k, v in res.exposed_s.items() if k.startswith("comm."))
    return WindowBusy(sum(res.compute_s.values()), res.comm_s, exposed, res.time_s)
