"""The optimizer step's time follows the stack's state widths and the rank's optimizer shard."""

from __future__ import annotations

import dataclasses

import pytest

from sim.accounting import optimizer_shard_divisor, optimizer_step_bytes_per_param
from sim.catalog import load_cluster, load_model
from sim.predict import predict
from sim.specs import ParallelPlan
from sim.stacks import load_stack


def _opt_seconds(stack_name: str, **changes: object) -> float:
    # renamed: a user's profile keeps its own numbers (the joint calibration sets those of the shipped releases)
    stack = dataclasses.replace(load_stack(stack_name), name=f"{stack_name}-as-given", **changes)
    plan = ParallelPlan(ep=4, dp_shard=8, global_batch=16, seq_len=512)
    p = predict(load_model("debug"), load_cluster("hgx-b200", n_gpus=8), plan, stack=stack)
    return p.breakdown["optimizer"]


def test_bytes_per_parameter_follow_the_state_widths() -> None:
    megatron = load_stack("megatron")
    assert optimizer_step_bytes_per_param(megatron) == 4 + 2 * (4 + 8) + 2
    wider = dataclasses.replace(megatron, moment_bytes=16)
    assert optimizer_step_bytes_per_param(wider) - optimizer_step_bytes_per_param(megatron) == 16
    assert optimizer_step_bytes_per_param(load_stack("torchtitan")) == 28  # FSDP: no BF16 copy written


def test_predicted_optimizer_time_scales_with_the_widths() -> None:
    base = _opt_seconds("torchtitan", kernel_overhead_s=0.0)  # no launch gap: the bytes alone
    doubled = _opt_seconds("torchtitan", kernel_overhead_s=0.0, grad_bytes=8, master_bytes=8, moment_bytes=16)
    assert base > 0
    assert doubled == pytest.approx(2 * base, rel=1e-6)


def test_zero1_shards_over_replicas_fsdp_does_not() -> None:
    plan = ParallelPlan(ep=2, dp_shard=2, dp_replicate=2, global_batch=16, seq_len=512)
    assert optimizer_shard_divisor(plan, load_stack("megatron")) == 2
    assert optimizer_shard_divisor(plan, load_stack("torchtitan")) == 1
