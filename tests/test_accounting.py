"""Parameter and FLOP accounting pinned to the published figures (shared/data/published.md, sections 1-2)."""

from __future__ import annotations

import dataclasses

import pytest

from sim.accounting import (
    count_params,
    exact_flops_per_token,
    forward_matmul_flops_per_token,
    memory_per_gpu,
    stage_layers,
    torchtitan_flops_per_token,
)
from sim.catalog import load_gpu, load_model, model_names
from sim.specs import ParallelPlan

HEADLINE_PLAN = ParallelPlan(tp=2, pp=2, pp_schedule="interleaved-1f1b", vpp=2, ep=32, dp_shard=64,
                             seq_len=8192, global_batch=4096, ac="full")


def test_deepseek_v3_671b_matches_published() -> None:
    model = load_model("deepseek-v3-671b")
    counts = count_params(model)
    assert counts.total == pytest.approx(671e9, rel=0.01)
    assert counts.active == pytest.approx(37e9, rel=0.03)
    assert torchtitan_flops_per_token(model, 8192) == pytest.approx(3.4256e11, rel=0.005)
    assert torchtitan_flops_per_token(model, 4096) == pytest.approx(2.8116e11, rel=0.005)
    # 36.6B activated without embeddings (published) is what the TorchTitan formula multiplies by 6.
    assert counts.active - counts.embedding == pytest.approx(36.6e9, rel=0.005)


def test_deepseek_v3_16b_matches_published() -> None:
    model = load_model("deepseek-v3-16b")
    counts = count_params(model)
    assert counts.total == pytest.approx(15.7e9, rel=0.01)
    assert counts.active == pytest.approx(2.66e9, rel=0.01)
    assert torchtitan_flops_per_token(model, 8192) == pytest.approx(2.1503e10, rel=0.005)


@pytest.mark.parametrize(
    ("name", "total", "active"),
    [("qwen3-235b-a22b", 235e9, 22e9), ("qwen3-30b-a3b", 30.5e9, 3.3e9), ("mixtral-8x22b", 141e9, 39e9),
     ("kimi-k2", 1.04e12, 32e9), ("deepseek-v2-236b", 236e9, 21e9)],
)
def test_other_catalog_models_match_their_model_cards(name: str, total: float, active: float) -> None:
    counts = count_params(load_model(name))
    assert counts.total == pytest.approx(total, rel=0.02)
    assert counts.active == pytest.approx(active, rel=0.05)


def test_exact_count_is_below_torchtitan_by_the_causal_and_embedding_terms() -> None:
    model = load_model("deepseek-v3-671b")
    parts = forward_matmul_flops_per_token(model, 8192)
    # Causal attention sees (S + 1) / 2 keys on average; TorchTitan's formula counts all S.
    tt_attention = 6 * model.n_layers * model.n_heads * (192 + 128) * 8192
    assert 3 * parts["attn.core"] == pytest.approx(tt_attention * (8192 + 1) / 2 / 8192)
    assert exact_flops_per_token(model, 8192) == pytest.approx(3 * sum(parts.values()))
    assert exact_flops_per_token(model, 8192) < torchtitan_flops_per_token(model, 8192)


def test_every_catalog_model_loads_and_counts() -> None:
    for name in model_names():
        counts = count_params(load_model(name))
        assert 0 < counts.active <= counts.total


def test_stage_layers_cover_every_layer_once() -> None:
    model = load_model("deepseek-v3-671b")
    for schedule, vpp in (("1f1b", 1), ("interleaved-1f1b", 2), ("dualpipev", 1)):
        plan = dataclasses.replace(HEADLINE_PLAN, pp=4, dp_shard=32, pp_schedule=schedule, vpp=vpp)
        layers = [layer for rank in stage_layers(model, plan) for layer in rank]
        assert sorted(layers) == list(range(model.n_layers))


def test_headline_plan_fits_a_b200_and_not_an_h100() -> None:
    model = load_model("deepseek-v3-671b")
    b200 = memory_per_gpu(model, HEADLINE_PLAN, load_gpu("b200"))
    assert b200.fits
    # fp32 master + grad + two Adam moments = 16 bytes per parameter, sharded over all 256 GPUs.
    assert b200.weights_bytes + b200.grads_bytes + b200.optimizer_bytes == pytest.approx(
        16 * 671e9 / 256, rel=0.05
    )
    tight = dataclasses.replace(HEADLINE_PLAN, dp_shard=8, global_batch=512)
    assert not memory_per_gpu(model, tight, load_gpu("h100")).fits


def test_recompute_modes_order_activation_memory() -> None:
    model = load_model("deepseek-v3-16b")
    plan = ParallelPlan(ep=8, dp_shard=8, seq_len=4096, global_batch=8)
    by_mode = {ac: memory_per_gpu(model, dataclasses.replace(plan, ac=ac), load_gpu("h100")).activations_bytes
               for ac in ("none", "selective", "full")}
    assert by_mode["full"] < by_mode["selective"] < by_mode["none"]


def test_dualpipe_keeps_two_model_copies_and_dualpipev_one() -> None:
    model = load_model("deepseek-v3-671b")
    v_plan = dataclasses.replace(HEADLINE_PLAN, pp=8, dp_shard=16, vpp=1, pp_schedule="dualpipev", global_batch=256)
    dual_plan = dataclasses.replace(v_plan, pp_schedule="dualpipe")
    v_layers = stage_layers(model, v_plan)
    dual_layers = stage_layers(model, dual_plan)
    assert sorted(layer for rank in v_layers for layer in rank) == list(range(model.n_layers))
    assert sorted(layer for rank in dual_layers for layer in rank) == sorted(2 * list(range(model.n_layers)))
    assert 0 in dual_layers[0] and model.n_layers - 1 in dual_layers[0]  # both ends of the model on rank 0
    gpu = load_gpu("b200")
    v_states = memory_per_gpu(model, v_plan, gpu).optimizer_bytes
    dual_states = memory_per_gpu(model, dual_plan, gpu).optimizer_bytes
    assert dual_states == pytest.approx(2 * v_states, rel=0.1)
