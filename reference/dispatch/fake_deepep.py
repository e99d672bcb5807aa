"""A CPU stand-in for DeepEP with the same Python signatures, built on torch.distributed.

:class:`FakeBuffer` mirrors ``deep_ep.Buffer`` (v1: ``get_dispatch_layout``, ``dispatch``, ``combine``,
``set_num_sms``, ``get_dispatch_config``/``get_combine_config`` with buffer-size hints) and
:class:`FakeElasticBuffer` mirrors ``deep_ep.ElasticBuffer`` (v2: ``dispatch``/``combine`` with
``EPHandle``-style handles). Semantics follow DeepEP's normal (non-expand) kernels: each token is sent
*once* to every rank that owns at least one of its experts; the receiver gets ``recv_topk_idx`` in
local expert ids (-1 for experts elsewhere) and the matching weights; combine sums the rows back to
their source token (no weights applied) and reduces ``topk_weights`` the same way. A cached dispatch
(``handle=...``) reuses the layout, as the backward of a combine does.

It moves data with ``all_to_all_single`` (gloo on CPU), so it checks the reference's use of the API
and the autograd plumbing, not DeepEP's kernels. Events are no-ops.

Shape letters: T tokens, D model dim, E experts, e local experts, K top-k, R ranks, N received tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["FakeBuffer", "FakeElasticBuffer", "FakeEventOverlap", "FakeConfig", "FakeHandle"]


class FakeEventOverlap:
    """DeepEP's ``EventOverlap`` without CUDA: waiting is a no-op."""

    def current_stream_wait(self) -> None:
        """Nothing to wait for on the CPU."""


@dataclass(frozen=True)
class FakeConfig:
    """DeepEP's ``Config`` (num_sms and chunk sizes) with its buffer-size hints."""

    num_sms: int
    num_max_send_tokens: int = 256
    num_max_recv_tokens: int = 128

    def get_nvl_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        return hidden_bytes * num_ranks * self.num_max_recv_tokens

    def get_rdma_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:  # noqa: ARG002
        return 0


@dataclass
class FakeHandle:
    """Layout of one dispatch: which local tokens went to which rank, and how many came back."""

    send_token_idx: torch.Tensor
    send_splits: list[int]
    recv_splits: list[int]
    n_tokens: int
    n_experts: int
    topk_idx: torch.Tensor


def _world(group: Any) -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(group), dist.get_world_size(group)
    return 0, 1


def _a2a(x: torch.Tensor, out_splits: list[int], in_splits: list[int], group: Any) -> torch.Tensor:
    if not (dist.is_available() and dist.is_initialized()):
        return x.clone()
    out = x.new_empty((sum(out_splits),) + tuple(x.shape[1:]))
    dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
    return out


class _FakeCore:
    """The exchange both fake buffers share."""

    def __init__(self, group: Any) -> None:
        self.group = group
        self.rank, self.num_ranks = _world(group)

    def layout(self, topk_idx: torch.Tensor, num_experts: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        e = num_experts // self.num_ranks
        T, dev = topk_idx.shape[0], topk_idx.device
        valid_TK = topk_idx >= 0
        rank_TK = torch.where(valid_TK, topk_idx // e, torch.zeros_like(topk_idx))
        in_rank_TR = torch.zeros((T, self.num_ranks), dtype=torch.bool, device=dev)
        in_rank_TR[torch.arange(T, device=dev).unsqueeze(1).expand_as(rank_TK)[valid_TK], rank_TK[valid_TK]] = True
        per_rank_R = in_rank_TR.sum(0).to(torch.int32)
        per_expert_E = torch.bincount(topk_idx[valid_TK].reshape(-1), minlength=num_experts).to(torch.int32)
        return per_rank_R, per_expert_E, in_rank_TR

    def dispatch(
        self,
        x: torch.Tensor,
        topk_idx: torch.Tensor | None,
        topk_weights: torch.Tensor | None,
        num_experts: int | None,
        handle: FakeHandle | None,
        expert_alignment: int,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, list[int], FakeHandle]:
        if handle is not None:
            sent = x.index_select(0, handle.send_token_idx)
            return _a2a(sent, handle.recv_splits, handle.send_splits, self.group), None, None, [], handle
        assert topk_idx is not None and num_experts is not None
        e, dev = num_experts // self.num_ranks, topk_idx.device
        _, _, in_rank_TR = self.layout(topk_idx, num_experts)
        send_idx = [torch.nonzero(in_rank_TR[:, r]).flatten() for r in range(self.num_ranks)]
        send_splits = [int(idx.numel()) for idx in send_idx]
        counts = torch.tensor(send_splits, dtype=torch.int64, device=dev)
        recv_counts = _a2a(counts, [1] * self.num_ranks, [1] * self.num_ranks, self.group)
        recv_splits = [int(c) for c in recv_counts.tolist()]
        send_token_idx = torch.cat(send_idx) if send_idx else torch.zeros(0, dtype=torch.long, device=dev)
        dest_rank_N = torch.repeat_interleave(
            torch.arange(self.num_ranks, device=dev), torch.tensor(send_splits, device=dev)
        )
        idx_NK = topk_idx.index_select(0, send_token_idx)
        local_NK = idx_NK - (dest_rank_N * e).unsqueeze(1)
        mine_NK = (idx_NK >= 0) & (local_NK >= 0) & (local_NK < e)
        recv_x = _a2a(x.index_select(0, send_token_idx), recv_splits, send_splits, self.group)
        recv_idx = _a2a(torch.where(mine_NK, local_NK, -1), recv_splits, send_splits, self.group)
        recv_w = None
        if topk_weights is not None:
            w_NK = topk_weights.index_select(0, send_token_idx).masked_fill(~mine_NK, 0.0)
            recv_w = _a2a(w_NK, recv_splits, send_splits, self.group)
        per_local = torch.bincount(recv_idx[recv_idx >= 0], minlength=e)
        aligned = ((per_local + expert_alignment - 1) // expert_alignment * expert_alignment).tolist()
        new_handle = FakeHandle(send_token_idx, send_splits, recv_splits, x.shape[0], num_experts, topk_idx.clone())
        return recv_x, recv_idx, recv_w, aligned, new_handle

    def combine(
        self, x: torch.Tensor, handle: FakeHandle, topk_weights: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        back = _a2a(x, handle.send_splits, handle.recv_splits, self.group)
        out = x.new_zeros((handle.n_tokens, x.shape[1])).index_add_(0, handle.send_token_idx, back)
        out_w = None
        if topk_weights is not None:
            back_w = _a2a(topk_weights, handle.send_splits, handle.recv_splits, self.group)
            out_w = topk_weights.new_zeros((handle.n_tokens, topk_weights.shape[1]))
            out_w.index_add_(0, handle.send_token_idx, back_w)
        return out, out_w


class FakeBuffer:
    """``deep_ep.Buffer`` (v1) signatures over torch.distributed."""

    num_sms: int = 20

    def __init__(
        self,
        group: Any,
        num_nvl_bytes: int = 0,
        num_rdma_bytes: int = 0,
        low_latency_mode: bool = False,
        num_qps_per_rank: int = 24,
        allow_nvlink_for_low_latency_mode: bool = True,
        allow_mnnvl: bool = False,
        explicitly_destroy: bool = False,
    ) -> None:
        self._core = _FakeCore(group)
        self.group = group
        self.rank, self.group_size = self._core.rank, self._core.num_ranks
        self.num_nvl_bytes, self.num_rdma_bytes = num_nvl_bytes, num_rdma_bytes
        self.low_latency_mode = low_latency_mode

    @staticmethod
    def capture() -> FakeEventOverlap:
        """An event on the current stream (a no-op here)."""
        return FakeEventOverlap()

    @staticmethod
    def set_num_sms(new_num_sms: int) -> None:
        assert new_num_sms % 2 == 0, "The SM count must be even"
        FakeBuffer.num_sms = new_num_sms

    @staticmethod
    def get_dispatch_config(num_ranks: int) -> FakeConfig:  # noqa: ARG004
        return FakeConfig(FakeBuffer.num_sms)

    @staticmethod
    def get_combine_config(num_ranks: int) -> FakeConfig:  # noqa: ARG004
        return FakeConfig(FakeBuffer.num_sms)

    def get_dispatch_layout(
        self,
        topk_idx: torch.Tensor,
        num_experts: int,
        previous_event: Any = None,
        async_finish: bool = False,
        allocate_on_comm_stream: bool = False,
    ) -> tuple[torch.Tensor, None, torch.Tensor, torch.Tensor, FakeEventOverlap]:
        per_rank, per_expert, in_rank = self._core.layout(topk_idx, num_experts)
        return per_rank, None, per_expert, in_rank, FakeEventOverlap()

    def dispatch(
        self,
        x: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        handle: FakeHandle | None = None,
        num_tokens_per_rank: torch.Tensor | None = None,
        num_tokens_per_rdma_rank: torch.Tensor | None = None,
        is_token_in_rank: torch.Tensor | None = None,
        num_tokens_per_expert: torch.Tensor | None = None,
        topk_idx: torch.Tensor | None = None,
        topk_weights: torch.Tensor | None = None,
        expert_alignment: int = 1,
        num_worst_tokens: int = 0,
        config: FakeConfig | None = None,
        previous_event: Any = None,
        async_finish: bool = False,
        allocate_on_comm_stream: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, list[int], FakeHandle, FakeEventOverlap]:
        if isinstance(x, tuple):
            raise NotImplementedError("the fake DeepEP buffer dispatches unquantised tokens only")
        if handle is None:
            assert num_tokens_per_rank is not None and is_token_in_rank is not None
            assert num_tokens_per_expert is not None and topk_idx is not None
            num_experts = int(num_tokens_per_expert.numel())
        else:
            assert topk_idx is None and topk_weights is None, "cached dispatch takes no topk_idx/weights"
            num_experts = handle.n_experts
        recv_x, recv_idx, recv_w, counts, new_handle = self._core.dispatch(
            x, topk_idx, topk_weights, num_experts, handle, expert_alignment
        )
        return recv_x, recv_idx, recv_w, counts, new_handle, FakeEventOverlap()

    def combine(
        self,
        x: torch.Tensor,
        handle: FakeHandle,
        topk_weights: torch.Tensor | None = None,
        bias: Any = None,
        config: FakeConfig | None = None,
        previous_event: Any = None,
        async_finish: bool = False,
        allocate_on_comm_stream: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, FakeEventOverlap]:
        out, out_w = self._core.combine(x, handle, topk_weights)
        return out, out_w, FakeEventOverlap()


class FakeElasticBuffer:
    """``deep_ep.ElasticBuffer`` (v2) signatures over torch.distributed (non-expand mode only)."""

    def __init__(
        self,
        group: Any,
        num_bytes: int | None = None,
        num_cpu_bytes: int = 0,
        num_max_tokens_per_rank: int = 0,
        hidden: int = 0,
        num_topk: int = 0,
        use_fp8_dispatch: bool = False,
        deterministic: bool = False,
        allow_hybrid_mode: bool = True,
        allow_multiple_reduction: bool = True,
        prefer_overlap_with_compute: bool = True,
        sl_idx: int = 3,
        num_allocated_qps: int = 0,
        num_cpu_timeout_secs: int = 300,
        num_gpu_timeout_secs: int = 100,
        explicitly_destroy: bool = False,
    ) -> None:
        self._core = _FakeCore(group)
        self.group = group
        self.rank_idx, self.num_ranks = self._core.rank, self._core.num_ranks
        self.num_max_tokens_per_rank = num_max_tokens_per_rank

    @staticmethod
    def capture() -> None:
        """An event on the current stream (none on the CPU)."""
        return None

    def dispatch(
        self,
        x: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        topk_idx: torch.Tensor | None = None,
        topk_weights: torch.Tensor | None = None,
        cumulative_local_expert_recv_stats: torch.Tensor | None = None,
        num_experts: int | None = None,
        num_max_tokens_per_rank: int | None = None,
        expert_alignment: int | None = None,
        num_sms: int = 0,
        num_qps: int = 0,
        previous_event: Any = None,
        previous_event_before_epilogue: Any = None,
        async_with_compute_stream: bool = False,
        allocate_on_comm_stream: bool = False,
        handle: FakeHandle | None = None,
        do_handle_copy: bool = True,
        do_cpu_sync: bool | None = None,
        do_expand: bool = False,
        do_zero_padding: bool = False,
        use_tma_aligned_col_major_sf: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, FakeHandle, FakeEventOverlap]:
        if isinstance(x, tuple):
            raise NotImplementedError("the fake DeepEP buffer dispatches unquantised tokens only")
        if do_expand:
            raise NotImplementedError("the fake ElasticBuffer implements the non-expand layout only")
        if handle is not None:
            assert topk_idx is None, "cached dispatch reuses the handle's topk_idx"
            num_experts = handle.n_experts
        elif num_experts is None:
            raise ValueError("num_experts is required for a non-cached dispatch")
        recv_x, recv_idx, recv_w, _, new_handle = self._core.dispatch(
            x, topk_idx, topk_weights, num_experts, handle, expert_alignment or 1
        )
        return recv_x, recv_idx, recv_w, new_handle, FakeEventOverlap()

    def combine(
        self,
        x: torch.Tensor,
        handle: FakeHandle,
        topk_weights: torch.Tensor | None = None,
        bias: Any = None,
        num_sms: int = 0,
        num_qps: int = 0,
        previous_event: Any = None,
        previous_event_before_epilogue: Any = None,
        async_with_compute_stream: bool = False,
        allocate_on_comm_stream: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, FakeEventOverlap]:
        out, out_w = self._core.combine(x, handle, topk_weights)
        return out, out_w, FakeEventOverlap()
