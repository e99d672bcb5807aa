"""The dispatch/combine interface every token-routing backend implements.

``dispatch`` takes this rank's tokens, their top-k expert ids and gate weights, and returns the token
copies routed to this rank's local experts, grouped by local expert and padded for the grouped GEMM.
``combine`` takes the experts' outputs in that layout and returns, for every original token, the
gate-weighted sum over its top-k experts. Both are differentiable (the backward of a dispatch is a
combine of gradients and vice versa). Where the gate weights are applied is the backend's choice:
at the source after combine (local, all_to_all, as TorchTitan does) or at the destination before the
reducing combine (DeepEP).

Shape letters: T tokens, D model dim, E experts, e local experts, K top-k, M padded routed rows.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import torch

from reference.errors import ConfigError

__all__ = ["Dispatched", "Dispatcher", "check_ep"]


def check_ep(n_experts: int, ep_size: int) -> None:
    """Raise ConfigError unless the expert-parallel degree divides the number of experts."""
    if ep_size <= 0:
        raise ConfigError(f"expert parallel degree ep must be positive, got {ep_size}")
    if n_experts % ep_size:
        raise ConfigError(
            f"expert parallel degree ep ({ep_size}) must divide the number of routed experts "
            f"({n_experts})"
        )


@dataclass
class Dispatched:
    """What ``dispatch`` returns: grouped rows ``x_MD``, int32 cumulative padded group ends ``offs_e``
    (one per local expert) and the backend's opaque ``handle`` for ``combine``."""

    x_MD: torch.Tensor
    offs_e: torch.Tensor
    handle: Any


class Dispatcher(ABC):
    """A token-routing backend for ``n_experts`` experts split over ``ep_size`` ranks.

    Rank ``ep_rank`` owns experts ``[first_expert, first_expert + n_local)``.
    """

    name: str = "abstract"

    def __init__(self, n_experts: int, ep_rank: int = 0, ep_size: int = 1) -> None:
        check_ep(n_experts, ep_size)
        if not 0 <= ep_rank < ep_size:
            raise ConfigError(f"ep rank ({ep_rank}) must lie in [0, ep ({ep_size}))")
        self.n_experts = n_experts
        self.ep_rank = ep_rank
        self.ep_size = ep_size
        self.n_local = n_experts // ep_size
        self.first_expert = ep_rank * self.n_local

    @abstractmethod
    def dispatch(
        self, x_TD: torch.Tensor, idx_TK: torch.Tensor, weight_TK: torch.Tensor, alignment: int
    ) -> Dispatched:
        """Route token copies to the ranks owning their experts; group and pad them per local expert."""

    @abstractmethod
    def combine(self, y_MD: torch.Tensor, handle: Any) -> torch.Tensor:
        """Return (T, D): for each original token, sum over k of weight[t, k] * expert_k(x[t])."""

    def describe(self) -> dict[str, Any]:
        """What ran, for meta.json."""
        return {"backend": self.name, "ep": self.ep_size}
