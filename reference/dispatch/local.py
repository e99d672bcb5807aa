"""Single-process dispatch: every expert is local, no communication, just permute and unpermute.

It is the EP=1 path and the oracle the distributed backends are tested against.

Shape letters: T tokens, D model dim, E experts, K top-k, M padded routed rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.profiler import record_function

from reference import names
from reference.dispatch.base import Dispatched, Dispatcher
from reference.permute import GroupLayout, group_layout, permute_rows, unpermute_rows

__all__ = ["LocalDispatcher", "weighted_sum"]


def weighted_sum(y_TKD: torch.Tensor, weight_TK: torch.Tensor) -> torch.Tensor:
    """sum_k weight[t, k] * y[t, k, :], accumulated in fp32, returned in y's dtype."""
    return (y_TKD.float() * weight_TK.float().unsqueeze(-1)).sum(dim=1).to(y_TKD.dtype)


@dataclass
class _LocalHandle:
    layout: GroupLayout
    weight_TK: torch.Tensor
    n_tokens: int
    top_k: int


class LocalDispatcher(Dispatcher):
    """All experts on this process (ep must be 1)."""

    name = "local"

    def __init__(self, n_experts: int) -> None:
        super().__init__(n_experts, ep_rank=0, ep_size=1)

    def dispatch(
        self, x_TD: torch.Tensor, idx_TK: torch.Tensor, weight_TK: torch.Tensor, alignment: int
    ) -> Dispatched:
        T, K = idx_TK.shape
        with record_function(names.MOE_PERMUTE):
            layout = group_layout(idx_TK.reshape(-1), self.n_experts, alignment)
            x_NKD = x_TD.unsqueeze(1).expand(T, K, x_TD.shape[-1]).reshape(T * K, -1)
            x_MD = permute_rows(x_NKD, layout)
        return Dispatched(x_MD, layout.offs_G, _LocalHandle(layout, weight_TK, T, K))

    def combine(self, y_MD: torch.Tensor, handle: _LocalHandle) -> torch.Tensor:
        with record_function(names.MOE_UNPERMUTE):
            y_TKD = unpermute_rows(y_MD, handle.layout).view(handle.n_tokens, handle.top_k, -1)
            return weighted_sum(y_TKD, handle.weight_TK)
