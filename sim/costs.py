"""Kernel cost model: how long a compute op takes on one GPU, at the hardware's measured kernel rates.

A :class:`CostModel` turns an op's work (FLOPs, bytes moved) into seconds: GEMMs at the datasheet peak
times an efficiency curve indexed by problem size (Calculon style), attention at a kernel efficiency
(or its softmax exponentials on the SFUs, when longer), memory-bound ops at a fraction of HBM
bandwidth, MXFP8 quantize/scale-rearrange kernels as measured by TorchAO. What belongs to the
framework rather than the hardware lives in its :class:`~sim.stacks.StackProfile`: the fraction of
these rates its kernels reach per op class and architecture, its per-kernel launch overhead and its
host-sync stall; :meth:`CostModel.op_seconds` combines the two. Every default number carries its
source in :attr:`CostModel.sources`.

The model serialises to a versioned ``calibration.json`` (:meth:`CostModel.to_json`,
:meth:`CostModel.from_json`) so the calibration step can replace any number with a fitted one.

>>> from sim.catalog import load_gpu
>>> costs = default_costs(load_gpu("b200"))
>>> round(costs.gemm_eff["bf16"](1e13), 3)
0.606
>>> CostModel.from_json(costs.to_json()) == costs
True
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Protocol

from sim.errors import ConfigError
from sim.specs import GPUSpec

__all__ = [
    "Curve",
    "log_interpolate",
    "CostModel",
    "default_costs",
    "torchao_mxfp8_curves",
    "CALIBRATION_VERSION",
    "KernelRates",
    "GROUPED_PER_EXPERT_SHARE",
    "ACCUMULATE_BW_SHARE",
]

CALIBRATION_VERSION = 1

#: PyTorch's index kernels that sum elements into rows by index (a workload op of kind ``accum``; where a stack
#: runs them: :attr:`sim.stacks.StackProfile.indexed_accumulate`), as the share of the GPU's HBM bandwidth they
#: sustain counting two bytes (one BF16 element) per element added, by layout:
#:
#: - ``atomic``: ``scatter_add_`` / ``index_add_`` over rows, one atomic add per element. TileOPs PR #608 (H200, BF16,
#:   its "PyTorch-vec" MoE unpermute: a zeroed output, the weighting, ``scatter_add_``): 2,048 tokens x top-2 x hidden
#:   4,096 in 0.20 ms, 16.8M elements, 167.8 GB/s of the H200's 4.8 TB/s (0.035; 512 tokens: 0.06 ms, 0.029), a
#:   tenth of its fused kernel's 2.95 TB/s. Its zeroed output and weighting are in that time: a lower bound.
#: - ``sorted``: ``index_put_`` with accumulate, autograd's backward of an index gather ``x[idx]``
#:   (``indexing_backward_kernel``: the indices sorted, each run of equal ones summed). TorchAO PR #4623 (B200,
#:   DeepSeek-V3 16B at EP8, 196,608 x 2,048 BF16 rows, median of 11): 1.848 ms, 435.8 GB/s of 7.7 TB/s (0.057), where
#:   a non-atomic Triton scatter takes 0.526 ms.
#: - ``batched``: the backward of ``torch.bmm`` of the router scores ``[T, 1, K]`` with the K copies' FP32 slots
#:   ``[T, K, D]`` (TorchTitan's standard-path combine, :attr:`sim.stacks.StackProfile.combine_bmm_batched`): the
#:   slots' gradient (an outer product, inner size 1) and the scores' gradient (one row against K, inner size D),
#:   which autograd runs as batched FP32 GEMMs of tiny sizes. TorchTitan PR #2466 (B200, Qwen3-30B-A3B, local batch
#:   16 at TorchTitan's Qwen3 sequence of 4,096: T = 65,536, K 8, D 2,048): "a large Magma SGEMM or Cutlass SIMT
#:   kernel ... taking ~6-9ms ..., where a memory-bound kernel should take something like 1ms". Its gradients move
#:   2 x 4 B x (T + T K) x D = 9.66 GB (``elems``: those bytes over two), 1.255 ms at the B200's 7.7 TB/s: at 7.5 ms
#:   (the middle of 6-9) 0.167 of the bandwidth (0.139-0.209; the PR's own "~1 ms" against 7.5 ms says 0.133).
#:
#: Other GPUs take the same share of their own bandwidth (no other chip measured).
ACCUMULATE_BW_SHARE: dict[str, float] = {"atomic": 0.035, "sorted": 0.057, "batched": 0.167}


def _launch_s(op: Any, stack: KernelRates) -> float:
    """Seconds one kernel of ``op`` adds for reaching the GPU: a graph node's when it replays from a CUDA graph
    (``op.graphed``), else the stack's launch gap."""
    return stack.graph_node_s if op.graphed else stack.kernel_overhead_s


class KernelRates(Protocol):
    """What a framework contributes to a kernel's time (a :class:`sim.stacks.StackProfile` is one): the
    fraction of this cost model's rates its kernels reach per op class and architecture, and a per-kernel gap.
    The hardware cost model reads it through this interface and never imports the stack profiles."""

    @property
    def kernel_overhead_s(self) -> float: ...

    @property
    def graph_node_s(self) -> float: ...

    def eff(self, arch: str, op_class: str) -> float: ...


def log_interpolate(sizes: Sequence[float], values: Sequence[float], size: float) -> float:
    """Piecewise linear in log10(size) through (sizes, values), clamped at the ends (sizes increasing).

    >>> log_interpolate((10.0, 1000.0), (0.2, 0.6), 100.0)
    0.4
    """
    if size <= sizes[0]:
        return values[0]
    if size >= sizes[-1]:
        return values[-1]
    x = math.log10(size)
    for i in range(1, len(sizes)):
        if size <= sizes[i]:
            x0, x1 = math.log10(sizes[i - 1]), math.log10(sizes[i])
            return values[i - 1] + (values[i] - values[i - 1]) * (x - x0) / (x1 - x0)
    return values[-1]  # pragma: no cover


@dataclass(frozen=True)
class Curve:
    """A value (an efficiency) as a piecewise-linear function of log10(size), clamped at the ends.

    >>> Curve((1e9, 1e12), (0.2, 0.6))(1e10)
    0.33333333333333337
    """

    sizes: tuple[float, ...]
    values: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.sizes) != len(self.values) or not self.sizes:
            raise ConfigError("curve: sizes and values must be non-empty and of equal length")
        if any(b <= a for a, b in zip(self.sizes, self.sizes[1:])):
            raise ConfigError(f"curve: sizes must increase, got {self.sizes}")
        if any(not 0 < v <= 1.5 for v in self.values):
            raise ConfigError(f"curve: values must be in (0, 1.5], got {self.values}")

    def __call__(self, size: float) -> float:
        return log_interpolate(self.sizes, self.values, size)

    def scaled(self, factor: float) -> Curve:
        return Curve(self.sizes, tuple(v * factor for v in self.values))

    def to_dict(self) -> dict[str, list[float]]:
        return {"sizes": list(self.sizes), "values": list(self.values)}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Curve:
        return Curve(tuple(float(s) for s in data["sizes"]), tuple(float(v) for v in data["values"]))


def _comm_overrides(data: dict[str, Any]) -> dict[str, float]:
    """A calibration file's ``comm`` overrides. A file of the former layout may carry ``nccl_sms`` (SMs its
    FSDP and TP collectives held; 0 = none): every NCCL collective now holds ``CommCosts.nccl_channels``, so a
    non-zero value becomes that override and the former default 0 leaves NCCL's own."""
    comm = {k: float(v) for k, v in data.get("comm", {}).items()}
    legacy = float(data.get("nccl_sms", 0))
    if legacy > 0:
        comm.setdefault("nccl_channels", legacy)
    return comm


#: Share of a grouped GEMM's roll-off half-point (at DeepSeek-V3's expert shape) that is a fixed time per expert:
#: 0.39 +- 0.08, least squares over flashinfer PR #2503's Blackwell masked grouped GEMM at two expert shapes
#: (published.md s8). The prior of the joint calibration's ``grouped.per_expert_share`` (:mod:`sim.joint`).
GROUPED_PER_EXPERT_SHARE = 0.39


@dataclass(frozen=True)
class CostModel:
    """Peak-rate-times-efficiency costs of compute ops on one GPU type.

    Efficiency curves are indexed by FLOPs per call (dense GEMMs) or by rows per call (grouped GEMMs,
    ``M`` = token copies through the experts of one rank). Keys of the curve dicts are dtypes:
    ``bf16``, ``mxfp8``, ``fp8`` (blockwise). MXFP8 grouped-GEMM curves are per pass (``mxfp8`` is the
    forward/dgrad kernel, ``mxfp8_wgrad`` the 2D-2D wgrad kernel).
    """

    gpu: str
    gemm_eff: dict[str, Curve]
    grouped_gemm_eff: dict[str, Curve]
    attn_fwd_eff: float
    attn_bwd_eff: float
    mem_bw_eff: float
    quantize_bw_eff: float
    #: Measured scale-rearrange time per element of the tensor whose scales are rearranged (s/elem),
    #: by kind: "act" (M x K activations), "weight" (G x N x K weights), "wgrad" (dim1 layout, per elem).
    rearrange_s_per_elem: dict[str, float]
    #: Overrides of the network model's CommCosts fields (name -> value); empty: its defaults.
    comm: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    version: int = CALIBRATION_VERSION
    provenance: str = "moesim defaults: datasheets and published microbenchmarks"
    #: Share of a grouped GEMM's roll-off (at the curves' reference expert shape, DeepSeek-V3's
    #: 7168 x 2048) that is a fixed time per expert, amortised over the expert's work per row (K x N); the rest
    #: (weight traffic, the partial last row tile) follows its rows alone. A call is read at its rows per expert
    #: times :meth:`grouped_work_scale`. Set by the joint calibration (``grouped.per_expert_share``,
    #: :mod:`sim.joint`); not serialised.
    grouped_per_expert_share: float = GROUPED_PER_EXPERT_SHARE
    #: FP8 attention's (``ParallelPlan.fp8_attention``) forward and backward efficiencies, as fractions of the FP8
    #: tensor rate; 0: the BF16 ones (``attn_fwd_eff`` / ``attn_bwd_eff``).
    attn_fp8_fwd_eff: float = 0.0
    attn_fp8_bwd_eff: float = 0.0
    #: The share of the GPU's exponential rate (``GPUSpec.exp_per_s``) an attention kernel's softmax sustains (the
    #: exponentials with the row max, rescaling and casts around them): the bound a kernel cannot beat, however fast
    #: its matmuls.
    softmax_eff: float = 1.0
    #: The least time a sliding-window attention kernel spends per query row and head, forward and backward (its
    #: few key tiles per query tile leave it bound by per-tile work, not by its FLOPs); 0: no floor.
    attn_window_row_s: tuple[float, float] = (0.0, 0.0)
    #: The same under FP8 attention; (0, 0): BF16's.
    attn_fp8_window_row_s: tuple[float, float] = (0.0, 0.0)
    #: Share of HBM bandwidth PyTorch's index kernels sustain summing elements into rows, by layout (``atomic``,
    #: ``sorted``; :data:`ACCUMULATE_BW_SHARE`).
    accumulate_bw_share: dict[str, float] = field(default_factory=lambda: dict(ACCUMULATE_BW_SHARE))

    def __post_init__(self) -> None:
        for name, value in (("attn_fwd_eff", self.attn_fwd_eff), ("attn_bwd_eff", self.attn_bwd_eff),
                            ("mem_bw_eff", self.mem_bw_eff), ("quantize_bw_eff", self.quantize_bw_eff),
                            ("softmax_eff", self.softmax_eff)):
            if not 0 < value <= 1.5:
                raise ConfigError(f"cost model: {name} must be in (0, 1.5], got {value}")
        for name, value in (("attn_fp8_fwd_eff", self.attn_fp8_fwd_eff), ("attn_fp8_bwd_eff", self.attn_fp8_bwd_eff)):
            if not 0 <= value <= 1.5:
                raise ConfigError(f"cost model: {name} must be in [0, 1.5] (0: the BF16 efficiency), got {value}")
        if set(self.accumulate_bw_share) != set(ACCUMULATE_BW_SHARE) or not all(
                0 < v <= 1.5 for v in self.accumulate_bw_share.values()):
            raise ConfigError(f"cost model: accumulate_bw_share needs the layouts {sorted(ACCUMULATE_BW_SHARE)}, each "
                              f"in (0, 1.5]; got {dict(self.accumulate_bw_share)}")

    # --- serialisation -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "provenance": self.provenance,
            "gpu": self.gpu,
            "gemm_eff": {k: c.to_dict() for k, c in self.gemm_eff.items()},
            "grouped_gemm_eff": {k: c.to_dict() for k, c in self.grouped_gemm_eff.items()},
            "attn_fwd_eff": self.attn_fwd_eff,
            "attn_bwd_eff": self.attn_bwd_eff,
            "attn_fp8_fwd_eff": self.attn_fp8_fwd_eff,
            "attn_fp8_bwd_eff": self.attn_fp8_bwd_eff,
            "softmax_eff": self.softmax_eff,
            "attn_window_row_s": list(self.attn_window_row_s),
            "attn_fp8_window_row_s": list(self.attn_fp8_window_row_s),
            "mem_bw_eff": self.mem_bw_eff,
            "quantize_bw_eff": self.quantize_bw_eff,
            "accumulate_bw_share": dict(self.accumulate_bw_share),
            "rearrange_s_per_elem": dict(self.rearrange_s_per_elem),
            "comm": dict(self.comm),
            "sources": dict(self.sources),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> CostModel:
        if not isinstance(data, dict):
            raise ConfigError(f"calibration: expected a JSON object, got {type(data).__name__}")
        version = data.get("version")
        if "stack" in data:
            raise ConfigError("calibration: field 'stack' is no longer part of a calibration (it held the legacy "
                              "compute_scale); framework efficiencies and host costs live in stack profiles "
                              "(--stack NAME|FILE, docs/stack-protocol.md)")
        if version != CALIBRATION_VERSION:
            raise ConfigError(
                f"calibration: version {version!r} is not supported (this moesim reads {CALIBRATION_VERSION})"
            )
        try:
            model = CostModel(
                gpu=str(data["gpu"]),
                gemm_eff={k: Curve.from_dict(v) for k, v in data["gemm_eff"].items()},
                grouped_gemm_eff={k: Curve.from_dict(v) for k, v in data["grouped_gemm_eff"].items()},
                attn_fwd_eff=float(data["attn_fwd_eff"]),
                attn_bwd_eff=float(data["attn_bwd_eff"]),
                attn_fp8_fwd_eff=float(data.get("attn_fp8_fwd_eff", 0.0)),
                attn_fp8_bwd_eff=float(data.get("attn_fp8_bwd_eff", 0.0)),
                softmax_eff=float(data.get("softmax_eff", 1.0)),
                attn_window_row_s=_row_pair(data.get("attn_window_row_s", (0.0, 0.0))),
                attn_fp8_window_row_s=_row_pair(data.get("attn_fp8_window_row_s", (0.0, 0.0)), "attn_fp8_window_row_s"),
                mem_bw_eff=float(data["mem_bw_eff"]),
                quantize_bw_eff=float(data["quantize_bw_eff"]),
                accumulate_bw_share={k: float(v) for k, v in data.get("accumulate_bw_share", ACCUMULATE_BW_SHARE).items()},
                rearrange_s_per_elem={k: float(v) for k, v in data["rearrange_s_per_elem"].items()},
                comm=_comm_overrides(data),
                sources=dict(data.get("sources", {})),
                version=int(version),
                provenance=str(data.get("provenance", "")),
            )
        except (KeyError, TypeError, ValueError) as err:  # the file's fields, parsed above: not our bugs
            raise ConfigError(f"calibration: missing or malformed field: {err}") from None
        for table in ("gemm_eff", "grouped_gemm_eff"):
            if not getattr(model, table):  # a dtype without its own curve falls back to another one
                raise ConfigError(f"calibration: {table} needs at least one curve")
        from sim.comm import CommCosts

        unknown = sorted(set(model.comm) - set(CommCosts.__dataclass_fields__))
        if unknown:
            raise ConfigError(f"calibration: comm.{unknown[0]} is not a CommCosts field")
        return model

    @staticmethod
    def from_json(text: str) -> CostModel:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ConfigError(f"calibration: malformed JSON: {err}") from None
        return CostModel.from_dict(data)

    # --- op times -----------------------------------------------------------------------------
    def op_seconds(self, op: Any, gpu: GPUSpec, stack: KernelRates, load_factor: float = 1.0) -> float:
        """Seconds of one compute op (a :class:`sim.workload.OpSpec` of kind gemm, grouped_gemm, attn, mem,
        accum, quant or rearrange) on ``gpu``, under ``stack`` (:class:`KernelRates`, e.g. a
        :class:`sim.stacks.StackProfile`): the kernel time at this calibration's rates divided by the stack's efficiency
        for the op's class on the GPU's architecture, plus the stack's per-kernel launch overhead for each kernel it launches.
        ``load_factor`` scales load-scaled ops (routed experts on a skewed EP rank).

        >>> from sim.catalog import load_gpu
        >>> from sim.stacks import StackProfile
        >>> from sim.workload import OpSpec
        >>> gpu, costs = load_gpu("b200"), default_costs(load_gpu("b200"))
        >>> op = OpSpec("x", "mem", nbytes=1e9)
        >>> s = StackProfile(efficiency={"*": {"mem": 0.5}}, kernel_overhead_s=1e-6)
        >>> round(costs.op_seconds(op, gpu, s) * 1e6, 3) == round(1e9 / (gpu.hbm_bw_bytes_per_s * 0.7 * 0.5) * 1e6 + 1, 3)
        True
        """
        f = load_factor if op.load_scaled else 1.0
        k = op.kind
        if k == "gemm":
            peak = gpu.bf16_flops if op.dtype == "bf16" else gpu.fp8_flops
            t, cls = self.gemm_time(op.flops, peak, op.dtype), f"gemm.{op.gemm_pass}"
        elif k == "grouped_gemm":
            peak = gpu.bf16_flops if op.dtype == "bf16" else gpu.fp8_flops
            # A calibration's own wgrad curve (``<dtype>_wgrad``: TorchAO's 2D-2D MXFP8 kernel, DeepSeek's
            # FP8 wgrad) where it has one, else the dtype's forward curve.
            # (of the curve the dtype resolves to: ``fp8-blockwise`` without its own curve runs on ``fp8``'s)
            key = _fallback_key(self.grouped_gemm_eff, op.dtype)
            wgrad_key = f"{key}_wgrad"
            key = wgrad_key if op.gemm_pass == "wgrad" and wgrad_key in self.grouped_gemm_eff else key
            t, cls = self.grouped_gemm_time(op.flops * f, op.rows * f * self.grouped_work_scale(op.k_in, op.n_out), peak,
                                            key, groups=op.groups), "grouped_gemm"
            # An empty grouped GEMM still launches (every EP rank runs its experts' kernels).
            return t / stack.eff(gpu.arch, cls) + int(op.launches) * _launch_s(op, stack)
        elif k == "attn":
            # FP8 attention (ParallelPlan.fp8_attention): its matmuls at the FP8 tensor rate, its softmax as in BF16.
            fp8 = op.dtype != "bf16"
            t = self.attention_time(op.flops, gpu.fp8_flops if fp8 else gpu.bf16_flops, op.backward, exps=op.elems,
                                    exp_per_s=gpu.exp_per_s, fp8=fp8, window_share=op.window_share,
                                    window_rows=op.rows)
            cls = "attn.bwd" if op.backward else "attn.fwd"
        elif k == "mem":
            t, cls = self.memory_time(op.nbytes * f, gpu.hbm_bw_bytes_per_s), "mem"
        elif k == "accum":
            t, cls = self.accumulate_time(op.elems * f, gpu.hbm_bw_bytes_per_s, op.accumulate), "accum"
        elif k == "quant":
            t, cls = self.quantize_time(op.elems * f, gpu.hbm_bw_bytes_per_s, op.copies), "quant"
        elif k == "rearrange":
            t, cls = self.rearrange_time(op.elems * f, op.layout), "quant"
        else:
            raise ValueError(f"op {op.name!r}: kind {k!r} is not a compute op")
        if t <= 0:
            return 0.0
        return t / stack.eff(gpu.arch, cls) + int(op.launches) * _launch_s(op, stack)

    def grouped_work_scale(self, k_in: float, n_out: float) -> float:
        """The factor on a grouped GEMM's rows per expert at which its curve is read: the curve's half-point over
        this shape's, for an expert of ``k_in x n_out`` work per row (1 when the shape is unknown).

        With a share ``q`` (:attr:`grouped_per_expert_share`) of the reference shape's half-point a fixed time per
        expert, an expert of ``w`` times the reference work per row has its half-point at ``(1 - q) + q / w`` of
        the curve's: a thinner expert needs more rows to amortise the same fixed time.

        >>> from dataclasses import replace
        >>> c = replace(default_costs(__import__("sim.catalog", fromlist=["load_gpu"]).load_gpu("h100")),
        ...             grouped_per_expert_share=0.5)
        >>> c.grouped_work_scale(7168, 2048), round(c.grouped_work_scale(4096, 2 * 14336), 3), c.grouped_work_scale(0, 0)
        (1.0, 1.778, 1.0)
        """
        if k_in <= 0 or n_out <= 0:
            return 1.0
        work = k_in * n_out / (_REF_K * _REF_N)
        q = self.grouped_per_expert_share
        return float(1.0 / ((1.0 - q) + q / work))

    def gemm_time(self, flops: float, peak_flops: float, dtype: str = "bf16") -> float:
        """Kernel seconds of one dense GEMM call of ``flops`` on a GPU of ``peak_flops`` for ``dtype``
        (dtypes without their own curve, e.g. ``fp8-current``, run at the FP8 curve)."""
        if flops <= 0:
            return 0.0
        return flops / (peak_flops * _fallback(self.gemm_eff, dtype)(flops))

    def grouped_gemm_time(self, flops: float, rows: float, peak_flops: float, dtype: str = "bf16",
                          groups: int = 0) -> float:
        """Kernel seconds of one grouped GEMM call over ``rows`` token copies spread over ``groups`` local
        experts (0: unknown, read the curve at ``rows``).

        The efficiency follows the rows *per expert*: each expert is its own GEMM of ``rows / groups`` rows
        (its own weight tile loads, its own partial last wave), so 32 experts of 1,024 rows run like
        torch._grouped_mm at 1,024 rows per group, not like one GEMM of 32,768. The curves are tabulated
        as the benchmark measured them, total rows at :data:`GROUPED_REF_GROUPS` groups (TorchAO's
        DeepSeek-V3 shapes, G = 8, published.md s4), so a call is read at ``rows / groups * 8``.

        >>> c = default_costs(__import__("sim.catalog", fromlist=["load_gpu"]).load_gpu("b200"))
        >>> c.grouped_gemm_time(1e12, 32768, 2250e12, groups=32) > c.grouped_gemm_time(1e12, 32768, 2250e12, groups=4)
        True
        """
        if flops <= 0:
            return 0.0
        if groups > 0:
            rows = rows / groups * GROUPED_REF_GROUPS
        eff = _fallback(self.grouped_gemm_eff, dtype)(max(rows, 1.0))
        return flops / (peak_flops * eff)

    def attention_time(self, flops: float, peak_flops: float, backward: bool, *, exps: float = 0.0,
                       exp_per_s: float = 0.0, fp8: bool = False, window_share: float = 0.0,
                       window_rows: float = 0.0) -> float:
        """Kernel seconds of causal attention: tensor-core time at the kernel efficiency (``fp8``: FP8 attention's,
        with ``peak_flops`` the FP8 rate), or the softmax's exponentials (``exps`` at ``exp_per_s`` x
        :attr:`softmax_eff`, when the GPU's rate is known), whichever is longer. ``window_share`` of the work is
        sliding-window layers', which take at least ``window_rows`` query rows x heads at
        :attr:`attn_window_row_s`."""
        if flops <= 0:
            return 0.0
        eff = self.attn_bwd_eff if backward else self.attn_fwd_eff
        if fp8:
            eff = (self.attn_fp8_bwd_eff if backward else self.attn_fp8_fwd_eff) or eff

        def kernel(share: float) -> float:
            mma = share * flops / (peak_flops * eff)
            return max(mma, share * exps / (exp_per_s * self.softmax_eff)) if exps > 0 and exp_per_s > 0 else mma

        if window_share <= 0:
            return kernel(1.0)
        rows_s = self.attn_fp8_window_row_s if fp8 and any(self.attn_fp8_window_row_s) else self.attn_window_row_s
        floor = window_rows * rows_s[1 if backward else 0]
        return kernel(1.0 - window_share) + max(kernel(window_share), floor)

    def memory_time(self, nbytes: float, hbm_bw: float, kernels: int = 1, overhead_s: float = 0.0) -> float:
        """Seconds of memory-bound kernels moving ``nbytes`` through HBM (plus ``kernels * overhead_s``)."""
        if nbytes <= 0:
            return 0.0
        return nbytes / (hbm_bw * self.mem_bw_eff) + kernels * overhead_s

    def accumulate_time(self, elems: float, hbm_bw: float, layout: str) -> float:
        """Seconds of a PyTorch index kernel summing ``elems`` BF16 elements into rows by index, ``layout`` ``atomic``
        (``scatter_add_``, ``index_add_``) or ``sorted`` (``index_put_`` with accumulate), or of a batched bmm backward
        moving ``2 x elems`` bytes (``batched``): :attr:`accumulate_bw_share`.

        >>> from sim.catalog import load_gpu
        >>> costs = default_costs(load_gpu("h200"))
        >>> round(costs.accumulate_time(2048 * 2 * 4096, 4.8e12, "atomic") * 1e3, 2)  # TileOPs PR #608: 0.20 ms
        0.2
        """
        if elems <= 0:
            return 0.0
        try:
            share = self.accumulate_bw_share[layout]
        except KeyError:
            raise ValueError(f"accumulate layout {layout!r} is not one of {sorted(self.accumulate_bw_share)}") from None
        return elems * 2 / (hbm_bw * share)

    def quantize_time(self, elems: float, hbm_bw: float, copies: int = 1) -> float:
        """One MXFP8 quantize kernel of ``elems`` BF16 elements: read 2 B, write ``copies`` x (1 B + 1/32 B of
        scales)."""
        if elems <= 0:
            return 0.0
        nbytes = elems * (2 + copies * (1 + 1 / 32))
        return nbytes / (hbm_bw * self.quantize_bw_eff)

    def rearrange_time(self, elems: float, kind: str) -> float:
        """One scale-rearrange kernel for a tensor of ``elems`` elements (measured rate, ``kind``)."""
        if elems <= 0:
            return 0.0
        return elems * self.rearrange_s_per_elem[kind]


def _row_pair(value: Any, name: str = "attn_window_row_s") -> tuple[float, float]:
    """A cost file's ``attn_window_row_s`` (or its FP8 twin): [forward, backward] seconds per query row and head."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ConfigError(f"calibration: {name} must be [forward, backward] seconds, got {value!r}")
    fwd, bwd = (float(v) for v in value)
    if not (0 <= fwd < 1e-3 and 0 <= bwd < 1e-3):
        raise ConfigError(f"calibration: {name} must be in [0, 1e-3) seconds, got {value!r}")
    return fwd, bwd


def _fallback_key(curves: dict[str, Curve], dtype: str) -> str:
    """The name of the curve ``dtype`` runs on: its own; a dtype without its own (e.g. ``fp8-current``,
    ``fp8-blockwise`` in a calibration that measured only ``fp8``) the FP8 curve; a table without FP8 (a
    BF16-only file) its first curve by name."""
    return dtype if dtype in curves else "fp8" if "fp8" in curves else min(curves)


def _fallback(curves: dict[str, Curve], dtype: str) -> Curve:
    """The curve of ``dtype`` (:func:`_fallback_key`)."""
    return curves[_fallback_key(curves, dtype)]


# --- defaults ------------------------------------------------------------------------------------

# Dense BF16 GEMM: asymptote = measured cuBLAS on large squares / datasheet (published.md s3:
# B200 1338-1389 of 2250 -> 0.607; H100 783-797 of 989 -> 0.80). Roll-off below ~1e11 FLOPs per call
# is an assumption shaped like cuBLAS size sweeps (tile quantisation and launch-bound small shapes).
_ROLLOFF_SIZES = (1e8, 1e9, 1e10, 1e11, 1e12)
_ROLLOFF_SHAPE = (0.10, 0.30, 0.65, 0.92, 1.00)

# Grouped BF16 GEMM (torch._grouped_mm) vs total rows M, DeepSeek-V3 expert shapes: 0.50 at M=131072 is
# DERIVED from published.md s4 (MXFP8 per-kernel sum 7361 us at 1.39x speedup -> BF16 10.23 ms for
# 3 x 2*131072*2048*7168 FLOPs); the roll-off to smaller M is an assumption (fewer rows per expert).
_GROUPED_BF16 = Curve((4096.0, 16384.0, 32768.0, 65536.0, 131072.0), (0.30, 0.42, 0.46, 0.48, 0.50))

# Published fwd+bwd MXFP8/BF16 speedups vs M (published.md s4, read from the roofline chart).
_MXFP8_SPEEDUP = ((16384.0, 0.99), (32768.0, 1.20), (65536.0, 1.25), (131072.0, 1.39))
# Below the chart's smallest M the speedup is held at its smallest published value (it falls with M over the
# whole chart), so the MXFP8 curve rolls off with the BF16 one there (:func:`_derive_mxfp8_curve`). Holding the
# MXFP8 *efficiency* flat instead (the curve's own clamp) would make MXFP8 gain on BF16 as M shrinks, against
# the published trend.
# Measured scale-rearrange kernel times at the reference shape (131072 tokens, dim 7168, hidden 2048,
# G=8): s4 per-kernel breakdown. Rates are per element of the tensor whose scales are rearranged.
_REF_M, _REF_K, _REF_N, _REF_G = 131072, 7168, 2048, 8
#: Groups (local experts) of the grouped-GEMM benchmark the curves are tabulated at (published.md s4, G = 8).
GROUPED_REF_GROUPS = _REF_G
_REARRANGE = {
    "act": (29.7e-6 / (_REF_M * _REF_K) + 19.4e-6 / (_REF_M * _REF_N)) / 2,
    "weight": (13.3e-6 + 12.9e-6) / 2 / (_REF_G * _REF_N * _REF_K),
    "wgrad": (199.8e-6 + 207.9e-6) / (_REF_M * (_REF_N + _REF_K)),
}
_QUANT_BW_EFF = 0.76  # s4: "quantize kernels reach ~70-82% of HBM bandwidth"


def _mxfp8_pass_overhead(m: float, costs_q: float, hbm_bw: float) -> float:
    """Quantize + rearrange seconds of one fwd+bwd of one expert GEMM (DeepSeek-V3 shape) at ``m`` rows."""
    k, n, g = _REF_K, _REF_N, _REF_G

    def nbytes(elements: float) -> float:
        return elements * (2 + 1 + 1 / 32) / (hbm_bw * costs_q)

    quant = nbytes(m * k) + nbytes(g * n * k)  # fwd: A, B
    quant += nbytes(m * n) + nbytes(g * n * k)  # dgrad: grad_out, B
    quant += nbytes(m * n) + nbytes(m * k)  # wgrad: dim1 grad_out and A
    rearr = _REARRANGE["act"] * (m * k + m * n) + _REARRANGE["weight"] * 2 * g * n * k
    rearr += _REARRANGE["wgrad"] * m * (n + k)
    return quant + rearr


# Per-kernel s4: the wgrad 2D-2D grouped mm takes 2103.3 us where the forward 2D-3D takes 1671.2 us for the
# same FLOPs (dgrad: 1683.4 us, the forward's rate).
_MXFP8_WGRAD_SLOWDOWN = 2103.3 / 1671.2


def _derive_mxfp8_curve(bf16_peak: float, fp8_peak: float, hbm_bw: float, bf16_curve: Curve = _GROUPED_BF16) -> Curve:
    """MXFP8 grouped-GEMM forward/dgrad kernel efficiency vs M such that (quantize + rearrange + forward +
    dgrad + wgrad, the wgrad :data:`_MXFP8_WGRAD_SLOWDOWN` times slower) reproduces the published fwd+bwd
    speedup over the BF16 grouped GEMM of ``bf16_curve`` at each M (DeepSeek-V3 expert shapes, B200), and
    below the published range the smallest published speedup at each of ``bf16_curve``'s points there."""
    below = tuple((m, _MXFP8_SPEEDUP[0][1]) for m in bf16_curve.sizes if m < _MXFP8_SPEEDUP[0][0])
    sizes, values = [], []
    for m, speedup in (*below, *_MXFP8_SPEEDUP):
        flops = 2 * m * _REF_N * _REF_K  # one GEMM; fwd+bwd runs it three times
        bf16 = 3 * flops / (bf16_peak * bf16_curve(m))
        at_peak = (2 + _MXFP8_WGRAD_SLOWDOWN) * flops / fp8_peak
        # a BF16 curve fast enough that the quantise passes alone exceed the speedup's budget: the GEMMs at peak
        gemms = max(bf16 / speedup - _mxfp8_pass_overhead(m, _QUANT_BW_EFF, hbm_bw), at_peak)
        sizes.append(m)
        values.append(at_peak / gemms)
    return Curve(tuple(sizes), tuple(values))


@lru_cache(maxsize=64)  # one per joint roll-off: every prediction of a fit asks for the same curves
def torchao_mxfp8_curves(bf16_curve: Curve) -> tuple[Curve, Curve]:
    """TorchAO's MXFP8 grouped GEMM (forward/dgrad, wgrad) over the BF16 grouped GEMM ``bf16_curve`` (rows per
    expert x 8, as every grouped curve): what the published data measures is MXFP8's fwd+bwd speedup over BF16
    at each shape (1.39x at 16,384 rows per expert down to 0.99x at 2,048, quantize and rearrange included;
    published.md s4), so the MXFP8 curves follow whatever BF16 curve a prediction uses (the joint calibration's
    roll-off, :func:`sim.joint.apply_params`). B200 numbers, reused as fractions of peak on other SM100 parts.

    >>> fwd, wgrad = torchao_mxfp8_curves(_GROUPED_BF16)
    >>> fwd == _derive_mxfp8_curve(_B200_BF16, _B200_FP8, _B200_HBM) and round(fwd(131072) / wgrad(131072), 4)
    1.2586
    """
    fwd = _derive_mxfp8_curve(_B200_BF16, _B200_FP8, _B200_HBM, bf16_curve)
    return fwd, fwd.scaled(1 / _MXFP8_WGRAD_SLOWDOWN)


_B200_BF16, _B200_FP8, _B200_HBM = 2250e12, 4500e12, 7.7e12
#: Blockwise-scaled FP8 GEMM over tensor/row-wise scaled FP8 on Hopper, whose scales are applied in the main loop:
#: FBGEMM PR #2546 (H100 500 W), GEMM alone at (8192, 8192, 8192), (65536, 8192, 7168), (65536, 3584, 8192):
#: block 870.40 / 828.34 / 828.31 vs row-wise 1125.51 / 1082.75 / 1141.38 TFLOPS (mean of the three ratios).
_HOPPER_BLOCKWISE_OVER_TENSORWISE = (870.40 / 1125.51 + 828.34 / 1082.75 + 828.31 / 1141.38) / 3
#: H100 SXM FP8 maximum achievable matmul (1402.6 of 1979 TFLOPS, torch 2.7.0+cu126, best shape
#: 1024x9216x14336): stas00/ml-engineering compute/accelerator/README.md (commit 744d01e), whose BF16 row
#: (794.5, 80.3%) agrees with published.md's H100 BF16 783-797.
_H100_FP8_MAMF = 1402.6e12 / 1979e12


#: Attention on Blackwell, cuDNN 9.22 (cudnn-frontend benchmark/sdpa_benchmark_training results/dsv3, 2026-04-24:
#: DeepSeek-V3's MLA, 128 heads, head dims 192 / 128, batch 2, causal, sequence 4,096): GB200 BF16 forward 0.977 ms,
#: backward 3.383 ms; MXFP8 0.714 / 2.620 ms. As fractions of the rates the cost model gives a GB200 (BF16 2,250,
#: FP8 4,500 TFLOPS: ``chip.nvl72_rate``), in its FLOP convention (backward = 2 x forward): BF16 0.625 / 0.361;
#: MXFP8 backward 0.233; MXFP8 forward 0.50 from the GB300 cell (0.546 ms at the fitted Blackwell-Ultra rate), as the
#: GB200 forward is softmax-bound. GB300 checks the rest: BF16 0.635 / 0.351, MXFP8 backward 0.233.
_BLACKWELL_ATTN = {"attn_fwd_eff": 0.625, "attn_bwd_eff": 0.361, "attn_fp8_fwd_eff": 0.50, "attn_fp8_bwd_eff": 0.233}
#: The softmax's share of the exponential rate (``GPUSpec.exp_per_s``, 5e12/s on a GB200): the GB200 MXFP8 forwards at
#: sequence 4,096 (cudnn-frontend results above), DeepSeek-V3's MLA 0.714 ms (0.60) and Llama 3.1's GQA (64 heads,
#: head dim 128) 0.326 ms (0.66), whose matmuls would take 0.61 / 0.24 ms at the FP8 forward efficiency: geometric
#: mean 0.63.
SOFTMAX_EFF = 0.63
#: Sliding-window attention on Blackwell, per query row and head (cudnn-frontend sdpa_benchmark_training results/gpt_oss,
#: cuDNN 9.22: window 128, head dim 64, 128 heads, batch 2, causal, sequence 4,096, BF16): GB200 forward 0.210 ms,
#: backward 0.465 ms over 2 x 128 x 4,096 rows (161 / 182 TFLOPS counted on the window); GB300 0.202 / 0.442 ms, the
#: same time per row on the faster chip: the kernel is bound by its per-tile work, not its FLOPs.
_BLACKWELL_WINDOW_ROW_S = (0.210e-3 / (2 * 128 * 4096), 0.465e-3 / (2 * 128 * 4096))
#: The same cells in MXFP8 attention: forward 0.210 ms (as BF16), backward 2.080 ms on GB200 (1.871 on GB300):
#: cuDNN 9.22's FP8 windowed backward takes 4.5x BF16's.
_BLACKWELL_FP8_WINDOW_ROW_S = (0.210e-3 / (2 * 128 * 4096), 2.080e-3 / (2 * 128 * 4096))
#: FP8 attention over BF16 on Hopper, per pass (cudnn-frontend results/h200_919_only_cudnn, cuDNN 9.19, H200, Llama 3.1
#: GQA: 64 / 8 heads, head dim 128, batch 1, causal, sequence 4,096): forward 0.465 -> 0.322 ms (1.44x), backward
#: 1.450 -> 1.459 ms (0.99x: per-tensor FP8 buys the backward nothing there).
_HOPPER_FP8_ATTN_SPEEDUP = {"fwd": 0.465 / 0.322, "bwd": 1.450 / 1.459}
#: BF16 attention on Hopper, as the Blackwell rates are taken (the same cudnn-frontend campaign, cuDNN 9.19 on H200:
#: results/h200_919_only_cudnn/dsv3_20260227_034744.csv, DeepSeek-V3's MLA, 128 heads, head dims 192 / 128, batch 1,
#: causal, sequence 4,096): forward 1.148 ms (599 TFLOPS), backward 4.424 ms, as fractions of the H200's 989 TFLOPS in
#: the cost model's FLOP convention (backward = 2 x forward): 0.605 / 0.314 (2,048: 0.528 / 0.274; 8,192: 0.650 /
#: 0.344). The Llama 3.1 GQA cell of the same folder (64 / 8 heads, head dim 128) checks them: 0.598 / 0.383.
_HOPPER_ATTN = {"attn_fwd_eff": 0.605, "attn_bwd_eff": 0.314}


def default_costs(gpu: GPUSpec) -> CostModel:
    """Datasheet-and-microbenchmark kernel costs for ``gpu`` (the framework's share lives in its stack profile).

    Hopper (sm90) takes its measured cuBLAS BF16 asymptote (0.80) and FP8 maximum achievable matmul (0.709);
    Blackwell (sm100) 0.607 and 0.616. MXFP8
    curves are derived on B200 numbers and reused as fractions of peak on other SM100 parts.
    """
    hopper = gpu.arch.startswith("sm9")
    bf16_top = 0.80 if hopper else 1363.5e12 / _B200_BF16
    fp8_top = _H100_FP8_MAMF if hopper else 2770e12 / _B200_FP8
    mx_dense_top = 2848e12 / _B200_FP8

    def dense(top: float) -> Curve:
        return Curve(_ROLLOFF_SIZES, tuple(top * s for s in _ROLLOFF_SHAPE))

    mx_grouped, mx_wgrad = torchao_mxfp8_curves(_GROUPED_BF16)
    grouped_bf16 = _GROUPED_BF16.scaled(0.80 / 0.607) if hopper else _GROUPED_BF16
    # Blockwise-scaled FP8 (1x128 / 128x128 scales) on Hopper applies its scales inside the main loop; on Blackwell
    # it runs as MXFP8 on the block-scaled tensor cores (TE PR #2157), at the FP8 curve here.
    blockwise = _HOPPER_BLOCKWISE_OVER_TENSORWISE if hopper else 1.0
    # Hopper: cuDNN's measured H200 BF16 attention (_HOPPER_ATTN); FP8 attention at its measured speedups over BF16
    # (as fractions of the FP8 rate, twice BF16's).
    attn = _BLACKWELL_ATTN if not hopper else {
        **_HOPPER_ATTN,
        "attn_fp8_fwd_eff": _HOPPER_ATTN["attn_fwd_eff"] * _HOPPER_FP8_ATTN_SPEEDUP["fwd"] / 2,
        "attn_fp8_bwd_eff": _HOPPER_ATTN["attn_bwd_eff"] * _HOPPER_FP8_ATTN_SPEEDUP["bwd"] / 2}
    sources = {
        "gemm_eff.bf16": "published.md s3: B200 cuBLAS BF16 1338-1389 TFLOPS of 2250 (H100 783-797 of 989); "
                         "roll-off below 1e11 FLOPs/call assumed",
        "gemm_eff.fp8": "published.md s3: B200 cuBLAS FP8 2770 of 4500 TFLOPS (blockwise recipe reuses it); H100 "
                        "1402.6 of 1979 (maximum achievable matmul, stas00/ml-engineering 744d01e)",
        "gemm_eff.mxfp8": "published.md s3: B200 cuBLAS MXFP8 2810-2886 of 4500 TFLOPS",
        "grouped_gemm_eff.bf16": "published.md s4: 0.50 at M=131072 (G=8) derived from per-kernel MXFP8 sum and "
                                 "the 1.39x speedup; smaller-M roll-off assumed; read at rows per expert x 8",
        "gemm_eff.fp8-blockwise": "Hopper: the FP8 curve x 0.755, FBGEMM PR #2546 (H100 500 W): blockwise-scaled "
                                  "GEMM alone 870/828/828 TFLOPS vs row-wise 1126/1083/1141 at three large shapes; "
                                  "Blackwell: the FP8 curve (TE runs the recipe as MXFP8, TE PR #2157)",
        "grouped_gemm_eff.fp8-blockwise": "the grouped FP8 curve x the same Hopper blockwise factor (0.755)",
        "grouped_gemm_eff.mxfp8": "published.md s4: derived so quantize+rearrange+fwd+dgrad+wgrad GEMMs "
                                  "reproduce the fwd+bwd speedup vs M table (0.99/1.20/1.25/1.39x)",
        "grouped_gemm_eff.mxfp8_wgrad": "published.md s4: wgrad 2103.3 us vs fwd 1671.2 us per-kernel",
        "grouped_gemm_eff.fp8": "ASSUMED: the BF16 grouped curve x 0.9, as a fraction of the FP8 peak; checked on "
                                "DeepSeek's H800 trace (h800-deepseek-trace calibration): DeepGEMM grouped FP8 "
                                "forward 0.591 at 65536 rows, where this gives 0.569 (-4%)",
        "attn_eff": ("cudnn-frontend sdpa_benchmark_training results/dsv3 (cuDNN 9.22, 2026-04-24), GB200 MLA causal "
                     "at sequence 4,096: BF16 0.625 (fwd) / 0.361 (bwd, incl. the recompute of P; backward FLOPs = 2 x "
                     "forward); MXFP8 attention 0.50 / 0.233 of the FP8 rate; GB300 agrees within 3% (sim.costs "
                     "_BLACKWELL_ATTN)" if not hopper else
                     "cudnn-frontend sdpa_benchmark_training results/h200_919_only_cudnn (cuDNN 9.19, H200), "
                     "DeepSeek-V3's MLA causal at sequence 4,096: BF16 0.605 (fwd) / 0.314 (bwd; backward FLOPs = 2 x "
                     "forward), Llama 3.1 GQA 0.598 / 0.383 (sim.costs._HOPPER_ATTN); FP8 attention at the same "
                     "folder's H200 speedups over BF16 (1.44x fwd, 0.99x bwd; Llama 3.1 at 4,096: "
                     "sim.costs._HOPPER_FP8_ATTN_SPEEDUP)"),
        "attn_window_row_s": ("cudnn-frontend sdpa_benchmark_training results/gpt_oss (GB200 / GB300, cuDNN 9.22, window "
                              "128): 0.20 / 0.44 ns per query row and head, forward / backward; MXFP8 0.20 / 1.98 "
                              "ns (sim.costs._BLACKWELL_WINDOW_ROW_S, _BLACKWELL_FP8_WINDOW_ROW_S)" if not hopper else "none measured on Hopper at a small "
                              "window: no floor"),
        "softmax_eff": "cudnn-frontend sdpa_benchmark_training (GB200 MXFP8 forwards, MLA and Llama 3.1 at 4,096): "
                       "0.63 of the exponential rate (sim.costs.SOFTMAX_EFF)",
        "mem_bw_eff": "published.md s4: TorchAO quantize kernels 70-82% of HBM bandwidth; elementwise ops assumed "
                      "at the same 0.70",
        "quantize_bw_eff": "published.md s4: quantize kernels 70-82% of HBM bandwidth (0.76)",
        "accumulate_bw_share": "PyTorch index kernels summing BF16 rows by index: scatter_add_ / index_add_ 0.035 of "
                               "HBM bandwidth (TileOPs PR #608, H200), index_put_ with accumulate 0.057 (TorchAO PR "
                               "#4623, B200); the combine's bmm backward 0.167 on its bytes (TorchTitan PR #2466, "
                               "B200); sim.costs.ACCUMULATE_BW_SHARE",
        "rearrange_s_per_elem": "published.md s4 per-kernel breakdown (29.7/19.4/13.3/12.9/199.8/207.9 us)",
    }
    return CostModel(
        gpu=gpu.name,
        gemm_eff={"bf16": dense(bf16_top), "fp8": dense(fp8_top), "fp8-blockwise": dense(fp8_top * blockwise),
                  "mxfp8": dense(mx_dense_top)},
        grouped_gemm_eff={
            "bf16": grouped_bf16,
            "fp8": grouped_bf16.scaled(0.9),
            "fp8-blockwise": grouped_bf16.scaled(0.9 * blockwise),
            "mxfp8": mx_grouped,
            "mxfp8_wgrad": mx_wgrad,
        },
        attn_fwd_eff=attn["attn_fwd_eff"],
        attn_bwd_eff=attn["attn_bwd_eff"],
        attn_fp8_fwd_eff=attn["attn_fp8_fwd_eff"],
        attn_fp8_bwd_eff=attn["attn_fp8_bwd_eff"],
        softmax_eff=SOFTMAX_EFF,
        attn_window_row_s=(0.0, 0.0) if hopper else _BLACKWELL_WINDOW_ROW_S,
        attn_fp8_window_row_s=(0.0, 0.0) if hopper else _BLACKWELL_FP8_WINDOW_ROW_S,
        mem_bw_eff=0.70,
        quantize_bw_eff=_QUANT_BW_EFF,
        rearrange_s_per_elem=dict(_REARRANGE),
        sources=sources,
    )
