"""The four specs every prediction starts from: what is trained, on what, how it is split.

``ModelSpec`` (the network), ``GPUSpec`` (one accelerator's datasheet), ``ClusterSpec`` (GPUs, nodes,
NVLink domains, NICs, fabric) and ``ParallelPlan`` (degrees, schedule, batch, recompute, precision,
EP backend). They are frozen dataclasses in SI units; files in human units are converted once by
:mod:`sim.loaders`. No spec holds another's fields; derive variants with ``dataclasses.replace``.

Shape letters used in names and docs: T tokens, D model dim, F expert hidden dim, E experts,
e local experts, K top-k, H heads, S sequence length.

>>> from sim.catalog import load_model
>>> m = load_model("debug")
>>> m.n_moe_layers == m.n_layers - m.n_dense_layers
True
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal

from sim.errors import ConfigError, PlanError
from sim.limits import (
    CLUSTER_BOUNDS,
    FABRIC_BOUNDS,
    GPU_BOUNDS,
    MAX_MICROBATCHES,
    MAX_TOKENS_PER_STEP,
    MODEL_BOUNDS,
    PLAN_BOUNDS,
    check_fields,
    check_routing,
)

__all__ = [
    "ModelSpec",
    "GPUSpec",
    "FabricSpec",
    "ClusterSpec",
    "ParallelPlan",
    "PP_SCHEDULES",
    "AC_MODES",
    "PRECISIONS",
    "FP8_ATTENTION_PRECISIONS",
    "EP_BACKENDS",
    "TRANSPORTS",
    "ATTENTION_KINDS",
    "SCORE_FUNCS",
    "RECOMPUTE_MODULES",
    "GRAD_REDUCE_DTYPES",
    "GRAD_REDUCE_BYTES",
    "CP_COMM_TYPES",
    "TE_GRAPH_SCOPES",
]

PP_SCHEDULES = ("1f1b", "interleaved-1f1b", "dualpipe", "dualpipev")
AC_MODES = ("none", "selective", "full")
#: ``fp8-current``: Transformer Engine FP8 with current (per-tensor) scaling on every linear (Hopper).
PRECISIONS = ("bf16", "mxfp8-grouped", "mxfp8", "fp8-blockwise", "fp8-current")
#: Precisions under which the attention core may run in FP8 (``ParallelPlan.fp8_attention``): the whole-model FP8
#: recipes, inside which Transformer Engine's ``fp8_dot_product_attention`` runs.
FP8_ATTENTION_PRECISIONS = ("mxfp8", "fp8-blockwise", "fp8-current")
#: Megatron-Core ``--recompute-modules`` names (``ac = "selective"``).
RECOMPUTE_MODULES = ("core_attn", "layernorm", "mla_up_proj", "mlp", "moe_act", "moe", "shared_experts")
EP_BACKENDS = ("nccl", "deepep", "deepep-ll", "hybridep", "uccl-ep", "deepep-v2")
#: scale-out transports a fabric can run (:attr:`FabricSpec.transport`)
TRANSPORTS = ("infiniband", "efa")
#: gradient accumulation / reduction dtypes a plan may name, and their bytes per element.
GRAD_REDUCE_DTYPES = ("fp32", "bf16")
#: Megatron-Core ``cp_comm_type``: "p2p" (ring attention: key/value blocks passed around the ring, each transfer
#: under the attention of the block before; its default and TorchTitan's) or "a2a" (DeepSpeed-Ulysses: all-to-alls
#: of Q, K, V and the output around the attention core, on the step's path).
CP_COMM_TYPES = ("p2p", "a2a")
GRAD_REDUCE_BYTES = {"fp32": 4, "bf16": 2}
ATTENTION_KINDS = ("mla", "gqa")
SCORE_FUNCS = ("sigmoid", "softmax")

AttentionKind = Literal["mla", "gqa"]


def _require_positive(owner: str, **values: float) -> None:
    for field, value in values.items():
        if not value > 0 or not math.isfinite(value):  # NaN fails `> 0`; inf is no size
            raise ConfigError(f"{owner}: {field} must be positive, got {value}")


def _require_non_negative(owner: str, **values: float) -> None:
    for field, value in values.items():
        if not value >= 0 or not math.isfinite(value):
            raise ConfigError(f"{owner}: {field} must be zero or positive, got {value}")


def _require_choice(owner: str, field: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{owner}: {field} must be one of {', '.join(choices)}; got {value!r}")


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only MoE transformer (DeepSeek-V3 family, Qwen3-MoE, Mixtral, Kimi-K2).

    Attention is MLA (``attention="mla"``: ``q_lora_rank`` 0 means no query compression) or GQA
    (``attention="gqa"``: ``n_kv_heads`` and ``head_dim``). The first ``n_dense_layers`` layers use a
    dense SwiGLU FFN of ``dense_inter_dim``; the rest are MoE layers with ``n_routed_experts`` experts of
    hidden size ``moe_inter_dim``, ``top_k`` selected per token, plus ``n_shared_experts`` always-on
    experts of the same size. ``n_group``/``topk_group`` limit the groups (nodes) a token may reach.

    ``sliding_window`` > 0 makes layers attend only to the last ``sliding_window`` positions (GPT-OSS: 128),
    except every ``full_attention_interval``-th layer, which attends over the whole causal prefix (GPT-OSS: 2,
    alternating; 0: every layer windowed). Attention sinks and projection biases cost no modelled time.

    ``scores_before_experts``: the router's score scales each routed expert's input rather than its output (Llama 4's
    MoE; TorchTitan's ``MoEArgs`` default), so a token's K expert outputs are summed as they are, not weighted by a
    product with the scores (:meth:`sim.workload.Workload.moe_glue`).
    """

    name: str
    n_layers: int
    dim: int
    n_heads: int
    vocab_size: int
    n_routed_experts: int
    top_k: int
    moe_inter_dim: int
    n_dense_layers: int = 0
    dense_inter_dim: int = 0
    n_shared_experts: int = 0
    attention: str = "mla"
    q_lora_rank: int = 0
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128
    n_kv_heads: int = 0
    head_dim: int = 0
    qk_norm: bool = False
    n_group: int = 1
    topk_group: int = 1
    score_func: str = "softmax"
    route_scale: float = 1.0
    norm_topk_prob: bool = True
    n_mtp_layers: int = 0
    tie_embeddings: bool = False
    sliding_window: int = 0
    full_attention_interval: int = 0
    scores_before_experts: bool = False
    source: str = ""

    def __post_init__(self) -> None:
        owner = f"model {self.name!r}"
        check_fields(owner, vars(self), MODEL_BOUNDS)
        _require_positive(
            owner,
            n_layers=self.n_layers,
            dim=self.dim,
            n_heads=self.n_heads,
            vocab_size=self.vocab_size,
            n_routed_experts=self.n_routed_experts,
            top_k=self.top_k,
            moe_inter_dim=self.moe_inter_dim,
            n_group=self.n_group,
            topk_group=self.topk_group,
            route_scale=self.route_scale,
        )
        _require_non_negative(
            owner,
            n_dense_layers=self.n_dense_layers,
            dense_inter_dim=self.dense_inter_dim,
            n_shared_experts=self.n_shared_experts,
            q_lora_rank=self.q_lora_rank,
            n_mtp_layers=self.n_mtp_layers,
            sliding_window=self.sliding_window,
            full_attention_interval=self.full_attention_interval,
        )
        if self.full_attention_interval and not self.sliding_window:
            raise ConfigError(f"{owner}: full_attention_interval ({self.full_attention_interval}) needs a "
                              f"sliding_window > 0 (0: every layer attends over the whole causal prefix)")
        _require_choice(owner, "attention", self.attention, ATTENTION_KINDS)
        _require_choice(owner, "score_func", self.score_func, SCORE_FUNCS)
        if self.attention == "mla":
            _require_positive(
                owner,
                kv_lora_rank=self.kv_lora_rank,
                qk_nope_head_dim=self.qk_nope_head_dim,
                qk_rope_head_dim=self.qk_rope_head_dim,
                v_head_dim=self.v_head_dim,
            )
        else:
            _require_positive(owner, n_kv_heads=self.n_kv_heads, head_dim=self.head_dim)
            if self.n_heads % self.n_kv_heads:
                raise ConfigError(
                    f"{owner}: n_kv_heads ({self.n_kv_heads}) must divide n_heads ({self.n_heads})"
                )
        if self.n_dense_layers > self.n_layers:
            raise ConfigError(
                f"{owner}: n_dense_layers ({self.n_dense_layers}) exceeds n_layers ({self.n_layers})"
            )
        if self.n_dense_layers and self.dense_inter_dim <= 0:
            raise ConfigError(
                f"{owner}: dense_inter_dim must be positive when n_dense_layers "
                f"({self.n_dense_layers}) > 0, got {self.dense_inter_dim}"
            )
        if self.top_k > self.n_routed_experts:
            raise ConfigError(
                f"{owner}: top_k ({self.top_k}) exceeds n_routed_experts ({self.n_routed_experts})"
            )
        if self.n_routed_experts % self.n_group:
            raise ConfigError(
                f"{owner}: n_group ({self.n_group}) must divide n_routed_experts "
                f"({self.n_routed_experts})"
            )
        if self.topk_group > self.n_group:
            raise ConfigError(
                f"{owner}: topk_group ({self.topk_group}) exceeds n_group ({self.n_group})"
            )
        if self.n_group > 1 and self.top_k > self.topk_group * (self.n_routed_experts // self.n_group):
            raise ConfigError(
                f"{owner}: top_k ({self.top_k}) exceeds the experts reachable in topk_group "
                f"({self.topk_group}) groups of {self.n_routed_experts // self.n_group}"
            )

    @property
    def n_moe_layers(self) -> int:
        """Layers whose FFN is a mixture of experts."""
        return self.n_layers - self.n_dense_layers

    @property
    def qk_head_dim(self) -> int:
        """Per-head query/key width (MLA: nope + rope dims; GQA: head_dim)."""
        if self.attention == "mla":
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.head_dim

    @property
    def attn_v_head_dim(self) -> int:
        """Per-head value width."""
        return self.v_head_dim if self.attention == "mla" else self.head_dim

    @property
    def n_windowed_layers(self) -> int:
        """Layers that attend within ``sliding_window`` (every layer but each ``full_attention_interval``-th).

        >>> m = ModelSpec("m", n_layers=36, dim=64, n_heads=8, vocab_size=10, n_routed_experts=4, top_k=1,
        ...               moe_inter_dim=8, attention="gqa", n_kv_heads=1, head_dim=8, sliding_window=128,
        ...               full_attention_interval=2)
        >>> m.n_windowed_layers, round(m.mean_attended_keys(4096, 2048.5), 2)
        (18, 1087.26)
        """
        if not self.sliding_window:
            return 0
        if not self.full_attention_interval:
            return self.n_layers
        return self.n_layers - self.n_layers // self.full_attention_interval

    def mean_attended_keys(self, seq_len: int, full_keys: float) -> float:
        """Keys per query averaged over the layers: ``full_keys`` (what a full-attention layer's query sees:
        the causal mean, or a document mask's) in full layers; in windowed layers the exact causal mean of
        ``min(position + 1, sliding_window)``, at most ``full_keys``. The per-layer work is linear in the keys,
        so one layer at this mean costs what the model's layers cost on average."""
        windowed = self.n_windowed_layers
        if not windowed:
            return full_keys
        return ((self.n_layers - windowed) * full_keys + windowed * self.window_keys(seq_len, full_keys)) / self.n_layers

    def window_keys(self, seq_len: int, full_keys: float) -> float:
        """Keys per query in a windowed layer: the causal mean of ``min(position + 1, sliding_window)``, at most
        ``full_keys``; ``full_keys`` for a model without windows."""
        if not self.sliding_window:
            return full_keys
        w = min(self.sliding_window, seq_len)
        return min(full_keys, (w * (w + 1) / 2 + (seq_len - w) * w) / seq_len)


@dataclass(frozen=True)
class GPUSpec:
    """One accelerator's datasheet: dense tensor rates, HBM, SMs, NVLink (per direction)."""

    name: str
    bf16_flops: float
    fp8_flops: float
    hbm_bytes: float
    hbm_bw_bytes_per_s: float
    num_sms: int
    nvlink_bw_bytes_per_s: float
    arch: str
    fp4_flops: float = 0.0
    mxfp8: bool = False
    deepep: bool = True
    #: softmax exponentials per second on the SFUs (attention's non-tensor-core bound); 0: not modelled.
    exp_per_s: float = 0.0
    source: str = ""

    def __post_init__(self) -> None:
        owner = f"gpu {self.name!r}"
        check_fields(owner, vars(self), GPU_BOUNDS)
        _require_positive(
            owner,
            bf16_flops=self.bf16_flops,
            fp8_flops=self.fp8_flops,
            hbm_bytes=self.hbm_bytes,
            hbm_bw_bytes_per_s=self.hbm_bw_bytes_per_s,
            num_sms=self.num_sms,
            nvlink_bw_bytes_per_s=self.nvlink_bw_bytes_per_s,
        )
        _require_non_negative(owner, fp4_flops=self.fp4_flops, exp_per_s=self.exp_per_s)


@dataclass(frozen=True)
class FabricSpec:
    """The scale-out network between NVLink domains.

    ``kind="rail-optimized"``: NIC i of every node goes to rail leaf i; ``nodes_per_leaf`` nodes share a
    leaf group (a SuperPOD scalable unit is 32 nodes). Above the leaves, ``tiers`` (2: leaf/spine, 3:
    leaf/spine/core) with oversubscription ratios (1.0 = non-blocking). ``transport``: what the NICs speak,
    ``"infiniband"`` (RDMA with GPU-initiated IBGDA) or ``"efa"`` (AWS Elastic Fabric Adapter: SRD over
    libfabric, no IBGDA; :mod:`sim.comm.transport`).
    """

    kind: str = "rail-optimized"
    tiers: int = 2
    nodes_per_leaf: int = 32
    leaf_oversubscription: float = 1.0
    spine_oversubscription: float = 1.0
    hop_latency_s: float = 1e-6
    nic_latency_s: float = 2e-6
    transport: str = "infiniband"

    def __post_init__(self) -> None:
        _require_choice("fabric", "kind", self.kind, ("rail-optimized", "fat-tree"))
        _require_choice("fabric", "transport", self.transport, TRANSPORTS)
        check_fields("fabric", vars(self), FABRIC_BOUNDS)
        if self.tiers not in (2, 3):
            raise ConfigError(f"fabric: tiers must be 2 or 3, got {self.tiers}")
        _require_positive(
            "fabric",
            nodes_per_leaf=self.nodes_per_leaf,
            leaf_oversubscription=self.leaf_oversubscription,
            spine_oversubscription=self.spine_oversubscription,
        )
        _require_non_negative("fabric", hop_latency_s=self.hop_latency_s, nic_latency_s=self.nic_latency_s)


@dataclass(frozen=True)
class ClusterSpec:
    """GPUs in nodes, nodes in NVLink domains, NICs into a fabric.

    ``gpus_per_node`` GPUs share a host; ``nvlink_domain_gpus`` GPUs share one NVLink/NVSwitch domain
    (8 for HGX, 72 for an NVL72 rack). ``nvlink_bw_bytes_per_s`` is per GPU per direction (0: take the
    GPU's datasheet value). Each GPU has ``nics_per_gpu`` NICs of ``nic_bw_bytes_per_s`` each.
    """

    name: str
    gpu: GPUSpec
    n_gpus: int
    gpus_per_node: int = 8
    nvlink_domain_gpus: int = 8
    nvlink_bw_bytes_per_s: float = 0.0
    nvlink_latency_s: float = 1e-6
    nics_per_gpu: int = 1
    nic_bw_bytes_per_s: float = 50e9
    fabric: FabricSpec = dataclasses.field(default_factory=FabricSpec)
    source: str = ""

    def __post_init__(self) -> None:
        owner = f"cluster {self.name!r}"
        check_fields(owner, vars(self), CLUSTER_BOUNDS)
        _require_positive(
            owner,
            n_gpus=self.n_gpus,
            gpus_per_node=self.gpus_per_node,
            nvlink_domain_gpus=self.nvlink_domain_gpus,
            nics_per_gpu=self.nics_per_gpu,
            nic_bw_bytes_per_s=self.nic_bw_bytes_per_s,
        )
        _require_non_negative(owner, nvlink_bw_bytes_per_s=self.nvlink_bw_bytes_per_s)
        if self.nvlink_domain_gpus % self.gpus_per_node:
            raise ConfigError(
                f"{owner}: gpus_per_node ({self.gpus_per_node}) must divide nvlink_domain_gpus "
                f"({self.nvlink_domain_gpus})"
            )
        if self.n_gpus % self.gpus_per_node and self.n_gpus > self.gpus_per_node:
            raise ConfigError(
                f"{owner}: n_gpus ({self.n_gpus}) must be a multiple of gpus_per_node "
                f"({self.gpus_per_node})"
            )

    @property
    def nvlink_bw(self) -> float:
        """NVLink bandwidth per GPU per direction, bytes/s (cluster override or datasheet)."""
        return self.nvlink_bw_bytes_per_s or self.gpu.nvlink_bw_bytes_per_s

    @property
    def n_nodes(self) -> int:
        return max(1, self.n_gpus // self.gpus_per_node)

    @property
    def domain_size(self) -> int:
        """GPUs in one NVLink domain, capped by the cluster size."""
        return min(self.nvlink_domain_gpus, self.n_gpus)

    def with_gpus(self, n_gpus: int) -> ClusterSpec:
        """The same cluster template sized to ``n_gpus``."""
        return dataclasses.replace(self, n_gpus=n_gpus)


#: CUDA-graph scopes a plan may name (``ParallelPlan.cuda_graphs``).
CUDA_GRAPH_SCOPES = ("stack", "none", "partial", "full")
#: Transformer Engine graph scopes of Megatron-Core's ``cuda_graph_scope`` that a partial plan may list
#: (``ParallelPlan.cuda_graph_scope``): the attention block, the router (with the MoE block's norm) and the
#: dispatcher's preprocessing (its sender-side permutation). The expert GEMMs of dropless MoE never are.
TE_GRAPH_SCOPES = ("attn", "moe_router", "moe_preprocess")


def _names(text: str) -> tuple[str, ...]:
    """A comma-separated plan field (``recompute_modules``, ``cuda_graph_scope``) as its names."""
    return tuple(x.strip() for x in text.split(",") if x.strip())


@dataclass(frozen=True)
class ParallelPlan:
    """How one step is split over the GPUs, TorchTitan style.

    World size = ``dp_replicate * dp_shard * cp * tp * pp``. Experts are split ``ep`` ways (EP borrows
    from ``dp_shard * cp``, and from ``tp`` when ``etp == 1``) and ``etp`` ways inside each expert.
    ``global_batch`` and ``micro_batch`` count sequences of ``seq_len`` tokens. ``routing`` is
    ``"balanced"``, ``"zipf:<s>"``, ``"dirichlet:<alpha>"``, ``"collapse:<k>"`` or a path to a tokens-per-expert file
    (:mod:`sim.routing`);
    ``routing_seed`` seeds the skewed ones.
    """

    tp: int = 1
    pp: int = 1
    pp_schedule: str = "1f1b"
    vpp: int = 1
    ep: int = 1
    etp: int = 1
    dp_shard: int = 1
    dp_replicate: int = 1
    cp: int = 1
    seq_len: int = 4096
    micro_batch: int = 1
    global_batch: int = 1
    ac: str = "full"
    #: with ``ac = "selective"``: comma-separated Megatron recompute modules overriding the stack's
    #: (e.g. ``"mla_up_proj,moe_act"``); "" = the stack's own list.
    recompute_modules: str = ""
    precision: str = "bf16"
    ep_backend: str = "nccl"
    deepep_sms: int = 20
    routing: str = "balanced"
    routing_seed: int = 0
    #: per-expert capacity, in multiples of an expert's balanced share (Megatron-Core ``moe_expert_capacity_factor``):
    #: the router drops the copies an expert receives beyond it before the dispatch; 0 = dropless. Changes nothing
    #: under balanced routing unless ``pad_to_capacity``.
    expert_capacity_factor: float = 0.0
    #: pad every expert's input up to its capacity (Megatron-Core ``moe_pad_expert_input_to_capacity``: static
    #: shapes): each expert computes, and the dispatch carries, ``expert_capacity_factor`` times the balanced rows.
    pad_to_capacity: bool = False
    #: HybridEP's static receive budget per EP rank, in multiples of a rank's balanced share (Megatron-Core
    #: ``moe_expert_rank_capacity_factor``, set for CUDA-graphed dispatch): the copies over it are dropped; 0 = none.
    ep_rank_capacity_factor: float = 0.0
    #: Megatron's combined 1F1B (``overlap_moe_expert_parallel_comm`` + ``delay_wgrad_compute``): after
    #: warm-up the forward of one microbatch and the backward of another run as one interleaved pair, each
    #: one's dispatch/combine hidden behind the other's compute. Needs ``ep > 1`` and a stack that has it.
    ep_overlap: bool = False
    #: multi-token-prediction modules trained (DeepSeek-V3 report s2.2; Megatron ``mtp_num_layers``), placed
    #: in the last pipeline stage; None: the model's ``n_mtp_layers`` if the stack's recipe trains them
    #: (``StackProfile.trains_mtp``), else 0 (:func:`sim.accounting.resolve_mtp_layers`).
    mtp_layers: int | None = None
    #: decoder layers per model chunk in Megatron-Core's ``pipeline_model_parallel_layout`` syntax (e.g. the
    #: DeepSeek-V3 recipes' ``"Et*4|(t*4|)*14tmL"``; :mod:`sim.pp_layout`); "" = as even as possible.
    pp_layout: str = ""
    #: dtype gradients are accumulated and reduced in: "fp32" or "bf16" (Megatron ``grad_reduce_in_fp32``,
    #: TorchTitan ``mixed_precision_reduce``); "" = the stack's (``StackProfile.grad_bytes``).
    grad_reduce_dtype: str = ""
    #: parameters per distributed-optimizer bucket (Megatron DDP ``bucket_size``; a Megatron-Bridge recipe's
    #: ``CommOverlapConfig.bucket_size``): what a bucket's gradient reduce-scatter and parameter all-gather
    #: carry (:mod:`sim.predict.dp_scale`); 0 = the stack's (``StackProfile.ddp_bucket_params``), else at least 1e6.
    ddp_bucket_params: float = 0.0
    #: CUDA-graph scope of the run's recipe: "stack" (the stack's launch mode), "none" (eager launches),
    #: "partial" (Megatron's TE scopes: attention, router, preprocess) or "full" (full-iteration graphs).
    cuda_graphs: str = "stack"
    #: with ``cuda_graphs = "partial"``: the comma-separated Transformer Engine scopes the recipe captures
    #: (:data:`TE_GRAPH_SCOPES`; Megatron ``cuda_graph_scope``); "" = all three, Megatron-Bridge's usual preset.
    cuda_graph_scope: str = ""
    #: the output layer (LM head, and the MTP heads) in the plan's FP8 recipe: Megatron ``fp8_output_proj``
    #: (MXFP8 only; Transformer Engine's LM-head linear). False: BF16, as Megatron-Core builds the output layer
    #: by default (a plain ``ColumnParallelLinear``), TorchTitan's float8/MX converters leave it and the DeepSeek-V3
    #: report keeps it.
    fp8_output_proj: bool = False
    #: the attention core (QK^T, softmax, PV and their gradients) in FP8: Transformer Engine's
    #: ``fp8_dot_product_attention`` (cuDNN's FP8 fused attention; MLPerf Training v6.0's DeepSeek-V3 recipes set
    #: ``FP8_DPA=True``). Needs an FP8 precision. False: BF16 attention, every framework's default.
    fp8_attention: bool = False
    #: the model's blocks under torch.compile (TorchTitan's ``compile.components`` lists ``"model"``): a compiled
    #: stack launches them as compiled regions. False: the blocks run eager (TorchTitan with ``compile.enable`` off
    #: or only the loss compiled), so they launch and issue from Python as an eager stack's do
    #: (:func:`sim.joint.launch_mode`). No effect on a stack that launches eagerly or from CUDA graphs.
    compile_model: bool = True
    #: how context parallelism exchanges attention's inputs (:data:`CP_COMM_TYPES`; Megatron ``cp_comm_type``):
    #: "p2p" passes key/value blocks around the CP ring under the attention of the block before (not priced),
    #: "a2a" all-to-alls Q, K, V and the output around the core (``cp.all_to_all`` ops). Only with ``cp`` > 1.
    cp_comm_type: str = "p2p"
    #: the routed experts' fc1, GLU and fc2 as Transformer Engine's fused grouped MLP (its op fuser,
    #: Megatron ``use_transformer_engine_op_fuser``, with ``NVTE_CUTEDSL_FUSED_GROUPED_MLP=1``: cuDNN front-end
    #: CuTe DSL grouped GEMMs, ``transformer_engine/pytorch/ops/fused/`` ``forward_grouped_mlp.py`` and
    #: ``backward_grouped_mlp.py`` from TE v2.14): one launch per GEMM over every local expert instead of one cuBLAS
    #: GEMM per expert (the GEMMs keep TE's fitted roll-off, ``grouped.half_rows_per_expert_launch``), the GLU and the
    #: fc2 input's MXFP8 cast in fc1's epilogue, the GLU's gradient and fc1's gradient cast in fc2's dgrad epilogue.
    #: Needs precision "mxfp8" (TE fuses only under a block-scaled recipe, on SM100-family GPUs). False: TE's
    #: grouped linears.
    fused_grouped_mlp: bool = False

    def __post_init__(self) -> None:
        owner = "plan"
        check_fields(owner, {k: v for k, v in vars(self).items() if not (k == "mtp_layers" and v is None)},
                     PLAN_BOUNDS)
        _require_positive(
            owner,
            tp=self.tp,
            pp=self.pp,
            vpp=self.vpp,
            ep=self.ep,
            etp=self.etp,
            dp_shard=self.dp_shard,
            dp_replicate=self.dp_replicate,
            cp=self.cp,
            seq_len=self.seq_len,
            micro_batch=self.micro_batch,
            global_batch=self.global_batch,
            deepep_sms=self.deepep_sms,
        )
        _require_choice(owner, "pp_schedule", self.pp_schedule, PP_SCHEDULES)
        _require_choice(owner, "ac", self.ac, AC_MODES)
        for module in self.recompute_module_list:
            _require_choice(owner, "recompute_modules", module, RECOMPUTE_MODULES)
        if self.recompute_modules and self.ac != "selective":
            raise ConfigError(f"plan: recompute_modules ({self.recompute_modules!r}) needs ac 'selective', "
                              f"got ac {self.ac!r}")
        _require_choice(owner, "precision", self.precision, PRECISIONS)
        _require_choice(owner, "ep_backend", self.ep_backend, EP_BACKENDS)
        _require_choice(owner, "cuda_graphs", self.cuda_graphs, CUDA_GRAPH_SCOPES)
        _require_choice(owner, "cp_comm_type", self.cp_comm_type, CP_COMM_TYPES)
        if self.cp_comm_type != "p2p" and self.cp == 1:
            raise ConfigError(f"plan: cp_comm_type {self.cp_comm_type!r} needs context parallelism (cp > 1): with cp "
                              "(1) there is no exchange")
        if not isinstance(self.cuda_graph_scope, str):
            raise ConfigError(f"plan: cuda_graph_scope must be a comma-separated string, got {self.cuda_graph_scope!r}")
        for scope in _names(self.cuda_graph_scope):
            _require_choice(owner, "cuda_graph_scope", scope, TE_GRAPH_SCOPES)
        if self.cuda_graph_scope and self.cuda_graphs != "partial":
            raise ConfigError(f"plan: cuda_graph_scope ({self.cuda_graph_scope!r}) needs cuda_graphs 'partial', "
                              f"got cuda_graphs {self.cuda_graphs!r}")
        if self.etp not in (1, self.tp):
            raise ConfigError(f"plan: etp ({self.etp}) must be 1 or equal to tp ({self.tp})")
        if self.pp_schedule == "1f1b" and self.vpp != 1:
            raise ConfigError(f"plan: vpp ({self.vpp}) must be 1 with pp_schedule '1f1b'")
        if not isinstance(self.fp8_output_proj, bool):
            raise ConfigError(f"plan: fp8_output_proj must be true or false, got {self.fp8_output_proj!r}")
        if self.fp8_output_proj and self.precision != "mxfp8":
            raise ConfigError(f"plan: fp8_output_proj needs precision 'mxfp8' (Megatron-Core: MXFP8 only), "
                              f"got precision {self.precision!r}")
        if not isinstance(self.fused_grouped_mlp, bool):
            raise ConfigError(f"plan: fused_grouped_mlp must be true or false, got {self.fused_grouped_mlp!r}")
        if self.fused_grouped_mlp and self.precision != "mxfp8":
            raise ConfigError(f"plan: fused_grouped_mlp needs precision 'mxfp8' (Transformer Engine fuses the grouped "
                              f"MLP under a block-scaled recipe only), got precision {self.precision!r}")
        if not isinstance(self.compile_model, bool):
            raise ConfigError(f"plan: compile_model must be true or false, got {self.compile_model!r}")
        if not isinstance(self.fp8_attention, bool):
            raise ConfigError(f"plan: fp8_attention must be true or false, got {self.fp8_attention!r}")
        if self.fp8_attention and self.precision not in FP8_ATTENTION_PRECISIONS:
            raise ConfigError(f"plan: fp8_attention needs an FP8 precision ({', '.join(FP8_ATTENTION_PRECISIONS)}: "
                              f"Transformer Engine runs FP8 attention inside its FP8 recipe), got precision "
                              f"{self.precision!r}")
        if not isinstance(self.ep_overlap, bool):
            raise ConfigError(f"plan: ep_overlap must be true or false, got {self.ep_overlap!r}")
        if self.ep_overlap and self.ep == 1:
            raise ConfigError("plan: ep_overlap needs expert parallelism (ep > 1): with ep (1) there is no "
                              "all-to-all to overlap")
        check_routing(self.routing, owner)
        if not isinstance(self.pad_to_capacity, bool):
            raise ConfigError(f"plan: pad_to_capacity must be true or false, got {self.pad_to_capacity!r}")
        if self.pad_to_capacity and not self.expert_capacity_factor:
            raise ConfigError("plan: pad_to_capacity needs an expert_capacity_factor (Megatron-Core pads each expert "
                              "to its capacity), got expert_capacity_factor 0 (dropless)")
        if self.ep_rank_capacity_factor and self.ep_backend != "hybridep":
            raise ConfigError(f"plan: ep_rank_capacity_factor ({self.ep_rank_capacity_factor:g}) is HybridEP's receive "
                              f"budget: it needs ep_backend 'hybridep', got ep_backend {self.ep_backend!r}")
        if self.grad_reduce_dtype:
            _require_choice(owner, "grad_reduce_dtype", self.grad_reduce_dtype, GRAD_REDUCE_DTYPES)
        if not isinstance(self.pp_layout, str):
            raise ConfigError(f"plan: pp_layout must be a layout string, got {self.pp_layout!r}")
        if self.pp_layout:
            from sim.pp_layout import decoders_per_chunk  # noqa: PLC0415  (syntax only; counts need the model)

            decoders_per_chunk(self.pp_layout)
            if self.pp_schedule in ("dualpipe", "dualpipev"):
                raise ConfigError(f"plan: pp_layout is for 1f1b and interleaved-1f1b chunks; {self.pp_schedule} "
                                  f"places its own (leave pp_layout empty)")
        if self.global_batch // (self.dp * self.micro_batch) > MAX_MICROBATCHES:
            raise ConfigError(
                f"plan: global_batch ({self.global_batch}) / (dp ({self.dp}) * micro_batch ({self.micro_batch})) "
                f"= {self.global_batch // (self.dp * self.micro_batch)} microbatches per step; at most "
                f"{MAX_MICROBATCHES} are simulated (raise micro_batch or dp)"
            )
        if self.global_batch * self.seq_len > MAX_TOKENS_PER_STEP:
            raise ConfigError(
                f"plan: global_batch ({self.global_batch}) * seq_len ({self.seq_len}) = "
                f"{self.global_batch * self.seq_len} tokens per step exceeds {MAX_TOKENS_PER_STEP}"
            )

    @property
    def recompute_module_list(self) -> tuple[str, ...]:
        """``recompute_modules`` as a tuple of names (empty: the stack's)."""
        return _names(self.recompute_modules)

    @property
    def graph_scopes(self) -> frozenset[str]:
        """The Transformer Engine scopes whose kernels replay from CUDA graphs: ``cuda_graph_scope`` (all of
        :data:`TE_GRAPH_SCOPES` when empty) under ``cuda_graphs = "partial"``, none otherwise.

        >>> sorted(ParallelPlan(cuda_graphs="partial", cuda_graph_scope="moe_router").graph_scopes)
        ['moe_router']
        >>> len(ParallelPlan(cuda_graphs="partial").graph_scopes), len(ParallelPlan().graph_scopes)
        (3, 0)
        """
        if self.cuda_graphs != "partial":
            return frozenset()
        return frozenset(_names(self.cuda_graph_scope) or TE_GRAPH_SCOPES)

    @property
    def world_size(self) -> int:
        return self.dp_replicate * self.dp_shard * self.cp * self.tp * self.pp

    @property
    def dp(self) -> int:
        """Data-parallel degree (replicas times shards): how many ways the batch is split."""
        return self.dp_replicate * self.dp_shard

    @property
    def non_data_parallel_size(self) -> int:
        """TorchTitan's divisor for tokens/s per device: cp * tp * pp."""
        return self.cp * self.tp * self.pp

    @property
    def expert_fsdp(self) -> int:
        """FSDP degree of the expert weights: the EP-borrowed dims left over after ``ep``."""
        borrowed = self.dp_shard * self.cp * (self.tp if self.etp == 1 else 1)
        return borrowed // self.ep

    @property
    def local_batch(self) -> int:
        """Sequences per data-parallel rank per step."""
        return self.global_batch // self.dp

    @property
    def n_microbatches(self) -> int:
        """Microbatches per data-parallel rank per step (gradient accumulation included)."""
        return self.local_batch // self.micro_batch

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len

    def check_fits(self, model: ModelSpec, n_gpus: int) -> None:
        """Raise :class:`PlanError` naming every factor if this plan cannot run ``model`` on ``n_gpus``."""
        if self.world_size != n_gpus:
            raise PlanError(
                f"plan: dp_replicate ({self.dp_replicate}) * dp_shard ({self.dp_shard}) * cp ({self.cp})"
                f" * tp ({self.tp}) * pp ({self.pp}) = {self.world_size}, but the cluster has "
                f"{n_gpus} GPUs"
            )
        if model.n_routed_experts % self.ep:
            raise PlanError(
                f"plan: expert parallel degree ep ({self.ep}) must divide the number of experts "
                f"({model.n_routed_experts}) of model {model.name!r}"
            )
        borrowed = self.dp_shard * self.cp * (self.tp if self.etp == 1 else 1)
        if borrowed % self.ep:
            raise PlanError(
                f"plan: ep ({self.ep}) must divide dp_shard ({self.dp_shard}) * cp ({self.cp})"
                + (f" * tp ({self.tp})" if self.etp == 1 else "")
                + f" = {borrowed}"
            )
        if model.n_heads % self.tp:
            raise PlanError(
                f"plan: tp ({self.tp}) must divide the number of attention heads ({model.n_heads}) "
                f"of model {model.name!r}"
            )
        if model.attention == "gqa" and model.n_kv_heads % self.tp and self.tp % model.n_kv_heads:
            raise PlanError(
                f"plan: tp ({self.tp}) and n_kv_heads ({model.n_kv_heads}) must divide one another"
            )
        if self.etp > 1 and model.moe_inter_dim % self.etp:
            raise PlanError(
                f"plan: etp ({self.etp}) must divide moe_inter_dim ({model.moe_inter_dim})"
            )
        stages = self.pp * self.vpp
        if stages > model.n_layers and not self.pp_layout:  # a layout may give E and L chunks of their own
            raise PlanError(
                f"plan: pp ({self.pp}) * vpp ({self.vpp}) = {stages} stages exceed the model's "
                f"{model.n_layers} layers"
            )
        if self.global_batch % (self.dp * self.micro_batch):
            raise PlanError(
                f"plan: global_batch ({self.global_batch}) must be a multiple of dp_replicate "
                f"({self.dp_replicate}) * dp_shard ({self.dp_shard}) * micro_batch "
                f"({self.micro_batch}) = {self.dp * self.micro_batch}"
            )
        if self.seq_len % (self.cp * self.tp):
            raise PlanError(
                f"plan: seq_len ({self.seq_len}) must be a multiple of cp ({self.cp}) * tp ({self.tp})"
            )
        if self.pp > 1:
            if self.pp_schedule == "dualpipe" and self.pp % 2:
                raise PlanError(f"plan: pp_schedule 'dualpipe' needs an even pp, got pp ({self.pp})")
            # DualPipe and DualPipeV fill both directions of the V: at least two microbatches per rank.
            needed = 2 * self.pp if self.pp_schedule in ("dualpipe", "dualpipev") else self.pp
            if self.n_microbatches < needed:
                raise PlanError(
                    f"plan: pp_schedule {self.pp_schedule!r} with pp ({self.pp}) needs at least "
                    f"{needed} microbatches per step, but global_batch ({self.global_batch}) / "
                    f"(dp ({self.dp}) * micro_batch ({self.micro_batch})) = {self.n_microbatches}"
                )
            if self.pp_schedule == "dualpipe" and self.n_microbatches % 2:
                raise PlanError(
                    f"plan: pp_schedule 'dualpipe' feeds half the microbatches from each end of the pipeline: "
                    f"needs an even microbatch count per step, got {self.n_microbatches}"
                )
            if self.pp_schedule == "interleaved-1f1b" and self.n_microbatches % self.pp:
                raise PlanError(
                    f"plan: interleaved-1f1b needs the microbatch count ({self.n_microbatches}) to be "
                    f"a multiple of pp ({self.pp})"
                )

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
