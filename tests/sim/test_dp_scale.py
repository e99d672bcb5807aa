"""Data-parallel work at scale (sim.predict.dp_scale): each mechanism grows with its resource, stragglers vanish
at cv = 0, and the breakdown's entries sum into the step."""

from __future__ import annotations

import dataclasses

import pytest

from sim.catalog import load_cluster, load_model
from sim.comm import CommCosts
from sim.comm.collectives import (
    allreduce_tree_time,
    reduce_scatter_time,
    ring_latency_s,
)
from sim.costs import default_costs
from sim.predict import predict
from sim.predict.dp_scale import bucket_params, straggler_s
from sim.specs import ParallelPlan
from sim.stacks import builtin_overrides, load_stack

COSTS = CommCosts.default()


def test_ring_latency_grows_with_ranks_and_domains():
    c = load_cluster("gb200-nvl72", n_gpus=2048)
    lats = [ring_latency_s(c, range(0, 2048, 2048 // n), COSTS) for n in (8, 64, 256, 1024)]
    assert lats == sorted(lats) and lats[0] < lats[-1]
    # NCCL's split: n-N steps inside a domain, N-1 across (4 ranks per domain over 2 domains: 6 + 1)
    two = ring_latency_s(c, [0, 1, 2, 3, 72, 73, 74, 75], COSTS)
    assert two == pytest.approx(COSTS.nccl_launch_s + 6 * COSTS.nccl_step_nvlink_s + COSTS.nccl_step_ib_s)
    # the latency is part of every ring: a 0-byte reduce-scatter is its latency
    assert reduce_scatter_time(c, range(256), 0.0, COSTS) == pytest.approx(ring_latency_s(c, range(256), COSTS))


def test_tree_allreduce_grows_with_ranks():
    c = load_cluster("gb200-nvl72", n_gpus=2048)
    t = [allreduce_tree_time(c, range(n), 4.0, COSTS) for n in (2, 72, 144, 2048)]
    assert t == sorted(t) and t[0] > 0
    assert allreduce_tree_time(c, [5], 4.0, COSTS) == 0.0


def test_bucket_rule():
    assert bucket_params(8) == 40e6 and bucket_params(40) == 40e6 and bucket_params(256) == 256e6
    # a size the framework sets wins over Megatron-Core's default for an unset one, at any data parallelism
    assert bucket_params(8, 128 * 2**20) == bucket_params(1024, 128 * 2**20) == 128 * 2**20


def test_stacks_carry_their_bucket_size():
    # Megatron-Bridge's CommOverlapConfig sets 128Mi-parameter buckets; TorchTitan shards with FSDP (no buckets)
    assert load_stack("megatron").ddp_bucket_params == 128 * 2**20
    assert load_stack("megatron-26.02").ddp_bucket_params == 128 * 2**20
    assert load_stack("torchtitan").ddp_bucket_params == 0


def test_smaller_buckets_hide_more_of_the_reduce_scatter():
    """The first chunk's gradients reduce bucket by bucket as its backward runs: cut finer, less of them is left
    after the pipeline; one bucket exposes the most."""
    cluster = load_cluster("gb200-nvl72", n_gpus=64)
    plan = ParallelPlan(tp=1, pp=2, vpp=1, ep=8, dp_shard=32, seq_len=1024, global_batch=128)
    model = load_model("deepseek-v3-16b")

    def exposed(bucket: float) -> float:
        stack = dataclasses.replace(load_stack("megatron"), name="user-buckets", ddp_bucket_params=bucket)
        return predict(model, cluster, plan, default_costs(cluster.gpu), stack=stack).trace_data["step"].dp.grad_rs_s

    fine, one = exposed(20e6), exposed(1e12)
    assert 0 < fine < one


def test_straggler_monotone_and_zero_at_cv0():
    base = straggler_s(10.0, 64, 240, 0.05)
    assert straggler_s(10.0, 256, 240, 0.05) > base  # more ranks: a slower slowest
    assert straggler_s(10.0, 64, 60, 0.05) > base  # fewer microbatches: less averaging
    assert straggler_s(10.0, 64, 240, 0.1) == pytest.approx(2 * base)
    assert straggler_s(10.0, 64, 240, 0.0) == 0.0 and straggler_s(10.0, 1, 240, 0.05) == 0.0


def _zero1(n_gpus: int, m_per_rank: int, **comm: float):
    """A small ZeRO-1 (Megatron) plan on an NVL72 cluster: TP2 PP2 (interleaved), EP4."""
    cluster = load_cluster("gb200-nvl72", n_gpus=n_gpus)
    dp = n_gpus // 4
    plan = ParallelPlan(tp=2, pp=2, vpp=2, pp_schedule="interleaved-1f1b", ep=4, dp_shard=dp, seq_len=512,
                        global_batch=dp * m_per_rank)
    costs = default_costs(cluster.gpu)
    if comm:
        costs = dataclasses.replace(costs, comm={**costs.comm, **comm})
    return predict(load_model("debug"), cluster, plan, costs, stack="megatron")


def test_breakdown_entries_sum_into_the_step():
    p = _zero1(16, 4)
    dp = p.trace_data["step"].dp
    assert dp.straggler_s > 0 and dp.once_s > 0 and dp.grad_rs_s >= 0 and dp.param_ag_s > 0
    assert p.breakdown["straggler"] == pytest.approx(dp.straggler_s)
    assert p.breakdown["comm.dp_once"] == pytest.approx(dp.once_s)
    assert p.breakdown["comm.dp_exposed"] == pytest.approx(dp.exposed_comm_s)
    assert sum(p.breakdown.values()) == pytest.approx(p.step_time_s, rel=1e-9)


def test_straggler_cv_zero_is_the_model_without_stragglers():
    on, off = _zero1(16, 4), _zero1(16, 4, straggler_cv=0.0)
    d_on, d_off = on.trace_data["step"].dp, off.trace_data["step"].dp
    assert d_off.straggler_s == 0.0 and "straggler" not in off.breakdown
    assert on.step_time_s - off.step_time_s == pytest.approx(d_on.straggler_s, rel=1e-9)
    assert dataclasses.replace(d_on, straggler_s=0.0) == d_off


def test_more_microbatches_lose_less_to_stragglers():
    few, many = _zero1(16, 2), _zero1(16, 8)
    # of the work the step does per microbatch and at the end of the pipeline (the step boundary's fixed seconds
    # aside: they are the same whatever the microbatch count)
    share = [p.trace_data["step"].dp.straggler_s / (p.step_time_s - p.breakdown.get("step_fixed", 0.0))
             for p in (few, many)]
    assert share[0] > share[1] > 0


def test_fsdp_stacks_get_no_buckets_or_stragglers():
    cluster = load_cluster("hgx-b200", n_gpus=8)
    p = predict(load_model("debug"), cluster, ParallelPlan(ep=4, dp_shard=8, global_batch=16, seq_len=512))
    dp = p.trace_data["step"].dp
    assert dp.straggler_s == 0.0 and dp.grad_rs_s == 0.0 and dp.param_ag_s == 0.0 and dp.once_s > 0


def _gather_case(nic_gbps: float) -> tuple[float, float]:
    """(exposed parameter gather, first forward) of a one-microbatch ZeRO-1 step on 16 HGX B200 whose expert
    parameters gather over the scale-out network at ``nic_gbps`` per NIC."""
    cluster = dataclasses.replace(load_cluster("hgx-b200", n_gpus=16), nic_bw_bytes_per_s=nic_gbps * 1e9 / 8)
    plan = ParallelPlan(ep=4, dp_shard=16, seq_len=4096, global_batch=16, ac="none")
    p = predict(load_model("deepseek-v3-16b"), cluster, plan, default_costs(cluster.gpu), stack=load_stack("megatron"))
    step = p.trace_data["step"]
    _, start, end = step.pipe.timeline[("F", 0, 0)]
    return step.dp.param_ag_s, end - start


def test_parameter_gathers_slower_than_the_forward_are_exposed():
    """Megatron-Core gathers one bucket ahead of the first forward: where the gathers outrun the layers'
    compute only the first bucket shows; where they are slower than the forward, the forward runs at their
    pace (a slower network exposes more, and more than the first bucket)."""
    fast, _ = _gather_case(3200.0)
    slow, forward = _gather_case(25.0)
    assert 0 < fast < slow
    assert slow > 0.5 * forward  # the gathers take longer than the forward they should hide under


def test_one_ahead_switch_off_is_the_first_bucket_alone():
    cluster = dataclasses.replace(load_cluster("hgx-b200", n_gpus=16), nic_bw_bytes_per_s=25e9 / 8)
    plan = ParallelPlan(ep=4, dp_shard=16, seq_len=4096, global_batch=16, ac="none")
    model = load_model("deepseek-v3-16b")
    on = predict(model, cluster, plan, default_costs(cluster.gpu), stack=load_stack("megatron"))
    with builtin_overrides(param_gather_one_ahead=False):  # the ablation's switch: the shipped release without it
        off = predict(model, cluster, plan, default_costs(cluster.gpu), stack=load_stack("megatron"))
    assert 0 < off.trace_data["step"].dp.param_ag_s < on.trace_data["step"].dp.param_ag_s
    assert off.trace_data["pipeline"].makespan == on.trace_data["pipeline"].makespan  # only the gather's wait moves


def test_plan_bucket_size_reaches_the_buckets():
    """A recipe's own DDP bucket_size (ParallelPlan.ddp_bucket_params) replaces the stack's; bigger buckets
    expose more of the last reduce-scatter; a size below 1e6 parameters is refused."""
    from sim.errors import ConfigError

    cluster = load_cluster("gb200-nvl72", n_gpus=64)
    model = load_model("deepseek-v3-16b")

    def grad_rs(bucket: float) -> float:
        plan = ParallelPlan(tp=1, pp=2, vpp=1, ep=8, dp_shard=32, seq_len=1024, global_batch=128,
                            ddp_bucket_params=bucket)
        return predict(model, cluster, plan, default_costs(cluster.gpu),
                       stack=load_stack("megatron")).trace_data["step"].dp.grad_rs_s

    assert 0 < grad_rs(20e6) < grad_rs(1e12)
    with pytest.raises(ConfigError, match="ddp_bucket_params must be 0 or at least"):
        ParallelPlan(ddp_bucket_params=5.0)
