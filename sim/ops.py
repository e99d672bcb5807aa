"""The shared op vocabulary: one name per operation, used by ``reference``, ``calibrate`` and ``sim``.

The reference labels its regions with these strings (``torch.profiler.record_function``), the
calibrator matches profiled kernels on them, and the simulator names its trace events with them, so a
measured and a simulated timeline line up by name in Perfetto.

Names are ``<block>.<op>``; a sub-op adds one more component (``moe.expert_gemm.gate_up`` is part of
``moe.expert_gemm``). Backward and recompute are not separate names: a trace event carries the phase
(``fwd``, ``bwd``, ``recompute``) as an argument.

>>> MOE_DISPATCH
'moe.dispatch'
>>> MOE_DISPATCH in ALL_OPS
True
>>> op_class("moe.expert_gemm.down")
'moe.expert_gemm'
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
    "MOE_QUANTIZE",
    "MOE_UNPERMUTE",
    "MOE_COMBINE",
    "MOE_SHARED_EXPERT",
    "MLP_DENSE",
    "A2A_COUNT_EXCHANGE",
    "A2A_HOST_SYNC",
    "EMBED",
    "LOSS",
    "FSDP_ALL_GATHER",
    "FSDP_REDUCE_SCATTER",
    "TP_ALL_REDUCE",
    "TP_ALL_GATHER",
    "TP_REDUCE_SCATTER",
    "CP_ALL_TO_ALL",
    "PP_SEND",
    "PP_RECV",
    "DP_ALL_REDUCE",
    "OPTIMIZER_STEP",
    "ALL_OPS",
    "COMM_OPS",
    "PHASES",
    "op_class",
]

# Attention block (MLA or GQA).
ATTN_NORM = "attn.norm"
ATTN_Q_PROJ = "attn.q_proj"
ATTN_KV_PROJ = "attn.kv_proj"
ATTN_CORE = "attn.core"
ATTN_O_PROJ = "attn.o_proj"

# MoE block.
MOE_NORM = "moe.norm"
MOE_ROUTER = "moe.router"
MOE_PERMUTE = "moe.permute"
MOE_DISPATCH = "moe.dispatch"
MOE_EXPERT_GEMM = "moe.expert_gemm"
MOE_EXPERT_GEMM_GATE_UP = "moe.expert_gemm.gate_up"
MOE_EXPERT_GEMM_DOWN = "moe.expert_gemm.down"
MOE_QUANTIZE = "moe.quantize"
MOE_UNPERMUTE = "moe.unpermute"
MOE_COMBINE = "moe.combine"
MOE_SHARED_EXPERT = "moe.shared_expert"

# Dense FFN layers.
MLP_DENSE = "mlp.dense"

# The standard (NCCL) EP path's preliminaries.
A2A_COUNT_EXCHANGE = "a2a.count_exchange"
A2A_HOST_SYNC = "a2a.host_sync"

# Model ends.
EMBED = "embed"
LOSS = "loss"
#: a multi-token-prediction module's own ops (norms of the embedding and hidden state, the 2D -> D projection)
MTP = "mtp.proj"

# Parallelism collectives.
FSDP_ALL_GATHER = "fsdp.all_gather"
FSDP_REDUCE_SCATTER = "fsdp.reduce_scatter"
TP_ALL_REDUCE = "tp.all_reduce"
TP_ALL_GATHER = "tp.all_gather"
TP_REDUCE_SCATTER = "tp.reduce_scatter"
#: context parallelism's exchange around the attention core under Megatron's ``cp_comm_type`` "a2a"
#: (DeepSpeed-Ulysses): Q, K, V from sequence shards to head shards before it, the output back after it
CP_ALL_TO_ALL = "cp.all_to_all"
PP_SEND = "pp.send"
PP_RECV = "pp.recv"
DP_ALL_REDUCE = "dp.all_reduce"

OPTIMIZER_STEP = "optimizer.step"

ALL_OPS: tuple[str, ...] = (
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
    MOE_QUANTIZE,
    MOE_UNPERMUTE,
    MOE_COMBINE,
    MOE_SHARED_EXPERT,
    MLP_DENSE,
    A2A_COUNT_EXCHANGE,
    A2A_HOST_SYNC,
    EMBED,
    LOSS,
    MTP,
    FSDP_ALL_GATHER,
    FSDP_REDUCE_SCATTER,
    TP_ALL_REDUCE,
    TP_ALL_GATHER,
    TP_REDUCE_SCATTER,
    CP_ALL_TO_ALL,
    PP_SEND,
    PP_RECV,
    DP_ALL_REDUCE,
    OPTIMIZER_STEP,
)

#: Ops that move data between GPUs (they run on a communication stream in the simulator).
COMM_OPS: frozenset[str] = frozenset(
    {
        MOE_DISPATCH,
        MOE_COMBINE,
        A2A_COUNT_EXCHANGE,
        FSDP_ALL_GATHER,
        FSDP_REDUCE_SCATTER,
        TP_ALL_REDUCE,
        TP_ALL_GATHER,
        TP_REDUCE_SCATTER,
        CP_ALL_TO_ALL,
        PP_SEND,
        PP_RECV,
        DP_ALL_REDUCE,
    }
)

#: Phases an op event can carry (trace argument ``phase``).
PHASES: tuple[str, ...] = ("fwd", "bwd", "recompute", "step")


def op_class(name: str) -> str:
    """The op's class for breakdowns: sub-ops fold into their parent (``moe.expert_gemm.down`` ->
    ``moe.expert_gemm``); every other name is its own class.

    >>> op_class("attn.core")
    'attn.core'
    """
    if name.startswith(MOE_EXPERT_GEMM + "."):
        return MOE_EXPERT_GEMM
    return name
