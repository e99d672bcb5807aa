"""Ledger tests per breakdown category, and the sum of the breakdown against the step time.

The breakdown must sum to the step on every plan, single-stage FSDP included (where time that overlapped
was once counted in several categories).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sim.accounting import count_params
from sim.catalog import load_cluster, load_model
from sim.predict import predict
from sim.specs import ParallelPlan

MODEL = load_model("deepseek-v3-16b")
CLUSTER = load_cluster("hgx-b200", n_gpus=16)
COUNTS = count_params(MODEL)
PLAN = ParallelPlan(ep=8, dp_shard=16, seq_len=1024, global_batch=32)
CATEGORIES = ("compute.", "comm.", "host_sync", "optimizer", "pipeline_bubble", "straggler", "step_fixed")


def test_categories_are_known_finite_and_non_negative() -> None:
    for p in (PLAN, dataclasses.replace(PLAN, pp=2, dp_shard=8, global_batch=16),
              dataclasses.replace(PLAN, dp_shard=8, dp_replicate=2)):
        pred = predict(MODEL, CLUSTER, p)
        for key, seconds in pred.breakdown.items():
            assert key.startswith(CATEGORIES), key
            assert math.isfinite(seconds) and seconds >= 0, (key, seconds)


def test_replica_all_reduce_is_sized_by_the_shard() -> None:
    """HSDP's all-reduce between replicas moves each rank's gradient shard (fp32), not the whole model."""
    p = dataclasses.replace(PLAN, dp_shard=8, dp_replicate=2)
    pred = predict(MODEL, CLUSTER, p)
    shard_bytes = COUNTS.total / p.dp_shard * 4
    ring = 2 * (p.dp_replicate - 1) / p.dp_replicate * shard_bytes  # bytes each rank sends
    floor_s = ring / (CLUSTER.nic_bw_bytes_per_s * CLUSTER.nics_per_gpu)
    assert floor_s <= pred.breakdown["comm.dp"] <= 1.3 * floor_s


def test_optimizer_step_scales_with_the_shard() -> None:
    one = predict(MODEL, CLUSTER, PLAN).breakdown["optimizer"]
    two = predict(MODEL, CLUSTER, dataclasses.replace(PLAN, dp_shard=8, dp_replicate=2)).breakdown["optimizer"]
    assert two == pytest.approx(2 * one, rel=2e-3)  # bytes double; a fixed launch cost does not


def test_no_bubble_without_pipeline() -> None:
    assert predict(MODEL, CLUSTER, PLAN).breakdown.get("pipeline_bubble", 0.0) == pytest.approx(0.0, abs=1e-12)


def test_breakdown_sums_to_the_step_single_stage_fsdp() -> None:
    pred = predict(MODEL, CLUSTER, PLAN)
    assert sum(pred.breakdown.values()) == pytest.approx(pred.step_time_s, rel=1e-6)


plans = st.builds(
    lambda pp, ep, rep, backend, ac, routing: ParallelPlan(
        pp=pp, ep=ep, dp_shard=16 // pp // rep, dp_replicate=rep, seq_len=1024, global_batch=16 // pp * 4,
        ep_backend=backend, ac=ac, routing=routing),
    st.sampled_from([1, 2]), st.sampled_from([2, 4, 8]), st.sampled_from([1, 2]), st.sampled_from(["nccl", "deepep"]),
    st.sampled_from(["none", "full"]), st.sampled_from(["balanced", "zipf:1.0"]),
).filter(lambda p: (p.dp_shard * p.cp) % p.ep == 0)


@settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(plans)
@example(PLAN)
def test_breakdown_sums_to_the_step_on_every_plan(plan: ParallelPlan) -> None:
    pred = predict(MODEL, CLUSTER, plan)
    assert sum(pred.breakdown.values()) == pytest.approx(pred.step_time_s, rel=1e-6)
