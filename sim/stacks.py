"""Framework stack profiles: what a training framework does, and how fast its kernels run.

A :class:`StackProfile` is the third input beside the hardware costs (:class:`~sim.costs.CostModel`,
per GPU architecture, from a calibration) and the specs: it names the framework release, its
implementation choices (how forced balance routes, DeepEP's data path, quantisation, parameter
sharding, recompute by module, which overlaps it can run, CUDA graphs, DeepEP's default SMs) and its
kernel efficiency per op class and GPU architecture, relative to the calibration's kernel rates.

Op classes (keys of :attr:`StackProfile.efficiency` per architecture): ``gemm.fwd``, ``gemm.dgrad``,
``gemm.wgrad``, ``grouped_gemm``, ``attn.fwd``, ``attn.bwd``, ``mem``. A missing key reads as the
architecture's ``default`` entry, then the profile-wide ``"*"`` architecture, then 1.0.

>>> s = StackProfile(efficiency={"*": {"default": 0.5}, "sm100": {"grouped_gemm": 0.8}})
>>> s.eff("sm100", "grouped_gemm"), s.eff("sm100", "attn.fwd"), s.eff("sm90", "mem")
(0.8, 0.5, 0.5)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sim.errors import ConfigError

__all__ = ["StackProfile", "OP_CLASSES", "FORCE_BALANCE", "PARAM_SHARDING", "QUANTIZE_WEIGHTS", "LAUNCH"]

OP_CLASSES = ("gemm.fwd", "gemm.dgrad", "gemm.wgrad", "grouped_gemm", "attn.fwd", "attn.bwd", "mem")
FORCE_BALANCE = ("round-robin", "random")
PARAM_SHARDING = ("fsdp", "zero1")
QUANTIZE_WEIGHTS = ("per_call", "per_step")
LAUNCH = ("eager", "compiled", "cuda_graphs")


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
    #: shared-expert compute overlaps the dispatch (Megatron ``moe_shared_expert_overlap``).
    shared_expert_overlap: bool = False
    #: how work reaches the GPU: eager launches, compiled regions, or CUDA graphs.
    launch: str = "compiled"
    #: SMs DeepEP's kernels take when the plan does not say (DeepEP v1 ``Buffer.num_sms`` = 20).
    deepep_sms: int = 20
    # --- host ------------------------------------------------------------------------------------
    kernel_overhead_s: float = 4e-6
    host_sync_s: float = 100e-6
    # --- efficiency --------------------------------------------------------------------------------
    #: arch ("sm90", "sm100", ... or "*") -> op class (or "default") -> fraction of the calibration's rate.
    efficiency: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    provenance: str = ""

    def __post_init__(self) -> None:
        choices: tuple[str, ...]
        for fname, choice, choices in (("force_balance", self.force_balance, FORCE_BALANCE),
                                      ("param_sharding", self.param_sharding, PARAM_SHARDING),
                                      ("quantize_weights", self.quantize_weights, QUANTIZE_WEIGHTS),
                                      ("launch", self.launch, LAUNCH)):
            if choice not in choices:
                raise ConfigError(f"stack {self.name!r}: {fname} must be one of {', '.join(choices)}; got {choice!r}")
        if not (self.kernel_overhead_s >= 0 and self.host_sync_s >= 0):
            raise ConfigError(f"stack {self.name!r}: kernel_overhead_s and host_sync_s must be zero or positive")
        for arch, table in self.efficiency.items():
            for op_class, value in table.items():
                if op_class != "default" and op_class not in OP_CLASSES:
                    raise ConfigError(f"stack {self.name!r}: efficiency.{arch}: unknown op class {op_class!r} "
                                      f"(known: {', '.join(OP_CLASSES)})")
                if not (isinstance(value, int | float) and 0 < value <= 1.5):
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
