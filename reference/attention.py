"""Multi-head latent attention (MLA) of the DeepSeek-V2/V3 family.

Queries are optionally low-rank (``q_lora_rank > 0``: D -> q_lora_rank -> RMSNorm -> H * (nope + rope));
keys and values come from one compressed latent (D -> kv_lora_rank, RMSNorm, -> H * (nope + v)) plus a
decoupled RoPE key of ``qk_rope_head_dim`` shared by all heads. Attention is causal, through
``F.scaled_dot_product_attention``.

Shape letters: B sequences, S sequence length, D model dim, H heads, Q query/key head dim (nope + rope),
N nope dim, R rope dim, V value head dim, C latent (lora) rank.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import record_function

from reference import names
from reference.errors import ConfigError
from reference.norm import RMSNorm
from reference.weights import fill_normal_
from sim.specs import ModelSpec

__all__ = ["MLA", "rope_tables", "apply_rope"]


def rope_tables(seq_len: int, rope_dim: int, theta: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables of shape (S, R/2) for rotary embeddings over adjacent (even, odd) pairs."""
    inv_freq_r = 1.0 / (theta ** (torch.arange(0, rope_dim, 2, dtype=torch.float32) / rope_dim))
    angles_SR = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq_r)
    return angles_SR.cos(), angles_SR.sin()


def apply_rope(x_BSHR: torch.Tensor, cos_SR: torch.Tensor, sin_SR: torch.Tensor) -> torch.Tensor:
    """Rotate adjacent pairs of the last dim of ``x`` (B, S, H, R) by the position angles."""
    x32 = x_BSHR.float().unflatten(-1, (-1, 2))
    even, odd = x32[..., 0], x32[..., 1]
    cos = cos_SR[None, :, None, :].to(x32.device)
    sin = sin_SR[None, :, None, :].to(x32.device)
    out = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return out.flatten(-2).to(x_BSHR.dtype)


class MLA(nn.Module):
    """One MLA block (projections, RoPE, causal SDPA, output projection) of ``spec``.

    The input norm is not part of this module: the decoder layer applies it (range ``attn.norm``).
    """

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        if spec.attention != "mla":
            raise ConfigError(
                f"model {spec.name!r}: the reference implements the DeepSeek-V3 family (attention "
                f"'mla'), but this model uses attention {spec.attention!r}"
            )
        if spec.qk_rope_head_dim % 2:
            raise ConfigError(
                f"model {spec.name!r}: qk_rope_head_dim ({spec.qk_rope_head_dim}) must be even for RoPE"
            )
        self.n_heads = spec.n_heads
        self.nope_dim = spec.qk_nope_head_dim
        self.rope_dim = spec.qk_rope_head_dim
        self.v_dim = spec.v_head_dim
        self.qk_dim = spec.qk_nope_head_dim + spec.qk_rope_head_dim
        self.q_lora_rank = spec.q_lora_rank
        self.kv_lora_rank = spec.kv_lora_rank
        self.softmax_scale = self.qk_dim**-0.5
        dim, heads = spec.dim, spec.n_heads
        if self.q_lora_rank > 0:
            self.wq_a = nn.Linear(dim, self.q_lora_rank, bias=False)
            self.q_norm = RMSNorm(self.q_lora_rank)
            self.wq_b = nn.Linear(self.q_lora_rank, heads * self.qk_dim, bias=False)
        else:
            self.wq = nn.Linear(dim, heads * self.qk_dim, bias=False)
        self.wkv_a = nn.Linear(dim, self.kv_lora_rank + self.rope_dim, bias=False)
        self.kv_norm = RMSNorm(self.kv_lora_rank)
        self.wkv_b = nn.Linear(self.kv_lora_rank, heads * (self.nope_dim + self.v_dim), bias=False)
        self.wo = nn.Linear(heads * self.v_dim, dim, bias=False)

    def init_weights(self, generator: torch.Generator, std: float = 0.02) -> None:
        """Draw every projection from N(0, std**2) with ``generator`` (fixed order)."""
        linears = [self.wq_a, self.wq_b] if self.q_lora_rank > 0 else [self.wq]
        linears += [self.wkv_a, self.wkv_b]
        for linear in linears:
            fill_normal_(linear.weight, std, generator)
        fill_normal_(self.wo.weight, std / math.sqrt(2.0), generator)
        if self.q_lora_rank > 0:
            self.q_norm.init_weights(generator)
        self.kv_norm.init_weights(generator)

    def forward(self, x_BSD: torch.Tensor) -> torch.Tensor:
        """Causal attention over each of the B sequences; returns (B, S, D)."""
        B, S, _ = x_BSD.shape
        H = self.n_heads
        with record_function(names.ATTN_Q_PROJ):
            if self.q_lora_rank > 0:
                q_BSHQ = self.wq_b(self.q_norm(self.wq_a(x_BSD)))
            else:
                q_BSHQ = self.wq(x_BSD)
            q_BSHQ = q_BSHQ.view(B, S, H, self.qk_dim)
            q_nope_BSHN, q_rope_BSHR = q_BSHQ.split([self.nope_dim, self.rope_dim], dim=-1)
            cos_SR, sin_SR = rope_tables(S, self.rope_dim)
            q_rope_BSHR = apply_rope(q_rope_BSHR, cos_SR, sin_SR)
            q_BSHQ = torch.cat((q_nope_BSHN, q_rope_BSHR), dim=-1)
        with record_function(names.ATTN_KV_PROJ):
            kv_BSC = self.wkv_a(x_BSD)
            latent_BSC, k_rope_BS1R = kv_BSC.split([self.kv_lora_rank, self.rope_dim], dim=-1)
            k_rope_BS1R = apply_rope(k_rope_BS1R.unsqueeze(2), cos_SR, sin_SR)
            kv_BSHX = self.wkv_b(self.kv_norm(latent_BSC)).view(B, S, H, self.nope_dim + self.v_dim)
            k_nope_BSHN, v_BSHV = kv_BSHX.split([self.nope_dim, self.v_dim], dim=-1)
            k_BSHQ = torch.cat((k_nope_BSHN, k_rope_BS1R.expand(B, S, H, self.rope_dim)), dim=-1)
        with record_function(names.ATTN_CORE):
            out_BHSV = F.scaled_dot_product_attention(
                q_BSHQ.transpose(1, 2),
                k_BSHQ.transpose(1, 2),
                v_BSHV.transpose(1, 2),
                is_causal=True,
                scale=self.softmax_scale,
            )
        with record_function(names.ATTN_O_PROJ):
            return self.wo(out_BHSV.transpose(1, 2).reshape(B, S, H * self.v_dim))
