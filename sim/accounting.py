"""Exact accounting of a model and a plan: parameters, FLOPs per token, memory per GPU.

Pure functions of the specs; no simulation. Two FLOP counts, each named for what it is:

- :func:`torchtitan_flops_per_token`: TorchTitan's formula, the one published TFLOPS/MFU figures use
  (``6 * (non-embedding dense + active sparse params) + 6 * L * H * (qk + v) * S``; the router and
  shared experts count fully, attention without the causal halving).
- :func:`exact_flops_per_token`: the per-op count the simulator uses (every matmul of forward,
  input-gradient and weight-gradient, the output head, and causal attention over ``(S + 1) / 2`` keys
  on average). Recompute is not included: it is a property of the plan, not of the model.

Memory (:func:`memory_per_gpu`) follows TorchTitan's FSDP2 mixed precision: fp32 master weights, fp32
gradients and two fp32 Adam moments, all sharded over ``tp * dp_shard * cp`` (experts over
``ep * etp * expert_fsdp``, the same product), bf16 unsharded copies of the layers in flight, and
activations by recompute mode and pipeline schedule.

>>> from sim.catalog import load_model
>>> counts = count_params(load_model("deepseek-v3-671b"))
>>> round(counts.total / 1e9)
671
>>> round(torchtitan_flops_per_token(load_model("deepseek-v3-671b"), 8192) / 1e11, 3)
3.426
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sim.specs import GPUSpec, ModelSpec, ParallelPlan

__all__ = [
    "ParamCounts",
    "MemoryBreakdown",
    "count_params",
    "torchtitan_flops_per_token",
    "exact_flops_per_token",
    "forward_matmul_flops_per_token",
    "stage_layers",
    "memory_per_gpu",
    "BYTES_PER_PARAM_STATE",
    "RUNTIME_RESERVE_BYTES",
    "DEEPEP_BUFFER_BYTES",
]

# fp32 master weight + fp32 gradient + Adam exp_avg + exp_avg_sq (TorchTitan FSDP2 defaults).
BYTES_PER_PARAM_STATE = {"weights": 4, "grads": 4, "optimizer": 8}
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


def count_params(model: ModelSpec) -> ParamCounts:
    """Count every parameter of ``model`` (MTP modules reported apart, not in ``total``).

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
    # An MTP module: a full MoE layer plus its projection (2D x D) and two norms; heads are shared.
    mtp = model.n_mtp_layers * (moe_layer + 2 * d * d + 2 * d)
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


def torchtitan_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """Training FLOPs per token by TorchTitan's formula (what its TFLOPS and MFU logs report)."""
    counts = count_params(model)
    non_embedding_active = counts.active - counts.embedding
    attention = 6 * model.n_layers * model.n_heads * (model.qk_head_dim + model.attn_v_head_dim) * seq_len
    return float(6 * non_embedding_active + attention)


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
    mean_keys = (seq_len + 1) / 2
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


def exact_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    """Training FLOPs per token, op by op: forward plus backward (input and weight gradients, 2x)."""
    return 3 * sum(forward_matmul_flops_per_token(model, seq_len).values())


def stage_layers(model: ModelSpec, plan: ParallelPlan) -> list[list[int]]:
    """Layer indices of each pipeline rank, in the order of its virtual stages.

    Layers split as evenly as possible over the chunks (earlier chunks take the remainder).
    1F1B: ``pp`` chunks, rank r holds chunk r. Interleaved 1F1B: ``pp * vpp`` chunks, rank r holds r,
    r + pp, ... DualPipeV: ``2 * pp`` chunks in a V, rank r holds r and 2 * pp - 1 - r. DualPipe
    (bidirectional) keeps two copies of the model: ``pp`` stages, rank r holds stage r of one copy and
    stage pp - 1 - r of the other, so its layers appear on two ranks.
    """
    if plan.pp_schedule == "dualpipe":
        stages = _split_layers(model.n_layers, plan.pp)
        return [stages[r] + stages[plan.pp - 1 - r] for r in range(plan.pp)]
    dual = plan.pp_schedule == "dualpipev"
    n_chunks = plan.pp * (2 if dual else plan.vpp)
    chunks = _split_layers(model.n_layers, n_chunks)
    ranks: list[list[int]] = [[] for _ in range(plan.pp)]
    for c, layers in enumerate(chunks):
        if dual:
            rank = c if c < plan.pp else 2 * plan.pp - 1 - c
        else:
            rank = c % plan.pp
        ranks[rank].extend(layers)
    return ranks


def _split_layers(n_layers: int, n_chunks: int) -> list[list[int]]:
    """``n_layers`` consecutive layer indices in ``n_chunks`` near-equal runs (earlier runs one longer)."""
    base, extra = divmod(n_layers, n_chunks)
    chunks: list[list[int]] = []
    start = 0
    for c in range(n_chunks):
        size = base + (1 if c < extra else 0)
        chunks.append(list(range(start, start + size)))
        start += size
    return chunks


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

    @property
    def total_bytes(self) -> float:
        return (
            self.weights_bytes
            + self.grads_bytes
            + self.optimizer_bytes
            + self.activations_bytes
            + self.transient_bytes
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


def _layer_activation_bytes_per_token(model: ModelSpec, moe: bool, ac: str) -> float:
    """Bytes one layer keeps per token for backward (before TP sharding), by recompute mode.

    ``none`` keeps every saved tensor; ``selective`` keeps matmul and attention outputs but recomputes
    norms and activation functions; ``full`` keeps only the layer input.
    """
    d, h = model.dim, model.n_heads
    if ac == "full":
        return BF16 * d
    qk, v = model.qk_head_dim, model.attn_v_head_dim
    norm_outputs = 2 * d
    if model.attention == "mla":
        latent = (model.q_lora_rank * 2 if model.q_lora_rank else 0) + (model.kv_lora_rank + model.qk_rope_head_dim) + model.kv_lora_rank
        attn = latent + h * qk + h * (qk + v) + h * v
    else:
        kv_h = model.n_kv_heads
        attn = h * model.head_dim + 2 * kv_h * model.head_dim + h * model.head_dim
    attn_bytes = BF16 * (d + attn) + 4 * h  # layer input, projections, output; fp32 softmax stats
    if moe:
        f, k = model.moe_inter_dim, model.top_k
        ffn_matmul = k * d + 2 * k * f + k * d + model.n_shared_experts * 2 * f + 2 * d
        ffn_elementwise = k * f + model.n_shared_experts * f
        ffn_bytes = BF16 * (ffn_matmul) + 4 * 2 * model.n_routed_experts
    else:
        ffn_matmul = 2 * model.dense_inter_dim + d
        ffn_elementwise = model.dense_inter_dim
        ffn_bytes = BF16 * ffn_matmul
    keep = attn_bytes + ffn_bytes
    if ac == "none":
        keep += BF16 * (ffn_elementwise + norm_outputs)
    return float(keep)


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
    return float(min(n_mb, pp + 1))  # DualPipe / DualPipeV: PP + 1 (DeepSeek-V3 report, table 2)


def memory_per_gpu(model: ModelSpec, plan: ParallelPlan, gpu: GPUSpec) -> MemoryBreakdown:
    """Peak memory of the busiest GPU of ``plan`` (the pipeline rank with the most bytes)."""
    counts = count_params(model)
    shard = plan.tp * plan.dp_shard * plan.cp
    tokens = plan.micro_batch * plan.seq_len / (plan.tp * plan.cp)  # sequence-parallel share
    best: MemoryBreakdown | None = None
    for rank, layers in enumerate(stage_layers(model, plan)):
        params = 0
        largest_layer = 0
        activation_per_token = 0.0
        full_layer_per_token = 0.0
        for layer in layers:
            moe = layer >= model.n_dense_layers
            layer_params = counts.moe_layer if moe else counts.dense_layer
            params += layer_params
            largest_layer = max(largest_layer, layer_params)
            activation_per_token += _layer_activation_bytes_per_token(model, moe, plan.ac)
            full_layer_per_token = max(full_layer_per_token, _layer_activation_bytes_per_token(model, moe, "none"))
        holds_first, holds_last = 0 in layers, model.n_layers - 1 in layers
        if holds_first:
            params += counts.embedding
        if holds_last:
            params += counts.output + counts.final_norm
        sharded = params / shard
        in_flight = _microbatches_in_flight(plan, rank)
        activations = activation_per_token * tokens * in_flight
        if plan.ac != "none":
            activations += full_layer_per_token * tokens  # the layer being recomputed
        if holds_last:
            activations += plan.micro_batch * plan.seq_len * model.vocab_size * (BF16 + 4) / (plan.tp * plan.cp)
        # Unsharded bf16 weights (and their bf16 gradients in backward) of the layer in use and the
        # one prefetched: the expert part is split ep * etp ways, the rest tp ways.
        expert_share = counts.routed_experts_per_layer / (plan.ep * plan.etp)
        dense_share = (largest_layer - counts.routed_experts_per_layer) / plan.tp if largest_layer == counts.moe_layer else largest_layer / plan.tp
        transient = 2 * 2 * BF16 * (dense_share + (expert_share if largest_layer == counts.moe_layer else 0))
        reserve = RUNTIME_RESERVE_BYTES + (DEEPEP_BUFFER_BYTES if plan.ep_backend != "nccl" else 0)
        candidate = MemoryBreakdown(
            weights_bytes=sharded * BYTES_PER_PARAM_STATE["weights"],
            grads_bytes=sharded * BYTES_PER_PARAM_STATE["grads"],
            optimizer_bytes=sharded * BYTES_PER_PARAM_STATE["optimizer"],
            activations_bytes=activations,
            transient_bytes=transient,
            reserve_bytes=reserve,
            capacity_bytes=gpu.hbm_bytes,
            pp_rank=rank,
        )
        if best is None or candidate.total_bytes > best.total_bytes:
            best = candidate
    assert best is not None
    return best
