"""Megatron's non-interleaved 1F1B waits for its own pipeline sends (batched send/recv with ``wait_on_reqs``;
Megatron-Bridge sets ``overlap_p2p_comm`` only with virtual stages): each stage-boundary transfer occupies the
sender. Interleaved schedules and TorchTitan's asynchronous sends are unchanged."""

from __future__ import annotations

import dataclasses

import pytest

from sim.catalog import load_cluster, load_model
from sim.predict import predict
from sim.schedule import PipelineSpec, simulate_pipeline
from sim.specs import ParallelPlan
from sim.stacks import load_stack


def test_one_microbatch_through_two_ranks_pays_each_send_once_more() -> None:
    """F0 -> send -> F1, B1 -> send -> B0: with async sends the chain is F + d + F + B + d + B; blocking adds
    nothing to it (the rank would wait for the arrival anyway) ..."""
    base = PipelineSpec("1f1b", pp=2, vpp=1, n_micro=1, f_s=[1.0, 1.0], b_s=[2.0, 2.0], p2p_s=0.5)
    blocking = dataclasses.replace(base, blocking_p2p=True)
    assert simulate_pipeline(base).makespan == pytest.approx(1 + 0.5 + 1 + 2 + 0.5 + 2)
    assert simulate_pipeline(blocking).makespan == pytest.approx(simulate_pipeline(base).makespan)


def test_blocked_sends_delay_the_senders_next_action() -> None:
    """... but rank 0's second forward waits for its first send to complete: F0(1) starts at F0(0) + d."""
    base = PipelineSpec("1f1b", pp=2, vpp=1, n_micro=4, f_s=[1.0, 1.0], b_s=[2.0, 2.0], p2p_s=0.5)
    blocking = dataclasses.replace(base, blocking_p2p=True)
    fast, slow = simulate_pipeline(base), simulate_pipeline(blocking)
    start = {(ph, s, mb): a for ph, s, mb, a, _b in slow.actions[0]}
    assert start[("F", 0, 1)] == pytest.approx(1.0 + 0.5)
    assert slow.makespan > fast.makespan
    # with no transfer time the flag changes nothing
    zero = dataclasses.replace(blocking, p2p_s=0.0)
    assert simulate_pipeline(zero).makespan == simulate_pipeline(dataclasses.replace(base, p2p_s=0.0)).makespan


def test_only_megatron_non_interleaved_plans_block() -> None:
    assert load_stack("megatron").blocking_p2p and load_stack("megatron-26.02").blocking_p2p
    assert not load_stack("torchtitan").blocking_p2p and not load_stack("deepseek").blocking_p2p
    model, cluster = load_model("debug"), load_cluster("hgx-b200", n_gpus=16)
    # copies of the profile (a changed copy keeps its own numbers: sim.joint applies to the profiles as shipped)
    megatron = dataclasses.replace(load_stack("megatron"), name="megatron-copy")
    off = dataclasses.replace(megatron, blocking_p2p=False)

    def step(schedule: str, stack: object) -> float:
        plan = ParallelPlan(pp=2, pp_schedule=schedule, vpp=2 if schedule == "interleaved-1f1b" else 1,
                            ep=8, dp_shard=8, global_batch=64, seq_len=512, ac="selective")
        return predict(model, cluster, plan, stack=stack).step_time_s  # type: ignore[arg-type]

    assert step("1f1b", megatron) > step("1f1b", off)
    assert step("interleaved-1f1b", megatron) == step("interleaved-1f1b", off)
