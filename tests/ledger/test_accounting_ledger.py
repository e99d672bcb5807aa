"""Ledger tests of the accounting: forward FLOPs per op class and saved activations per token, from shapes."""

from __future__ import annotations

import pytest

from sim.accounting import (
    forward_matmul_flops_per_token,
    memory_per_gpu,
)
from sim.catalog import load_gpu, load_model
from sim.specs import ModelSpec, ParallelPlan

BF16 = 2


def _attention_proj_flops(m: ModelSpec) -> float:
    """2 FLOPs per weight of every attention projection (norm weights are no matmul)."""
    d, h = m.dim, m.n_heads
    if m.attention == "gqa":
        return 2.0 * (d * h * m.head_dim + 2 * d * m.n_kv_heads * m.head_dim + h * m.head_dim * d)
    qk = m.qk_nope_head_dim + m.qk_rope_head_dim
    q = d * m.q_lora_rank + m.q_lora_rank * h * qk if m.q_lora_rank else d * h * qk
    kv = d * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank * h * (m.qk_nope_head_dim + m.v_head_dim)
    return 2.0 * (q + kv + h * m.v_head_dim * d)


@pytest.mark.parametrize("name", ["deepseek-v3-671b", "deepseek-v3-16b", "qwen3-30b-a3b", "mixtral-8x22b"])
@pytest.mark.parametrize("seq_len", [1024, 8192])
def test_forward_flops_per_op_class(name: str, seq_len: int) -> None:
    m = load_model(name)
    got = forward_matmul_flops_per_token(m, seq_len)
    qk = m.qk_head_dim
    v = m.attn_v_head_dim
    moe, dense = m.n_layers - m.n_dense_layers, m.n_dense_layers
    assert got["attn.proj"] == pytest.approx(m.n_layers * _attention_proj_flops(m), rel=1e-12)
    assert got["attn.core"] == pytest.approx(m.n_layers * 2 * m.n_heads * (qk + v) * (seq_len + 1) / 2, rel=1e-12)
    assert got["moe.router"] == pytest.approx(moe * 2 * m.dim * m.n_routed_experts, rel=1e-12)
    assert got["moe.expert_gemm"] == pytest.approx(moe * m.top_k * 6 * m.dim * m.moe_inter_dim, rel=1e-12)
    assert got["moe.shared_expert"] == pytest.approx(moe * m.n_shared_experts * 6 * m.dim * m.moe_inter_dim,
                                                     rel=1e-12)
    assert got["mlp.dense"] == pytest.approx(dense * 6 * m.dim * m.dense_inter_dim, rel=1e-12)
    assert got["output"] == pytest.approx(2 * m.dim * m.vocab_size, rel=1e-12)
    assert set(got) == {"attn.proj", "attn.core", "moe.router", "moe.expert_gemm", "moe.shared_expert",
                        "mlp.dense", "output"}


# Saved activations per component and recompute mode: tests/test_accounting.py (the activation ledger).


def test_memory_as_dict() -> None:
    mem = memory_per_gpu(load_model("deepseek-v3-16b"), ParallelPlan(ep=8, dp_shard=16, global_batch=16),
                         load_gpu("b200"))
    d = mem.as_dict()
    assert d["total_bytes"] == mem.total_bytes and d["fits"] is mem.fits
    for key in ("weights_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes", "transient_bytes",
                "fsdp_unsharded_bytes", "reserve_bytes", "capacity_bytes", "pp_rank"):
        assert d[key] == getattr(mem, key)
