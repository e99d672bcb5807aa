"""Expert-parallel dispatch through DeepEP: v1 ``deep_ep.Buffer`` or v2 ``deep_ep.ElasticBuffer``.

DeepEP is imported only when this backend is chosen; a missing build raises
:class:`~reference.errors.BackendUnavailableError` naming what is missing. The buffer is any object
with DeepEP's signatures, so tests pass :class:`~reference.dispatch.fake_deepep.FakeBuffer` or
:class:`~reference.dispatch.fake_deepep.FakeElasticBuffer` on CPU.

As TorchTitan runs it: dispatch with ``async_finish`` / ``allocate_on_comm_stream`` and wait at once on
the returned event (no explicit overlap); each token travels once per destination rank; the receiver
expands it to one row per local expert (``moe.permute``), runs the grouped GEMMs, applies the gate
weights and sums the rows of each received token (``moe.unpermute``), and DeepEP's combine reduces
across ranks. Backward: the gradient of a dispatch is a combine (which also reduces the gate-weight
gradients), the gradient of a combine is a cached dispatch.

Shape letters: T tokens, D model dim, E experts, e local experts, K top-k, N received tokens,
V valid (token, local expert) rows, M padded rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.profiler import record_function

from reference import names
from reference.dispatch.base import Dispatched, Dispatcher
from reference.errors import BackendUnavailableError, ConfigError
from reference.permute import GroupLayout, group_layout, permute_rows, unpermute_rows

__all__ = ["DEEPEP_APIS", "DeepEPDispatcher", "load_deepep", "make_deepep_buffer"]

DEEPEP_APIS = ("v1", "v2")


def load_deepep(api: str) -> Any:
    """The DeepEP buffer class for ``api`` (v1: ``Buffer``, v2: ``ElasticBuffer``), or a clear error."""
    if api not in DEEPEP_APIS:
        raise ConfigError(f"deepep api must be one of {', '.join(DEEPEP_APIS)}; got {api!r}")
    try:
        import deep_ep  # type: ignore[import-not-found]
    except ImportError as exc:
        raise BackendUnavailableError(
            "dispatch backend 'deepep' needs DeepEP (the deep_ep package: build it from source on a GPU "
            "machine with NVSHMEM, see README 'DeepEP'; v1 provides deep_ep.Buffer, v2 "
            f"deep_ep.ElasticBuffer); 'import deep_ep' failed: {exc}. Use --dispatch all_to_all instead."
        ) from exc
    attr = "Buffer" if api == "v1" else "ElasticBuffer"
    cls = getattr(deep_ep, attr, None)
    if cls is None:
        version = getattr(deep_ep, "__version__", "unknown")
        raise BackendUnavailableError(
            f"dispatch backend 'deepep' api {api}: the installed deep_ep ({version}) has no "
            f"deep_ep.{attr}; build DeepEP {'v2 (ElasticBuffer)' if api == 'v2' else 'v1'} or pass "
            f"--deepep-api {'v1' if api == 'v2' else 'v2'}"
        )
    return cls


def make_deepep_buffer(
    buffer_cls: Any, api: str, group: Any, *, hidden: int, max_tokens: int, top_k: int, elem_bytes: int = 2
) -> Any:
    """Construct a DeepEP buffer sized for ``max_tokens`` tokens of ``hidden`` values per rank."""
    if api == "v2":
        return buffer_cls(group, num_max_tokens_per_rank=max_tokens, hidden=hidden, num_topk=top_k)
    num_ranks = group.size() if group is not None else torch.distributed.get_world_size()
    hidden_bytes = hidden * max(elem_bytes, 2)
    nvl_bytes = rdma_bytes = 0
    for config in (buffer_cls.get_dispatch_config(num_ranks), buffer_cls.get_combine_config(num_ranks)):
        nvl_bytes = max(nvl_bytes, config.get_nvl_buffer_size_hint(hidden_bytes, num_ranks))
        rdma_bytes = max(rdma_bytes, config.get_rdma_buffer_size_hint(hidden_bytes, num_ranks))
    return buffer_cls(group, nvl_bytes, rdma_bytes)


def _wait(event: Any) -> None:
    if event is not None and hasattr(event, "current_stream_wait"):
        event.current_stream_wait()


class _Ops:
    """The three DeepEP calls the autograd functions need, for either API version."""

    def __init__(self, buffer: Any, api: str, n_experts: int, async_finish: bool) -> None:
        self.buffer, self.api, self.n_experts, self.async_finish = buffer, api, n_experts, async_finish

    def _flags(self) -> dict[str, Any]:
        """DeepEP allocates on its comm stream only after an event captured on the compute stream."""
        capture = getattr(type(self.buffer), "capture", None)
        if not self.async_finish or capture is None:
            return {"previous_event": None, "allocate_on_comm_stream": False}
        return {"previous_event": capture(), "allocate_on_comm_stream": True}

    def dispatch(self, x_TD: torch.Tensor, idx_TK: torch.Tensor, weight_TK: torch.Tensor) -> tuple:
        b, flags = self.buffer, self._flags()
        if self.api == "v1":
            per_rank, per_rdma, per_expert, in_rank, event = b.get_dispatch_layout(
                idx_TK, self.n_experts, async_finish=self.async_finish, **flags
            )
            flags = self._flags()
            _wait(event)
            recv_x, recv_idx, recv_w, _, handle, event = b.dispatch(
                x_TD,
                num_tokens_per_rank=per_rank,
                num_tokens_per_rdma_rank=per_rdma,
                is_token_in_rank=in_rank,
                num_tokens_per_expert=per_expert,
                topk_idx=idx_TK,
                topk_weights=weight_TK,
                async_finish=self.async_finish,
                **flags,
            )
        else:
            recv_x, recv_idx, recv_w, handle, event = b.dispatch(
                x_TD,
                topk_idx=idx_TK,
                topk_weights=weight_TK,
                num_experts=self.n_experts,
                async_with_compute_stream=self.async_finish,
                **flags,
            )
        _wait(event)
        return recv_x, recv_idx, recv_w, handle

    def cached_dispatch(self, x_TD: torch.Tensor, handle: Any) -> torch.Tensor:
        b, flags = self.buffer, self._flags()
        if self.api == "v1":
            recv_x, _, _, _, _, event = b.dispatch(x_TD, handle=handle, async_finish=self.async_finish, **flags)
        else:
            recv_x, _, _, _, event = b.dispatch(
                x_TD, handle=handle, async_with_compute_stream=self.async_finish, **flags
            )
        _wait(event)
        return recv_x

    def combine(self, y_ND: torch.Tensor, handle: Any, weight_NK: torch.Tensor | None) -> tuple:
        b, flags = self.buffer, self._flags()
        key = "async_finish" if self.api == "v1" else "async_with_compute_stream"
        out, out_w, event = b.combine(y_ND, handle, topk_weights=weight_NK, **{key: self.async_finish}, **flags)
        _wait(event)
        return out, out_w


class _DeepEPDispatch(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x_TD: torch.Tensor, weight_TK: torch.Tensor, idx_TK: torch.Tensor, ops: _Ops, box: list):  # type: ignore[override]
        recv_x, recv_idx, recv_w, handle = ops.dispatch(x_TD, idx_TK, weight_TK.float())
        ctx.ops, ctx.handle = ops, handle
        box.append((recv_idx, handle))
        ctx.mark_non_differentiable(recv_idx)
        return recv_x, recv_w, recv_idx

    @staticmethod
    def backward(ctx: Any, grad_x: torch.Tensor, grad_w: torch.Tensor | None, _grad_idx: Any):  # type: ignore[override]
        with record_function(names.MOE_DISPATCH):
            if grad_w is not None:
                grad_w = grad_w.float().contiguous()
            gx, gw = ctx.ops.combine(grad_x.contiguous(), ctx.handle, grad_w)
        return gx, gw, None, None, None


class _DeepEPCombine(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, y_ND: torch.Tensor, ops: _Ops, handle: Any):  # type: ignore[override]
        ctx.ops, ctx.handle = ops, handle
        out, _ = ops.combine(y_ND.contiguous(), handle, None)
        return out

    @staticmethod
    def backward(ctx: Any, grad_TD: torch.Tensor):  # type: ignore[override]
        with record_function(names.MOE_COMBINE):
            return ctx.ops.cached_dispatch(grad_TD.contiguous(), ctx.handle), None, None


@dataclass
class _DeepEPHandle:
    deepep_handle: Any
    layout: GroupLayout
    token_V: torch.Tensor
    weight_V: torch.Tensor
    n_recv: int


class DeepEPDispatcher(Dispatcher):
    """Dispatch/combine through a DeepEP buffer (real or fake) over ``group``."""

    name = "deepep"

    def __init__(
        self,
        n_experts: int,
        buffer: Any,
        *,
        api: str,
        ep_rank: int,
        ep_size: int,
        async_finish: bool = True,
        buffer_kind: str = "deep_ep",
    ) -> None:
        if api not in DEEPEP_APIS:
            raise ConfigError(f"deepep api must be one of {', '.join(DEEPEP_APIS)}; got {api!r}")
        super().__init__(n_experts, ep_rank=ep_rank, ep_size=ep_size)
        self.api = api
        self.buffer_kind = buffer_kind
        self._ops = _Ops(buffer, api, n_experts, async_finish)

    def describe(self) -> dict[str, Any]:
        info = {**super().describe(), "deepep_api": self.api, "buffer": self.buffer_kind}
        if self.api == "v1":
            info["num_sms"] = getattr(type(self._ops.buffer), "num_sms", None)
        return info

    def dispatch(
        self, x_TD: torch.Tensor, idx_TK: torch.Tensor, weight_TK: torch.Tensor, alignment: int
    ) -> Dispatched:
        box: list = []
        with record_function(names.MOE_DISPATCH):
            recv_x_ND, recv_w_NK, recv_idx_NK = _DeepEPDispatch.apply(x_TD, weight_TK, idx_TK, self._ops, box)
        _, deepep_handle = box[0]
        with record_function(names.MOE_PERMUTE):
            valid_NK = recv_idx_NK >= 0
            token_V = torch.arange(recv_x_ND.shape[0], device=recv_x_ND.device).unsqueeze(1).expand_as(recv_idx_NK)[valid_NK]
            layout = group_layout(recv_idx_NK[valid_NK], self.n_local, alignment)
            x_MD = permute_rows(recv_x_ND.index_select(0, token_V), layout)
        handle = _DeepEPHandle(deepep_handle, layout, token_V, recv_w_NK[valid_NK], recv_x_ND.shape[0])
        return Dispatched(x_MD, layout.offs_G, handle)

    def combine(self, y_MD: torch.Tensor, handle: _DeepEPHandle) -> torch.Tensor:
        with record_function(names.MOE_UNPERMUTE):
            y_VD = unpermute_rows(y_MD, handle.layout).float() * handle.weight_V.float().unsqueeze(1)
            y_ND = y_VD.new_zeros((handle.n_recv, y_VD.shape[1])).index_add(0, handle.token_V, y_VD)
            y_ND = y_ND.to(y_MD.dtype)
        with record_function(names.MOE_COMBINE):
            return _DeepEPCombine.apply(y_ND, self._ops, handle.deepep_handle)
