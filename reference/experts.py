"""Routed experts: SwiGLU grouped GEMMs behind one GEMM-backend interface.

Backends (``make_gemm``):

- ``fp32``: ``torch._grouped_mm`` in fp32 (a per-group loop where the device has no fp32 grouped GEMM):
  the oracle the others are measured against.
- ``bf16``: ``torch._grouped_mm`` in bf16 (what TorchTitan runs by default).
- ``mxfp8``: TorchAO ``_to_mxfp8_then_scaled_grouped_mm`` (dynamic MXFP8 quantisation of both operands
  in forward, dgrad and wgrad; block size 32). Real CUTLASS/Triton kernels on SM100, TorchAO's
  ``KernelPreference.EMULATED`` (quantise, dequantise, bf16 GEMM) elsewhere; ``GemmBackend.kernel``
  records which one ran.

Token groups arrive padded to ``GemmBackend.alignment`` rows (32 for MXFP8, whose wgrad quantises along
the token dim) by :mod:`reference.permute`; padding rows are zero and produce zero.

Shape letters: M rows (routed token copies, padded), D model dim, F expert hidden dim, E experts,
e local experts, X = 2F (gate and up projections fused).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import record_function

from reference import names
from reference.errors import BackendUnavailableError, ConfigError
from reference.weights import draw_normal

__all__ = [
    "GEMM_PRECISIONS",
    "MX_BLOCK",
    "GemmBackend",
    "make_gemm",
    "check_mxfp8_shapes",
    "GroupedExperts",
    "loop_experts",
]

GEMM_PRECISIONS = ("fp32", "bf16", "mxfp8")
MX_BLOCK = 32


def check_mxfp8_shapes(**dims: int) -> None:
    """Raise ConfigError naming every dim that is not a multiple of the MXFP8 block (32)."""
    bad = {name: value for name, value in dims.items() if value % MX_BLOCK}
    if bad:
        listed = ", ".join(f"{name} ({value})" for name, value in bad.items())
        raise ConfigError(
            f"precision mxfp8: {listed} must be a multiple of {MX_BLOCK} (MXFP8 scales one value per "
            f"block of {MX_BLOCK} along every GEMM reduction dim); use --precision bf16 or fp32 for this "
            "model"
        )


@dataclass(frozen=True)
class GemmBackend:
    """One way to run ``y[g] = x[g] @ w[g]^T`` over contiguous token groups.

    ``precision``: fp32, bf16 or mxfp8. ``kernel``: what actually runs (``torch._grouped_mm``,
    ``loop``, ``torchao-mxfp8-sm100`` or ``torchao-mxfp8-emulated``). ``alignment``: rows each token
    group must be padded to. ``dtype``: the activation dtype the rest of the layer should use.
    """

    precision: str
    kernel: str
    alignment: int
    dtype: torch.dtype

    @property
    def emulated(self) -> bool:
        """True when MXFP8 is emulated (quantise-dequantise + bf16 GEMM) rather than run natively."""
        return self.kernel == "torchao-mxfp8-emulated"

    def __call__(self, x_MK: torch.Tensor, w_GNK: torch.Tensor, offs_G: torch.Tensor) -> torch.Tensor:
        """Grouped GEMM: rows ``offs[g-1]:offs[g]`` of ``x_MK`` times ``w_GNK[g]^T``; returns (M, N)."""
        if self.precision == "fp32":
            if self.kernel == "loop":
                return _loop_mm(x_MK.float(), w_GNK.float(), offs_G).to(x_MK.dtype)
            out = torch._grouped_mm(x_MK.float(), w_GNK.float().transpose(-2, -1), offs=offs_G)
            return out.to(x_MK.dtype)
        if self.precision == "bf16":
            out = torch._grouped_mm(x_MK.bfloat16(), w_GNK.bfloat16().transpose(-2, -1), offs=offs_G)
            return out.to(x_MK.dtype)
        from torchao.prototype.moe_training import _to_mxfp8_then_scaled_grouped_mm
        from torchao.quantization.quantize_.common import KernelPreference

        preference = KernelPreference.EMULATED if self.emulated else KernelPreference.AUTO
        out = _to_mxfp8_then_scaled_grouped_mm(
            x_MK.bfloat16(),
            w_GNK.bfloat16().transpose(-2, -1),
            offs=offs_G,
            out_dtype=torch.bfloat16,
            kernel_preference=preference,
            pad_token_groups_for_grouped_mm=False,
        )
        return out.to(x_MK.dtype)


def _loop_mm(x_MK: torch.Tensor, w_GNK: torch.Tensor, offs_G: torch.Tensor) -> torch.Tensor:
    ends = offs_G.tolist()
    starts = [0] + ends[:-1]
    pieces = [x_MK[s:e] @ w_GNK[g].T for g, (s, e) in enumerate(zip(starts, ends))]
    tail = x_MK.new_zeros((x_MK.shape[0] - (ends[-1] if ends else 0), w_GNK.shape[1]))
    return torch.cat(pieces + [tail], dim=0)


def _sm100_mxfp8_available() -> bool:
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 10:
        return False
    try:
        from torchao.prototype.moe_training.mxfp8_grouped_mm import (
            _SM100_KERNELS_AVAILABLE,
        )
    except ImportError:
        return False
    return bool(_SM100_KERNELS_AVAILABLE)


def make_gemm(precision: str, device: torch.device | str = "cpu", mxfp8_kernels: str = "auto") -> GemmBackend:
    """The GEMM backend for ``precision`` (fp32, bf16, mxfp8) on ``device``.

    ``mxfp8_kernels``: ``auto`` (real SM100 kernels when present, else emulated), ``real`` (raise
    BackendUnavailableError without them) or ``emulated``.
    """
    device = torch.device(device)
    if precision == "fp32":
        kernel = "loop" if device.type == "cuda" else "torch._grouped_mm"
        return GemmBackend("fp32", kernel, alignment=1, dtype=torch.float32)
    if precision == "bf16":
        return GemmBackend("bf16", "torch._grouped_mm", alignment=8, dtype=torch.bfloat16)
    if precision != "mxfp8":
        raise ConfigError(f"precision must be one of {', '.join(GEMM_PRECISIONS)}; got {precision!r}")
    if mxfp8_kernels not in ("auto", "real", "emulated"):
        raise ConfigError(f"mxfp8 kernels must be auto, real or emulated; got {mxfp8_kernels!r}")
    try:
        import torchao.prototype.moe_training  # noqa: F401
    except ImportError as exc:
        raise BackendUnavailableError(
            f"precision mxfp8 needs torchao (pip install 'torchao>=0.17'); import failed: {exc}"
        ) from exc
    real = device.type == "cuda" and _sm100_mxfp8_available()
    if mxfp8_kernels == "real" and not real:
        raise BackendUnavailableError(
            "precision mxfp8 with real kernels needs an SM100 (Blackwell) GPU and a CUDA 12.8+ torchao "
            "build; use --mxfp8-kernels emulated (or auto) elsewhere"
        )
    use_real = real and mxfp8_kernels != "emulated"
    kernel = "torchao-mxfp8-sm100" if use_real else "torchao-mxfp8-emulated"
    return GemmBackend("mxfp8", kernel, alignment=MX_BLOCK, dtype=torch.bfloat16)


class GroupedExperts(nn.Module):
    """The ``n_local`` experts this rank owns, out of ``n_experts``, as SwiGLU grouped GEMMs.

    ``w13_eXD`` holds the gate (rows :F) and up (rows F:) projections fused; ``w2_eDF`` the down
    projection. Weights are initialised for all ``n_experts`` from one generator, so every rank of an
    expert-parallel group draws the same full set and keeps its slice
    ``[first_expert, first_expert + n_local)``.
    """

    def __init__(self, dim: int, hidden_dim: int, n_experts: int, n_local: int, first_expert: int) -> None:
        super().__init__()
        if n_local <= 0 or first_expert < 0 or first_expert + n_local > n_experts:
            raise ValueError(
                f"local experts [{first_expert}, {first_expert + n_local}) must lie in [0, {n_experts})"
            )
        self.dim, self.hidden_dim = dim, hidden_dim
        self.n_experts, self.n_local, self.first_expert = n_experts, n_local, first_expert
        self.w13_eXD = nn.Parameter(torch.empty(n_local, 2 * hidden_dim, dim))
        self.w2_eDF = nn.Parameter(torch.empty(n_local, dim, hidden_dim))

    def init_weights(self, generator: torch.Generator, std: float = 0.02) -> None:
        """Draw all experts' weights (full E) and keep this rank's slice."""
        E, F_, D = self.n_experts, self.hidden_dim, self.dim
        w1_EFD = draw_normal((E, F_, D), std, generator)
        w3_EFD = draw_normal((E, F_, D), std, generator)
        w2_EDF = draw_normal((E, D, F_), std / math.sqrt(2.0), generator)
        local = slice(self.first_expert, self.first_expert + self.n_local)
        with torch.no_grad():
            self.w13_eXD.copy_(torch.cat((w1_EFD[local], w3_EFD[local]), dim=1))
            self.w2_eDF.copy_(w2_EDF[local])

    def forward(self, x_MD: torch.Tensor, offs_e: torch.Tensor, gemm: GemmBackend) -> torch.Tensor:
        """SwiGLU of each token group through its expert; ``offs_e`` are int32 cumulative group ends."""
        with record_function(names.MOE_EXPERT_GEMM):
            with record_function(names.MOE_EXPERT_GEMM_GATE_UP):
                h_MX = gemm(x_MD, self.w13_eXD, offs_e)
            gate_MF, up_MF = h_MX.chunk(2, dim=-1)
            act_MF = F.silu(gate_MF) * up_MF
            with record_function(names.MOE_EXPERT_GEMM_DOWN):
                return gemm(act_MF.contiguous(), self.w2_eDF, offs_e)


def loop_experts(
    x_MD: torch.Tensor, sizes: list[int], w13_eXD: torch.Tensor, w2_eDF: torch.Tensor
) -> torch.Tensor:
    """The oracle: SwiGLU experts one group at a time with plain fp32 matmuls (for tests)."""
    outputs, start = [], 0
    for e, size in enumerate(sizes):
        x_md = x_MD[start : start + size].float()
        gate_mf, up_mf = (x_md @ w13_eXD[e].float().T).chunk(2, dim=-1)
        outputs.append((F.silu(gate_mf) * up_mf) @ w2_eDF[e].float().T)
        start += size
    return torch.cat(outputs, dim=0)
