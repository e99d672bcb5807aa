"""Ledger tests, per memory component and per parallel dimension (cp, dp_replicate), in closed form."""

from __future__ import annotations

import dataclasses

import pytest

from sim.accounting import (
    DEEPEP_BUFFER_BYTES,
    RUNTIME_RESERVE_BYTES,
    count_params,
    memory_per_gpu,
)
from sim.catalog import load_cluster, load_model
from sim.predict import predict
from sim.specs import ParallelPlan
from sim.stacks import load_stack

_TT = load_stack("torchtitan")  # FSDP2: fp32 master weights, fp32 grads, two fp32 moments, all sharded
BYTES_PER_PARAM_STATE = {"weights": _TT.master_bytes, "grads": _TT.grad_bytes, "optimizer": _TT.moment_bytes}

MODEL = load_model("deepseek-v3-16b")
CLUSTER = load_cluster("hgx-b200", n_gpus=16)
GPU = CLUSTER.gpu
COUNTS = count_params(MODEL)
BF16 = 2


def plan(**changes: object) -> ParallelPlan:
    base = {"ep": 8, "dp_shard": 16, "seq_len": 2048, "global_batch": 16, "ac": "full"}
    base.update(changes)
    return ParallelPlan(**base)  # type: ignore[arg-type]


def test_parameter_states_sharded_over_tp_dp_shard_cp() -> None:
    for p in (plan(), plan(tp=2, dp_shard=8), plan(cp=2, dp_shard=8, global_batch=8)):
        mem = memory_per_gpu(MODEL, p, GPU)
        shard = p.tp * p.dp_shard * p.cp
        for state in ("weights", "grads", "optimizer"):
            expected = COUNTS.total / shard * BYTES_PER_PARAM_STATE[state]
            assert getattr(mem, f"{state}_bytes") == pytest.approx(expected, rel=1e-12), (p, state)


def test_replicas_hold_whole_shards() -> None:
    """HSDP: each replica group shards over dp_shard only; dp_replicate does not shrink the states."""
    one = memory_per_gpu(MODEL, plan(dp_shard=8, dp_replicate=2), GPU)
    assert one.optimizer_bytes == pytest.approx(COUNTS.total / 8 * BYTES_PER_PARAM_STATE["optimizer"])


def test_full_recompute_activations() -> None:
    """ac=full keeps the bf16 layer input of every layer, plus one layer recomputed, plus the logits."""
    p = plan()
    mem = memory_per_gpu(MODEL, p, GPU)
    tokens = p.micro_batch * p.seq_len / (p.tp * p.cp)
    kept = MODEL.n_layers * BF16 * MODEL.dim * tokens
    logits = p.micro_batch * p.seq_len * MODEL.vocab_size * (BF16 + 4) / (p.tp * p.cp)
    assert mem.activations_bytes > kept + logits  # plus the recomputed layer's full activations
    recomputed = mem.activations_bytes - kept - logits
    no_ac = memory_per_gpu(MODEL, plan(ac="none"), GPU)
    per_layer_none = (no_ac.activations_bytes - logits) / MODEL.n_layers
    assert recomputed == pytest.approx(per_layer_none, rel=0.3)  # the MoE layer dominates the average


@pytest.mark.parametrize("ac", ["none", "selective", "full"])
def test_context_parallel_halves_activations(ac: str) -> None:
    one = memory_per_gpu(MODEL, plan(ac=ac, dp_shard=8, global_batch=8), GPU)
    two = memory_per_gpu(MODEL, plan(ac=ac, dp_shard=8, cp=2, global_batch=8), GPU)
    assert two.activations_bytes == pytest.approx(one.activations_bytes / 2, rel=1e-12)


def test_prediction_reports_the_accounting() -> None:
    for p in (plan(), plan(dp_shard=8, cp=2, global_batch=8), plan(dp_shard=8, dp_replicate=2)):
        mem = memory_per_gpu(MODEL, p, GPU)
        pred = predict(MODEL, CLUSTER, p)
        assert pred.peak_memory_bytes == pytest.approx(mem.total_bytes, rel=1e-12)
        assert pred.memory["activations_bytes"] == pytest.approx(mem.activations_bytes, rel=1e-12)
        assert pred.fits_in_memory == mem.fits


def test_reserve_and_deepep_buffers() -> None:
    assert memory_per_gpu(MODEL, plan(), GPU).reserve_bytes == RUNTIME_RESERVE_BYTES
    deepep = memory_per_gpu(MODEL, plan(ep_backend="deepep"), GPU)
    assert deepep.reserve_bytes == RUNTIME_RESERVE_BYTES + DEEPEP_BUFFER_BYTES


def test_transient_is_two_layers_of_bf16_weights_and_grads() -> None:
    p = plan()
    mem = memory_per_gpu(MODEL, p, GPU)
    expert = COUNTS.routed_experts_per_layer / (p.ep * p.etp)
    dense = (COUNTS.moe_layer - COUNTS.routed_experts_per_layer) / p.tp
    assert mem.transient_bytes == pytest.approx(2 * 2 * BF16 * (dense + expert), rel=1e-12)


def test_total_is_the_sum_and_fits_compares_with_hbm() -> None:
    mem = memory_per_gpu(MODEL, plan(), GPU)
    parts = (mem.weights_bytes, mem.grads_bytes, mem.optimizer_bytes, mem.activations_bytes, mem.transient_bytes,
             mem.fsdp_unsharded_bytes, mem.reserve_bytes)
    assert mem.total_bytes == pytest.approx(sum(parts), rel=1e-12)
    assert mem.capacity_bytes == GPU.hbm_bytes
    small = dataclasses.replace(GPU, hbm_bytes=mem.total_bytes * 0.99)
    assert not memory_per_gpu(MODEL, plan(), small).fits


def test_interleaved_ranks_hold_their_warm_up_in_flight() -> None:
    """Interleaved 1F1B: rank r holds (vpp - 1) * pp + 2 * (pp - 1 - r) + 1 chunk activations at its peak
    (Megatron's warm-up plus the one in flight), in units of its whole stage (vpp chunks); 1F1B: pp - r."""
    from sim.accounting import _microbatches_in_flight

    plan = ParallelPlan(pp=4, vpp=2, pp_schedule="interleaved-1f1b", dp_shard=2, global_batch=64)
    assert [_microbatches_in_flight(plan, r) for r in range(4)] == [(4 + 2 * (3 - r) + 1) / 2 for r in range(4)]
    plain = ParallelPlan(pp=4, pp_schedule="1f1b", dp_shard=2, global_batch=64)
    assert [_microbatches_in_flight(plain, r) for r in range(4)] == [4.0, 3.0, 2.0, 1.0]


def test_expert_fsdp_groups_are_integer_ranks() -> None:
    from sim.layout import Layout

    layout = Layout(ParallelPlan(tp=2, ep=4, dp_shard=16, global_batch=32))
    for rank in (0, 3, 17):
        group = list(layout.expert_fsdp_group(rank))
        assert all(type(r) is int for r in group) and rank in group
