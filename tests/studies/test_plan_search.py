"""Plan search: the lower bounds never exceed the prediction, and pruning never changes the answer."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.catalog import load_cluster, load_model
from sim.predict import predict
from sim.specs import ParallelPlan
from studies.bounds import peak_bound_s, pipeline_compute_bound_s, schedule_bound_s
from studies.search import PlanSpace, search

MODEL = load_model("deepseek-v3-16b")
CLUSTER = load_cluster("hgx-b200", n_gpus=32)

plans = st.builds(
    lambda tp, pp, sched, vpp, ep, ac, precision, backend, mb, extra: ParallelPlan(
        tp=tp, pp=pp, pp_schedule=sched if pp > 1 else "1f1b", vpp=vpp if (sched == "interleaved-1f1b" and pp > 1) else 1,
        ep=ep, dp_shard=32 // (tp * pp), seq_len=2048, micro_batch=mb, ac=ac, precision=precision,
        ep_backend=backend, global_batch=(32 // (tp * pp)) * mb * 2 * pp * extra),
    st.sampled_from([1, 2]), st.sampled_from([1, 2, 4]),
    st.sampled_from(["1f1b", "interleaved-1f1b", "dualpipev", "dualpipe"]), st.sampled_from([2, 3]),
    st.sampled_from([2, 4, 8]), st.sampled_from(["none", "selective", "full"]),
    st.sampled_from(["bf16", "mxfp8-grouped", "mxfp8"]), st.sampled_from(["nccl", "deepep"]),
    st.sampled_from([1, 2]), st.sampled_from([1, 2, 3]),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(plan=plans)
def test_every_bound_is_at_most_the_predicted_step(plan: ParallelPlan) -> None:
    from sim.errors import MoesimError

    try:
        step = predict(MODEL, CLUSTER, plan).step_time_s
    except MoesimError:
        return
    peak = peak_bound_s(MODEL, CLUSTER, plan)
    sim_bound = pipeline_compute_bound_s(MODEL, CLUSTER, plan, "torchtitan")
    assert 0 < peak <= sim_bound <= step * (1 + 1e-9)
    assert 0 < schedule_bound_s(MODEL, CLUSTER, plan, "torchtitan") <= step * (1 + 1e-9)


SPACE = PlanSpace(tp=(1, 2), pp=(1, 2, 4), schedules=("1f1b", "interleaved-1f1b", "dualpipev"), vpp=(2,),
                  ep=(4, 8), ac=("selective", "full"), micro_batch=(1, 2), seq_len=2048, global_batch=128)


def test_pruned_search_finds_exactly_what_predicting_everything_finds() -> None:
    pruned = search(MODEL, CLUSTER, SPACE)
    full = search(MODEL, CLUSTER, SPACE, prune=False)
    assert full.counts["pruned"] == 0 and full.counts["evaluated"] == full.counts["fits"]
    assert pruned.counts["pruned"] > 0 and pruned.counts["bound_violations"] == 0
    assert pruned.counts["evaluated"] + pruned.counts["pruned"] == pruned.counts["fits"]
    assert pruned.counts["valid"] == pruned.counts["fits"] + pruned.counts["no_fit"]
    assert pruned.counts["enumerated"] == pruned.counts["valid"] + pruned.counts["invalid"]
    top = [c.plan for c in [pruned.best, *pruned.runner_ups]]
    assert top == [c.plan for c in [full.best, *full.runner_ups]]
    steps = [c.prediction.step_time_s for c in [pruned.best, *pruned.runner_ups]]
    assert steps == sorted(steps)


def test_two_workers_find_the_same_plans_as_one() -> None:
    one = search(MODEL, CLUSTER, SPACE)
    two = search(MODEL, CLUSTER, SPACE, workers=2)
    assert [c.plan for c in [one.best, *one.runner_ups]] == [c.plan for c in [two.best, *two.runner_ups]]


def test_nothing_fits_gives_no_best() -> None:
    space = PlanSpace(tp=(1,), pp=(1,), ep=(64,), ac=("none",), micro_batch=(1,), seq_len=2048, global_batch=128)
    r = search(MODEL, load_cluster("hgx-b200", n_gpus=8), space)  # ep 64 > 8 GPUs: no valid plan
    assert r.best is None and r.counts["valid"] == 0 and r.counts["invalid"] > 0


def test_the_compute_bound_carries_the_step_boundary_every_step_pays() -> None:
    """Every prediction of a covered release pays ``step.fixed_s`` once; the cheap bound adds it (without it a
    one-second step of a small model is bounded a second low and nothing is pruned), and stays below the step."""
    from sim.joint import shipped_values
    from studies._sim import predict_run, step_boundary_seconds

    model, cluster = load_model("debug"), load_cluster("hgx-b200", n_gpus=8)
    plan = ParallelPlan(ep=4, dp_shard=8, global_batch=16, seq_len=512)
    boundary = step_boundary_seconds("megatron-26.04", plan)
    assert boundary == shipped_values()["step.fixed_s"] > 0
    bound = pipeline_compute_bound_s(model, cluster, plan, "megatron-26.04")
    assert boundary < bound <= predict_run(model, cluster, plan, "megatron-26.04").step_time_s
    # a step of one microbatch pays none (StackProfile.step_boundary_s), so neither does its bound
    single = ParallelPlan(ep=4, dp_shard=8, global_batch=8, seq_len=512)
    assert step_boundary_seconds("megatron-26.04", single) == 0.0
    assert pipeline_compute_bound_s(model, cluster, single, "megatron-26.04") <= predict_run(
        model, cluster, single, "megatron-26.04").step_time_s < boundary
