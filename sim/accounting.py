"""Exact accounting of a model and a plan: parameters, FLOPs per token, memory per GPU.

Pure functions of the specs; no simulation. Two FLOP counts, each named for what it is:

- :func:`torchtitan_flops_per_token`: TorchTitan's formula, the one published TFLOPS/MFU figures use
  (``6 * (non-embedding dense + active sparse params) + 6 * L * H * (qk + v) * S``; the router and
  shared experts count fully, attention without the causal halving).
- :func:`exact_flops_per_token`: the per-op count the simulator uses (every matmul of forward,
  input-gradient and weight-gradient, the output head, and causal attention over ``(S + 1) / 2`` keys
  on average, fewer in sliding-window layers: :meth:`~sim.specs.ModelSpec.mean_attended_keys`). Recompute
  is not included: it is a property of the plan, not of the model.

Memory (:func:`memory_per_gpu`) follows the stack (:class:`~sim.stacks.StackProfile`): TorchTitan's
FSDP2 mixed precision (fp32 master weights, gradients and moments sharded over ``tp * dp_shard * cp``,
bf16 unsharded copies of the layers in flight) or a ZeRO-1 distributed optimizer (Megatron, DeepSeek:
bf16 weights and the gradient buffer whole per data-parallel rank, master weights and moments sharded),
the stack's state byte widths, and activations by component (:func:`activation_ledger`), recompute
mode and module list, and pipeline schedule (DualPipe's two model copies in weights and optimizer).

>>> from sim.catalog import load_model
>>> counts = count_params(load_model("deepseek-v3-671b"))
>>> round(counts.total / 1e9)
671
>>> round(torchtitan_flops_per_token(load_model("deepseek-v3-671b"), 8192) / 1e11, 3)
3.426
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from sim.pp_layout import split_layers
from sim.specs import GPUSpec, ModelSpec, ParallelPlan

if TYPE_CHECKING:
    from sim.stacks import StackProfile

__all__ = [
    "ParamCounts",
    "MemoryBreakdown",
    "count_params",
    "torchtitan_flops_per_token",
    "exact_flops_per_token",
    "forward_matmul_flops_per_token",
    "stage_layers",
    "resolve_mtp_layers",
    "mtp_forward_flops_per_token",
    "memory_per_gpu",
    "activation_ledger",
    "saved_components",
    "RUNTIME_RESERVE_BYTES",
    "DEEPEP_BUFFER_BYTES",
    "optimizer_step_bytes_per_param",
    "optimizer_shard_divisor",
]

# CUDA context, NCCL communicators and allocator fragmentation: a planning allowance, not a measurement.
RUNTIME_RESERVE_BYTES = 5e9
# DeepEP v1 normal-mode NVLink + RDMA buffers (1 GB each is DeepEP's test default).
DEEPEP_BUFFER_BYTES = 2e9
BF16 = 2


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts of a model; ``*_per_layer`` are for one layer of that kind."""

    total: int
    active: int
    embedding: int
    output: int
    final_norm: int
    attention_per_layer: int
    norms_per_layer: int
    dense_ffn_per_layer: int
    routed_experts_per_layer: int
    shared_experts_per_layer: int
    router_per_layer: int
    mtp: int

    @property
    def dense_layer(self) -> int:
        return self.attention_per_layer + self.norms_per_layer + self.dense_ffn_per_layer

    @property
    def moe_layer(self) -> int:
        return (
            self.attention_per_layer
            + self.norms_per_layer
            + self.routed_experts_per_layer
            + self.shared_experts_per_layer
            + self.router_per_layer
        )

    @property
    def moe_layer_non_expert(self) -> int:
        """An MoE layer's parameters outside the routed experts (sharded like dense weights)."""
        return self.moe_layer - self.routed_experts_per_layer

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _attention_params(model: ModelSpec) -> int:
    d, h = model.dim, model.n_heads
    if model.attention == "mla":
        qk = model.qk_head_dim
        if model.q_lora_rank:
            q = d * model.q_lora_rank + model.q_lora_rank + model.q_lora_rank * h * qk
        else:
            q = d * h * qk
        kv = (
            d * (model.kv_lora_rank + model.qk_rope_head_dim)
            + model.kv_lora_rank
            + model.kv_lora_rank * h * (model.qk_nope_head_dim + model.v_head_dim)
        )
        return q + kv + h * model.v_head_dim * d
    hd = model.head_dim
    qk_norm = 2 * hd if model.qk_norm else 0
    return d * h * hd + 2 * d * model.n_kv_heads * hd + h * hd * d + qk_norm


@lru_cache(maxsize=64)
def count_params(model: ModelSpec) -> ParamCounts:
    """Count every parameter of ``model`` (MTP modules reported apart, not in ``total``; memoised, the
    counts are frozen).

    ``active`` is what one token touches: everything but the unselected routed experts.
    """
    d = model.dim
    swiglu = 3 * d
    embedding = model.vocab_size * d
    output = 0 if model.tie_embeddings else model.vocab_size * d
    attention = _attention_params(model)
    norms = 2 * d
    dense_ffn = swiglu * model.dense_inter_dim
    routed = model.n_routed_experts * swiglu * model.moe_inter_dim
    shared = model.n_shared_experts * swiglu * model.moe_inter_dim
    router = d * model.n_routed_experts
    moe_layer = attention + norms + routed + shared + router
    dense_layer = attention + norms + dense_ffn
    total = (
        embedding
        + output
        + d
        + model.n_dense_layers * dense_layer
        + model.n_moe_layers * moe_layer
    )
    inactive = model.n_moe_layers * routed * (model.n_routed_experts - model.top_k) // model.n_routed_experts
    # An MTP module (DeepSeek-V3 report s2.2; HF layer 61: enorm, hnorm, eh_proj, shared_head.norm): one
    # transformer block (MoE if the model has MoE layers), the 2D -> D projection and three norms; the
    # embedding and the output head are shared with the main model, so not counted again.
    mtp = model.n_mtp_layers * _mtp_module_params(model, moe_layer if model.n_moe_layers else dense_layer)
    return ParamCounts(
        total=total,
        active=total - inactive,
        embedding=embedding,
        output=output,
        final_norm=d,
        attention_per_layer=attention,
        norms_per_layer=norms,
        dense_ffn_per_layer=dense_ffn,
        routed_experts_per_layer=routed,
        shared_experts_per_layer=shared,
        router_per_layer=router,
        mtp=mtp,
    )


def _mtp_module_params(model: ModelSpec, block: int) -> int:
    """One MTP module's own parameters: its transformer block, the 2D -> D projection, three norms."""
    d = model.dim
    return block + 2 * d * d + 3 * d


def resolve_mtp_layers(model: ModelSpec, plan: ParallelPlan, stack: StackProfile | None = None) -> int:
    """MTP modules trained under ``plan``: its ``mtp_layers``, or (None) the model's ``n_mtp_layers`` when
    the stack's recipe trains MTP (``StackProfile.trains_mtp``; default stack: torchtitan, which does not)."""
    if plan.mtp_layers is not None:
        return plan.mtp_layers
    stack = stack if stack is not None else _default_stack()
    return model.n_mtp_layers if stack.trains_mtp else 0


def _mtp_active_params(model: ModelSpec) -> int:
    """Parameters one token touches in one MTP module, plus the shared output head it applies again."""
    counts = count_params(model)
    if model.n_moe_layers:
        block = counts.moe_layer - counts.routed_experts_per_layer * (model.n_routed_experts - model.top_k) \
            // model.n_routed_experts
    else:
        block = counts.dense_layer
    return _mtp_module_params(model, block) + model.vocab_size * model.dim


def torchtitan_flops_per_token(model: ModelSpec, seq_len: int, mtp_layers: int = 0) -> float:
    """Training FLOPs per token by TorchTitan's formula (what its TFLOPS and MFU logs report); each of
    ``mtp_layers`` MTP modules adds its active parameters, the output head it applies again and one
    layer's attention term (as Megatron's FLOP count does for ``mtp_num_layers``)."""
    counts = count_params(model)
    non_embedding_active = counts.active - counts.embedding
    attention_layer = 6 * model.n_heads * (model.qk_head_dim + model.attn_v_head_dim) * seq_len
    attention = model.n_layers * attention_layer
    out = float(6 * non_embedding_active + attention)
    if mtp_layers:
        out += float(mtp_layers * (6 * _mtp_active_params(model) + attention_layer))
    return out


def forward_matmul_flops_per_token(model: ModelSpec, seq_len: int) -> dict[str, float]:
    """Forward FLOPs per token of each op class, summed over all layers (2 FLOPs per multiply-add).

    Keys: ``attn.proj`` (all attention projections), ``attn.core`` (causal QK^T and PV), ``moe.router``,
    ``moe.expert_gemm`` (routed experts, K per token), ``moe.shared_expert``, ``mlp.dense``,
    ``output`` (the LM head).
    """
    d, h = model.dim, model.n_heads
    attention_proj = 2 * _attention_params(model) - (2 * 2 * model.head_dim if model.qk_norm else 0)
    if model.attention == "mla":
        attention_proj -= 2 * (model.q_lora_rank + model.kv_lora_rank)  # norm weights are not matmuls
    mean_keys = model.mean_attended_keys(seq_len, (seq_len + 1) / 2)
    attention_core = 2 * h * (model.qk_head_dim + model.attn_v_head_dim) * mean_keys
    swiglu = 3 * 2 * d
    return {
        "attn.proj": float(model.n_layers * attention_proj),
        "attn.core": float(model.n_layers * attention_core),
        "moe.router": float(model.n_moe_layers * 2 * d * model.n_routed_experts),
        "moe.expert_gemm": float(model.n_moe_layers * model.top_k * swiglu * model.moe_inter_dim),
        "moe.shared_expert": float(model.n_moe_layers * model.n_shared_experts * swiglu * model.moe_inter_dim),
        "mlp.dense": float(model.n_dense_layers * swiglu * model.dense_inter_dim),
        "output": float(2 * d * model.vocab_size),
    }


def mtp_forward_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """Forward FLOPs per token of one MTP module: the 2D -> D projection, one block (an MoE layer's, or a
    dense layer's for a model without MoE layers) and the shared output head applied to its output."""
    per = forward_matmul_flops_per_token(model, seq_len)
    layer = (per["attn.proj"] + per["attn.core"]) / model.n_layers
    if model.n_moe_layers:
        layer += (per["moe.router"] + per["moe.expert_gemm"] + per["moe.shared_expert"]) / model.n_moe_layers
    else:
        layer += per["mlp.dense"] / model.n_dense_layers
    return float(2 * 2 * model.dim * model.dim + layer + per["output"])


def exact_flops_per_token(model: ModelSpec, seq_len: int, mtp_layers: int = 0) -> float:
    """Training FLOPs per token, op by op: forward plus backward (input and weight gradients, 2x), with
    ``mtp_layers`` MTP modules (:func:`mtp_forward_flops_per_token`)."""
    total = 3 * sum(forward_matmul_flops_per_token(model, seq_len).values())
    if mtp_layers:
        total += 3 * mtp_layers * mtp_forward_flops_per_token(model, seq_len)
    return total


def stage_layers(model: ModelSpec, plan: ParallelPlan) -> list[list[int]]:
    """Layer indices of each pipeline rank, in the order of its virtual stages.

    Layers split per the plan's ``pp_layout``, else as evenly as possible over the chunks (earlier chunks
    take the remainder; :func:`sim.pp_layout.split_layers`).
    1F1B: ``pp`` chunks, rank r holds chunk r. Interleaved 1F1B: ``pp * vpp`` chunks, rank r holds r,
    r + pp, ... DualPipeV: ``2 * pp`` chunks in a V, rank r holds r and 2 * pp - 1 - r. DualPipe
    (bidirectional) keeps two copies of the model: ``pp`` stages, rank r holds stage r of one copy and
    stage pp - 1 - r of the other, so its layers appear on two ranks.
    """
    if plan.pp_schedule == "dualpipe":
        stages = split_layers(model.n_layers, plan.pp)
        return [stages[r] + stages[plan.pp - 1 - r] for r in range(plan.pp)]
    dual = plan.pp_schedule == "dualpipev"
    n_chunks = plan.pp * (2 if dual else plan.vpp)
    chunks = split_layers(model.n_layers, n_chunks, plan.pp_layout)
    ranks: list[list[int]] = [[] for _ in range(plan.pp)]
    for c, layers in enumerate(chunks):
        if dual:
            rank = c if c < plan.pp else 2 * plan.pp - 1 - c
        else:
            rank = c % plan.pp
        ranks[rank].extend(layers)
    return ranks


@dataclass(frozen=True)
class MemoryBreakdown:
    """Peak memory of the busiest GPU, bytes. ``fits`` compares ``total_bytes`` with ``capacity_bytes``."""

    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    transient_bytes: float
    reserve_bytes: float
    capacity_bytes: float
    pp_rank: int
    #: FSDP under pipelining: the rank's gathered BF16 weights and unsharded accumulated gradients, held from
    #: their first forward to the last backward (:func:`_fsdp_pipeline_resident_bytes`); 0 otherwise.
    fsdp_unsharded_bytes: float = 0.0

    @property
    def total_bytes(self) -> float:
        return (
            self.weights_bytes
            + self.grads_bytes
            + self.optimizer_bytes
            + self.activations_bytes
            + self.transient_bytes
            + self.fsdp_unsharded_bytes
            + self.reserve_bytes
        )

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["total_bytes"] = self.total_bytes
        out["fits"] = self.fits
        return out


#: Activation-ledger components: name -> the recompute module that drops it under selective recompute
#: ("" = kept unless full AC). Megatron ``recompute_modules`` names; ``moe`` drops the whole MoE block.
_COMPONENT_MODULE = {
    "attn.input": "", "attn.norm_out": "layernorm", "attn.latent": "", "attn.latent_norm": "layernorm",
    "attn.qkv": "mla_up_proj", "attn.out": "", "attn.softmax_stats": "core_attn",
    "moe.input": "", "moe.norm_out": "layernorm", "moe.router": "moe", "moe.expert_in": "moe",
    "moe.fc1_out": "moe", "moe.act_out": "moe_act", "moe.expert_out": "moe",
    "moe.shared_fc1_out": "shared_experts", "moe.shared_act_out": "moe_act",
    "mlp.input": "", "mlp.norm_out": "layernorm", "mlp.fc1_out": "mlp", "mlp.act_out": "mlp",
}
#: TorchTitan's op-level SAC (a stack without a module list): keeps matmul and attention outputs,
#: recomputes norms and activation functions.
_SAC_DROPS = ("attn.norm_out", "attn.latent_norm", "moe.norm_out", "moe.act_out", "moe.shared_act_out",
              "mlp.norm_out", "mlp.act_out")
FP8 = 1 + 1 / 32  # an FP8 element with its MX / 1x128 block scale


#: The MoE activations saved per routed token copy: what padding each expert to its capacity multiplies.
_PER_COPY_COMPONENTS = ("moe.expert_in", "moe.fc1_out", "moe.act_out", "moe.expert_out")


def activation_ledger(model: ModelSpec, moe: bool, plan: ParallelPlan | None = None,
                      stack: StackProfile | None = None) -> dict[str, float]:
    """Bytes per token one layer (MoE or dense) saves for backward, by component, before TP/CP sharding.

    Components are BF16 unless noted: the layer and block inputs; the norm outputs; MLA's latents (down-
    projection outputs) and their normed copies; the up-projected q/k/v; the attention output (kept in
    BF16: FlashAttention's backward reads it) and its fp32 softmax statistics; the router's fp32 logits and
    probabilities; per token copy (K of them, times the capacity factor when the plan pads every expert to its
    capacity): the expert input, the gate/up output, the SwiGLU output and
    the expert output (only if the router probabilities are applied after the experts, ``probs_in_act``
    off); the shared experts' gate/up and SwiGLU outputs. With an FP8 recipe and a stack that saves
    linear inputs in FP8 (``fp8_act_cache``), inputs consumed only by FP8 linears take 1 + 1/32 bytes.

    >>> from sim.catalog import load_model
    >>> m = load_model("deepseek-v3-671b")
    >>> led = activation_ledger(m, True)
    >>> led["moe.expert_in"] == 2 * m.top_k * m.dim and led["attn.input"] == 2 * m.dim
    True
    """
    stack = stack if stack is not None else _default_stack()
    d, h = model.dim, model.n_heads
    fp8_experts = plan is not None and plan.precision not in ("bf16",) and stack.fp8_act_cache
    fp8_linears = plan is not None and plan.precision not in ("bf16", "mxfp8-grouped") and stack.fp8_act_cache
    lin = FP8 if fp8_linears else BF16
    exp = FP8 if fp8_experts else BF16
    out: dict[str, float] = {"attn.input": BF16 * d, "attn.norm_out": BF16 * d}
    if model.attention == "mla":
        out["attn.latent"] = BF16 * (model.q_lora_rank + model.kv_lora_rank + model.qk_rope_head_dim)
        out["attn.latent_norm"] = lin * (model.q_lora_rank + model.kv_lora_rank)
        out["attn.qkv"] = BF16 * (h * model.qk_head_dim + h * (model.qk_head_dim + model.v_head_dim))
        out["attn.out"] = BF16 * h * model.v_head_dim
    else:
        out["attn.qkv"] = BF16 * (h + 2 * model.n_kv_heads) * model.head_dim
        out["attn.out"] = BF16 * h * model.head_dim
    out["attn.softmax_stats"] = 4.0 * h
    if moe:
        f, k, fs = model.moe_inter_dim, model.top_k, model.n_shared_experts * model.moe_inter_dim
        out.update({
            "moe.input": BF16 * d, "moe.norm_out": BF16 * d, "moe.router": 4.0 * 2 * model.n_routed_experts,
            "moe.expert_in": exp * k * d, "moe.fc1_out": BF16 * 2 * k * f, "moe.act_out": exp * k * f,
            "moe.expert_out": 0.0 if stack.probs_in_act else BF16 * k * d,
            "moe.shared_fc1_out": BF16 * 2 * fs, "moe.shared_act_out": lin * fs,
        })
    else:
        fd = model.dense_inter_dim
        out.update({"mlp.input": BF16 * d, "mlp.norm_out": BF16 * d, "mlp.fc1_out": BF16 * 2 * fd,
                    "mlp.act_out": lin * fd})
    if plan is not None and plan.precision != "bf16":  # the stack's own low-precision caches
        for component, width in stack.saved_act_bytes.items():
            if component in out:
                out[component] *= width / BF16
    if moe and plan is not None and plan.pad_to_capacity:  # every expert's input padded to its capacity
        for component in _PER_COPY_COMPONENTS:
            out[component] *= plan.expert_capacity_factor
    return {k: float(v) for k, v in out.items()}



def saved_components(ledger: dict[str, float], ac: str, stack: StackProfile | None = None) -> dict[str, float]:
    """The part of ``ledger`` kept under recompute mode ``ac``: ``none`` all, ``full`` the layer input,
    ``selective`` all but what the stack's ``recompute_modules`` (or TorchTitan's op-level SAC) re-runs."""
    stack = stack if stack is not None else _default_stack()
    if ac == "none":
        return dict(ledger)
    if ac == "full":
        return {"attn.input": ledger["attn.input"]}
    if stack.recompute_modules:
        return {k: v for k, v in ledger.items()
                if not (_COMPONENT_MODULE[k] and stack.recomputes(_COMPONENT_MODULE[k]))}
    return {k: v for k, v in ledger.items() if k not in _SAC_DROPS}


def _layer_activation_bytes_per_token(model: ModelSpec, moe: bool, ac: str, plan: ParallelPlan | None = None,
                                      stack: StackProfile | None = None) -> float:
    """Bytes one layer keeps per token for backward (before TP sharding), by recompute mode."""
    return float(sum(saved_components(activation_ledger(model, moe, plan, stack), ac, stack).values()))


def _fsdp_pipeline_resident_bytes(plan: ParallelPlan, stack: StackProfile, dense: float, expert: float) -> float:
    """What FSDP2 keeps unsharded on a pipeline rank through a step: with pipelining, TorchTitan's default
    ``reshard_after_forward_policy`` keeps every gathered BF16 weight until its backward (``not
    pp_enabled``), and ``torch.distributed.pipelining`` runs every backward but the last without gradient
    sync or reshard (``set_requires_gradient_sync(False)``, ``set_reshard_after_backward(False)``), so each
    parameter's unsharded gradient accumulates over the microbatches in the reduce dtype
    (``FSDPParam.to_accumulated_grad_if_needed``: ``grad_bytes``), until the last backward reduce-scatters it.
    Bytes for the rank's whole part of the model (``dense`` and ``expert`` parameters, :func:`_rank_params`),
    split only by TP (experts by EP x ETP)."""
    return (BF16 + stack.grad_bytes) * (dense / plan.tp + expert / (plan.ep * plan.etp))


def _microbatches_in_flight(plan: ParallelPlan, rank: int) -> float:
    """Chunk-activations pipeline rank ``rank`` holds at its peak, in units of its whole stage."""
    pp, n_mb = plan.pp, plan.n_microbatches
    if pp == 1:
        return 1.0
    if plan.pp_schedule == "1f1b":
        return float(min(n_mb, pp - rank))
    if plan.pp_schedule == "interleaved-1f1b":
        warmup = (plan.vpp - 1) * pp + 2 * (pp - 1 - rank)
        chunks = min(n_mb * plan.vpp, warmup + 1)
        return chunks / plan.vpp
    return float(min(n_mb, pp + 1))  # DualPipeV: PP + 1 (DeepSeek-V3 report, table 2)


def _rank_params(model: ModelSpec, layers: list[int], holds_first: bool, holds_last: bool,
                 mtp: int = 0) -> tuple[float, float]:
    """(dense, routed-expert) parameters of the whole model part one pipeline rank holding ``layers`` runs
    (before any TP / EP / data-parallel split): its layers, the embedding on the first rank, the head and
    the MTP modules on the last."""
    counts = count_params(model)
    dense = expert = 0.0
    for layer in layers:
        if layer >= model.n_dense_layers:
            dense += counts.moe_layer_non_expert
            expert += counts.routed_experts_per_layer
        else:
            dense += counts.dense_layer
    if holds_first:
        dense += counts.embedding
    if holds_last:
        dense += counts.output + counts.final_norm
        if mtp:  # the MTP modules live in the last stage (Megatron's layout "...mL")
            block_experts = counts.routed_experts_per_layer if model.n_moe_layers else 0
            per_module = _mtp_module_params(model, counts.moe_layer if model.n_moe_layers else counts.dense_layer)
            dense += mtp * (per_module - block_experts)
            expert += mtp * block_experts
            if not holds_first:  # a copy of the shared embedding for the MTP input (Megatron: mtp_process)
                dense += counts.embedding
    return dense, expert


def _state_bytes(model: ModelSpec, plan: ParallelPlan, layers: list[int], stack: StackProfile,
                 holds_first: bool, holds_last: bool, mtp: int = 0) -> tuple[float, float, float]:
    """(weights, grads, optimizer) bytes of one pipeline rank holding ``layers``.

    FSDP (TorchTitan): the master weights, gradients and moments all sharded over ``tp * dp_shard * cp``
    (experts over ``ep * etp * expert_fsdp``, the same product). ZeRO-1 (Megatron distributed optimizer,
    DeepSeek): BF16 weights and the gradient buffer whole on every data-parallel rank (split only by TP/EP),
    master weights and moments sharded over the data-parallel ranks (experts: the expert-data-parallel ones).
    """
    return _state_bytes_of(plan, stack, *_rank_params(model, layers, holds_first, holds_last, mtp))


def _state_bytes_of(plan: ParallelPlan, stack: StackProfile, dense: float, expert: float) -> tuple[float, float, float]:
    """:func:`_state_bytes` of a rank whose part of the model has ``dense`` and ``expert`` parameters."""
    if stack.param_sharding == "fsdp":
        sharded = (dense + expert) / (plan.tp * plan.dp_shard * plan.cp)
        return (sharded * stack.master_bytes, sharded * stack.grad_bytes, sharded * stack.moment_bytes)
    local_dense, local_expert = dense / plan.tp, expert / (plan.ep * plan.etp)
    dp = plan.dp_shard * plan.cp * plan.dp_replicate
    edp = max(1, plan.expert_fsdp) * plan.dp_replicate
    states = stack.master_bytes + stack.moment_bytes
    return (BF16 * (local_dense + local_expert), stack.grad_bytes * (local_dense + local_expert),
            states * (local_dense / dp + local_expert / edp))


def optimizer_step_bytes_per_param(stack: StackProfile) -> float:
    """HBM bytes one AdamW step moves per parameter of the rank's optimizer shard, from the stack's widths.

    The step reads the gradient, reads and writes the master weights and both moments (an elementwise
    update: each state once in, once out), and under ZeRO-1 writes the BF16 model copy that the parameter
    all-gather then sends; under FSDP the sharded FP32 parameters are the master and nothing else is written.
    Megatron (fp32 main_grad, master, moments): 4 + 2 x (4 + 8) + 2 = 30; TorchTitan: 28; DeepSeek (BF16
    moments): 22.

    >>> from sim.stacks import load_stack
    >>> [optimizer_step_bytes_per_param(load_stack(n)) for n in ("megatron", "torchtitan", "deepseek")]
    [30, 28, 22]
    """
    written_copy = BF16 if stack.param_sharding == "zero1" else 0
    return stack.grad_bytes + 2 * (stack.master_bytes + stack.moment_bytes) + written_copy


def optimizer_shard_divisor(plan: ParallelPlan, stack: StackProfile) -> int:
    """What divides a rank's FSDP-sharded parameter count (``Context.layer_shards``: dense over
    ``tp * dp_shard * cp``, experts over ``ep * etp * expert_fsdp``) to give its optimizer shard: ZeRO-1
    also shards over the replicas (:func:`_state_bytes_of`), FSDP keeps one copy per replica."""
    return plan.dp_replicate if stack.param_sharding == "zero1" else 1


def memory_per_gpu(model: ModelSpec, plan: ParallelPlan, gpu: GPUSpec,
                   stack: StackProfile | None = None) -> MemoryBreakdown:
    """Peak memory of the busiest GPU of ``plan`` under ``stack`` (default: torchtitan), bytes.

    Activations: the saved components (:func:`activation_ledger`, :func:`saved_components`) of the layers
    of one stage times the microbatches in flight (1F1B: ``pp - rank``; interleaved: warm-up chunks;
    DualPipe: ``pp - rank`` microbatches of the rank's first-direction stage plus ``rank + 1`` of its
    second-direction one, ``PP + 1`` in all as in the DeepSeek-V3 report's table 2), plus what one layer
    being recomputed re-materialises and the last stage's logits. Transient: FSDP's unsharded BF16 weights and gradients of the
    layer in use and the prefetched one (with pipelining: one layer's BF16 gradient, and
    ``fsdp_unsharded_bytes`` every gathered weight of the rank and its unsharded gradients accumulated in the
    reduce dtype, :func:`_fsdp_pipeline_resident_bytes`). None under ZeRO-1, whose BF16 weights are resident.
    """
    stack = (stack if stack is not None else _default_stack()).for_plan(plan)
    counts = count_params(model)
    mtp = resolve_mtp_layers(model, plan, stack)
    tokens = plan.micro_batch * plan.seq_len / (plan.tp * plan.cp)  # sequence-parallel share
    per_layer = {moe: _layer_activation_bytes_per_token(model, moe, plan.ac, plan, stack) for moe in (False, True)}
    kinds = (True, False) if model.n_dense_layers else (True,)
    # The layer being recomputed re-materialises what its recompute mode dropped.
    rematerialised = max(_layer_activation_bytes_per_token(model, moe, "none", plan, stack)
                         - per_layer[moe] for moe in kinds)
    stages = split_layers(model.n_layers, plan.pp) if plan.pp_schedule == "dualpipe" else None
    best: MemoryBreakdown | None = None
    for rank, layers in enumerate(stage_layers(model, plan)):
        largest_layer = max((counts.moe_layer if li >= model.n_dense_layers else counts.dense_layer) for li in layers)

        def act(stage: Sequence[int]) -> float:
            return float(sum(per_layer[li >= model.n_dense_layers] for li in stage))

        if stages is not None:  # DualPipe: two directions, each a 1F1B-like pipeline over half the microbatches
            half = max(1, plan.n_microbatches // 2)
            first, second = stages[rank], stages[plan.pp - 1 - rank]
            activation_per_token = (min(half, plan.pp - rank) * act(first) + min(half, rank + 1) * act(second))
            in_flight = 1.0
        else:
            activation_per_token = act(layers)
            in_flight = _microbatches_in_flight(plan, rank)
        holds_first, holds_last = 0 in layers, model.n_layers - 1 in layers
        dense, expert = _rank_params(model, layers, holds_first, holds_last, mtp)
        weights, grads, optimizer = _state_bytes_of(plan, stack, dense, expert)
        activations = activation_per_token * tokens * in_flight
        activations += rematerialised * tokens  # the layer being recomputed
        if holds_last:
            logits = plan.micro_batch * plan.seq_len * model.vocab_size * (BF16 + 4) / (plan.tp * plan.cp)
            activations += (1 + mtp) * logits  # the main loss's and each MTP loss's
            if mtp:  # each MTP block, with the normed embedding and hidden state it projects (2D, BF16)
                mtp_in_flight = 1.0 if stages is not None else in_flight
                block = per_layer[bool(model.n_moe_layers)] + 2 * BF16 * model.dim
                activations += mtp * block * tokens * mtp_in_flight
        transient = unsharded = 0.0
        if stack.param_sharding == "fsdp":
            # Unsharded bf16 weights (and their bf16 gradients in backward) of the layer in use and the
            # one prefetched: the expert part is split ep * etp ways, the rest tp ways.
            moe = largest_layer == counts.moe_layer
            expert_share = counts.routed_experts_per_layer / (plan.ep * plan.etp) if moe else 0.0
            dense_share = (largest_layer - (counts.routed_experts_per_layer if moe else 0)) / plan.tp
            layer_unsharded = dense_share + expert_share
            transient = 2 * 2 * BF16 * layer_unsharded
            if plan.pp > 1:  # the gathers stay; one layer's BF16 gradient before its upcast stays transient
                unsharded = _fsdp_pipeline_resident_bytes(plan, stack, dense, expert)
                transient = BF16 * layer_unsharded
        reserve = RUNTIME_RESERVE_BYTES + (DEEPEP_BUFFER_BYTES if plan.ep_backend != "nccl" else 0)
        candidate = MemoryBreakdown(
            weights_bytes=weights,
            grads_bytes=grads,
            optimizer_bytes=optimizer,
            activations_bytes=activations,
            transient_bytes=transient,
            fsdp_unsharded_bytes=unsharded,
            reserve_bytes=reserve,
            capacity_bytes=gpu.hbm_bytes,
            pp_rank=rank,
        )
        if best is None or candidate.total_bytes > best.total_bytes:
            best = candidate
    assert best is not None
    return best


def _default_stack() -> StackProfile:
    from sim.stacks import default_stack

    return default_stack()
