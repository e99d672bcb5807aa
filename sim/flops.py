"""Model FLOPs per training token by a named framework's formula: what that framework's TFLOPS and MFU report.

- ``torchtitan``: :func:`sim.accounting.torchtitan_flops_per_token` (6 x non-embedding active parameters
  plus the attention term, causal masking not discounted);
- ``megatron``: Megatron-Bridge's ``num_floating_point_operations``
  (``src/megatron/bridge/training/utils/flop_utils.py``, ``transformer_flops``): 3 x 2 x (GEMM
  multiply-adds) per token for the MLPs (dense, routed top-k, shared experts), MLA or GQA attention with
  its projections and the causal core (half of ``seq_len``), and the logits over the vocabulary padded to a
  multiple of 128; multi-token-prediction layers are added with ``mtp_layers``.

The two differ by 8-13% for the same tokens/s (the TorchTitan formula counts the full, unmasked attention
core and the router).

>>> from sim.catalog import load_model
>>> m = load_model("deepseek-v3-671b")
>>> round(megatron_flops_per_token(m, 4096, mtp_layers=1) * 2689 / 1e12)  # Megatron-Bridge's table: 699
699
"""

from __future__ import annotations

from sim.accounting import torchtitan_flops_per_token
from sim.errors import ConfigError
from sim.specs import ModelSpec

__all__ = ["FLOPS_FORMULAS", "flops_per_token", "megatron_flops_per_token"]

FLOPS_FORMULAS = ("torchtitan", "megatron")


def _padded_vocab(vocab: int, multiple: int = 128) -> int:
    return -(-vocab // multiple) * multiple


def megatron_flops_per_token(model: ModelSpec, seq_len: int, *, mtp_layers: int = 0) -> float:
    """Training FLOPs per token by Megatron-Bridge's formula (see the module docstring)."""
    h, heads = model.dim, model.n_heads
    n_layers = model.n_layers + mtp_layers
    n_dense = model.n_dense_layers
    n_moe = model.n_layers - n_dense + (mtp_layers if model.n_routed_experts > 1 else 0)
    if model.n_routed_experts <= 1:
        n_dense, n_moe = n_dense + (model.n_layers - n_dense) + mtp_layers, 0
    glu = 3
    mlp = 6 * h * (model.dense_inter_dim * glu * n_dense + model.moe_inter_dim * model.top_k * glu * n_moe
                   + model.moe_inter_dim * model.n_shared_experts * glu * n_moe)
    if model.attention == "mla":
        qk, rope, v = model.qk_nope_head_dim, model.qk_rope_head_dim, model.v_head_dim
        q_term = (model.q_lora_rank * (h + heads * (qk + rope) + 1) if model.q_lora_rank
                  else h * heads * (qk + rope))
        per_layer = (q_term + model.kv_lora_rank * (h + heads * (qk + v) + 1) + h * rope + heads * v * h
                     + seq_len * heads * (qk + rope) / 2 + seq_len * heads * v / 2)
    else:
        kv_heads = model.n_kv_heads or heads
        q = model.head_dim * heads
        kv = model.head_dim * kv_heads
        per_layer = h * (q + 2 * kv) + q * h + q * seq_len / 2 * 2
    attention = 6 * n_layers * per_layer
    mtp = 6 * mtp_layers * (3 * h + 2 * h * h)
    logits = 6 * h * _padded_vocab(model.vocab_size) * (mtp_layers + 1)
    return float(mlp + attention + mtp + logits)


def flops_per_token(model: ModelSpec, seq_len: int, formula: str = "torchtitan") -> float:
    """FLOPs per token by ``formula`` (one of :data:`FLOPS_FORMULAS`)."""
    if formula == "torchtitan":
        return torchtitan_flops_per_token(model, seq_len)
    if formula == "megatron":
        return megatron_flops_per_token(model, seq_len)
    raise ConfigError(f"flops formula must be one of {', '.join(FLOPS_FORMULAS)}; got {formula!r}")
