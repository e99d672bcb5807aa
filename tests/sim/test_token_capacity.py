"""Token capacities (Megatron-Core's ``moe_expert_capacity_factor``, ``moe_pad_expert_input_to_capacity`` and
HybridEP's ``moe_expert_rank_capacity_factor``): what each expert and EP rank computes and the dispatch carries."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sim.catalog import load_cluster, load_model
from sim.errors import ConfigError
from sim.routing import capacity_load, rank_budget_load, rank_load_factors, routed_load
from sim.specs import ParallelPlan
from studies._sim import predict_run


def test_a_capacity_drops_the_copies_over_it_and_padding_fills_every_expert_to_it() -> None:
    load = np.array([0.4, 0.3, 0.2, 0.1])
    np.testing.assert_allclose(capacity_load(load, 1.2), [0.3, 0.3, 0.2, 0.1])  # cap = 1.2 / 4
    np.testing.assert_allclose(capacity_load(load, 1.2, pad=True), [0.3] * 4)
    np.testing.assert_allclose(capacity_load(load, 2.0), load)  # a capacity above every share drops nothing
    assert capacity_load(np.full(8, 0.125), 0.5).sum() == pytest.approx(0.5)  # below the balanced share: half kept


def test_a_rank_budget_caps_each_ranks_copies_and_scales_its_experts_alike() -> None:
    load = np.array([0.4, 0.2, 0.2, 0.1, 0.05, 0.05])
    capped = rank_budget_load(load, 3, 1.5)
    np.testing.assert_allclose(rank_load_factors(capped, 3), [1.5, 0.9, 0.3])
    np.testing.assert_allclose(capped[:2] / capped[:2].sum(), load[:2] / load[:2].sum())
    np.testing.assert_allclose(rank_budget_load(load, 3, 2.0), load)  # every rank within its budget


def test_routed_load_applies_the_expert_capacity_then_the_rank_budget() -> None:
    skewed = routed_load("zipf:1.2", 16, 4, seed=2)
    assert skewed.sum() == pytest.approx(1.0)
    both = routed_load("zipf:1.2", 16, 4, seed=2, capacity_factor=2.0, rank_budget_factor=1.3)
    assert rank_load_factors(both, 4).max() <= 1.3 + 1e-12
    assert both.max() <= 2.0 / 16 + 1e-12
    np.testing.assert_allclose(routed_load("balanced", 16, 4, capacity_factor=1.5, pad=True), np.full(16, 1.5 / 16))


def test_plan_fields_refuse_what_megatron_refuses_naming_the_field() -> None:
    with pytest.raises(ConfigError, match="pad_to_capacity needs an expert_capacity_factor"):
        ParallelPlan(pad_to_capacity=True)
    with pytest.raises(ConfigError, match="ep_rank_capacity_factor .*hybridep"):
        ParallelPlan(ep=2, ep_rank_capacity_factor=1.5, ep_backend="deepep")
    with pytest.raises(ConfigError, match="expert_capacity_factor"):
        ParallelPlan(expert_capacity_factor=0.001)
    with pytest.raises(ConfigError, match="expert_capacity_factor"):
        ParallelPlan(expert_capacity_factor=-1.0)
    with pytest.raises(ConfigError, match="pad_to_capacity must be true or false"):
        ParallelPlan(expert_capacity_factor=1.0, pad_to_capacity="yes")  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def qwen_on_hgx() -> tuple[object, object, ParallelPlan]:
    model = load_model("qwen3-30b-a3b")
    cluster = load_cluster("hgx-b200", n_gpus=8)
    plan = ParallelPlan(ep=8, dp_shard=8, seq_len=4096, micro_batch=2, global_batch=32, ac="none",
                        ep_backend="hybridep")
    return model, cluster, plan


def _step(setup: tuple[object, object, ParallelPlan], **fields: object) -> tuple[float, float, float]:
    model, cluster, plan = setup
    pred = predict_run(model, cluster, dataclasses.replace(plan, **fields), "megatron")  # type: ignore[arg-type]
    return pred.step_time_s, pred.breakdown.get("compute.moe.expert_gemm", 0.0), pred.peak_memory_bytes


def test_balanced_routing_with_a_capacity_at_or_above_the_share_changes_nothing(qwen_on_hgx) -> None:
    base = _step(qwen_on_hgx)
    assert _step(qwen_on_hgx, expert_capacity_factor=1.5) == base
    assert _step(qwen_on_hgx, ep_rank_capacity_factor=1.5) == base


def test_padding_to_capacity_costs_expert_time_and_memory(qwen_on_hgx) -> None:
    step, gemm, mem = _step(qwen_on_hgx)
    p_step, p_gemm, p_mem = _step(qwen_on_hgx, expert_capacity_factor=1.5, pad_to_capacity=True)
    assert p_step > step and p_mem > mem
    assert 1.2 < p_gemm / gemm <= 1.5 + 1e-9  # 1.5x the rows, at a rate that rises with rows per expert


def test_a_capacity_or_budget_caps_the_busiest_rank_under_skew(qwen_on_hgx) -> None:
    skew = _step(qwen_on_hgx, routing="zipf:1.2")
    balanced = _step(qwen_on_hgx)
    capped = _step(qwen_on_hgx, routing="zipf:1.2", expert_capacity_factor=1.25)
    budget = _step(qwen_on_hgx, routing="zipf:1.2", ep_rank_capacity_factor=1.25)
    assert skew[1] > balanced[1]
    assert capped[1] < skew[1] and budget[1] < skew[1]
    assert budget[1] <= 1.25 * balanced[1] * 1.001  # the busiest rank computes at most its budget


def test_a_collapsed_router_sends_every_copy_to_the_first_k_experts() -> None:
    load = routed_load("collapse:4", 16, 4)
    np.testing.assert_allclose(load, [0.25] * 4 + [0.0] * 12)
    np.testing.assert_allclose(rank_load_factors(load, 4), [4.0, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(rank_load_factors(routed_load("collapse:4", 16, 4, rank_budget_factor=3.0), 4),
                               [3.0, 0.0, 0.0, 0.0])
    with pytest.raises(ConfigError, match="fewer than 32"):
        routed_load("collapse:32", 16, 4)
    for bad in ("collapse:0", "collapse:x", "collapse:-2", "collapse:1.5"):
        with pytest.raises(ConfigError, match="whole number of experts"):
            ParallelPlan(routing=bad)


def test_a_collapse_onto_fewer_experts_than_a_token_picks_is_refused(qwen_on_hgx) -> None:
    with pytest.raises(ConfigError, match="top_k"):
        _step(qwen_on_hgx, routing="collapse:4")  # Qwen3-30B-A3B: each token takes 8 experts


def test_a_collapsed_router_slows_the_step_up_to_the_budget(qwen_on_hgx) -> None:
    balanced = _step(qwen_on_hgx)
    collapsed = _step(qwen_on_hgx, routing="collapse:16")  # every copy to EP rank 0 (16 experts a rank)
    budget = _step(qwen_on_hgx, routing="collapse:16", ep_rank_capacity_factor=2.0)
    assert collapsed[0] > budget[0] > balanced[0]
