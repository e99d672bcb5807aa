"""Profiler range names: the simulator's op vocabulary, as the reference uses it.

Every ``torch.profiler.record_function`` label the reference emits is one of these strings, so measured
and simulated timelines line up by name. They are defined once in :mod:`sim.ops`; this module repeats
them as plain constants (the reference must not break when ``sim.ops`` renames its Python
identifiers) and a test checks that each one is in ``sim.ops.ALL_OPS``.
"""

from __future__ import annotations

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

ATTN_NORM = "attn.norm"
ATTN_Q_PROJ = "attn.q_proj"
ATTN_KV_PROJ = "attn.kv_proj"
ATTN_CORE = "attn.core"
ATTN_O_PROJ = "attn.o_proj"
MOE_NORM = "moe.norm"
MOE_ROUTER = "moe.router"
MOE_PERMUTE = "moe.permute"
MOE_DISPATCH = "moe.dispatch"
MOE_EXPERT_GEMM = "moe.expert_gemm"
MOE_EXPERT_GEMM_GATE_UP = "moe.expert_gemm.gate_up"
MOE_EXPERT_GEMM_DOWN = "moe.expert_gemm.down"
MOE_UNPERMUTE = "moe.unpermute"
MOE_COMBINE = "moe.combine"
MOE_SHARED_EXPERT = "moe.shared_expert"
MOE_QUANTIZE = "moe.quantize"
MLP_DENSE = "mlp.dense"
A2A_COUNT_EXCHANGE = "a2a.count_exchange"
A2A_HOST_SYNC = "a2a.host_sync"

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
