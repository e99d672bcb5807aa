"""Property tests (hypothesis): monotonicity, conservation, lower bounds, determinism."""

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim import comm
from sim.catalog import load_cluster, load_model
from sim.costs import default_costs
from sim.predict import predict
from sim.specs import ParallelPlan

SETTINGS = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MODEL = load_model("deepseek-v3-16b")

plans = st.builds(
    lambda pp, ep, backend, precision, ac, routing, seed: ParallelPlan(
        pp=pp, ep=ep, dp_shard=16 // pp, seq_len=4096, micro_batch=1, global_batch=(16 // pp) * 4,
        ep_backend=backend, precision=precision, ac=ac, routing=routing, routing_seed=seed,
        pp_schedule="1f1b"),
    st.sampled_from([1, 2]), st.sampled_from([2, 4, 8]), st.sampled_from(["nccl", "deepep"]),
    st.sampled_from(["bf16", "mxfp8-grouped"]), st.sampled_from(["none", "full"]),
    st.sampled_from(["balanced", "zipf:0.8", "dirichlet:2.0"]), st.integers(0, 5),
)


def _cluster(nic_gbps=400.0, flops_scale=1.0):
    c = load_cluster("hgx-b200", n_gpus=16)
    gpu = dataclasses.replace(c.gpu, bf16_flops=c.gpu.bf16_flops * flops_scale, fp8_flops=c.gpu.fp8_flops * flops_scale)
    return dataclasses.replace(c, gpu=gpu, nic_bw_bytes_per_s=nic_gbps * 1e9 / 8)


@SETTINGS
@given(plan=plans, factor=st.floats(1.0, 4.0))
def test_more_bandwidth_never_slows_a_step(plan, factor):
    slow = predict(MODEL, _cluster(400.0), plan)
    fast = predict(MODEL, _cluster(400.0 * factor), plan)
    assert fast.step_time_s <= slow.step_time_s * (1 + 1e-9)


@SETTINGS
@given(plan=plans, factor=st.floats(1.0, 4.0))
def test_more_flops_never_slows_a_step(plan, factor):
    slow = predict(MODEL, _cluster(flops_scale=1.0), plan)
    fast = predict(MODEL, _cluster(flops_scale=factor), plan)
    assert fast.step_time_s <= slow.step_time_s * (1 + 1e-9)


@SETTINGS
@given(plan=plans)
def test_step_is_at_least_compute_and_comm_lower_bounds(plan):
    cluster = _cluster()
    p = predict(MODEL, cluster, plan)
    data = p.trace_data
    compute = 0.0
    for ch in data["chunks"]:
        compute += sum(v for k, v in {**ch.f_parts}.items() if k.startswith("compute."))
        compute += sum(v for k, v in {**ch.b_parts}.items() if k.startswith("compute."))
    busiest = compute * plan.n_microbatches / plan.pp  # chunks are spread over pp ranks
    per_rank = max(sum(e - s for *_, s, e in acts) for acts in data["pipeline"].actions)
    assert p.step_time_s >= per_rank - 1e-9
    # Communication lower bound: every microbatch's all-to-alls on the busiest rank, back to back.
    chunk_comm = sum(ch.f_comm + ch.b_comm for ch in data["chunks"]) * plan.n_microbatches / plan.pp
    assert p.step_time_s >= chunk_comm * 0.999 or plan.pp > 1
    assert p.step_time_s >= busiest / plan.pp * 0.999


@SETTINGS
@given(plan=plans)
def test_same_seed_same_result(plan):
    a = predict(MODEL, _cluster(), plan).to_dict()
    b = predict(MODEL, _cluster(), plan).to_dict()
    assert a == b


@SETTINGS
@given(ep=st.sampled_from([4, 8, 16]), backend=st.sampled_from(["nccl", "deepep", "deepep-ll"]),
       phase=st.sampled_from(["dispatch", "combine"]), skew=st.sampled_from([None, 0.5, 1.2]),
       seed=st.integers(0, 3))
def test_bytes_sent_equal_bytes_received(ep, backend, phase, skew, seed):
    import numpy as np

    from sim.routing import expert_load

    load = None if skew is None else expert_load(f"zipf:{skew}", MODEL.n_routed_experts, seed)
    res = comm.moe_alltoall(_cluster(), list(range(ep)), 2048, MODEL, backend, phase, comm.CommCosts.default(),
                            bytes_per_elem=2.0, expert_load=load, seed=seed)
    assert np.isclose(res.sent_bytes.sum(), res.recv_bytes.sum(), rtol=1e-9)


def test_default_costs_are_monotone_in_size():
    costs = default_costs(load_cluster("hgx-b200", n_gpus=8).gpu)
    effs = [costs.gemm_eff["bf16"](10 ** k) for k in range(7, 14)]
    assert effs == sorted(effs)


overlap_plans = st.builds(
    lambda pp, sched, ep, backend, ac, overlap, routing: ParallelPlan(
        pp=pp, pp_schedule=sched if pp > 1 else "1f1b", vpp=2 if (pp > 1 and sched == "interleaved-1f1b") else 1,
        ep=ep, dp_shard=16 // pp, seq_len=4096, micro_batch=1, global_batch=(16 // pp) * 4,
        ep_backend=backend, ac=ac, ep_overlap=overlap and (pp == 1 or sched != "1f1b"), routing=routing),
    st.sampled_from([1, 2]), st.sampled_from(["1f1b", "interleaved-1f1b", "dualpipev"]), st.sampled_from([2, 8]),
    st.sampled_from(["nccl", "deepep"]), st.sampled_from(["none", "selective", "full"]), st.booleans(),
    st.sampled_from(["balanced", "zipf:0.8"]),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=overlap_plans, sharding=st.sampled_from(["fsdp", "zero1"]), shared=st.booleans())
def test_breakdown_sums_exactly_to_the_step(plan, sharding, shared):
    """Every plan (single-stage FSDP, pipelines, DualPipeV, combined 1F1B, skewed routing, ZeRO-1): the exposed
    breakdown sums to the step time, nothing is negative, hidden communication is reported apart."""
    from sim.stacks import StackProfile

    stack = StackProfile(ep_overlap_available=True, param_sharding=sharding, shared_expert_overlap=shared)
    p = predict(MODEL, _cluster(), plan, stack=stack)
    assert abs(sum(p.breakdown.values()) - p.step_time_s) <= 1e-9 * p.step_time_s
    assert all(v >= -1e-12 for v in p.breakdown.values())
    assert all(v >= 0 for v in p.hidden_comm.values())
