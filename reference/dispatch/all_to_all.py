"""Expert-parallel dispatch with ``torch.distributed.all_to_all_single``, as TorchTitan's standard EP.

Dispatch: sort token copies by global expert (``moe.permute``); exchange per-expert counts with an
all-to-all (``a2a.count_exchange``); copy the split sizes to the host (``a2a.host_sync``); all-to-all
the tokens (``moe.dispatch``); regroup the received rows by local expert and pad them for the grouped
GEMM (``moe.permute``). Combine mirrors it (``moe.unpermute``, ``moe.combine``, ``moe.unpermute``) and
applies the gate weights at the source. Works on gloo (CPU) and NCCL (GPU).

With ``payload="mxfp8"`` the dispatched tokens travel quantised (MXFP8: e4m3 values plus one e8m0
scale per 32), packed into one uint8 tensor (gloo and NCCL move float8 only as bytes); the backward
sends the gradient unquantised (straight-through), and combine always runs in the activation dtype.

Shape letters: T tokens, D model dim, E experts, e local experts, K top-k, R ranks, N routed rows,
M padded rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.profiler import record_function

from reference import names
from reference.dispatch.base import Dispatched, Dispatcher
from reference.dispatch.local import weighted_sum
from reference.errors import ConfigError
from reference.permute import GroupLayout, group_layout, permute_rows, unpermute_rows

__all__ = ["AllToAllDispatcher", "all_to_all_rows", "PAYLOADS"]

PAYLOADS = ("native", "mxfp8")
_MX_BLOCK = 32


def _a2a(x_ND: torch.Tensor, out_splits: list[int], in_splits: list[int], group: Any) -> torch.Tensor:
    out = x_ND.new_empty((sum(out_splits),) + tuple(x_ND.shape[1:]))
    dist.all_to_all_single(out, x_ND.contiguous(), out_splits, in_splits, group=group)
    return out


class _AllToAll(torch.autograd.Function):
    """all_to_all_single whose backward is the reverse all_to_all of the gradient."""

    @staticmethod
    def forward(ctx: Any, x_ND: torch.Tensor, out_splits: list[int], in_splits: list[int], group: Any, label: str):  # type: ignore[override]
        ctx.splits, ctx.group, ctx.label = (out_splits, in_splits), group, label
        return _a2a(x_ND, out_splits, in_splits, group)

    @staticmethod
    def backward(ctx: Any, grad_ND: torch.Tensor):  # type: ignore[override]
        out_splits, in_splits = ctx.splits
        with record_function(ctx.label):
            return _a2a(grad_ND, in_splits, out_splits, ctx.group), None, None, None, None


def _quantize_rows(x_ND: torch.Tensor) -> torch.Tensor:
    """MXFP8 rows packed as bytes: (N, D) e4m3 values then (N, D/32) e8m0 scales -> (N, D + D/32) uint8."""
    from torchao.prototype.mx_formats.mx_tensor import to_mx

    scale_NB, data_ND = to_mx(x_ND, torch.float8_e4m3fn, _MX_BLOCK)
    return torch.cat((data_ND.view(torch.uint8), scale_NB.view(torch.uint8)), dim=1)


def _dequantize_rows(packed: torch.Tensor, dim: int, dtype: torch.dtype) -> torch.Tensor:
    n = packed.shape[0]
    data_ND = packed[:, :dim].contiguous().view(torch.float8_e4m3fn)
    scale_NB = packed[:, dim:].contiguous().view(torch.float8_e8m0fnu)
    values = data_ND.float().view(n, dim // _MX_BLOCK, _MX_BLOCK) * scale_NB.float().unsqueeze(-1)
    return values.view(n, dim).to(dtype)


class _QuantizedAllToAll(torch.autograd.Function):
    """Forward: MXFP8-quantise, all_to_all the bytes, dequantise. Backward: plain reverse all_to_all."""

    @staticmethod
    def forward(ctx: Any, x_ND: torch.Tensor, out_splits: list[int], in_splits: list[int], group: Any, label: str):  # type: ignore[override]
        ctx.splits, ctx.group, ctx.label = (out_splits, in_splits), group, label
        with record_function(names.MOE_QUANTIZE):
            packed = _quantize_rows(x_ND)
        received = _a2a(packed, out_splits, in_splits, group)
        with record_function(names.MOE_QUANTIZE):
            return _dequantize_rows(received, x_ND.shape[1], x_ND.dtype)

    @staticmethod
    def backward(ctx: Any, grad_ND: torch.Tensor):  # type: ignore[override]
        out_splits, in_splits = ctx.splits
        with record_function(ctx.label):
            return _a2a(grad_ND, in_splits, out_splits, ctx.group), None, None, None, None


def all_to_all_rows(
    x_ND: torch.Tensor,
    out_splits: list[int],
    in_splits: list[int],
    group: Any = None,
    *,
    payload: str = "native",
    label: str = names.MOE_DISPATCH,
) -> torch.Tensor:
    """Differentiable uneven all-to-all of rows: send ``in_splits[r]`` rows to rank r, receive
    ``out_splits[r]`` from it. ``payload="mxfp8"`` sends MXFP8 bytes (forward only)."""
    if payload == "mxfp8":
        return _QuantizedAllToAll.apply(x_ND, out_splits, in_splits, group, label)
    return _AllToAll.apply(x_ND, out_splits, in_splits, group, label)


@dataclass
class _A2AHandle:
    src_layout: GroupLayout
    dst_layout: GroupLayout
    send_splits: list[int]
    recv_splits: list[int]
    weight_TK: torch.Tensor
    n_tokens: int
    top_k: int


class AllToAllDispatcher(Dispatcher):
    """Token dispatch over ``group`` (default: the world) with ``all_to_all_single``."""

    name = "all_to_all"

    def __init__(
        self, n_experts: int, group: Any = None, payload: str = "native", model_dim: int | None = None
    ) -> None:
        if not dist.is_available() or not dist.is_initialized():
            raise ConfigError(
                "dispatch all_to_all needs an initialised torch.distributed process group (run under "
                "torchrun, or use --dispatch local)"
            )
        if payload not in PAYLOADS:
            raise ConfigError(f"a2a payload must be one of {', '.join(PAYLOADS)}; got {payload!r}")
        if payload == "mxfp8" and model_dim is not None and model_dim % _MX_BLOCK:
            raise ConfigError(
                f"mxfp8 dispatch payload: model dim D ({model_dim}) must be a multiple of {_MX_BLOCK}"
            )
        super().__init__(n_experts, ep_rank=dist.get_rank(group), ep_size=dist.get_world_size(group))
        self.group = group
        self.payload = payload

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "payload": self.payload, "process_group": dist.get_backend(self.group)}

    def dispatch(
        self, x_TD: torch.Tensor, idx_TK: torch.Tensor, weight_TK: torch.Tensor, alignment: int
    ) -> Dispatched:
        T, K = idx_TK.shape
        R, e = self.ep_size, self.n_local
        with record_function(names.MOE_PERMUTE):
            src_layout = group_layout(idx_TK.reshape(-1), self.n_experts, alignment=1)
            x_NKD = x_TD.unsqueeze(1).expand(T, K, x_TD.shape[-1]).reshape(T * K, -1)
            x_send_ND = permute_rows(x_NKD, src_layout)
        counts_E = src_layout.sizes_G
        with record_function(names.A2A_COUNT_EXCHANGE):
            recv_counts_Re = torch.empty_like(counts_E)
            dist.all_to_all_single(recv_counts_Re, counts_E, group=self.group)
        with record_function(names.A2A_HOST_SYNC):
            send_splits = counts_E.view(R, e).sum(dim=1).tolist()
            recv_splits = recv_counts_Re.view(R, e).sum(dim=1).tolist()
        with record_function(names.MOE_DISPATCH):
            x_recv_ND = all_to_all_rows(
                x_send_ND, recv_splits, send_splits, self.group, payload=self.payload, label=names.MOE_DISPATCH
            )
        with record_function(names.MOE_PERMUTE):
            local_ids = torch.arange(e, device=x_TD.device).repeat(R)
            expert_N = torch.repeat_interleave(local_ids, recv_counts_Re.view(-1))
            dst_layout = group_layout(expert_N, e, alignment)
            x_MD = permute_rows(x_recv_ND, dst_layout)
        handle = _A2AHandle(src_layout, dst_layout, send_splits, recv_splits, weight_TK, T, K)
        return Dispatched(x_MD, dst_layout.offs_G, handle)

    def combine(self, y_MD: torch.Tensor, handle: _A2AHandle) -> torch.Tensor:
        with record_function(names.MOE_UNPERMUTE):
            y_recv_ND = unpermute_rows(y_MD, handle.dst_layout)
        with record_function(names.MOE_COMBINE):
            y_back_ND = all_to_all_rows(
                y_recv_ND, handle.send_splits, handle.recv_splits, self.group, label=names.MOE_COMBINE
            )
        with record_function(names.MOE_UNPERMUTE):
            y_TKD = unpermute_rows(y_back_ND, handle.src_layout).view(handle.n_tokens, handle.top_k, -1)
            return weighted_sum(y_TKD, handle.weight_TK)
