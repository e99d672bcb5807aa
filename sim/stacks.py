"""Framework stack profiles: what a training framework does, and how fast its kernels run.

A :class:`StackProfile` is the third input beside the hardware costs (:class:`~sim.costs.CostModel`,
per GPU architecture, from a calibration) and the specs: it names the framework release, its
implementation choices (how forced balance routes, DeepEP's data path, quantisation, parameter
sharding, recompute by module, which overlaps it can run, CUDA graphs, DeepEP's default SMs), its
host overheads (per-kernel launch gap, blocking device-to-host sync), its training-state byte widths,
and its kernel efficiency per op class and GPU architecture, relative to the calibration's kernel rates.

Op classes (keys of :attr:`StackProfile.efficiency` per architecture): ``gemm.fwd``, ``gemm.dgrad``,
``gemm.wgrad``, ``grouped_gemm``, ``attn.fwd``, ``attn.bwd``, ``mem``, ``quant`` (a separate MXFP8 quantize or
scale-rearrange kernel, TorchAO's; TE's casts fused into their producer are ``mem``). A missing key reads as the
architecture's ``default`` entry, then the profile-wide ``"*"`` architecture, then 1.0.

>>> s = StackProfile(efficiency={"*": {"default": 0.5}, "sm100": {"grouped_gemm": 0.8}})
>>> s.eff("sm100", "grouped_gemm"), s.eff("sm100", "attn.fwd"), s.eff("sm90", "mem")
(0.8, 0.5, 0.5)

Named profiles are data files (``sim/stack_profiles/<name>.toml``, every value with its source);
:func:`load_stack` reads a name, an alias (``megatron`` = the newest Megatron release profile) or a
user file, strictly:

>>> load_stack("megatron").name
'megatron-26.04'
>>> load_stack("torchtitan").force_balance, load_stack("deepseek").param_sharding
('round-robin', 'zero1')
"""

from __future__ import annotations

import math
import re
import sys
import tomllib
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from sim.comm.costs import DEEPEP_API_BACKENDS
from sim.errors import ConfigError
from sim.limits import ZERO_OR_AT_LEAST
from sim.specs import (
    EP_BACKENDS,
    GRAD_REDUCE_BYTES,
    PP_SCHEDULES,
    PRECISIONS,
    RECOMPUTE_MODULES,
    ClusterSpec,
    ParallelPlan,
)

__all__ = [
    "StackProfile",
    "builtin_overrides",
    "OP_CLASSES",
    "FORCE_BALANCE",
    "PARAM_SHARDING",
    "QUANTIZE_WEIGHTS",
    "LAUNCH",
    "RECOMPUTE_MODULES",
    "STACK_SCHEDULES",
    "CAPABILITIES",
    "STACK_ALIASES",
    "DEFAULT_STACK",
    "stack_names",
    "load_stack",
    "default_stack",
    "profile_for",
]

OP_CLASSES = ("gemm.fwd", "gemm.dgrad", "gemm.wgrad", "grouped_gemm", "attn.fwd", "attn.bwd", "mem", "accum", "quant")
FORCE_BALANCE = ("round-robin", "random")
PARAM_SHARDING = ("fsdp", "zero1")
QUANTIZE_WEIGHTS = ("per_call", "per_step")
LAUNCH = ("eager", "compiled", "cuda_graphs")
#: Pipeline schedules a profile may list: the simulated ones (:data:`sim.specs.PP_SCHEDULES`) and others a
#: framework runs that the simulator does not model (listed for the record, never predicted).
STACK_SCHEDULES = (*PP_SCHEDULES, "gpipe", "looped-bfs", "interleaved-zb", "zbv")
#: capability field -> (the plan field it limits, the values a profile may list)
CAPABILITIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "pp_schedules": ("pp_schedule", STACK_SCHEDULES),
    "ep_backends": ("ep_backend", EP_BACKENDS),
    "precisions": ("precision", PRECISIONS),
}
#: Short names of the built-in profiles: ``megatron`` is the newest Megatron-Bridge release profile.
STACK_ALIASES = {"megatron": "megatron-26.04"}
DEFAULT_STACK = "torchtitan"


#: The largest value a stack may give each of its time and size fields: beyond any framework (a kernel launch of 10 ms,
#: a host sync of a second, a step boundary of an hour, 10^13 parameters a bucket), so a typo is refused, not simulated.
STACK_FIELD_MAX: dict[str, float] = {"kernel_overhead_s": 1e-2, "graph_node_s": 1e-3, "host_sync_s": 1.0,
                                     "host_op_s": 0.1, "step_fixed_s": 3600.0, "ddp_bucket_params": 1e13}


@dataclass(frozen=True)
class StackProfile:
    """One framework release's implementation choices and kernel efficiencies.

    Defaults describe TorchTitan at the seed runs' commit; named profiles live in data files.
    """

    name: str = "torchtitan"
    release: str = ""
    # --- implementation --------------------------------------------------------------------------
    #: what the framework's forced load balance means: TorchTitan's literal round-robin (token t takes
    #: experts (t*K + k) mod E) or Megatron's random router logits (uniform random top-k).
    force_balance: str = "round-robin"
    #: DeepEP reads tokens in place and reduces in combine (no sender-side permute / unpermute copies).
    deepep_in_place: bool = True
    #: with tensor parallelism and ETP 1, the DeepEP path splits the MoE layer's tokens over the TP ranks (each
    #: dispatches and computes its share, as the standard path does); off: every TP rank dispatches, and its
    #: experts compute, every token of the microbatch (TorchTitan before its May 2026 MoE refactor).
    deepep_tp_token_split: bool = True
    #: attention masked at document boundaries of the packed sequence (FlexAttention ``block_causal``): a query
    #: computes its own document's keys (:func:`sim.documents.attended_keys`); off: the causal prefix.
    document_mask: bool = False
    #: MXFP8/FP8 weights quantised at every GEMM call (TorchAO) or once per optimizer step (TE).
    quantize_weights: str = "per_call"
    #: activation quantisation fused into the producing kernel (TE: norm, SwiGLU, permute).
    fused_act_quant: bool = False
    #: parameters: per-layer FSDP2 gathers (TorchTitan) or ZeRO-1 distributed optimizer (Megatron, DeepSeek).
    param_sharding: str = "fsdp"
    #: what ``ac = "selective"`` recomputes (Megatron ``recompute_modules``); empty: TorchTitan's op-level SAC.
    recompute_modules: tuple[str, ...] = ()
    #: the framework can run the combined forward/backward pair with EP overlap (Megatron combined 1F1B).
    ep_overlap_available: bool = False
    #: the framework can run the attention core in FP8 (Transformer Engine's ``fp8_dot_product_attention``;
    #: ``ParallelPlan.fp8_attention``).
    fp8_attention_available: bool = False
    #: the framework can run the routed experts as Transformer Engine's fused grouped MLP
    #: (``ParallelPlan.fused_grouped_mlp``: TE's op fuser with the CuTe DSL grouped GEMMs).
    fused_grouped_mlp_available: bool = False
    #: the stack's recipe trains the model's multi-token-prediction modules (``ModelSpec.n_mtp_layers``) when
    #: the plan does not say (``ParallelPlan.mtp_layers`` None); off: they are not trained.
    trains_mtp: bool = False
    #: non-interleaved 1F1B waits for its pipeline sends (Megatron: batched send/recv, ``wait_on_reqs``), so
    #: each stage-boundary transfer occupies the sending rank; interleaved schedules overlap them.
    blocking_p2p: bool = False
    #: shared-expert compute overlaps the dispatch (Megatron ``moe_shared_expert_overlap``).
    shared_expert_overlap: bool = False
    #: the standard (NCCL) path's combine all-to-all is waited on where its output is first used, and the shared
    #: experts are called before that use, so in the forward and its recompute they run beside the combine
    #: (TorchTitan: a functional collective's lazy wait); the backward's all-to-all waits at once. A stack that
    #: overlaps them with the dispatch (``shared_expert_overlap``) keeps that.
    shared_expert_beside_combine: bool = False
    # --- what the framework can run (a plan asking for anything else is refused, :meth:`refusal`) -----
    #: pipeline schedules (:data:`STACK_SCHEDULES`); the overlap switch it can run is ``ep_overlap_available``.
    pp_schedules: tuple[str, ...] = ("1f1b", "interleaved-1f1b", "dualpipev", "gpipe", "looped-bfs",
                                     "interleaved-zb", "zbv")
    #: expert-parallel all-to-all backends (:data:`sim.specs.EP_BACKENDS`).
    ep_backends: tuple[str, ...] = ("nccl", "deepep")
    #: precision recipes (:data:`sim.specs.PRECISIONS`).
    precisions: tuple[str, ...] = ("bf16", "mxfp8-grouped", "mxfp8", "fp8-current")
    #: how work reaches the GPU: eager launches, compiled regions, or CUDA graphs. Descriptive: its cost enters
    #: through ``kernel_overhead_s`` and ``host_sync_s``, which each profile sets (and sources) for its launch mode.
    launch: str = "compiled"
    #: ranks the framework places in one NVLink domain larger than this (Megatron-Bridge: 64 HybridEP
    #: ranks per NVL72 rack); 0: every GPU of the domain.
    nvlink_domain_ranks: int = 0
    #: router probabilities multiplied inside the expert activation (Megatron-Core >= 0.13), so the
    #: expert outputs need not be saved for the probabilities' gradient.
    probs_in_act: bool = False
    #: inputs of FP8 linears saved for backward in FP8 (TE keeps the quantised copy; DeepSeek caches FP8).
    fp8_act_cache: bool = False
    #: bytes per element of saved activations the stack keeps in a custom low precision, by activation
    #: ledger component (:func:`sim.accounting.activation_ledger`), e.g. DeepSeek's FP8 SwiGLU inputs.
    saved_act_bytes: Mapping[str, float] = field(default_factory=dict)
    # --- training state, bytes per parameter -------------------------------------------------------
    #: gradient buffer (fp32 main_grad / FSDP fp32 reduce-scatter output).
    grad_bytes: int = 4
    #: optimizer's master copy of the weights.
    master_bytes: int = 4
    #: Adam's two moments together (fp32: 8; DeepSeek's BF16 moments: 4).
    moment_bytes: int = 8
    # --- host ------------------------------------------------------------------------------------
    kernel_overhead_s: float = 4e-6
    #: device time of one kernel that replays from a CUDA graph (a captured scope of a partial plan: the ops
    #: marked ``OpSpec.graphed``): Megatron-LM PR #6064, 1.34 us per serialized node (published.md s8).
    graph_node_s: float = 1.34e-6
    host_sync_s: float = 100e-6
    #: host (CPU) seconds to issue one modelled op that is launched eagerly (not captured in a CUDA graph,
    #: ``OpSpec.graphed``): the framework's Python and the kernel launches it stands for. The host issues a
    #: layer's ops in order and cannot run ahead of a blocking sync, so a layer pass takes at least the host
    #: time of its eager ops (:func:`sim.predict.layers.host_issue_s`); 0: the host always keeps ahead. The
    #: joint calibration's ``host.eager_op_s`` for the shipped releases under eager and partial launch.
    host_op_s: float = 0.0
    #: seconds each accumulating training step spends once (:meth:`step_boundary_s`), whatever its microbatch count
    #: and data-parallel size, beyond the per-step work modelled apart (pipeline fill and drain, exposed data-parallel
    #: buckets, the optimizer, the once-per-step reductions): the train loop's step boundary, where the GPU idles while the host finishes
    #: one step and starts the next (the joint calibration's ``step.fixed_s`` for the shipped releases).
    step_fixed_s: float = 0.0
    #: whether the joint calibration's ``step.fixed_s`` is this release's step boundary (Megatron-Bridge's and
    #: TorchTitan's train loops: their accumulating runs constrain it together); False: the profile's own
    #: ``step_fixed_s`` holds (a stack no joint scalar covers, e.g. DeepSeek's trace-calibrated one).
    joint_step_boundary: bool = True
    #: parameters per distributed-optimizer gradient bucket (ZeRO-1 stacks with overlapped gradient reduction);
    #: 0: Megatron-Core's own default, ``max(40M, 1M x data-parallel ranks)`` (:func:`sim.predict.dp_scale.bucket_params`).
    ddp_bucket_params: float = 0.0
    #: the distributed optimizer's parameter all-gather issued one bucket ahead of the first forward (Megatron-Core
    #: ``overlap_param_gather``: each forward pre-hook waits for its bucket and dispatches the next;
    #: :func:`sim.predict.dp_scale.param_gather_exposed_s`). False: every bucket but the first hidden, whatever
    #: the gathers take, the first forward bucket's whole gather exposed (an ablation switch).
    param_gather_one_ahead: bool = True
    #: blocking host syncs per DeepEP normal-mode forward dispatch, each a ``host_sync_s`` stall: DeepEP's own
    #: wait for the receive counts, plus the framework's glue around it (boolean-mask indexing,
    #: ``repeat_interleave`` without ``output_size``, a blocking host-to-device copy of the counts).
    deepep_host_syncs: int = 1
    #: blocking host syncs per Hybrid-EP forward dispatch: 0 when the framework passes the permuted-token
    #: count (``num_permuted_tokens``: the kernel then runs ``non_blocking``, CUDA-graph safe), 1 when it
    #: does not and the dispatch waits on the host for the per-expert counts (Megatron-Core, dropless).
    hybridep_host_syncs: int = 0
    #: DeepEP / Hybrid-EP dispatch FP8 tokens (with their block scales) under the ``fp8-blockwise`` recipe
    #: (DeepSeek: activations quantised before the dispatch); off: tokens travel in BF16 and are quantised by
    #: the expert GEMM's input quantisation after the dispatch (Megatron-Core's flex dispatcher).
    fp8_dispatch: bool = False
    #: the standard (NCCL) path sorts the received tokens by local expert even when a rank holds one expert
    #: (TorchTitan's permute indices); off: the sort runs only with two or more local experts (Megatron-Core).
    sort_single_local_expert: bool = True
    #: the standard path's sender-side permute and unpermute are fused top-K kernels (Transformer Engine
    #: ``moe_permute`` / ``moe_unpermute``: one block per token reads it once and writes its K copies, or reads
    #: its K copies and writes their weighted sum once); off: an index gather and a scatter-add over the K copies
    #: (each copy read and written as a row of its own).
    fused_permute: bool = False
    #: the MoE layer's token bookkeeping runs as separate, unfused eager PyTorch ops (TorchTitan's ``MoE.forward``,
    #: ``_permute`` and DeepEP ``combine_tokens`` outside its compiled regions): the standard path's sender puts the
    #: K copies back into a zeroed buffer of every token's K slots on each TP rank (the MoE input is replicated over
    #: TP), casts it to FP32 and reduces it with a bmm against the router scores; its receiver copies the received
    #: tokens once more (``torch.vstack`` with a padding row) before the gather; the DeepEP path multiplies the
    #: copies by their scores in a pass of its own before the scatter-add (:meth:`sim.workload.Workload.moe_glue`).
    #: Off: one pass per permutation, as ``fused_permute`` says.
    eager_moe_glue: bool = False
    #: the MoE bookkeeping's sums by index run in PyTorch's index kernels at their own measured rates
    #: (:data:`sim.costs.ACCUMULATE_BW_SHARE`): ``scatter_add_`` and ``index_add_`` (the DeepEP path's scatter-add of
    #: the K copies into their tokens and the backward of its ``index_select`` gather) add one element at a time with
    #: an atomic; ``index_put_`` with accumulate (autograd's backward of an index gather ``x[idx]``: the standard
    #: path's sender gather and receiver sort) sorts the indices and sums each run. Off: counted as bytes at the
    #: memory-bound rate, like a copy.
    indexed_accumulate: bool = False
    #: the standard path's combine (``eager_moe_glue``: a bmm of the router scores with the K copies' FP32 slots)
    #: takes its backward in autograd's batched FP32 GEMMs of tiny sizes, at their own measured rate
    #: (:data:`sim.costs.ACCUMULATE_BW_SHARE` ``batched``); off: the bmm's gradients are counted as bytes at the
    #: memory-bound rate.
    combine_bmm_batched: bool = False
    #: the host issues a layer's kernels in order, ``host_op_s`` each, and at a blocking device-to-host sync waits
    #: for the GPU before issuing more, so a kernel starts only once it is issued (:mod:`sim.engine`'s host issue):
    #: after each sync the GPU waits while the host launches what follows. Off: a layer pass takes at least the
    #: host's issue time of its eager ops as a whole (:func:`sim.predict.layers.host_floor`).
    host_serial_syncs: bool = False
    #: the routed experts' gate and up projections are one grouped GEMM of 2F outputs (one quantisation of its
    #: input, one gradient); off: two grouped GEMMs of F on the same input, each quantising it.
    fused_gate_up: bool = False
    #: a grouped GEMM launches one GEMM per local expert (Transformer Engine's multi-stream cuBLAS); off: one
    #: kernel for every expert (``torch._grouped_mm``, DeepGEMM). Each launch costs ``kernel_overhead_s``.
    grouped_gemm_per_expert: bool = False
    # --- efficiency --------------------------------------------------------------------------------
    #: arch ("sm90", "sm100", ... or "*") -> op class (or "default") -> fraction of the calibration's rate.
    efficiency: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    provenance: str = ""
    #: field name (or ``efficiency.<arch>``) -> where its value comes from.
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        choices: tuple[str, ...]
        for fname, choice, choices in (("force_balance", self.force_balance, FORCE_BALANCE),
                                      ("param_sharding", self.param_sharding, PARAM_SHARDING),
                                      ("quantize_weights", self.quantize_weights, QUANTIZE_WEIGHTS),
                                      ("launch", self.launch, LAUNCH)):
            if choice not in choices:
                raise ConfigError(f"stack {self.name!r}: {fname} must be one of {', '.join(choices)}; got {choice!r}")
        for fname, (_plan_field, known) in CAPABILITIES.items():
            values = getattr(self, fname)
            bad = [v for v in values if v not in known]
            if bad or not values:
                raise ConfigError(f"stack {self.name!r}: {fname} must list one or more of {', '.join(known)}; "
                                  f"got {list(values)!r}")
        for module in self.recompute_modules:
            if module not in RECOMPUTE_MODULES:
                raise ConfigError(f"stack {self.name!r}: recompute_modules: unknown module {module!r} "
                                  f"(known: {', '.join(RECOMPUTE_MODULES)})")
        for fname, most in STACK_FIELD_MAX.items():
            value = getattr(self, fname)
            if not (math.isfinite(value) and 0 <= value <= most):
                raise ConfigError(f"stack {self.name!r}: {fname} must be a number in [0, {most:g}], got {value!r}")
        if 0 < self.ddp_bucket_params < ZERO_OR_AT_LEAST["ddp_bucket_params"]:
            raise ConfigError(f"stack {self.name!r}: ddp_bucket_params must be 0 (Megatron-Core's default) or at least "
                              f"{ZERO_OR_AT_LEAST['ddp_bucket_params']:g} parameters, got {self.ddp_bucket_params!r}")
        if isinstance(self.nvlink_domain_ranks, bool) or not isinstance(self.nvlink_domain_ranks, int) or not (
                0 <= self.nvlink_domain_ranks <= 1_000_000):
            raise ConfigError(f"stack {self.name!r}: nvlink_domain_ranks must be an integer >= 0, "
                              f"got {self.nvlink_domain_ranks!r}")
        if isinstance(self.deepep_host_syncs, bool) or not isinstance(self.deepep_host_syncs, int) or not (
                1 <= self.deepep_host_syncs <= 64):
            raise ConfigError(f"stack {self.name!r}: deepep_host_syncs must be an integer in 1..64, "
                              f"got {self.deepep_host_syncs!r}")
        if isinstance(self.hybridep_host_syncs, bool) or not isinstance(self.hybridep_host_syncs, int) or not (
                0 <= self.hybridep_host_syncs <= 64):
            raise ConfigError(f"stack {self.name!r}: hybridep_host_syncs must be an integer in 0..64, "
                              f"got {self.hybridep_host_syncs!r}")
        for fname in ("grad_bytes", "master_bytes", "moment_bytes"):
            value = getattr(self, fname)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 256:
                raise ConfigError(f"stack {self.name!r}: {fname} must be an integer in 1..256, got {value!r}")
        for component, width in self.saved_act_bytes.items():
            if isinstance(width, bool) or not isinstance(width, int | float) or not 0 < width <= 4:
                raise ConfigError(f"stack {self.name!r}: saved_act_bytes.{component} must be in (0, 4] bytes, "
                                  f"got {width!r}")
        for arch, table in self.efficiency.items():
            for op_class, value in table.items():
                if op_class != "default" and op_class not in OP_CLASSES:
                    raise ConfigError(f"stack {self.name!r}: efficiency.{arch}: unknown op class {op_class!r} "
                                      f"(known: {', '.join(OP_CLASSES)})")
                if isinstance(value, bool) or not (isinstance(value, int | float) and 0 < value <= 1.5):
                    raise ConfigError(f"stack {self.name!r}: efficiency.{arch}.{op_class} must be in (0, 1.5], "
                                      f"got {value!r}")

    def eff(self, arch: str, op_class: str) -> float:
        """This stack's efficiency for ``op_class`` on ``arch`` (see the module docstring for fallbacks)."""
        for key in (arch, "*"):
            table = self.efficiency.get(key)
            if table is not None:
                if op_class in table:
                    return float(table[op_class])
                if "default" in table:
                    return float(table["default"])
        return 1.0

    def can_run(self, capability: str) -> tuple[str, ...]:
        """The simulated values of ``capability`` (a :data:`CAPABILITIES` field) this stack can run, in order.

        >>> load_stack("megatron").can_run("pp_schedules")
        ('1f1b', 'interleaved-1f1b')
        """
        plan_field, _known = CAPABILITIES[capability]
        simulated = {"pp_schedule": PP_SCHEDULES, "ep_backend": EP_BACKENDS, "precision": PRECISIONS}[plan_field]
        return tuple(v for v in getattr(self, capability) if v in simulated)

    def refusal(self, plan: ParallelPlan) -> str | None:
        """One line naming the stack, the plan field, its value and what the stack runs instead, when
        ``plan`` asks for a schedule, backend, precision or overlap this stack cannot run; else None.

        >>> load_stack("torchtitan").refusal(ParallelPlan(ep=8, ep_backend="hybridep"))
        "stack torchtitan cannot run ep_backend 'hybridep'; it runs nccl, deepep"
        """
        for capability, (plan_field, _known) in CAPABILITIES.items():
            value = getattr(plan, plan_field)
            if plan_field == "pp_schedule" and plan.pp == 1:
                continue  # no pipeline: every stack runs the single stage
            if value not in getattr(self, capability):
                return (f"stack {self.name} cannot run {plan_field} {value!r}; it runs "
                        f"{', '.join(self.can_run(capability))}")
        if plan.ep_overlap and not self.ep_overlap_available and plan.pp_schedule not in ("dualpipe", "dualpipev"):
            return (f"stack {self.name} cannot run ep_overlap True (combined 1F1B); it runs ep_overlap False "
                    "(DualPipe schedules overlap their pairs without it)")
        if plan.fp8_attention and not self.fp8_attention_available:
            return f"stack {self.name} cannot run fp8_attention True (FP8 attention); it runs fp8_attention False"
        if plan.fused_grouped_mlp and not self.fused_grouped_mlp_available:
            return (f"stack {self.name} cannot run fused_grouped_mlp True (Transformer Engine's fused grouped MLP); it "
                    "runs fused_grouped_mlp False")
        return None

    def defaults_for(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """What this stack runs for the plan fields ``given`` (plan fields by name) leaves out, where the
        :class:`~sim.specs.ParallelPlan` default is something the stack cannot run: its first backend, schedule
        (with ``pp`` > 1) or precision. E.g. DeepSeek's stack dispatches with DeepEP, not NCCL.

        >>> load_stack("deepseek").defaults_for({"pp": 16, "ep": 64})
        {'pp_schedule': 'dualpipe', 'ep_backend': 'deepep'}
        >>> load_stack("deepseek").defaults_for({"ep": 64})  # no pipeline: no schedule to choose
        {'ep_backend': 'deepep'}
        >>> load_stack("torchtitan").defaults_for({"ep": 8})
        {}
        """
        plan_defaults = {f.name: f.default for f in fields(ParallelPlan)}
        out: dict[str, Any] = {}
        for capability, (plan_field, _known) in CAPABILITIES.items():
            if plan_field in given or (plan_field == "pp_schedule" and given.get("pp", 1) == 1):
                continue
            runs = self.can_run(capability)
            if plan_defaults[plan_field] not in getattr(self, capability) and runs:
                out[plan_field] = runs[0]
        return out

    def check_plan(self, plan: ParallelPlan) -> None:
        """Raise :class:`ConfigError` with :meth:`refusal`'s line when this stack cannot run ``plan``."""
        reason = self.refusal(plan)
        if reason is not None:
            raise ConfigError(reason)

    def host_syncs(self, backend: str) -> int:
        """Blocking host syncs before one forward dispatch of ``backend``: NCCL's split-size copy (1), the
        stack's DeepEP counts for every backend behind DeepEP's API (:data:`sim.comm.costs.DEEPEP_API_BACKENDS`),
        its Hybrid-EP counts, none for DeepEP's low-latency kernels."""
        if backend in DEEPEP_API_BACKENDS:
            return self.deepep_host_syncs
        return {"nccl": 1, "hybridep": self.hybridep_host_syncs}.get(backend, 0)

    def recomputes(self, module: str) -> bool:
        """Whether selective recompute re-runs ``module`` (a Megatron ``recompute_modules`` name)."""
        return module in self.recompute_modules or (module != "moe" and "moe" in self.recompute_modules
                                                    and module in ("moe_act", "shared_experts"))

    def place(self, cluster: ClusterSpec) -> ClusterSpec:
        """``cluster`` as this framework lays ranks on it: NVLink domains larger than
        ``nvlink_domain_ranks`` hold only that many ranks (the rest of the rack idles) when the job spans several
        domains; a job no larger than one domain runs in one (MLPerf v6.0's 72-GPU GPT-OSS-20B recipe,
        ``config_GB300_18x4x1...``: the 18 trays of one NVL72).

        >>> from sim.catalog import load_cluster
        >>> rack = load_cluster("gb200-nvl72", n_gpus=256)
        >>> StackProfile(nvlink_domain_ranks=64).place(rack).nvlink_domain_gpus, StackProfile().place(rack) is rack
        (64, True)
        >>> StackProfile(nvlink_domain_ranks=64).place(load_cluster("gb200-nvl72", n_gpus=72)).nvlink_domain_gpus
        72
        """
        n = self.nvlink_domain_ranks
        if not n or cluster.nvlink_domain_gpus <= n or n % cluster.gpus_per_node:
            return cluster
        if cluster.n_gpus <= cluster.nvlink_domain_gpus:  # a job of one domain (18 x 4 GPUs: one NVL72) fills it
            return cluster
        return replace(cluster, nvlink_domain_gpus=n)

    def step_boundary_s(self, plan: ParallelPlan) -> float:
        """Seconds ``plan``'s step pays at its boundary (:attr:`step_fixed_s`): only a step that accumulates
        gradients over more than one microbatch per rank pays it.

        Every run that constrains the joint ``step.fixed_s`` accumulates 8 to 512 microbatches (Megatron-Bridge's
        recipes; MLPerf Training v6.0's DeepSeek-V3, 16 to 240); the steps of one microbatch in the same NeMo
        MLPerf loop, with the same distributed optimizer (MLPerf v6.0 GPT-OSS-20B, 15 recipe cells on 8 to 512
        GPUs, 0.09-0.57 s a step; ``studies/data/mlperf_gpt_oss.toml``), show none: predicted without it the cells
        whose experts sit on one rank land at -13% to +10%, with it every cell 78-96% slow. What in an accumulating step
        costs it is not identified, so the model charges it where it was measured, not beyond; nor is accumulation
        all of it: MLPerf's GB300 DeepSeek-V3 recipe accumulates 8-240 microbatches and shows none either
        (``studies/data/scale_checks.toml``: CoreWeave's 8,192 GB300 take 1.70 s a step, about what the predicted step
        spends without it; docs/scaling.md gives today's figures), where its GB200 recipe shows 1.3-2.3 s.

        >>> from sim.specs import ParallelPlan
        >>> s = StackProfile(step_fixed_s=1.8)
        >>> s.step_boundary_s(ParallelPlan(global_batch=8)), s.step_boundary_s(ParallelPlan(global_batch=1))
        (1.8, 0.0)
        """
        return self.step_fixed_s if plan.n_microbatches > 1 else 0.0

    def for_plan(self, plan: ParallelPlan) -> StackProfile:
        """This stack with the plan's own recompute module list, gradient reduce dtype and DDP bucket size, where
        it gives them."""
        changes: dict[str, Any] = {}
        modules = plan.recompute_module_list
        if modules and modules != self.recompute_modules:
            changes["recompute_modules"] = modules
        if plan.grad_reduce_dtype and GRAD_REDUCE_BYTES[plan.grad_reduce_dtype] != self.grad_bytes:
            changes["grad_bytes"] = GRAD_REDUCE_BYTES[plan.grad_reduce_dtype]
        if plan.ddp_bucket_params and plan.ddp_bucket_params != self.ddp_bucket_params:
            changes["ddp_bucket_params"] = plan.ddp_bucket_params
        return replace(self, **changes) if changes else self

    def describe(self) -> dict[str, Any]:
        """Name, release and provenance, for a prediction's output."""
        return {"name": self.name, "release": self.release, "provenance": self.provenance}


# --- loading ---------------------------------------------------------------------------------------

_IMPL_FIELDS = tuple(f.name for f in fields(StackProfile) if f.name not in ("efficiency", "sources"))
_TYPES: dict[str, type] = {"name": str, "release": str, "force_balance": str, "deepep_in_place": bool,
                           "deepep_tp_token_split": bool, "document_mask": bool,
                           "quantize_weights": str, "fused_act_quant": bool, "param_sharding": str,
                           "recompute_modules": list, "pp_schedules": list, "ep_backends": list, "precisions": list,
                           "ep_overlap_available": bool, "fp8_attention_available": bool, "fused_grouped_mlp_available": bool, "joint_step_boundary": bool, "trains_mtp": bool, "shared_expert_overlap": bool, "shared_expert_beside_combine": bool,
                           "launch": str, "nvlink_domain_ranks": int, "probs_in_act": bool, "fp8_act_cache": bool,
                           "saved_act_bytes": dict,
                           "grad_bytes": int, "master_bytes": int, "moment_bytes": int,
                           "kernel_overhead_s": float, "graph_node_s": float, "host_sync_s": float, "host_op_s": float, "step_fixed_s": float, "ddp_bucket_params": float, "param_gather_one_ahead": bool, "deepep_host_syncs": int, "hybridep_host_syncs": int, "fp8_dispatch": bool, "sort_single_local_expert": bool, "fused_permute": bool, "eager_moe_glue": bool, "indexed_accumulate": bool, "combine_bmm_batched": bool, "host_serial_syncs": bool, "fused_gate_up": bool, "grouped_gemm_per_expert": bool, "blocking_p2p": bool, "provenance": str}
assert set(_TYPES) == set(_IMPL_FIELDS), "every StackProfile field needs a file type"
_TABLES = ("stack", "efficiency", "sources")
#: fields a stack file may leave out (their defaults: the behaviour before the field existed).
_OPTIONAL_FIELDS = ("host_op_s", "ddp_bucket_params", "param_gather_one_ahead", "fp8_attention_available", "fused_grouped_mlp_available", "joint_step_boundary",
                   "eager_moe_glue", "indexed_accumulate", "combine_bmm_batched", "host_serial_syncs",
                   "shared_expert_beside_combine")


def _builtin_dir() -> Any:
    return resources.files("sim").joinpath("stack_profiles")


@cache
def _builtin_files() -> dict[str, str]:
    return {p.name[:-5]: p.read_text(encoding="utf-8") for p in _builtin_dir().iterdir() if p.name.endswith(".toml")}


def stack_names() -> list[str]:
    """Built-in profile names and their aliases."""
    return sorted({*_builtin_files(), *STACK_ALIASES})


def _check_value(where: str, key: str, value: Any) -> Any:
    want = _TYPES[key]
    if want is float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not abs(value) <= sys.float_info.max:
            raise ConfigError(f"{where}: {key} must be a finite number, got {value!r}")
        return float(value)
    if want is list:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            what = "module names" if key == "recompute_modules" else "names"
            raise ConfigError(f"{where}: {key} must be a list of {what}, got {value!r}")
        return tuple(value)
    if want is dict:
        if not isinstance(value, dict) or not all(
                isinstance(v, int | float) and not isinstance(v, bool) and abs(v) <= sys.float_info.max
                for v in value.values()):
            raise ConfigError(f"{where}: {key} must be a table of component = bytes per element, got {value!r}")
        return {k: float(v) for k, v in value.items()}
    if want is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"{where}: {key} must be an integer, got {value!r}")
    if want is bool and not isinstance(value, bool):
        raise ConfigError(f"{where}: {key} must be true or false, got {value!r}")
    if want is str and not isinstance(value, str):
        raise ConfigError(f"{where}: {key} must be a string, got {value!r}")
    return value


def _efficiency(where: str, data: Any) -> dict[str, dict[str, float]]:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: [efficiency] must be a table of architectures, got {data!r}")
    out: dict[str, dict[str, float]] = {}
    for arch, table in data.items():
        if arch != "*" and not (arch.startswith("sm") and arch[2:].isdigit()):
            raise ConfigError(f"{where}: efficiency.{arch}: an architecture is \"*\" or an SM version such as sm90 "
                              "or sm100")
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: efficiency.{arch} must be a table of op classes, got {table!r}")
        for op_class, value in table.items():
            if op_class != "default" and op_class not in OP_CLASSES:
                raise ConfigError(f"{where}: efficiency.{arch}: unknown op class {op_class!r} "
                                  f"(known: default, {', '.join(OP_CLASSES)})")
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1.5:
                raise ConfigError(f"{where}: efficiency.{arch}.{op_class} must be a number in (0, 1.5], got {value!r}")
        out[arch] = {k: float(v) for k, v in table.items()}
    return out


def _from_data(where: str, data: dict[str, Any], *, builtin: bool) -> StackProfile:
    unknown = set(data) - set(_TABLES)
    if unknown:
        raise ConfigError(f"{where}: unknown table(s) {', '.join(sorted(unknown))}; allowed: {', '.join(_TABLES)}")
    head = data.get("stack")
    if not isinstance(head, dict):
        raise ConfigError(f"{where}: missing [stack] table")
    head = dict(head)
    base_name = head.pop("base", None)
    extra = set(head) - set(_IMPL_FIELDS)
    if extra:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(extra))} in [stack]; allowed: base, "
                          f"{', '.join(_IMPL_FIELDS)}")
    values = {k: _check_value(where, k, v) for k, v in head.items()}
    efficiency = _efficiency(where, data.get("efficiency", {}))
    sources = data.get("sources", {})
    if not isinstance(sources, dict):
        raise ConfigError(f"{where}: [sources] must be a table of field names to strings, got {sources!r}")
    for key, text in sources.items():
        if not isinstance(text, str):
            raise ConfigError(f"{where}: [sources] {key} must be a string (where the value comes from), got {text!r}")
    if base_name is not None:
        if not isinstance(base_name, str) or STACK_ALIASES.get(base_name, base_name) not in _builtin_files():
            raise ConfigError(f"{where}: base must be the name of a built-in stack ({', '.join(stack_names())}), "
                              f"got {base_name!r}")  # a file as base could name itself: a cycle
        try:
            base = load_stack(base_name)
        except ConfigError as err:
            raise ConfigError(f"{where}: base: {err}") from None
        merged_eff = {a: dict(t) for a, t in base.efficiency.items()}
        for arch, table in efficiency.items():
            merged_eff.setdefault(arch, {}).update(table)
        try:
            return replace(base, **values, efficiency=merged_eff, sources={**base.sources, **sources})
        except ConfigError as err:
            raise ConfigError(f"{where}: {err}") from None
    missing = [k for k in _IMPL_FIELDS if k not in values and k not in _OPTIONAL_FIELDS]
    if missing:
        raise ConfigError(f"{where}: missing key(s) {', '.join(missing)} in [stack] "
                          "(or name a built-in profile to start from with base = \"...\")")
    if builtin:
        needed = [k for k in _IMPL_FIELDS if k not in ("name", "release", "provenance")]
        needed += [f"efficiency.{arch}" for arch in efficiency]
        unsourced = [k for k in needed if not sources.get(k)]
        if unsourced:
            raise ConfigError(f"{where}: no source for {', '.join(unsourced)} in [sources]")
    try:
        return StackProfile(**values, efficiency=efficiency, sources=dict(sources))
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None


@cache
def _load_builtin(name: str) -> StackProfile:
    where = f"stack profile {name!r} (sim/stack_profiles/{name}.toml)"
    try:
        data = tomllib.loads(_builtin_files()[name])
    except tomllib.TOMLDecodeError as err:  # pragma: no cover - shipped files are tested
        raise ConfigError(f"{where}: malformed TOML: {err}") from None
    return _from_data(where, data, builtin=True)


#: Field overrides the built-in profiles are read with (:func:`builtin_overrides`), innermost block last: each layer's
#: profile names (empty: every built-in profile) and its field changes. Empty: as shipped.
_OVERRIDE_LAYERS: list[tuple[frozenset[str], dict[str, Any]]] = []


@contextmanager
def builtin_overrides(*, profiles: Collection[str] = (), **changes: Any) -> Iterator[None]:
    """Within the block, every built-in profile (or those named in ``profiles``) reads as shipped with ``changes``
    (field -> value): an ablation's way to switch one framework behaviour off in every release at once (``python -m
    studies.joint_fit --ablation``). Blocks nest, an inner block's changes over an outer's where both apply. Profiles
    loaded before the block keep their fields.

    >>> with builtin_overrides(fused_permute=False):
    ...     load_stack("megatron-26.04").fused_permute
    False
    >>> load_stack("megatron-26.04").fused_permute
    True
    >>> with builtin_overrides(profiles=("torchtitan",), joint_step_boundary=False):
    ...     load_stack("torchtitan").joint_step_boundary, load_stack("megatron-26.04").joint_step_boundary
    (False, True)
    """
    unknown = set(changes) - {f.name for f in fields(StackProfile)}
    if unknown:
        raise ConfigError(f"builtin_overrides: unknown stack fields {sorted(unknown)}")
    names = frozenset(profiles)
    if names - set(_builtin_files()):
        raise ConfigError(f"builtin_overrides: unknown built-in profiles {sorted(names - set(_builtin_files()))}")
    _OVERRIDE_LAYERS.append((names, dict(changes)))
    try:
        yield
    finally:
        _OVERRIDE_LAYERS.pop()


def _overrides_for(name: str) -> dict[str, Any]:
    """The field changes the open :func:`builtin_overrides` blocks make to built-in profile ``name``."""
    return {k: v for names, changes in _OVERRIDE_LAYERS if not names or name in names for k, v in changes.items()}


def load_stack(name_or_path: str | StackProfile | None) -> StackProfile:
    """A stack profile by built-in name, alias, or TOML file path (``None``: the torchtitan profile).

    A file holds ``[stack]`` (every :class:`StackProfile` field, or ``base = "<built-in>"`` and the
    fields it changes), ``[efficiency.<arch>]`` tables of op class -> efficiency, and ``[sources]``.
    Unknown or missing keys, wrong types and bad values raise :class:`ConfigError` naming the file,
    the field and the value.
    """
    if isinstance(name_or_path, StackProfile):
        return name_or_path
    if name_or_path is None:
        name_or_path = DEFAULT_STACK
    if not isinstance(name_or_path, str) or not name_or_path:
        raise ConfigError(f"stack: expected a profile name or a TOML path, got {name_or_path!r}")
    name = STACK_ALIASES.get(name_or_path, name_or_path)
    if name in _builtin_files():
        changes = _overrides_for(name)
        return replace(_load_builtin(name), **changes) if changes else _load_builtin(name)
    if not (name.endswith(".toml") or "/" in name or Path(name).is_file()):
        raise ConfigError(f"unknown stack {name_or_path!r}; built in: {', '.join(stack_names())} (or give a TOML path)")
    from sim.loaders import read_toml

    return _from_data(f"stack file {name}", read_toml(name), builtin=False)


#: Framework -> ((year, month) of a container, profile), oldest first: each profile covers its container and the point
#: releases after it.
_RELEASE_PROFILES: dict[str, tuple[tuple[tuple[int, int], str], ...]] = {
    "megatron": (((26, 2), "megatron-26.02"), ((26, 4), "megatron-26.04"))}
#: A "YY.MM" container number in a release string, not part of a longer number.
_CONTAINER = re.compile(r"(?<![\d.])(\d{2})\.(\d{2})(?!\d)")


def profile_for(stack: str, release: str = "") -> str:
    """The profile name for a measured run's ``stack`` and ``release`` (a dataset row): a Megatron-Bridge container maps
    to the newest profile not newer than it (26.04.01, a point release of 26.04, to 26.04; 26.08, newer than every
    profile, to the newest), one older than every profile to the oldest (25.11 to 26.02); other stacks, and a release
    naming no container, keep the stack's name.

    >>> profile_for("megatron", "megatron-bridge 26.04.01"), profile_for("torchtitan", "1a36996b")
    ('megatron-26.04', 'torchtitan')
    >>> profile_for("megatron", "megatron-bridge 26.08"), profile_for("megatron", "megatron-bridge 25.11")
    ('megatron-26.04', 'megatron-26.02')
    >>> profile_for("megatron", "megatron-bridge 26.04 (MLPerf Training v6.0 NeMo container)"), profile_for("megatron")
    ('megatron-26.04', 'megatron')
    """
    known = _RELEASE_PROFILES.get(stack, ())
    found = _CONTAINER.search(release)
    if not known or found is None:
        return stack
    number = (int(found.group(1)), int(found.group(2)))
    older = [name for container, name in known if container <= number]
    return older[-1] if older else known[0][1]


def default_stack() -> StackProfile:
    """The profile used when none is given: TorchTitan at the seed runs' commit."""
    return load_stack(DEFAULT_STACK)
