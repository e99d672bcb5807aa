"""Workload: each rank's ops for one microbatch through one layer (forward, backward, recompute).

Built from (model, plan) alone, TorchTitan's way of running DeepSeek-V3-style models:

- attention (MLA or GQA) with sequence-parallel TP: the norm runs on ``T/tp`` tokens, ``tp.all_gather``
  before the projections, ``tp.reduce_scatter`` after ``attn.o_proj``; MLA's down-projections
  (``wq_a``, ``wkv_a``) are replicated over TP, the up-projections and ``wo`` are split by heads;
- MoE: router replicated over TP; with ``etp == 1`` each TP rank dispatches ``1/tp`` of the tokens
  (TorchTitan's ``ReordererSequenceParallel``); ``moe.permute`` / ``moe.dispatch`` / grouped GEMMs
  (three ``_grouped_mm`` calls: w1, w3 = ``gate_up``; w2 = ``down``) / ``moe.combine`` /
  ``moe.unpermute``; shared experts TP-split on all tokens; the standard (NCCL) path first exchanges
  per-expert counts (``a2a.count_exchange``) and blocks on a device-to-host copy (``a2a.host_sync``);
  DeepEP normal-mode dispatch blocks the host too, until its receive counts are known (``a2a.host_sync``);
- precision recipes add MXFP8/FP8 quantize and scale-rearrange kernels (memory bound) per GEMM pass, as
  the stack implements them (:class:`~sim.stacks.StackProfile`): TorchAO quantises weights and
  activations at every call (``quantize_weights = "per_call"``, separate kernels); Transformer Engine
  quantises weights once per optimizer step (:meth:`Workload.step_ops`) and fuses activation
  quantisation into the producing kernel (``fused_act_quant``: the producer writes the FP8 copies, no
  separate kernel, no scale rearrange), keeping the forward's column-wise copy for wgrad
  (``fp8_act_cache``: no re-quantisation of the saved input in backward);
- DeepEP / HybridEP with ``deepep_in_place``: dispatch reads the tokens in place and combine reduces the
  weighted copies itself, so there is no sender-side ``moe.permute`` / ``moe.unpermute``;
- backward mirrors forward (GEMM -> dgrad + wgrad, attention -> 2x, all-gather <-> reduce-scatter,
  dispatch <-> combine); recompute re-runs the forward per AC mode (``full``: everything, including the
  all-to-alls; ``selective``: the stack's ``recompute_modules`` (Megatron: ``layernorm``, ``mla_up_proj``,
  ``core_attn``, ``mlp``, ``moe_act``, ``shared_experts``, ``moe``; each op carries its ``module`` tag),
  or, for a stack without a module list (TorchTitan), op-level SAC: memory-bound ops and every other
  linear, no communication).

Op FLOPs are per rank per microbatch, 2 per multiply-add; ``flops`` is what the rank executes;
``useful_frac`` is the share not duplicated by TP replication (MLA down-projections, router), so summing
``flops * useful_frac`` over ranks gives
:func:`sim.accounting.exact_flops_per_token` times the tokens.

Shape letters: T tokens, D model dim, F expert hidden dim, E experts, e local experts, K top-k,
H heads, S sequence length.

>>> from sim.catalog import load_model
>>> from sim.specs import ParallelPlan
>>> w = Workload(load_model("debug"), ParallelPlan(ep=2, dp_shard=2, global_batch=2, seq_len=64))
>>> [op.name for op in w.layer_ops("moe", "fwd")][12:16]
['moe.permute', 'a2a.count_exchange', 'a2a.host_sync', 'moe.dispatch']
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from sim import ops
from sim.comm.costs import DEEPEP_API_BACKENDS
from sim.documents import attended_keys
from sim.pp_layout import split_layers
from sim.specs import ModelSpec, ParallelPlan
from sim.stacks import StackProfile, default_stack

__all__ = ["OpSpec", "Workload", "LAYER_KINDS", "chunk_layers", "GRAPH_SCOPE_OF", "graph_scope"]

#: ``mtp``: an MTP module's input side (embedding of the next tokens, two norms, the 2D -> D projection);
#: ``mtp_head``: its loss through the shared output head. Its block is a ``moe`` (or ``dense``) layer.
LAYER_KINDS = ("embed", "dense", "moe", "head", "mtp", "mtp_head")
BF16 = 2
FP32 = 4


@dataclass(frozen=True, slots=True)
class OpSpec:
    """One kernel of the workload (per rank, per microbatch).

    ``kind``: ``gemm``, ``grouped_gemm``, ``attn``, ``mem`` (memory bound), ``accum`` (a PyTorch index kernel
    summing ``elems`` elements into rows by index, ``accumulate`` atomic/sorted), ``quant`` (MXFP8/FP8
    quantize of ``elems``), ``rearrange`` (scale rearrange of ``elems``, ``layout`` act/weight/wgrad),
    ``comm`` (``coll`` in ``tp.all_gather``, ``tp.reduce_scatter``, ``a2a.dispatch``, ``a2a.combine``,
    ``a2a.counts``) or ``host_sync``. ``load_scaled``: scales with the EP rank's routed-load factor.
    """

    name: str
    kind: str
    flops: float = 0.0
    nbytes: float = 0.0
    rows: float = 0.0
    elems: float = 0.0
    dtype: str = "bf16"
    gemm_pass: str = "fwd"
    coll: str = ""
    layout: str = ""
    load_scaled: bool = False
    useful_frac: float = 1.0
    backward: bool = False
    k_in: float = 0.0
    n_out: float = 0.0
    #: grouped_gemm: the local experts the call spans (0: unknown, the curve is read at ``rows``).
    groups: int = 0
    #: the recompute module the op belongs to (Megatron ``recompute_modules`` names; "" for none).
    module: str = ""
    #: mem: HBM bytes of the op's backward where its kernel's reads and writes say (0: twice the forward's, a
    #: kernel that reads its saved input and the incoming gradient and writes one gradient of each)
    backward_nbytes: float = 0.0
    #: accum: how its index kernel sums (``atomic``: ``scatter_add_`` / ``index_add_``; ``sorted``: ``index_put_``
    #: with accumulate; :data:`sim.costs.ACCUMULATE_BW_SHARE`); mem: how its backward's sum runs, where it has one
    accumulate: str = ""
    #: mem: elements its backward sums into rows by index (an index gather's backward), beside ``backward_nbytes``
    backward_accum_elems: float = 0.0
    #: mem: a cast (FP8 copies of an activation written by a separate kernel or its producer) whose gradient
    #: needs no backward kernel of its own (the backward's quantisation comes with the GEMM's backward passes)
    backward_free: bool = False
    #: kernels the op launches, each paying the stack's launch gap (grouped_gemm: Transformer Engine runs one cuBLAS
    #: GEMM per local expert; TE's casts: one per expert split, three under current scaling)
    launches: int = 1
    #: quant: FP8 copies one kernel writes per read of its BF16 input (Transformer Engine writes the row- and
    #: column-wise copies of a weight in one pass: MXFP8 BIDIMENSIONAL cast, blockwise quantize-transpose)
    copies: int = 1
    #: the kernel replays from a CUDA graph (a captured scope of a partial plan, :data:`GRAPH_SCOPE_OF`): it
    #: costs a graph node's time instead of the stack's launch gap
    graphed: bool = False
    #: attn: the share of ``flops`` and ``elems`` that is the model's sliding-window layers' (one op stands for the
    #: average layer), whose kernels take at least their query rows (``rows``: query rows x heads of those layers,
    #: at their share) times the cost model's per-row time (:meth:`sim.costs.CostModel.attention_time`)
    window_share: float = 0.0


#: The Transformer Engine graph scope (``ParallelPlan.cuda_graph_scope``) that captures each op, by op name:
#: Megatron-Core's ``attn`` scope is the self-attention block (its norm, projections and core), ``moe_router``
#: the MoE block's pre-norm and router, ``moe_preprocess`` the dispatcher's preprocessing (the sender-side
#: permutation). Ops not named here (experts, dispatch and combine, shared experts) launch as the stack does.
GRAPH_SCOPE_OF: dict[str, str] = {
    ops.ATTN_NORM: "attn", ops.ATTN_Q_PROJ: "attn", ops.ATTN_KV_PROJ: "attn", ops.ATTN_CORE: "attn",
    ops.ATTN_O_PROJ: "attn", ops.MOE_NORM: "moe_router", ops.MOE_ROUTER: "moe_router",
    ops.MOE_PERMUTE: "moe_preprocess",
}


def graph_scope(op: OpSpec) -> str:
    """The Transformer Engine graph scope that captures ``op`` ("" for none, :data:`GRAPH_SCOPE_OF`): compute
    kernels only, and of the permutations only the sender-side one before the dispatch (the receiver-side sort
    after it, scaled by the rank's routed load, is the dispatcher's postprocessing)."""
    if op.kind in ("comm", "host_sync") or (op.name == ops.MOE_PERMUTE and op.load_scaled):
        return ""
    return GRAPH_SCOPE_OF.get(op.name, "")


def chunk_layers(model: ModelSpec, plan: ParallelPlan) -> list[list[int]]:
    """Layer indices of each model chunk (virtual stage), in pipeline order: ``pp * vpp`` chunks (DualPipe:
    ``2 * pp``), per the plan's ``pp_layout`` or as even as possible, earlier chunks taking the remainder
    (:func:`sim.pp_layout.split_layers`, as :mod:`sim.accounting`)."""
    dual = plan.pp_schedule in ("dualpipe", "dualpipev")
    return split_layers(model.n_layers, plan.pp * (2 if dual else plan.vpp), plan.pp_layout)


class Workload:
    """The per-rank op lists of (model, plan, stack); cheap to build, lists cached per (kind, phase).

    ``stack`` (default: the torchtitan profile) decides quantisation, DeepEP's data path and selective
    recompute."""

    def __init__(self, model: ModelSpec, plan: ParallelPlan, stack: StackProfile | None = None) -> None:
        self.model = model
        self.plan = plan
        self.stack = (stack if stack is not None else default_stack()).for_plan(plan)
        self._cache: dict[tuple[str, str], list[OpSpec]] = {}

    @cached_property
    def mtp_layers(self) -> int:
        """MTP modules trained (:func:`sim.accounting.resolve_mtp_layers`)."""
        from sim.accounting import resolve_mtp_layers

        return resolve_mtp_layers(self.model, self.plan, self.stack)

    def last_chunk_tail(self) -> list[str]:
        """Layer kinds after the last chunk's layers: the output head and loss, then each MTP module (input
        side, its block, its loss), as Megatron's layout places them in the last stage (``...mL``)."""
        block = "moe" if self.model.n_moe_layers else "dense"
        return ["head"] + ["mtp", block, "mtp_head"] * self.mtp_layers

    # --- sizes ----------------------------------------------------------------------------------
    @cached_property
    def tokens(self) -> float:
        """T: tokens through attention per rank per microbatch (full sequence over TP, split by CP)."""
        return self.plan.micro_batch * self.plan.seq_len / self.plan.cp

    @property
    def tokens_sp(self) -> float:
        """Sequence-parallel shard: tokens per rank in norms and between TP regions."""
        return self.tokens / self.plan.tp

    @property
    def tokens_dispatched(self) -> float:
        """Tokens each rank dispatches to the experts (``T/tp`` with etp 1, ``T`` with etp = tp, and ``T`` on a
        DeepEP path that does not split the tokens over the TP ranks: :attr:`StackProfile.deepep_tp_token_split`)."""
        if self.plan.etp != 1:
            return self.tokens
        if self.plan.ep > 1 and self.plan.ep_backend in DEEPEP_API_BACKENDS and not self.stack.deepep_tp_token_split:
            return self.tokens
        return self.tokens / self.plan.tp

    @property
    def expert_rows(self) -> float:
        """Token copies each rank's experts receive under balanced routing."""
        return self.tokens_dispatched * self.model.top_k

    @property
    def local_experts(self) -> int:
        return self.model.n_routed_experts // self.plan.ep

    @property
    def expert_dtype(self) -> str:
        return {"bf16": "bf16", "mxfp8-grouped": "mxfp8", "mxfp8": "mxfp8", "fp8-blockwise": "fp8-blockwise",
                "fp8-current": "fp8"}[self.plan.precision]

    @property
    def linear_dtype(self) -> str:
        return {"bf16": "bf16", "mxfp8-grouped": "bf16", "mxfp8": "mxfp8", "fp8-blockwise": "fp8-blockwise",
                "fp8-current": "fp8"}[self.plan.precision]

    @property
    def expert_splits(self) -> int:
        """Pieces a grouped GEMM's input is quantised in: one per local expert where the stack runs one GEMM per
        expert (Transformer Engine's GroupedLinear), else the whole tensor at once (one grouped kernel, as TE's fused
        grouped MLP quantises and multiplies)."""
        return self.local_experts if self.stack.grouped_gemm_per_expert and not self.plan.fused_grouped_mlp else 1

    @property
    def head_dtype(self) -> str:
        """The output layer's GEMM dtype: the linears' under ``fp8_output_proj``, else BF16 (Megatron-Core's
        default ``ColumnParallelLinear`` output layer; TorchTitan's converters skip it)."""
        return self.linear_dtype if self.plan.fp8_output_proj else "bf16"

    @property
    def in_place_dispatch(self) -> bool:
        """DeepEP / HybridEP reading tokens in place (no sender-side permute / unpermute)."""
        return self.plan.ep > 1 and self.plan.ep_backend != "nccl" and self.stack.deepep_in_place

    @property
    def permute_in_dispatch(self) -> bool:
        """HybridEP's dispatch writes the received tokens expert-major and its combine reads them so
        (``dispatch_with_permute`` / ``combine_with_unpermute``, the only HybridEP path of Megatron-Core's
        ``fused_a2a.hybrid_ep_dispatch``; HybridEP's published bandwidths are of that API): no receiver-side
        permute / unpermute pass over memory."""
        return self.plan.ep > 1 and self.plan.ep_backend == "hybridep"

    @property
    def host_may_block(self) -> bool:
        """Whether a dispatch may block the host on the GPU (a device-to-host copy of the counts). Not inside a
        full-iteration CUDA graph (``cuda_graphs = "full"``): stream capture forbids a synchronising copy, so a
        dropless MoE captured whole hands its dispatcher a static bound instead (Megatron-Core's
        ``moe_expert_rank_capacity_factor`` with paged stashing in MLPerf Training v6.0's DeepSeek-V3 recipe;
        ``FullCudaGraphWrapper`` replays one graph per step)."""
        return self.plan.cuda_graphs != "full"

    @property
    def receiver_sort(self) -> bool:
        """A receiver-side pass that sorts the received tokens by local expert (and its mirror before the
        combine): not when the dispatch permutes (HybridEP), and not on the standard path with one local expert
        where the stack skips it (:attr:`StackProfile.sort_single_local_expert`)."""
        if self.permute_in_dispatch:
            return False
        single = self.plan.ep > 1 and self.plan.ep_backend == "nccl" and self.local_experts == 1
        return not single or self.stack.sort_single_local_expert

    def _sender_permute_bytes(self, unpermute: bool = False) -> float:
        """HBM bytes of the standard path's sender-side permute (each token to its K copies, sorted by
        destination) or unpermute (the K copies back, weighted and summed per token).

        Fused top-K kernels (:attr:`StackProfile.fused_permute`) move each token once and each copy once; an
        index gather reads and writes every copy as a row of its own, and the unpermute's scatter-add also reads
        and writes the tokens it accumulates into."""
        tokens, D = self.tokens_dispatched, self.model.dim
        copies = tokens * self.model.top_k
        if self.stack.fused_permute:
            return (copies + tokens) * BF16 * D
        return (2 * copies + (2 * tokens if unpermute else 0)) * BF16 * D

    def _sender_permute(self) -> OpSpec:
        """The standard path's sender-side sort of the token copies by destination (:meth:`_sender_permute_bytes`).
        Where the stack runs it as an index gather ``x[idx]`` in PyTorch (:attr:`StackProfile.indexed_accumulate`),
        its backward sums each token's K copies back with ``index_put_`` (accumulate: sorted) into a zeroed buffer of
        the rank's tokens (replicated over TP: every token of the sequence)."""
        nbytes = self._sender_permute_bytes()
        op = self._permutation(ops.MOE_PERMUTE, nbytes)
        if not self.stack.indexed_accumulate or self.stack.fused_permute:
            return op
        D = self.model.dim
        return replace(op, backward_nbytes=BF16 * self.tokens * D, accumulate="sorted",
                       backward_accum_elems=self.tokens_dispatched * self.model.top_k * D)

    def moe_glue(self, step: str) -> tuple[float, float]:
        """(forward, backward) HBM bytes of one token-bookkeeping pass of a MoE layer around its experts:
        ``"sort"`` (the receiver sorting the received copies by local expert), ``"unsort"`` (its mirror before the
        combine) or ``"combine"`` (the sender putting the K copies of each token back, weighted and summed).

        One pass reads and writes every copy once (a permutation's backward is the inverse permutation), and the
        sender's combine is :meth:`_sender_permute_bytes`'s, unless the stack runs the bookkeeping as separate eager
        ops (:attr:`StackProfile.eager_moe_glue`, TorchTitan), whose passes are counted op by op:

        - sort on the standard path: ``torch.vstack`` with a padding row (a copy), then the gather;
        - unsort on a DeepEP path: the copies times their scores (forward read and write; backward the gradient
          times the scores and the scores' gradient, which reads the gradient and the saved copies), then the
          scatter-add per token (a gather backward);
        - combine: a zeroed buffer of ``T x K`` slots (``T``: the rank's tokens before any TP split, the MoE input
          being replicated over TP), the index put of the copies, its cast to FP32, a bmm with the scores into
          ``T`` FP32 rows, their cast back; backward: the cast, the bmm's two gradients (the slots' FP32 gradient
          written, the saved FP32 slots read), the slots' cast back, the gather of the copies' gradient (TorchTitan's
          DeepSeek-V3, Qwen3 and GPT-OSS flavours, ``score_before_experts = False``; a model whose scores scale the
          experts' input, :attr:`sim.specs.ModelSpec.scores_before_experts` (Llama 4), sums the BF16 slots instead, a
          smaller pass counted the same here, without the bmm's batched backward of :meth:`_glue_ops`).
        """
        D = self.model.dim
        rows = BF16 * self.expert_rows * D  # one pass over the received copies
        glue = self.stack.eager_moe_glue
        if step == "sort":
            passes = 4 if glue and not self.in_place_dispatch else 2
            return passes * rows, passes * rows
        if step == "unsort":
            if glue and self.in_place_dispatch:
                return 4 * rows, 6 * rows
            return 2 * rows, 2 * rows
        if not glue:
            nbytes = self._sender_permute_bytes(unpermute=True)
            return nbytes, nbytes
        tokens = self.tokens
        slots, copies = tokens * self.model.top_k, self.tokens_dispatched * self.model.top_k
        fwd = (BF16 * slots  # zeroed slots
               + 2 * BF16 * copies  # index put of the copies
               + (BF16 + FP32) * slots  # cast to FP32
               + FP32 * slots + FP32 * tokens  # bmm with the scores
               + (FP32 + BF16) * tokens)  # cast back
        bwd = ((BF16 + FP32) * tokens  # cast's gradient
               + (FP32 + BF16) * slots  # cast back
               + 2 * BF16 * copies)  # gather of the copies' gradient
        return fwd * D, bwd * D + self._combine_bmm_grad_bytes()

    def _combine_bmm_grad_bytes(self) -> float:
        """HBM bytes of the two gradients of the combine's bmm (:meth:`moe_glue`, TorchTitan's FP32 slots): the slots'
        gradient (an outer product with the scores: the incoming FP32 gradient read, the slots' written) and the
        scores' gradient (the incoming gradient and the saved FP32 slots read)."""
        tokens = self.tokens
        slots = tokens * self.model.top_k
        return 2 * FP32 * (tokens + slots) * self.model.dim

    def _glue_ops(self, name: str, step: str, *, load_scaled: bool = False) -> list[OpSpec]:
        """The ops of bookkeeping pass ``step`` (:meth:`moe_glue`): its memory-bound op, its backward bytes its own;
        where the stack sums by index in PyTorch's index kernels (:attr:`StackProfile.indexed_accumulate`), each such
        sum is an op of kind ``accum`` (its elements no longer counted as bytes):

        - the receiver's sort (an index gather) has the sum as its backward: ``index_add_`` into the received tokens
          after DeepEP's in-place dispatch (``index_select``'s backward, atomic), ``index_put_`` with accumulate into
          the padded copies on the standard path (``x[permuted_indices]``'s backward, sorted); the backward's bytes
          are then the zeroed buffer it sums into;
        - DeepEP's unsort sums the K copies into their tokens in the forward (``scatter_add_``, atomic) after the
          score multiply; the forward's bytes are then that multiply's and the zeroed tokens', and the whole backward
          (the gather of the tokens' gradient back to the copies, then the multiply's) stays the memory-bound op's.

        Where the stack's combine is a bmm of the scores with the copies' FP32 slots and autograd runs its backward as
        batched GEMMs (:attr:`StackProfile.combine_bmm_batched`; not for a model with
        :attr:`~sim.specs.ModelSpec.scores_before_experts`), the bmm's two gradients leave the combine's backward
        bytes for an op of layout ``batched`` (:data:`sim.costs.ACCUMULATE_BW_SHARE`).
        """
        fwd, bwd = self.moe_glue(step)
        if (step == "combine" and self.stack.eager_moe_glue and self.stack.combine_bmm_batched
                and not self.model.scores_before_experts):
            # the bmm's two gradients at the batched kernels' rate, the rest of the backward as bytes
            bmm = self._combine_bmm_grad_bytes()
            return [replace(self._permutation(name, fwd, backward_nbytes=bwd - bmm, load_scaled=load_scaled),
                            accumulate="batched", backward_accum_elems=bmm / 2)]
        if not self.stack.indexed_accumulate or step == "combine" or (step == "unsort" and not self.in_place_dispatch):
            return [self._permutation(name, fwd, backward_nbytes=bwd, load_scaled=load_scaled)]
        D, K = self.model.dim, self.model.top_k
        elems = self.expert_rows * D
        zeroed_tokens = BF16 * self.expert_rows / K * D  # the received tokens' zeroed buffer (K copies each, at most)
        if step == "sort":
            layout = "atomic" if self.in_place_dispatch else "sorted"
            zeroed = zeroed_tokens if self.in_place_dispatch else BF16 * elems  # else the padded copies' buffer
            return [replace(self._permutation(name, fwd, backward_nbytes=zeroed, load_scaled=load_scaled),
                            accumulate=layout, backward_accum_elems=elems)]
        # DeepEP's unsort: the score multiply (when the glue runs it apart), then the scatter-add of the K copies
        multiply = fwd - 2 * BF16 * elems  # moe_glue's forward: the multiply's pass, then the scatter-add's
        return [self._permutation(name, multiply + zeroed_tokens, backward_nbytes=bwd, load_scaled=load_scaled),
                OpSpec(name, "accum", elems=elems, accumulate="atomic", load_scaled=load_scaled, module="moe")]

    def _act_quant(self, name: str, elems: float, *, module: str = "", load_scaled: bool = False,
                   backward: bool = False, copies: int = 1, useful: float = 1.0, reads_input: bool = False,
                   splits: int = 1) -> list[OpSpec]:
        """Quantisation of an activation (or gradient) of ``elems``: a separate kernel (TorchAO), or the
        producer writing ``copies`` FP8 copies with their scales (fused, TE). ``reads_input``: under TE the
        tensor comes from a kernel that writes BF16 (an all-to-all, Megatron's SwiGLU), so the cast reads it too.
        ``splits``: the per-expert pieces TE's grouped linear quantises one by one (``tex.split_quantize`` ->
        ``multi_tensor_quantize_impl``, which fuses the pieces only under delayed scaling), each its own kernels."""
        if self.stack.fused_act_quant and self.plan.precision == "fp8-current":
            # Per-tensor current scaling: the scale needs the whole tensor's amax first, so TE runs an amax
            # reduction (nvte_compute_amax: one read of the BF16 tensor), the scale from it and then a separate cast
            # (read it again, write the FP8 copies): three kernels per quantised tensor
            # (Float8CurrentScalingQuantizer::quantize_impl; tests/cpp/operator/test_cast_current_scaling.cu).
            return [OpSpec(name, "mem", nbytes=elems * (2 + 2 + copies), module=module, load_scaled=load_scaled,
                           backward=backward, useful_frac=useful, backward_free=True, launches=3 * splits)]
        if self.stack.fused_act_quant:
            read = BF16 * elems if reads_input else 0.0
            return [OpSpec(name, "mem", nbytes=read + copies * elems * (1 + 1 / 32), module=module, load_scaled=load_scaled,
                           backward=backward, useful_frac=useful, backward_free=True, launches=splits)]
        return [OpSpec(name, "quant", elems=elems, module=module, load_scaled=load_scaled, backward=backward,
                       useful_frac=useful)]

    def step_ops(self) -> list[OpSpec]:
        """Once-per-step ops of one rank beyond the layers: with ``quantize_weights = "per_step"`` and an
        FP8 recipe, quantising every local weight once (row- and column-wise copies for fwd and dgrad:
        :meth:`weight_quantisation`)."""
        if self.stack.quantize_weights != "per_step" or self.plan.precision == "bf16":
            return []
        from sim.accounting import count_params

        pc, p = count_params(self.model), self.plan
        layers = self.model.n_layers / (p.pp)
        expert = pc.routed_experts_per_layer / p.ep / p.etp if self.expert_dtype != "bf16" else 0.0
        dense = 0.0
        if self.linear_dtype != "bf16":
            dense = (pc.attention_per_layer + pc.shared_experts_per_layer) / p.tp
        return self.weight_quantisation(layers * (expert + dense))

    def weight_quantisation(self, params: float, module: str = "") -> list[OpSpec]:
        """Quantising ``params`` BF16 weights once into their row- and column-wise FP8 copies (Transformer
        Engine: one kernel reads the weight and writes both, ``transformer_engine/common/cast``); under
        per-tensor current scaling an amax pass reads the weight first (``nvte_compute_amax``)."""
        if params <= 0:
            return []
        out = [OpSpec(ops.MOE_QUANTIZE, "quant", elems=params, copies=2, module=module)]
        if self.plan.precision == "fp8-current":
            out.insert(0, OpSpec(ops.MOE_QUANTIZE, "mem", nbytes=BF16 * params, module=module))
        return out

    # --- op lists -------------------------------------------------------------------------------
    def share_layer_ops(self, cache: dict[tuple[str, str], list[OpSpec]]) -> None:
        """Keep :meth:`layer_ops`' lists in ``cache``, shared with the workloads of other plans whose layers
        read the same (one layer's ops read every plan field but the pipeline's: :mod:`sim.predict.memo`)."""
        cache.update(self._cache)
        self._cache = cache

    def layer_ops(self, kind: str, phase: str) -> list[OpSpec]:
        """Ops of one layer of ``kind`` (embed/dense/moe/head) in ``phase`` (fwd/bwd/recompute)."""
        key = (kind, phase)
        if key not in self._cache:
            fwd = self._forward(kind)
            if phase == "fwd":
                out = fwd
            elif phase == "bwd":
                out = [b for op in reversed(fwd) for b in self._backward(op)]
            elif phase == "recompute":
                out = self._recompute(fwd)
            else:
                raise ValueError(f"unknown phase {phase!r}")
            scopes = self.plan.graph_scopes
            if scopes:
                out = [replace(op, graphed=True) if graph_scope(op) in scopes else op for op in out]
            self._cache[key] = out
        return self._cache[key]

    def _forward(self, kind: str) -> list[OpSpec]:
        if kind == "embed":
            return self._embed()
        if kind in ("head", "mtp_head"):
            return self._head()
        if kind == "mtp":
            return self._mtp_input()
        out = self._attention()
        out += self._moe() if kind == "moe" else self._dense_ffn()
        return out

    def _linear(self, name: str, tokens: float, d_in: float, d_out: float, *, useful: float = 1.0,
                module: str = "", dtype: str | None = None) -> list[OpSpec]:
        dtype = dtype or self.linear_dtype
        ops_: list[OpSpec] = []
        if dtype != "bf16":
            # TE's forward quantisation writes the row-wise copy and the column-wise one kept for wgrad.
            copies = 2 if self.stack.fp8_act_cache else 1
            ops_ += self._act_quant(name, tokens * d_in, module=module, copies=copies, useful=useful)
            if self.stack.quantize_weights == "per_call":
                ops_.append(OpSpec(name, "quant", elems=d_in * d_out, useful_frac=useful, module=module))
        ops_.append(OpSpec(name, "gemm", flops=2 * tokens * d_in * d_out, dtype=dtype, useful_frac=useful,
                           rows=tokens, k_in=d_in, n_out=d_out, module=module))
        return ops_

    def _norm(self, name: str, tokens: float) -> OpSpec:
        """RMSNorm: the forward reads x and writes y; the backward reads x and dy and writes dx."""
        width = BF16 * tokens * self.model.dim
        return OpSpec(name, "mem", nbytes=2 * width, module="layernorm", backward_nbytes=3 * width)

    @staticmethod
    def _permutation(name: str, nbytes: float, *, backward_nbytes: float | None = None,
                     load_scaled: bool = False) -> OpSpec:
        """A permute or unpermute pass of ``nbytes``; its backward moves ``backward_nbytes`` (default: the inverse
        pass over the same bytes)."""
        return OpSpec(name, "mem", nbytes=nbytes, load_scaled=load_scaled, module="moe",
                      backward_nbytes=nbytes if backward_nbytes is None else backward_nbytes)

    @staticmethod
    def _swiglu(name: str, rows: float, hidden: float, *, module: str, load_scaled: bool = False) -> OpSpec:
        """SwiGLU of the fused gate/up output: the forward reads gate and up and writes their product (3 widths);
        the backward reads gate, up and the incoming gradient and writes the gradients of gate and up (5)."""
        width = BF16 * rows * hidden
        return OpSpec(name, "mem", nbytes=3 * width, load_scaled=load_scaled, module=module, backward_nbytes=5 * width)

    def _tp(self, coll: str) -> list[OpSpec]:
        if self.plan.tp == 1:
            return []
        name = ops.TP_ALL_GATHER if coll == "ag" else ops.TP_REDUCE_SCATTER
        return [OpSpec(name, "comm", coll=name, nbytes=BF16 * self.tokens_sp * self.model.dim)]

    @property
    def _v_head_dim(self) -> int:
        """Width of one attention head's values (and output)."""
        return self.model.v_head_dim if self.model.attention == "mla" else self.model.head_dim

    def _attention(self) -> list[OpSpec]:
        m, t, T = self.model, self.plan.tp, self.tokens
        D, H = m.dim, m.n_heads
        out = [self._norm(ops.ATTN_NORM, self.tokens_sp)] + self._tp("ag")
        if m.attention == "mla":
            qk = m.qk_nope_head_dim + m.qk_rope_head_dim
            up = "mla_up_proj"
            if m.q_lora_rank:
                out += self._linear(ops.ATTN_Q_PROJ, T, D, m.q_lora_rank, useful=1 / t)
                out.append(OpSpec(ops.ATTN_Q_PROJ, "mem", nbytes=2 * BF16 * T * m.q_lora_rank, module="layernorm"))
                out += self._linear(ops.ATTN_Q_PROJ, T, m.q_lora_rank, H * qk / t, module=up)
            else:
                out += self._linear(ops.ATTN_Q_PROJ, T, D, H * qk / t, module=up)
            out += self._linear(ops.ATTN_KV_PROJ, T, D, m.kv_lora_rank + m.qk_rope_head_dim, useful=1 / t)
            out.append(OpSpec(ops.ATTN_KV_PROJ, "mem", nbytes=2 * BF16 * T * m.kv_lora_rank, module="layernorm"))
            out += self._linear(ops.ATTN_KV_PROJ, T, m.kv_lora_rank, H * (m.qk_nope_head_dim + m.v_head_dim) / t,
                                module=up)
            v = self._v_head_dim
        else:
            qk, v = m.head_dim, self._v_head_dim
            out += self._linear(ops.ATTN_Q_PROJ, T, D, H * qk / t)
            out += self._linear(ops.ATTN_KV_PROJ, T, D, 2 * max(1, m.n_kv_heads // t) * m.head_dim)
        # Causal core: each query sees (S+1)/2 keys on average (CP keeps that mean); under a document mask, the keys
        # of its own document that the block-sparse kernel computes; in sliding-window layers at most the window
        # (one layer at the mean over the model's layers: ModelSpec.mean_attended_keys).
        full_keys = attended_keys(self.plan.seq_len) if self.stack.document_mask else (self.plan.seq_len + 1) / 2
        mean_keys = m.mean_attended_keys(self.plan.seq_len, full_keys)
        attn_dtype = "bf16"
        kv_heads = H / t if m.attention == "mla" else max(1, m.n_kv_heads // t)
        qkv_elems = T * (H / t * qk + kv_heads * (qk + v))  # the core's inputs on this rank
        if self.plan.fp8_attention:
            # FP8 attention (TE fp8_dot_product_attention): Q, K and V cast from the BF16 the projections (and MLA's
            # RoPE concat) write, under MXFP8 along both the sequence and the head dimension (TE PR #2719's
            # mxfp8_quantize_fast_path: the forward and backward matmuls contract over either); the core runs at FP8
            # attention's rates (CostModel.attention_time).
            out += self._act_quant(ops.ATTN_CORE, qkv_elems, module="core_attn",
                                   reads_input=True, copies=2 if self.plan.precision == "mxfp8" else 1)
            attn_dtype = "fp8"
        out += self._cp_exchange(qkv_elems)  # Q, K, V: sequence -> head shards
        window_share = rows = 0.0
        if m.n_windowed_layers:
            f = m.n_windowed_layers / m.n_layers
            window_share = f * m.window_keys(self.plan.seq_len, full_keys) / mean_keys
            rows = f * T * H / t
        out.append(OpSpec(ops.ATTN_CORE, "attn", flops=2 * T * H / t * (qk + v) * mean_keys,
                          elems=T * H / t * mean_keys, module="core_attn", dtype=attn_dtype, rows=rows,
                          window_share=window_share))
        out += self._cp_exchange(T * H / t * v)  # the output: head -> sequence shards
        out += self._linear(ops.ATTN_O_PROJ, T, H * v / t, D)
        out += self._tp("rs")
        return out

    def _cp_exchange(self, elems: float) -> list[OpSpec]:
        """Context parallelism's all-to-all of ``elems`` BF16 values of this rank's sequence shard under Megatron's
        ``cp_comm_type`` "a2a" (DeepSpeed-Ulysses; Transformer Engine's attention runs it around the core):
        each rank keeps 1/cp of them. None under "p2p": ring attention passes key/value blocks around the CP
        ring, each transfer under the attention of the block before, off the step's path (not priced)."""
        if self.plan.cp == 1 or self.plan.cp_comm_type != "a2a":
            return []
        return [OpSpec(ops.CP_ALL_TO_ALL, "comm", coll=ops.CP_ALL_TO_ALL, nbytes=BF16 * elems, module="core_attn")]

    def _dense_ffn(self) -> list[OpSpec]:
        m, t, T = self.model, self.plan.tp, self.tokens
        out = [self._norm(ops.MOE_NORM, self.tokens_sp)] + self._tp("ag")
        f = m.dense_inter_dim / t
        out += self._linear(ops.MLP_DENSE, T, m.dim, 2 * f, module="mlp")
        out.append(self._swiglu(ops.MLP_DENSE, T, f, module="mlp"))
        out += self._linear(ops.MLP_DENSE, T, f, m.dim, module="mlp")
        out += self._tp("rs")
        return out

    def _moe(self) -> list[OpSpec]:
        m, p = self.model, self.plan
        T, D, K = self.tokens, m.dim, m.top_k
        F = m.moe_inter_dim / (p.etp if p.etp > 1 else 1)
        rows_out = self.tokens_dispatched * K
        rows = self.expert_rows
        e = self.local_experts
        in_place = self.in_place_dispatch
        out = [self._norm(ops.MOE_NORM, self.tokens_sp)] + self._tp("ag")
        # Router is replicated over TP (NoParallel): every TP rank scores all T tokens.
        out.append(OpSpec(ops.MOE_ROUTER, "gemm", flops=2 * T * D * m.n_routed_experts, useful_frac=1 / p.tp,
                          module="moe"))
        out.append(OpSpec(ops.MOE_ROUTER, "mem", nbytes=3 * 4 * T * m.n_routed_experts, module="moe"))
        if not in_place:  # sender-side sort of the token copies by destination rank
            out.append(self._sender_permute())
        if p.ep > 1:
            if p.ep_backend == "nccl":
                out.append(OpSpec(ops.A2A_COUNT_EXCHANGE, "comm", coll="a2a.counts", nbytes=8 * m.n_routed_experts,
                                  module="moe"))
                if self.host_may_block:
                    out.append(OpSpec(ops.A2A_HOST_SYNC, "host_sync", module="moe"))
            elif self.host_may_block and self.stack.host_syncs(p.ep_backend):
                # DeepEP v1 normal-mode dispatch (no cached handle) busy-waits on the host until the GPU
                # has written the received-token counts, so it can size the receive buffers; Hybrid-EP does
                # the same when the caller gives no permuted-token count (StackProfile.hybridep_host_syncs).
                out.append(OpSpec(ops.A2A_HOST_SYNC, "host_sync", module="moe"))
            out.append(OpSpec(ops.MOE_DISPATCH, "comm", coll="a2a.dispatch", nbytes=BF16 * rows_out * D, module="moe"))
        if self.receiver_sort:  # receiver-side sort of the received tokens by local expert
            out += self._glue_ops(ops.MOE_PERMUTE, "sort", load_scaled=True)
        dtype = self.expert_dtype
        per_call = self.stack.quantize_weights == "per_call"
        # Gate and up: one grouped GEMM of 2F outputs (the stack fuses them), or two of F on the same input.
        gate_up = [(ops.MOE_EXPERT_GEMM_GATE_UP, D, 2 * F)] if self.stack.fused_gate_up else [
            (ops.MOE_EXPERT_GEMM_GATE_UP, D, F), (ops.MOE_EXPERT_GEMM_GATE_UP, D, F)]
        # TE's fused grouped MLP (ParallelPlan.fused_grouped_mlp): fc1's epilogue applies the GLU and writes fc2's
        # MXFP8 input, so neither the GLU nor that cast is a kernel of its own.
        fused_mlp = self.plan.fused_grouped_mlp
        for name, k_in, n_out in (*gate_up, (ops.MOE_EXPERT_GEMM_DOWN, F, D)):
            if name == ops.MOE_EXPERT_GEMM_DOWN and not fused_mlp:
                out.append(self._swiglu(ops.MOE_EXPERT_GEMM_GATE_UP, rows, F, load_scaled=True, module="moe_act"))
            if dtype != "bf16" and not (fused_mlp and name == ops.MOE_EXPERT_GEMM_DOWN):
                copies = 2 if self.stack.fp8_act_cache else 1
                out += self._act_quant(ops.MOE_QUANTIZE, rows * k_in, module="moe", load_scaled=True, copies=copies,
                                       splits=self.expert_splits,
                                       reads_input=True)
                if per_call:
                    out.append(OpSpec(ops.MOE_QUANTIZE, "quant", elems=e * n_out * k_in, module="moe"))
                if dtype == "mxfp8" and not self.stack.fused_act_quant:
                    out.append(OpSpec(ops.MOE_QUANTIZE, "rearrange", elems=rows * k_in, layout="act",
                                      load_scaled=True, module="moe"))
                if dtype == "mxfp8" and per_call:
                    out.append(OpSpec(ops.MOE_QUANTIZE, "rearrange", elems=e * n_out * k_in, layout="weight",
                                      module="moe"))
            out.append(OpSpec(name, "grouped_gemm", flops=2 * rows * k_in * n_out, rows=rows, dtype=dtype,
                              load_scaled=True, k_in=k_in, n_out=n_out, groups=e, module="moe",
                              launches=self.expert_splits))
        if self.receiver_sort:
            out += self._glue_ops(ops.MOE_UNPERMUTE, "unsort", load_scaled=True)
        if p.ep > 1:
            out.append(OpSpec(ops.MOE_COMBINE, "comm", coll="a2a.combine", nbytes=BF16 * rows_out * D, module="moe"))
        if not in_place:  # sender-side unsort and weighted sum of the K copies of each token
            out += self._glue_ops(ops.MOE_UNPERMUTE, "combine")
        if m.n_shared_experts:
            fs = m.n_shared_experts * m.moe_inter_dim / p.tp
            out += self._linear(ops.MOE_SHARED_EXPERT, T, D, 2 * fs, module="shared_experts")
            out.append(self._swiglu(ops.MOE_SHARED_EXPERT, T, fs, module="moe_act"))
            out += self._linear(ops.MOE_SHARED_EXPERT, T, fs, D, module="shared_experts")
        out += self._tp("rs")
        return out

    def _embed(self) -> list[OpSpec]:
        return [OpSpec(ops.EMBED, "mem", nbytes=2 * BF16 * self.tokens_sp * self.model.dim)]

    def _head(self) -> list[OpSpec]:
        m, t, T = self.model, self.plan.tp, self.tokens
        out = [self._norm(ops.LOSS, self.tokens_sp)] + self._tp("ag")
        out += self._linear(ops.LOSS, T, m.dim, m.vocab_size / t, dtype=self.head_dtype)
        out.append(OpSpec(ops.LOSS, "mem", nbytes=3 * 4 * T * m.vocab_size / t))
        return out

    def _mtp_input(self) -> list[OpSpec]:
        """An MTP module before its block: the next tokens' embedding, RMSNorm of it and of the hidden
        state, and the 2D -> D projection of their concatenation (column-split over TP between an
        all-gather and a reduce-scatter, as the attention's sequence-parallel region)."""
        m, t, T = self.model, self.plan.tp, self.tokens
        out = self._embed() + [self._norm(ops.MTP, self.tokens_sp), self._norm(ops.MTP, self.tokens_sp)]
        out += self._tp("ag")
        out += self._linear(ops.MTP, T, 2 * m.dim, m.dim / t)
        out += self._tp("rs")
        return out

    # --- backward and recompute -----------------------------------------------------------------
    def _backward(self, op: OpSpec) -> list[OpSpec]:
        if op.kind == "gemm":
            out = [replace(op, gemm_pass="dgrad", backward=True), replace(op, gemm_pass="wgrad", backward=True)]
            if op.dtype != "bf16":
                # grad_out in both layouts; the saved input's dim1 copy (unless the forward kept it in FP8);
                # the weight's dim1 copy (unless quantised once per step).
                quant = self._act_quant(op.name, op.rows * op.n_out, copies=2, backward=True, module=op.module,
                                        useful=op.useful_frac)
                rest = (0.0 if self.stack.fp8_act_cache else op.rows * op.k_in) + (
                    op.k_in * op.n_out if self.stack.quantize_weights == "per_call" else 0.0)
                if self.stack.fused_act_quant or rest:
                    if not self.stack.fused_act_quant:  # one TorchAO kernel pass over all three
                        quant = [OpSpec(op.name, "quant", elems=2 * op.rows * op.n_out + rest, useful_frac=op.useful_frac,
                                        backward=True, module=op.module)]
                    elif rest:
                        quant.append(OpSpec(op.name, "quant", elems=rest, useful_frac=op.useful_frac, backward=True,
                                            module=op.module))
                out[:0] = quant
            return out
        if op.kind == "grouped_gemm":
            return self._grouped_backward(op)
        if op.kind == "attn":
            out = [replace(op, flops=2 * op.flops, backward=True)]
            if op.dtype != "bf16":  # FP8 attention's backward takes the output's gradient in FP8: its cast
                out[:0] = self._act_quant(op.name, self.tokens * self.model.n_heads / self.plan.tp * self._v_head_dim,
                                          backward=True, module=op.module, reads_input=True)
            return out
        if op.kind == "mem":
            # Norms, SwiGLU and permutations say their backward's bytes (OpSpec.backward_nbytes); other
            # memory-bound ops read their saved input and the incoming gradient and write one.
            if op.backward_free:
                return []
            out = [replace(op, nbytes=op.backward_nbytes or 2 * op.nbytes, backward=True, backward_accum_elems=0.0)]
            if op.backward_accum_elems:  # an index gather's backward: the incoming rows summed back by index
                out.append(OpSpec(op.name, "accum", elems=op.backward_accum_elems, accumulate=op.accumulate,
                                  load_scaled=op.load_scaled, module=op.module, backward=True))
            return out
        if op.kind == "accum":
            # a sum by index's backward gathers the incoming gradient (its bytes: ``backward_nbytes``)
            return [OpSpec(op.name, "mem", nbytes=op.backward_nbytes, load_scaled=op.load_scaled, module=op.module,
                           backward=True)] if op.backward_nbytes else []
        if op.kind in ("quant", "rearrange"):
            return []  # backward quantization is emitted with the GEMM's backward passes
        if op.kind == "host_sync":
            return []  # backward all-to-alls reuse the forward's split sizes
        if op.kind == "comm":
            swap = {
                "tp.all_gather": (ops.TP_REDUCE_SCATTER, "tp.reduce_scatter"),
                "tp.reduce_scatter": (ops.TP_ALL_GATHER, "tp.all_gather"),
                "a2a.dispatch": (ops.MOE_DISPATCH, "a2a.combine"),
                "a2a.combine": (ops.MOE_COMBINE, "a2a.dispatch"),
                ops.CP_ALL_TO_ALL: (ops.CP_ALL_TO_ALL, ops.CP_ALL_TO_ALL),  # the gradients all-to-all back
            }
            if op.coll not in swap:
                return []
            name, coll = swap[op.coll]
            return [replace(op, name=name, coll=coll, backward=True)]
        raise AssertionError(op.kind)

    def _grouped_backward(self, op: OpSpec) -> list[OpSpec]:
        out: list[OpSpec] = []
        weight = self.local_experts * op.k_in * op.n_out
        st = self.stack
        per_call = st.quantize_weights == "per_call"
        for gpass in ("dgrad", "wgrad"):
            if op.dtype != "bf16":
                if st.fused_act_quant:
                    # grad_out's row- and column-wise FP8 copies, cast at dgrad time from the BF16 gradient the
                    # combine's backward all-to-all wrote. Under the fused grouped MLP, fc2's dgrad epilogue applies
                    # the GLU's gradient and writes fc1's grad_out in MXFP8 itself.
                    if gpass == "dgrad":
                        if not (self.plan.fused_grouped_mlp and op.name == ops.MOE_EXPERT_GEMM_GATE_UP):
                            out += self._act_quant(ops.MOE_QUANTIZE, op.rows * op.n_out, copies=2, load_scaled=True,
                                                   reads_input=True, splits=self.expert_splits, backward=True,
                                                   module=op.module)
                    elif not st.fp8_act_cache:
                        out.append(OpSpec(ops.MOE_QUANTIZE, "quant", elems=op.rows * op.k_in, load_scaled=True,
                                          backward=True, module=op.module))
                else:
                    # dgrad: quantize grad_out (rows x N) and B; wgrad: dim1 grad_out and A (rows x (N + K)).
                    a_elems = 0.0 if st.fp8_act_cache else op.k_in
                    act = op.rows * (op.n_out if gpass == "dgrad" else op.n_out + a_elems)
                    out.append(OpSpec(ops.MOE_QUANTIZE, "quant", elems=act, load_scaled=True, backward=True,
                                      module=op.module))
                    if op.dtype == "mxfp8":
                        layout = "act" if gpass == "dgrad" else "wgrad"
                        out.append(OpSpec(ops.MOE_QUANTIZE, "rearrange", elems=act, layout=layout, load_scaled=True,
                                          backward=True, module=op.module))
                if gpass == "dgrad" and per_call:
                    out.append(OpSpec(ops.MOE_QUANTIZE, "quant", elems=weight, backward=True, module=op.module))
                    if op.dtype == "mxfp8":
                        out.append(OpSpec(ops.MOE_QUANTIZE, "rearrange", elems=weight, layout="weight",
                                          backward=True, module=op.module))
            out.append(replace(op, gemm_pass=gpass, backward=True))
        return out

    def _recompute(self, fwd: list[OpSpec]) -> list[OpSpec]:
        ac = self.plan.ac
        if ac == "none":
            return []
        if ac == "full":
            return list(fwd)
        if self.stack.recompute_modules:  # Megatron-style: re-run the ops of the listed modules
            return [op for op in fwd if op.module and self.stack.recomputes(op.module)]
        out, keep = [], False
        for op in fwd:  # op-level SAC: memory-bound ops and every other dense linear; no comm, no experts
            if op.kind in ("mem", "accum"):
                out.append(op)
            elif op.kind == "gemm":
                keep = not keep
                if keep:
                    out.append(op)
        return out
