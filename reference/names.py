"""Profiler range names: the simulator's op vocabulary, as the reference uses it.

Every ``torch.profiler.record_function`` label the reference emits is one of these strings, defined
once in :mod:`sim.ops` and re-exported here, so measured and simulated timelines line up by name.
"""

from __future__ import annotations

from sim.ops import (
    A2A_COUNT_EXCHANGE,
    A2A_HOST_SYNC,
    ATTN_CORE,
    ATTN_KV_PROJ,
    ATTN_NORM,
    ATTN_O_PROJ,
    ATTN_Q_PROJ,
    MLP_DENSE,
    MOE_COMBINE,
    MOE_DISPATCH,
    MOE_EXPERT_GEMM,
    MOE_EXPERT_GEMM_DOWN,
    MOE_EXPERT_GEMM_GATE_UP,
    MOE_NORM,
    MOE_PERMUTE,
    MOE_QUANTIZE,
    MOE_ROUTER,
    MOE_SHARED_EXPERT,
    MOE_UNPERMUTE,
)

__all__ = [
    "ATTN_NORM",
    "ATTN_Q_PROJ",
    "ATTN_KV_PROJ",
    "ATTN_CORE",
    "ATTN_O_PROJ",
    "MOE_NORM",
    "MOE_ROUTER",
    "MOE_PERMUTE",
    "MOE_DISPATCH",
    "MOE_EXPERT_GEMM",
    "MOE_EXPERT_GEMM_GATE_UP",
    "MOE_EXPERT_GEMM_DOWN",
    "MOE_UNPERMUTE",
    "MOE_COMBINE",
    "MOE_SHARED_EXPERT",
    "MOE_QUANTIZE",
    "MLP_DENSE",
    "A2A_COUNT_EXCHANGE",
    "A2A_HOST_SYNC",
    "REFERENCE_OPS",
]

#: Every range name the reference can emit.
REFERENCE_OPS: tuple[str, ...] = (
    ATTN_NORM,
    ATTN_Q_PROJ,
    ATTN_KV_PROJ,
    ATTN_CORE,
    ATTN_O_PROJ,
    MOE_NORM,
    MOE_ROUTER,
    MOE_PERMUTE,
    MOE_DISPATCH,
    MOE_EXPERT_GEMM,
    MOE_EXPERT_GEMM_GATE_UP,
    MOE_EXPERT_GEMM_DOWN,
    MOE_UNPERMUTE,
    MOE_COMBINE,
    MOE_SHARED_EXPERT,
    MOE_QUANTIZE,
    MLP_DENSE,
    A2A_COUNT_EXCHANGE,
    A2A_HOST_SYNC,
)
